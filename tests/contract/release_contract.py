"""Reading the pinned release's source for contract tests: message templates, log lines,
function bodies and module constants, straight from the wheel (nothing of it is imported).

A *template* is a string literal of the release with every interpolated part replaced by
``{}``: an f-string's fields, and the ``%d``/``%s`` of a %-style log call. The simulator's
``str.format`` templates are normalised the same way, so one comparison says whether the
sim prints the release's text.
"""

import ast
import functools
import re
import warnings
import zipfile

import sglang_release

_FORMAT_FIELD = re.compile(r"\{[^{}]*\}")
_PERCENT_FIELD = re.compile(r"%(?:\.\d+)?[sdfr]")
LOG_METHODS = ("debug", "info", "warning", "warn", "error", "exception", "critical")


def normalise(template):
    """``str.format`` fields and %-conversions become ``{}``."""
    return _PERCENT_FIELD.sub("{}", _FORMAT_FIELD.sub("{}", template))


def render(template, value="1"):
    """A concrete line from a normalised template."""
    return template.replace("{}", value)


@functools.lru_cache(maxsize=None)
def _sources(version):
    """Every .py file of the wheel, read once: path -> bytes."""
    with zipfile.ZipFile(sglang_release.wheel_path(version)) as zf:
        return {n: zf.read(n) for n in zf.namelist() if n.endswith(".py")}


def source(path, version=sglang_release.PINNED):
    """Text of ``sglang/<path>`` in the wheel."""
    try:
        return _sources(version)["sglang/" + path].decode()
    except KeyError:
        raise AssertionError("sglang %s has no %s" % (version, path))


def files(prefix, version=sglang_release.PINNED):
    """Paths (relative to sglang/) of the wheel's .py files under ``prefix``."""
    return sorted(n[len("sglang/"):] for n in _sources(version) if n.startswith("sglang/" + prefix))


@functools.lru_cache(maxsize=None)
def tree(path, version=sglang_release.PINNED):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)  # the release's own invalid escapes
        return ast.parse(source(path, version))


def template_of(node):
    """The template of a str Constant or an f-string (JoinedStr); None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        out = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                out.append(str(part.value))
            else:
                out.append("{}")
        return "".join(out)
    return None


def templates(path, version=sglang_release.PINNED):
    """Every string template of a module, normalised."""
    return templates_of_tree(tree(path, version))


def templates_of_tree(module):
    """The normalised string templates of a parsed module (an f-string once, not its parts)."""
    nodes = list(ast.walk(module))
    parts = set(id(v) for n in nodes if isinstance(n, ast.JoinedStr) for v in n.values)
    out = []
    for node in nodes:
        if id(node) in parts:
            continue
        t = template_of(node)
        if t is not None:
            out.append(normalise(t))
    return out


def find_template(path, anchor, version=sglang_release.PINNED):
    """The one normalised template of ``path`` that contains ``anchor``; AssertionError when
    there is none or several differing ones."""
    hits = sorted(set(t for t in templates(path, version) if anchor in t))
    assert hits, "sglang %s %s has no text containing %r" % (version, path, anchor)
    assert len(hits) == 1, "sglang %s %s: %d texts contain %r: %r" % (version, path, len(hits), anchor, hits)
    return hits[0]


def log_calls(path, methods=LOG_METHODS, version=sglang_release.PINNED):
    """(method, normalised template, lineno) of each ``logger.<method>(<literal>, ...)`` call."""
    out = []
    for node in ast.walk(tree(path, version)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in methods and node.args):
            continue
        owner = node.func.value
        name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
        if "log" not in name.lower():
            continue
        t = template_of(node.args[0])
        if t is not None:
            out.append((node.func.attr, normalise(t), node.lineno))
    return out


def function_source(path, qualname, version=sglang_release.PINNED):
    """``ast.unparse`` of a function (``name`` or ``Class.method``): formatting-independent."""
    parts = qualname.split(".")
    body = tree(path, version).body
    node = None
    for part in parts:
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                     and n.name == part), None)
        assert node is not None, "sglang %s %s has no %s" % (version, path, qualname)
        body = node.body
    return ast.unparse(node)


def module_constant(path, name, version=sglang_release.PINNED):
    """The literal value of a module-level ``NAME = <literal>``."""
    for node in tree(path, version).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError("sglang %s %s has no module constant %s" % (version, path, name))
