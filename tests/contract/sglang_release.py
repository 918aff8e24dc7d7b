"""The real SGLang release's own command-line parser, rebuilt without its runtime.

The contract tests need to know exactly which flags a pinned SGLang release
accepts, because a flag it rejects makes the systemd unit crash-loop on every
node. A hand-written list drifts; so this module fetches the release wheel from
PyPI (``pip download``) and runs the release's *own* argument definitions
(``sglang/srt/server_args.py``, ``sglang/srt/arg_groups/...``) straight out of
the wheel, without importing SGLang's runtime (torch, CUDA kernels, ... are not
installed on the controller).

How it runs code that imports torch without torch: every ``sglang.*`` module is
loaded *lazily by definition*. Importing ``sglang.srt.server_args`` executes
nothing; reading ``ServerArgs`` from it executes only the top-level statements
that bind or mutate ``ServerArgs`` and, transitively, the top-level names those
statements reference. Function bodies run against a globals dict that loads a
missing name the first time it is looked up. A statement that cannot run in
isolation (``import torch``) binds its names to an ``_Unavailable`` placeholder
that raises a clear error if anything actually uses it; the parser build never
does, and the reconstruction fails loudly if it ever did. The argument
definition modules (``arg_groups/arg_utils.py``, ``argparse_actions.py``,
``choices.py``, ``field_order.py``, ``fields/*.py``) are executed in full.

The result is a plain ``argparse.ArgumentParser(prog="sglang serve")`` built by
the release's own ``ServerArgs.add_cli_args``; every ``add_argument`` call is
recorded into a JSON spec cached under ``.cache/sglang-specs`` (keyed by the
wheel's sha256 and this file's own hash), so later runs rebuild the parser from
JSON without re-running the release code. Callables in the spec (argparse
``type=`` functions, custom actions) are references that are re-loaded lazily
from the wheel.

Use from a contract test (tests/contract/conftest.py puts this directory on
sys.path and offers fixtures that skip when the wheel cannot be fetched)::

    import sglang_release
    ns = sglang_release.parse_cmdline(["--model-path", "m", "--tp-size", "4"])
    assert "--cuda-graph-max-bs-decode" in sglang_release.flag_names("0.5.23")

or from a shell: ``python tests/contract/sglang_release.py [--flags] [VERSION ...]``.

API: ``real_parser(version)``, ``parse_cmdline(argv, version)``,
``flag_names(version)``, ``wheel_path(version)``. ``ReleaseUnavailable`` means
the wheel could not be fetched (tests skip); ``SpecBuildError`` means the
release's definitions could not be rebuilt (tests fail).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import fcntl
import functools
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import threading
import time
import types
import zipfile
from pathlib import Path

PINNED = "0.5.23"
# 0.5.19 is the last release built for CUDA 12; nodes still on a 12.x driver run it.
SUPPORTED = ("0.5.23", "0.5.19")

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"
WHEELS = CACHE / "wheels"
SPECS = CACHE / "sglang-specs"
DEPS = CACHE / "sglang-deps"

# Executed in full: these are the argument definitions themselves, and they must
# not silently lose a statement. Everything else under sglang/ is lazy.
_EAGER = re.compile(
    r"^sglang/srt/arg_groups/("
    r"arg_utils|argparse_actions|choices|field_order|fields/[A-Za-z0-9_]+"
    r")\.py$"
)

# Third-party modules that a *type function* of the release calls at parse time,
# and that the controller venv does not have. The stand-in only offers the
# functions the type functions call, with the same semantics
# (orjson.loads accepts str and raises a json.JSONDecodeError subclass).
_STAND_INS = {
    "orjson": {"loads": json.loads, "JSONDecodeError": json.JSONDecodeError},
}

_BUILD_LOCK = threading.Lock()


class ReleaseUnavailable(RuntimeError):
    """The release wheel (or a dependency needed to read it) could not be fetched."""


class SpecBuildError(RuntimeError):
    """The release's own argument definitions could not be rebuilt."""


class ArgvRejected(ValueError):
    """The real parser rejected a command line (argparse exited)."""

    def __init__(self, argv, version, exit_code, stderr):
        self.argv = list(argv)
        self.version = version
        self.exit_code = exit_code
        self.stderr = stderr
        lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
        self.message = lines[-1] if lines else "exit %s" % exit_code
        super().__init__(
            "sglang %s rejects %r (exit %s): %s"
            % (version, " ".join(self.argv), exit_code, self.message)
        )


