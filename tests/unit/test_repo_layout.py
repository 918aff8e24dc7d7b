"""Guards on the collection's own shape that no linter checks."""

import json
import os
import re
from pathlib import Path

import pytest
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


def _role_variables(role):
    """Every variable a user can set on the role: its defaults and the options of every entry point."""
    names = set()
    defaults_file = role / "defaults" / "main.yml"
    if defaults_file.exists():
        names |= set(yaml.safe_load(defaults_file.read_text()) or {})
    spec_file = role / "meta" / "argument_specs.yml"
    if spec_file.exists():
        for entry in (yaml.safe_load(spec_file.read_text())["argument_specs"] or {}).values():
            names |= set((entry or {}).get("options") or {})
    return sorted(names)


def _names_missing_from(text, names):
    # A whole name only: sglang_service_watchdog must not pass for sglang_service_watchdog_window.
    return [n for n in names if not re.search(r"(?<![A-Za-z0-9_])%s(?![A-Za-z0-9_])" % re.escape(n), text)]


@pytest.mark.parametrize("role", _roles(), ids=lambda r: r.name)
def test_every_role_readme_names_each_of_its_variables(role):
    """A role's README is its front page: it exists and names every variable of its defaults and
    argument specs, so a variable added without a line there fails here."""
    readme = role / "README.md"
    assert readme.exists(), "roles/%s has no README.md" % role.name
    missing = _names_missing_from(readme.read_text(), _role_variables(role))
    assert not missing, "roles/%s/README.md does not mention: %s" % (role.name, ", ".join(missing))


def test_readme_check_sees_a_missing_name():
    assert _names_missing_from("`sglang_service_watchdog_window` ...", ["sglang_service_watchdog"]) == ["sglang_service_watchdog"]
    assert _names_missing_from("(`sglang_service_watchdog`, 60 s)", ["sglang_service_watchdog"]) == []


def test_files_named_in_ansible_lint_config_exist():
    """.ansible-lint's comments and paths name files a reader will look for."""
    text = (ROOT / ".ansible-lint").read_text()
    named = set(re.findall(r"[A-Za-z0-9_./-]+\.(?:md|ya?ml|py|sh|cfg|toml|txt)\b", text))
    missing = sorted(n for n in named if not (ROOT / n).exists())
    assert not missing, ".ansible-lint names files that are not in the repository: %s" % ", ".join(missing)


