"""Every file of plugins/module_utils and plugins/plugin_utils says it is private to the collection,
the way community.crypto marks its own (a comment above the docstring): the filters and modules are
the public API, the libraries behind them may change in any release."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTE = ("# Note that this %s is **PRIVATE** to the collection. It can have breaking changes at any time.\n"
        "# Do not use this from other collections or standalone plugins/modules!\n")


def _libraries():
    return sorted(p for folder in ("module_utils", "plugin_utils") for p in (ROOT / "plugins" / folder).glob("*.py")
                  if p.name != "__init__.py")


@pytest.mark.parametrize("path", _libraries(), ids=lambda p: "%s/%s" % (p.parent.name, p.name))
def test_library_says_it_is_private(path):
    rel = path.relative_to(ROOT).as_posix()
    kind = "module util" if path.parent.name == "module_utils" else "plugin util"
    head = path.read_text().split('"""', 1)[0]
    assert NOTE % kind in head, "%s lacks the private-module note above its docstring:\n%s" % (rel, NOTE % kind)