# ---------------------------------------------------------------------------
# Fetching
# ---------------------------------------------------------------------------


@contextlib.contextmanager
def _file_lock(name):
    """Serialise downloads/extractions between pytest-xdist workers."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / (".%s.lock" % name), "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _pip_download(requirement, dest):
    cmd = [
        sys.executable, "-m", "pip", "download", requirement,
        "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
        "-d", str(dest),
    ]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ReleaseUnavailable("pip download %s failed: %s" % (requirement, exc))
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise ReleaseUnavailable(
            "pip download %s failed (rc=%d): %s" % (requirement, proc.returncode, tail)
        )


def _find_wheel(directory, dist, version=None):
    pattern = "%s-%s-*.whl" % (dist, version) if version else "%s-*.whl" % dist
    found = sorted(directory.glob(pattern))
    return found[-1] if found else None


def wheel_path(version=PINNED):
    """Path of the sglang==version wheel, downloaded with the venv's pip if absent."""
    if version not in SUPPORTED:
        raise ValueError("unsupported SGLang release %r; supported: %s" % (version, ", ".join(SUPPORTED)))
    WHEELS.mkdir(parents=True, exist_ok=True)
    found = _find_wheel(WHEELS, "sglang", version)
    if found is None:
        with _file_lock("wheels"):
            found = _find_wheel(WHEELS, "sglang", version)
            if found is None:
                _pip_download("sglang==%s" % version, WHEELS)
                found = _find_wheel(WHEELS, "sglang", version)
    if found is None:
        raise ReleaseUnavailable("pip reported success but no sglang-%s wheel is in %s" % (version, WHEELS))
    return found


def _ensure_msgspec():
    """Make ``msgspec`` importable: the release's field classes are msgspec Structs.

    msgspec is a real (compiled) dependency of the wheel, not something to fake;
    when the venv lacks it, its own wheel is fetched and extracted under .cache.
    """
    if importlib.util.find_spec("msgspec") is not None:
        return
    target = DEPS / "msgspec"
    if not (target / "msgspec" / "__init__.py").exists():
        with _file_lock("deps"):
            if not (target / "msgspec" / "__init__.py").exists():
                DEPS.mkdir(parents=True, exist_ok=True)
                wheel = _find_wheel(WHEELS, "msgspec")
                if wheel is None:
                    _pip_download("msgspec", WHEELS)
                    wheel = _find_wheel(WHEELS, "msgspec")
                if wheel is None:
                    raise ReleaseUnavailable("no msgspec wheel in %s" % WHEELS)
                tmp = DEPS / (".msgspec.%d" % os.getpid())
                with zipfile.ZipFile(wheel) as zf:
                    zf.extractall(tmp)
                os.replace(tmp, target)
    if str(target) not in sys.path:
        sys.path.append(str(target))
    importlib.invalidate_caches()
    if importlib.util.find_spec("msgspec") is None:
        raise ReleaseUnavailable("msgspec extracted to %s but is not importable" % target)


# ---------------------------------------------------------------------------
# Lazy, definition-at-a-time loading of the wheel's sglang package
# ---------------------------------------------------------------------------


class _Unavailable:
    """Stands for a top-level name whose defining statement cannot run here."""

    def __init__(self, module, name, error):
        object.__setattr__(self, "_where", "%s.%s" % (module, name))
        object.__setattr__(self, "_error", "%s: %s" % (type(error).__name__, error))

    def _fail(self, *args, **kwargs):
        raise SpecBuildError(
            "%s is not available without the SGLang runtime (%s); the CLI rebuild "
            "touched it" % (self._where, self._error)
        )

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        self._fail()

    __call__ = __getitem__ = __iter__ = __mro_entries__ = _fail

    def __repr__(self):
        return "<unavailable %s (%s)>" % (self._where, self._error)


def _bound_names(stmt):
    """Names a top-level statement binds (recursing into if/try/with blocks)."""
    out = set()
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        out.add(stmt.name)
    elif isinstance(stmt, (ast.Import, ast.ImportFrom)):
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            return out
        for alias in stmt.names:
            if alias.name != "*":
                out.add(alias.asname or alias.name.split(".")[0])
    elif isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        for target in targets:
            for node in ast.walk(target):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                    out.add(node.id)
    elif isinstance(stmt, (ast.If, ast.Try, ast.With, ast.For, ast.While)) or type(stmt).__name__ == "TryStar":
        for field in ("body", "orelse", "finalbody"):
            for sub in getattr(stmt, field, []):
                out |= _bound_names(sub)
        for handler in getattr(stmt, "handlers", []):
            if handler.name:
                out.add(handler.name)
            for sub in handler.body:
                out |= _bound_names(sub)
    return out


