"""PEP 517 build backend for sglang_sim: setuptools when it can build wheels, else stdlib.

Nodes install the simulator with ``pip install --no-index --no-build-isolation`` into a
venv made by Debian bookworm's python3-venv, which ships setuptools 66 but not the
``wheel`` package; setuptools < 70.1 cannot build a wheel without it ("invalid command
'bdist_wheel'"). So: delegate to setuptools.build_meta when bdist_wheel is available,
otherwise write the (pure-Python, stdlib-only) wheel directly with zipfile.
"""

import base64
import hashlib
import os
import re
import zipfile

NAME = "sglang_sim"
DIST = "sglang_sim"
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _setuptools_can_build():
    try:
        import setuptools  # noqa: F401
    except ImportError:
        return False
    try:
        import wheel  # noqa: F401
        return True
    except ImportError:
        pass
    try:
        from setuptools.command import bdist_wheel  # noqa: F401  (setuptools >= 70.1)
        return True
    except ImportError:
        return False


def _meta():
    text = open(os.path.join(HERE, "pyproject.toml")).read()

    def field(name):
        m = re.search(r'^%s\s*=\s*"([^"]*)"' % name, text, re.M)
        return m.group(1) if m else ""

    scripts = dict(re.findall(r'^([\w-]+)\s*=\s*"([\w.:]+)"', text.split("[project.scripts]", 1)[1]
                              .split("[", 1)[0], re.M)) if "[project.scripts]" in text else {}
    return {"version": field("version"), "summary": field("description"),
            "requires_python": field("requires-python"), "scripts": scripts}


def _metadata_files(meta):
    metadata = ("Metadata-Version: 2.1\nName: sglang-sim\nVersion: %s\nSummary: %s\n"
                "Requires-Python: %s\n" % (meta["version"], meta["summary"], meta["requires_python"]))
    wheel = ("Wheel-Version: 1.0\nGenerator: sglang_sim_build\nRoot-Is-Purelib: true\n"
             "Tag: py3-none-any\n")
    entry = "[console_scripts]\n" + "".join("%s = %s\n" % kv for kv in sorted(meta["scripts"].items()))
    return {"METADATA": metadata, "WHEEL": wheel, "entry_points.txt": entry,
            "top_level.txt": NAME + "\n"}


def _distinfo(meta):
    return "%s-%s.dist-info" % (DIST, meta["version"])


def _write_wheel(wheel_directory, editable=False):
    meta = _meta()
    name = "%s-%s-py3-none-any.whl" % (DIST, meta["version"])
    path = os.path.join(wheel_directory, name)
    records = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        def add(arcname, data):
            if isinstance(data, str):
                data = data.encode("utf-8")
            zf.writestr(arcname, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            records.append("%s,sha256=%s,%d" % (arcname, digest, len(data)))

        if editable:
            add("__editable__.%s.pth" % DIST, HERE + "\n")
        else:
            pkg = os.path.join(HERE, NAME)
            for fname in sorted(os.listdir(pkg)):
                if fname.endswith((".py", ".json")):
                    with open(os.path.join(pkg, fname), "rb") as fh:
                        add("%s/%s" % (NAME, fname), fh.read())
        di = _distinfo(meta)
        for fname, content in _metadata_files(meta).items():
            add("%s/%s" % (di, fname), content)
        records.append("%s/RECORD,," % di)
        zf.writestr("%s/RECORD" % di, "\n".join(records) + "\n")
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    if _setuptools_can_build():
        from setuptools import build_meta
        return build_meta.prepare_metadata_for_build_wheel(metadata_directory, config_settings)
    meta = _meta()
    di = _distinfo(meta)
    os.makedirs(os.path.join(metadata_directory, di), exist_ok=True)
    for fname, content in _metadata_files(meta).items():
        with open(os.path.join(metadata_directory, di, fname), "w") as fh:
            fh.write(content)
    return di


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    if _setuptools_can_build():
        from setuptools import build_meta
        return build_meta.build_wheel(wheel_directory, config_settings, metadata_directory)
    return _write_wheel(wheel_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    if _setuptools_can_build():
        from setuptools import build_meta
        if hasattr(build_meta, "build_editable"):
            return build_meta.build_editable(wheel_directory, config_settings, metadata_directory)
    return _write_wheel(wheel_directory, editable=True)


def build_sdist(sdist_directory, config_settings=None):
    from setuptools import build_meta
    return build_meta.build_sdist(sdist_directory, config_settings)