def _github_anchor(heading):
    """GitHub's id for a Markdown heading: lower case, punctuation but '-' and '_' dropped, spaces to '-'."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _markdown_files():
    # os.walk does not follow links: .cache/collections links back to the checkout itself.
    skip = {".git", ".venv", ".cache", "build", "output", "node_modules"}
    found = []
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in skip]
        found += [Path(top) / f for f in files if f.endswith(".md")]
    return sorted(found)


def test_relative_links_in_markdown_resolve():
    """A link from one document to another (and to a heading in it) points at something that exists."""
    problems = []
    for doc in _markdown_files():
        text = re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path, _sep, anchor = target.partition("#")
            dest = (doc.parent / path).resolve()
            if not dest.exists():
                problems.append("%s: %s does not exist" % (doc.relative_to(ROOT), path))
            elif anchor and dest.suffix == ".md":
                anchors = {_github_anchor(h) for h in re.findall(r"^#+\s+(.*)$", dest.read_text(), flags=re.M)}
                if anchor not in anchors:
                    problems.append("%s: %s has no heading #%s" % (doc.relative_to(ROOT), path, anchor))
    assert not problems, "\n".join(problems)


def test_github_anchor():
    assert _github_anchor("Interrupted runs and honest resumes (`plugins/plugin_utils/mtp_resume.py`)") == \
        "interrupted-runs-and-honest-resumes-pluginsplugin_utilsmtp_resumepy"


def _module_options(name):
    source = (ROOT / "plugins" / "modules" / ("%s.py" % name)).read_text()
    doc = yaml.safe_load(re.search(r'DOCUMENTATION = r?"""(.*?)"""', source, re.S).group(1))
    return set(doc.get("options") or {})


def _module_calls_in_docs():
    """(document, module, option names) for each call of a collection module in a README's
    YAML blocks and in `ansible ... -m blackwell.sglang.X -a '...'` lines."""
    calls = []
    for doc in _markdown_files():
        text = doc.read_text()
        for block in re.findall(r"```ya?ml\n(.*?)```", text, re.S):
            tasks = []
            for play in yaml.safe_load(block) or []:
                if isinstance(play, dict):
                    tasks += [play] + list(play.get("tasks") or [])
            for task in tasks:
                for key, args in task.items():
                    if key.startswith("blackwell.sglang.") and isinstance(args, dict):
                        calls.append((doc, key.split(".")[-1], set(args)))
        for module, quoted, bare in re.findall(r"-m blackwell\.sglang\.(\w+)(?:[ \\\n]+-a (?:'([^']*)'|(\S+)))?", text):
            args = quoted or bare
            names = set(json.loads(args)) if args.startswith("{") else {a.split("=")[0] for a in args.split()}
            calls.append((doc, module, names))
    return calls


def test_module_examples_in_docs_use_real_options():
    """A copied example must run: every module a README calls exists and takes the options it is given."""
    calls = _module_calls_in_docs()
    assert any(module == "sglang_bench" for _doc, module, _opts in calls), "README.md shows no sglang_bench example"
    problems = []
    for doc, module, names in calls:
        if not (ROOT / "plugins" / "modules" / ("%s.py" % module)).exists():
            problems.append("%s: no module %s" % (doc.relative_to(ROOT), module))
            continue
        unknown = sorted(names - _module_options(module))
        if unknown:
            problems.append("%s: %s has no option %s" % (doc.relative_to(ROOT), module, ", ".join(unknown)))
    assert not problems, "\n".join(problems)


# Decisions belong in plugins/plugin_utils (pure functions with unit tests), not in Jinja: an
# expression this long is one to move there, or to build from the role's settings mapping.
JINJA_MAX_CHARS = 200
_JINJA = re.compile(r"\{\{(.*?)\}\}|\{%(.*?)%\}", re.S)
# Keys whose value is a bare Jinja expression (no braces).
_BARE_JINJA_KEYS = ("when", "that", "failed_when", "changed_when", "until")


def _long_jinja(node, out):
    """Every Jinja expression in ``node`` over JINJA_MAX_CHARS once its whitespace is collapsed."""
    if isinstance(node, dict):
        for key, value in node.items():
            _long_jinja(value, out)
            if key in _BARE_JINJA_KEYS:
                for cond in value if isinstance(value, list) else [value]:
                    if isinstance(cond, str) and "{{" not in cond and len(" ".join(cond.split())) > JINJA_MAX_CHARS:
                        out.append(" ".join(cond.split()))
    elif isinstance(node, list):
        for value in node:
            _long_jinja(value, out)
    elif isinstance(node, str):
        for match in _JINJA.finditer(node):
            expr = " ".join((match.group(1) or match.group(2) or "").split())
            if len(expr) > JINJA_MAX_CHARS:
                out.append(expr)
    return out


def test_long_jinja_check_sees_a_long_expression():
    long_expr = "{{ " + " or ".join(["some_long_variable_name"] * 10) + " }}"
    assert _long_jinja({"x": long_expr}, [])
    assert _long_jinja([{"when": " and ".join(["a_condition_that_is_long"] * 10)}], [])
    assert not _long_jinja({"x": "{{ a\n     | b }}", "when": "a and b"}, [])


def test_no_jinja_expression_over_the_limit():
    files = sorted(list((ROOT / "roles").rglob("*.yml")) + list((ROOT / "playbooks").glob("*.yml")))
    assert len(files) > 50
    problems = []
    for path in files:
        rel = path.relative_to(ROOT).as_posix()
        found = _long_jinja(yaml.safe_load(path.read_text()), [])
        if found:
            problems.extend("%s: %d characters: %s..." % (rel, len(expr), expr[:80]) for expr in found)
    assert not problems, ("Jinja expressions over %d characters (move the decision into plugins/plugin_utils, "
                          "pass the role's settings mapping whole):\n%s" % (JINJA_MAX_CHARS, "\n".join(problems)))