def _mutated_names(stmt):
    """Names a top-level statement mutates in place (``X.attr = ...``, ``X.append(...)``)."""
    out = set()
    targets = []
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        targets = [stmt.target]
    elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        targets = [stmt.value.func]
    for target in targets:
        node = target
        if not isinstance(node, (ast.Attribute, ast.Subscript)):
            continue
        while isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        if isinstance(node, ast.Name):
            out.add(node.id)
    return out


def _eager_refs(node):
    """Names a statement reads when it *executes* (not inside nested function bodies)."""
    refs = set()
    stack = [node]
    while stack:
        cur = stack.pop()
        if isinstance(cur, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stack.extend(cur.decorator_list)
            stack.extend(d for d in cur.args.defaults if d is not None)
            stack.extend(d for d in cur.args.kw_defaults if d is not None)
            # Without `from __future__ import annotations` these run at def time.
            every = cur.args.posonlyargs + cur.args.args + cur.args.kwonlyargs
            every += [a for a in (cur.args.vararg, cur.args.kwarg) if a is not None]
            stack.extend(a.annotation for a in every if a.annotation is not None)
            if cur.returns is not None:
                stack.append(cur.returns)
            continue
        if isinstance(cur, ast.Lambda):
            stack.extend(cur.args.defaults)
            continue
        if isinstance(cur, ast.Name) and isinstance(cur.ctx, ast.Load):
            refs.add(cur.id)
        stack.extend(ast.iter_child_nodes(cur))
    return refs


class _LazyGlobals(dict):
    """Module globals that execute a top-level definition on first lookup."""

    def __init__(self, loader, name, path, source):
        super().__init__()
        self._loader = loader
        self._name = name
        self._filename = "%s/%s" % (loader.wheel.name, path)
        tree = ast.parse(source, self._filename)
        self._flags = 0
        self._stmts = tree.body
        self._index = {}
        mutations = {}
        for i, stmt in enumerate(tree.body):
            if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
                for alias in stmt.names:
                    feature = getattr(__import__("__future__"), alias.name, None)
                    if feature is not None:
                        self._flags |= feature.compiler_flag
                continue
            for bound in _bound_names(stmt):
                self._index.setdefault(bound, []).append(i)
            for mutated in _mutated_names(stmt):
                mutations.setdefault(mutated, []).append(i)
        # A mutation is part of *building* a name only when the name is rebound
        # after it (``X.__annotations__ = ...; X = defstruct(X ...)``). Later ones
        # change state other definitions rely on first (``EnvField._allow_set_name
        # = False`` after ``class Envs``), so they are left out.
        for name, idxs in mutations.items():
            binds = self._index.get(name)
            if binds:
                self._index[name] = sorted(set(binds) | {i for i in idxs if i < binds[-1]})
        self._done = set()

    def run_all(self):
        """Execute the whole module in order (for the definition modules)."""
        for i in range(len(self._stmts)):
            self._run(i, tolerant=False)

    def _run(self, i, tolerant):
        if i in self._done:
            return
        self._done.add(i)
        stmt = self._stmts[i]
        if tolerant:
            for ref in _eager_refs(stmt):
                if ref in self._index and not dict.__contains__(self, ref):
                    self.get_lazy(ref)
        code = compile(ast.Module(body=[stmt], type_ignores=[]), self._filename, "exec",
                       flags=self._flags, dont_inherit=True)
        try:
            exec(code, self)
        except Exception as exc:
            if not tolerant:
                raise
            self._loader.unavailable.append("%s: %s" % (self._name, exc))
            for bound in _bound_names(stmt):
                if not dict.__contains__(self, bound):
                    self[bound] = _Unavailable(self._name, bound, exc)

    def get_lazy(self, key):
        try:
            return self[key]
        except KeyError:
            return None

    def __missing__(self, key):
        for i in self._index.get(key, ()):
            self._run(i, tolerant=True)
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        raise KeyError(key)


class _LazyModule(types.ModuleType):
    """A module whose namespace is a _LazyGlobals (so ``from m import x`` loads x)."""

    @property
    def __dict__(self):  # typing.get_type_hints reads module.__dict__
        return object.__getattribute__(self, "_lazy_globals")

    def __getattr__(self, name):
        g = object.__getattribute__(self, "_lazy_globals")
        try:
            return g[name]
        except KeyError:
            raise AttributeError("module %r has no attribute %r" % (self.__name__, name))

    def __setattr__(self, name, value):
        types.ModuleType.__setattr__(self, name, value)
        try:
            object.__getattribute__(self, "_lazy_globals")[name] = value
        except AttributeError:
            pass


class _WheelLoader(importlib.abc.Loader):
    def __init__(self, importer, path, is_pkg):
        self.importer = importer
        self.path = path
        self.is_pkg = is_pkg

    def create_module(self, spec):
        imp = self.importer
        source = imp.zip.read(self.path).decode("utf-8") if self.path else ""
        module = _LazyModule(spec.name)
        g = _LazyGlobals(imp, spec.name, self.path or spec.name.replace(".", "/"), source)
        object.__setattr__(module, "_lazy_globals", g)
        g.update({
            "__name__": spec.name,
            "__file__": "%s/%s" % (imp.wheel, self.path or ""),
            "__package__": spec.name if self.is_pkg else spec.name.rpartition(".")[0],
            "__builtins__": __builtins__,
        })
        return module

    def exec_module(self, module):
        if self.path and _EAGER.match(self.path):
            object.__getattribute__(module, "_lazy_globals").run_all()


class _StandInLoader(importlib.abc.Loader):
    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__dict__.update(_STAND_INS[spec.name])
        module.__stand_in__ = True
        return module

    def exec_module(self, module):
        pass


class _WheelImporter(importlib.abc.MetaPathFinder):
    """Serves ``sglang.*`` from the wheel while active; restores sys.modules on exit."""

    def __init__(self, wheel):
        self.wheel = Path(wheel)
        self.zip = zipfile.ZipFile(self.wheel)
        self.files = set(self.zip.namelist())
        self.dirs = {n.rsplit("/", 1)[0] for n in self.files if "/" in n}
        for d in list(self.dirs):
            while "/" in d:
                d = d.rsplit("/", 1)[0]
                self.dirs.add(d)
        self.unavailable = []
        self._saved = None

    def find_spec(self, name, path=None, target=None):
        if name in _STAND_INS and importlib.machinery.PathFinder.find_spec(name) is None:
            return importlib.util.spec_from_loader(name, _StandInLoader())
        if name != "sglang" and not name.startswith("sglang."):
            return None
        rel = name.replace(".", "/")
        if rel + "/__init__.py" in self.files:
            loader, pkg = _WheelLoader(self, rel + "/__init__.py", True), True
        elif rel + ".py" in self.files:
            loader, pkg = _WheelLoader(self, rel + ".py", False), False
        elif rel in self.dirs:
            loader, pkg = _WheelLoader(self, None, True), True
        else:
            return None
        spec = importlib.util.spec_from_loader(name, loader, is_package=pkg)
        if pkg:
            spec.submodule_search_locations = ["%s/%s" % (self.wheel, rel)]
        return spec

    def _ours(self, name):
        return name == "sglang" or name.startswith("sglang.") or name in _STAND_INS

    def __enter__(self):
        self._saved = {k: v for k, v in sys.modules.items() if self._ours(k)}
        for k in self._saved:
            del sys.modules[k]
        sys.meta_path.insert(0, self)
        return self

    def __exit__(self, *exc):
        sys.meta_path.remove(self)
        # Sources were read when each module was created; nothing reads the zip later.
        self.zip.close()
        for k in [k for k in sys.modules if self._ours(k)]:
            del sys.modules[k]
        sys.modules.update(self._saved)
        return False

    def resolve(self, ref):
        """Load ``module:qualname`` from the wheel (used inside the context)."""
        modname, _sep, qualname = ref.partition(":")
        obj = importlib.import_module(modname)
        for part in qualname.split("."):
            obj = getattr(obj, part)
        return obj


# ---------------------------------------------------------------------------
# Recording the release's add_argument calls as a JSON spec
# ---------------------------------------------------------------------------


class _RecordingParser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.recorded = []

    def add_argument(self, *names, **kwargs):
        action = super().add_argument(*names, **kwargs)
        # None while ArgumentParser.__init__ adds -h/--help (every parser has it).
        if getattr(self, "recorded", None) is not None:
            self.recorded.append((names, kwargs))
        return action


_BUILTIN_REFS = {int: "builtins:int", float: "builtins:float", str: "builtins:str",
                 bool: "builtins:bool", json.loads: "json:loads"}


def _encode(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        items = [_encode(v) for v in value]
        return items if isinstance(value, list) else {"__tuple__": items}
    if isinstance(value, (set, frozenset)):
        return {"__set__": sorted((_encode(v) for v in value), key=repr)}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"__dict__": {k: _encode(v) for k, v in value.items()}}
    try:
        if value in _BUILTIN_REFS:
            return {"__ref__": _BUILTIN_REFS[value]}
    except TypeError:
        pass
    module = getattr(value, "__module__", None)
    qualname = getattr(value, "__qualname__", None)
    if callable(value) and module and qualname and "<" not in qualname:
        if module == "argparse" or module == "sglang" or module.startswith("sglang."):
            return {"__ref__": "%s:%s" % (module, qualname)}
    if isinstance(value, _Unavailable):
        value._fail()
    raise SpecBuildError("cannot record %r (%s) in the CLI spec" % (value, type(value).__name__))


def _decode(value, resolve):
    if isinstance(value, list):
        return [_decode(v, resolve) for v in value]
    if isinstance(value, dict):
        if "__tuple__" in value:
            return tuple(_decode(v, resolve) for v in value["__tuple__"])
        if "__set__" in value:
            return {_decode(v, resolve) for v in value["__set__"]}
        if "__dict__" in value:
            return {k: _decode(v, resolve) for k, v in value["__dict__"].items()}
        if "__ref__" in value:
            return resolve(value["__ref__"])
    return value


@contextlib.contextmanager
def _default_environment():
    """Hide SGLANG_* variables: a few choices depend on them (e.g. the token_oracle
    sampling backend), and the cached spec must describe the release's defaults."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("SGLANG")}
    for k in saved:
        del os.environ[k]
    try:
        yield
    finally:
        os.environ.update(saved)


def _build_spec(version, wheel):
    """Run the release's own ServerArgs.add_cli_args and record what it adds."""
    _ensure_msgspec()
    with _BUILD_LOCK, _default_environment(), _WheelImporter(wheel) as imp:
        try:
            server_args = importlib.import_module("sglang.srt.server_args")
            server_args_cls = server_args.ServerArgs
            parser = _RecordingParser(prog="sglang serve")
            # Quiet: some releases log deprecation notes while registering.
            with contextlib.redirect_stderr(io.StringIO()):
                server_args_cls.add_cli_args(parser)
        except SpecBuildError:
            raise
        except Exception as exc:
            raise SpecBuildError(
                "rebuilding the sglang %s CLI from %s failed: %s: %s (isolation gaps: %s)"
                % (version, wheel.name, type(exc).__name__, exc, "; ".join(imp.unavailable[-5:]))
            ) from exc
        arguments = [{"names": list(names), "kwargs": {k: _encode(v) for k, v in kwargs.items()}}
                     for names, kwargs in parser.recorded]
        # Statements that could not run here; none of them fed an argument (an
        # argument touching one fails the build), kept so a reviewer can see them.
        gaps = sorted({gap[:200] for gap in imp.unavailable})
    if len(arguments) < 50:
        raise SpecBuildError("sglang %s: only %d arguments recorded; the rebuild is incomplete" % (version, len(arguments)))
    return {
        "version": version,
        "wheel": wheel.name,
        "prog": parser.prog,
        "allow_abbrev": parser.allow_abbrev,
        "arguments": arguments,
        "isolation_gaps": gaps,
    }


def _self_hash():
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _file_sha256(path):
    """sha256 of a file, remembered next to it per (size, mtime) to keep warm runs fast."""
    st = path.stat()
    memo = path.with_name(".%s.sha256" % path.name)
    stamp = "%d %d" % (st.st_size, st.st_mtime_ns)
    try:
        recorded_stamp, recorded = memo.read_text().split("\n")[:2]
        if recorded_stamp == stamp and len(recorded) == 64:
            return recorded
    except (OSError, ValueError):
        pass
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    try:
        memo.write_text("%s\n%s\n" % (stamp, digest.hexdigest()))
    except OSError:
        pass  # read-only cache: just hash again next time
    return digest.hexdigest()


@functools.lru_cache(maxsize=None)
def spec(version=PINNED):
    """The recorded add_argument calls of sglang==version (JSON-able dict), cached on disk."""
    wheel = wheel_path(version)
    key = "%s-%s-%s" % (version, _file_sha256(wheel)[:24], _self_hash())
    path = SPECS / ("sglang-%s.json" % key)
    if path.exists():
        try:
            return json.loads(path.read_text())
        except ValueError:
            pass  # a torn write from an interrupted run: rebuild it
    built = _build_spec(version, wheel)
    built["wheel_sha256"] = _file_sha256(wheel)
    SPECS.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".%d.tmp" % os.getpid())
    tmp.write_text(json.dumps(built, indent=1, sort_keys=True))
    os.replace(tmp, path)
    for stale in SPECS.glob("sglang-%s-*.json" % version):
        if stale != path:  # an older wheel or an older version of this file
            with contextlib.suppress(OSError):
                stale.unlink()
    return built


