"""Every filter the collection exports has an ansible-doc page (plugins/filter/<name>.yml) whose
options are the filter's own parameters, and ansible-doc renders it; every page names an exported
filter, and every exported filter is used by a role or playbook. A filter added without a page, a
parameter added or renamed without updating its page, or a filter nothing uses, fails here by name."""

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[4]
FILTER_DIR = ROOT / "plugins" / "filter"
COLLECTIONS = ROOT / ".cache" / "collections"


def exported():
    """{filter name: function} over every filter plugin file."""
    found = {}
    for path in sorted(FILTER_DIR.glob("*.py")):
        if path.name == "__init__.py":
            continue
        module = importlib.import_module("ansible_collections.blackwell.sglang.plugins.filter." + path.stem)
        for name, func in module.FilterModule().filters().items():
            assert name not in found, "filter %s is exported by two plugin files" % name
            found[name] = func
    return found


FILTERS = exported()


def page(name):
    with open(str(FILTER_DIR / (name + ".yml"))) as fh:
        return yaml.safe_load(fh)


def test_every_exported_filter_has_a_page():
    missing = sorted(name for name in FILTERS if not (FILTER_DIR / (name + ".yml")).is_file())
    assert not missing, "filters without an ansible-doc page plugins/filter/<name>.yml: %s" % ", ".join(missing)


def test_every_page_documents_an_exported_filter():
    stale = sorted(p.stem for p in FILTER_DIR.glob("*.yml") if p.stem not in FILTERS)
    assert not stale, "pages for filters no plugin exports: %s" % ", ".join(stale)
    misnamed = sorted(p.stem for p in FILTER_DIR.glob("*.yml") if (page(p.stem)["DOCUMENTATION"] or {}).get("name") != p.stem)
    assert not misnamed, "pages whose DOCUMENTATION.name is not their file's: %s" % ", ".join(misnamed)


def _role_and_playbook_text():
    """Every task file, var file, template and playbook of the collection's roles and playbooks."""
    out = []
    for top in ("roles", "playbooks"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.is_file() and path.suffix in (".yml", ".yaml", ".j2"):
                out.append(path.read_text(encoding="utf-8"))
    return "\n".join(out)


def test_every_exported_filter_is_used_by_a_role_or_playbook():
    """A filter is published for the roles and playbooks; the library's inner decisions stay in
    plugins/plugin_utils (tests import them there). A filter nothing asks for is no filter."""
    text = _role_and_playbook_text()
    unused = sorted(name for name in FILTERS if not re.search(r"blackwell\.sglang\.%s\b" % re.escape(name), text))
    assert not unused, ("filters no role or playbook uses (unpublish them: drop them from FilterModule.filters() "
                        "and their page): %s" % ", ".join(unused))


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_page_matches_the_filter_signature(name):
    if not (FILTER_DIR / (name + ".yml")).is_file():
        pytest.fail("filter %s has no page plugins/filter/%s.yml" % (name, name))
    doc = page(name)
    assert set(doc) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, sorted(doc)
    meta = doc["DOCUMENTATION"]
    assert meta["name"] == name
    assert meta["short_description"] and meta["description"] and meta["author"]
    params = list(inspect.signature(FILTERS[name]).parameters)
    expected = ["_input"] + params[1:]
    options = meta.get("options") or {}
    assert sorted(options) == sorted(expected), (
        "%s: the page documents %s, the filter takes %s (first as _input)" % (name, sorted(options), params))
    if len(expected) > 1:
        positional = [word.strip() for word in meta.get("positional", "").split(",")]
        assert positional == expected, "%s: positional should be %s" % (name, ", ".join(expected))
    signature = inspect.signature(FILTERS[name])
    first = signature.parameters[params[0]]
    assert bool(options["_input"].get("required")) == (first.default is inspect.Parameter.empty), \
        "%s: _input is required exactly when the filter's first parameter has no default" % name
    for param in params[1:]:
        default = signature.parameters[param].default
        if default is not inspect.Parameter.empty and default is not None:
            assert options[param].get("default") == default, "%s: default of %s" % (name, param)
    assert "blackwell.sglang.%s" % name in doc["EXAMPLES"]
    assert set(doc["RETURN"]) == {"_value"} and doc["RETURN"]["_value"].get("description")


def _ansible_doc(*args):
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(COLLECTIONS), ANSIBLE_NOCOLOR="1")
    bindir = Path(sys.executable).parent
    proc = subprocess.run([str(bindir / "ansible-doc")] + list(args), capture_output=True, text=True,
                          timeout=300, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_ansible_doc_lists_and_renders_every_filter():
    listed = json.loads(_ansible_doc("-t", "filter", "--list", "--json", "blackwell.sglang"))
    names = set(key.split(".")[-1] for key in listed)
    missing = sorted(set(FILTERS) - names)
    assert not missing, "ansible-doc does not list: %s" % ", ".join(missing)
    rendered = json.loads(_ansible_doc("-t", "filter", "--json", *["blackwell.sglang." + n for n in sorted(FILTERS)]))
    for name in FILTERS:
        entry = rendered.get("blackwell.sglang." + name)
        assert entry, "ansible-doc rendered nothing for %s" % name
        assert entry["doc"]["short_description"] and entry["doc"]["options"]["_input"]
        assert "blackwell.sglang.%s" % name in entry["examples"]
    # The text form too (what a person reads).
    text = _ansible_doc("-t", "filter", "blackwell.sglang.sglang_service_args")
    assert "sglang_service_args" in text and "flags" in text and "EXAMPLES" in text
