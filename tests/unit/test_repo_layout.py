"""Guards on the collection's own shape that no linter checks."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_galaxy_identity():
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    assert (galaxy["namespace"], galaxy["name"]) == ("blackwell", "sglang")


def _roles():
    return sorted(p for p in (ROOT / "roles").iterdir() if p.is_dir())


def test_every_role_has_argument_specs_mirroring_defaults():
    """Each public default must be documented in meta/argument_specs.yml and vice versa,
    so role validation rejects bad input before any task runs."""
    problems = []
    for role in _roles():
        spec_file = role / "meta" / "argument_specs.yml"
        if not spec_file.exists():
            problems.append("%s: no meta/argument_specs.yml" % role.name)
            continue
        options = yaml.safe_load(spec_file.read_text())["argument_specs"]["main"].get("options") or {}
        defaults_file = role / "defaults" / "main.yml"
        defaults = yaml.safe_load(defaults_file.read_text()) if defaults_file.exists() else {}
        defaults = defaults or {}
        for name in sorted(set(defaults) - set(options)):
            problems.append("%s: default %s is not in argument_specs" % (role.name, name))
        for name, opt in sorted(options.items()):
            if "default" in opt and name not in defaults:
                problems.append("%s: argument_specs default for %s missing in defaults/main.yml" % (role.name, name))
    assert not problems, "\n".join(problems)
