"""Test-wide setup: make this checkout importable as ``ansible_collections.blackwell.sglang``
and the simulator importable as ``sglang_sim``, without installing either."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLLECTIONS = ROOT / ".cache" / "collections"


def _link_collection():
    link = COLLECTIONS / "ansible_collections" / "blackwell" / "sglang"
    link.parent.mkdir(parents=True, exist_ok=True)
    if not link.is_symlink():
        if link.exists():
            raise RuntimeError("%s exists and is not a symlink; remove it" % link)
        try:
            link.symlink_to(ROOT, target_is_directory=True)
        except FileExistsError:  # a parallel worker made it first
            pass


_link_collection()
for path in (str(COLLECTIONS), str(ROOT / "sim"), str(ROOT / "tests")):
    if path not in sys.path:
        sys.path.insert(0, path)
os.environ.setdefault("ANSIBLE_COLLECTIONS_PATH", str(COLLECTIONS))