@functools.lru_cache(maxsize=None)
def real_parser(version=PINNED):
    """``argparse.ArgumentParser(prog="sglang serve")`` with sglang==version's arguments.

    The parser is shared (cached); treat it as read-only.
    """
    data = spec(version)
    wheel = wheel_path(version)
    _ensure_msgspec()
    parser = argparse.ArgumentParser(prog=data["prog"], allow_abbrev=data["allow_abbrev"])
    # Callables live in the wheel; keep the importer's module objects alive after
    # the context closes (function globals hold what they need).
    with _BUILD_LOCK, _WheelImporter(wheel) as imp:
        cache = {}

        def resolve(ref):
            if ref not in cache:
                cache[ref] = imp.resolve(ref)
            return cache[ref]

        for entry in data["arguments"]:
            kwargs = {k: _decode(v, resolve) for k, v in entry["kwargs"].items()}
            parser.add_argument(*entry["names"], **kwargs)
    parser.sglang_version = version
    return parser


def parse_cmdline(argv, version=PINNED):
    """Parse ``argv`` (flags after ``python -m sglang.launch_server``) like the release does.

    Returns the argparse Namespace; raises ArgvRejected carrying argparse's message
    when the release would exit (exit 2: unknown/ambiguous option, bad choice, ...).
    """
    parser = real_parser(version)
    err = io.StringIO()
    out = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            return parser.parse_args([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
        raise ArgvRejected(argv, version, code, err.getvalue() or out.getvalue()) from None


@functools.lru_cache(maxsize=None)
def config_merger_class(version=PINNED):
    """The release's own ``ConfigArgumentMerger`` (srt/utils/server_args_config_parser.py).

    That module needs only the standard library and PyYAML (which Ansible brings), so it is
    executed in full from the wheel, not rebuilt lazily.
    """
    name = "sglang/srt/utils/server_args_config_parser.py"
    with zipfile.ZipFile(wheel_path(version)) as zf:
        try:
            source = zf.read(name).decode()
        except KeyError:
            raise SpecBuildError("sglang %s has no %s" % (version, name))
    module = types.ModuleType("sglang_%s_server_args_config_parser" % version.replace(".", "_"))
    module.__file__ = "%s!/%s" % (wheel_path(version), name)
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module.ConfigArgumentMerger


def parse_server_argv(argv, version=PINNED):
    """What ``prepare_server_args`` (srt/server_args.py) parses: a ``--config`` file merged by
    the release's ConfigArgumentMerger first, then the release's parser.

    Returns ``(namespace, merged_argv)``; raises ArgvRejected as parse_cmdline does, and the
    merger's own ValueError for a config file the release refuses.
    """
    argv = [str(a) for a in argv]
    if "--config" in argv:
        argv = config_merger_class(version)(real_parser(version)).merge_config_with_args(argv)
    return parse_cmdline(argv, version), argv


def flag_names(version=PINNED):
    """Every option string sglang==version accepts verbatim (aliases included, -h/--help not)."""
    names = set()
    for action in real_parser(version)._actions:
        names.update(action.option_strings)
    return names - {"-h", "--help"}


def _main(argv=None):
    """``python tests/contract/sglang_release.py [VERSION ...]``: build and time the parsers."""
    ap = argparse.ArgumentParser(description=_main.__doc__)
    ap.add_argument("versions", nargs="*", default=list(SUPPORTED))
    ap.add_argument("--flags", action="store_true", help="print the flag names")
    args = ap.parse_args(argv)
    for version in args.versions:
        try:
            t0 = time.perf_counter()
            parser = real_parser(version)
            dt = time.perf_counter() - t0
        except (ReleaseUnavailable, SpecBuildError) as exc:
            print("sglang %s: %s" % (version, exc), file=sys.stderr)
            return 1
        print("sglang %s: %d options, parser in %.3f s" % (version, len(parser._actions), dt))
        if args.flags:
            print("\n".join(sorted(flag_names(version))))
    return 0


if __name__ == "__main__":
    sys.exit(_main())
