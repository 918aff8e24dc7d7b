"""Fixtures for the contract tests: the real SGLang releases' own parsers.

Any test here may use ``real_sglang_parser`` (pinned release), ``sglang_parser_for``
(``sglang_parser_for("0.5.19")``) or ``sglang_parse`` (``sglang_parse(argv,
version=...)`` -> Namespace, raising ``sglang_release.ArgvRejected``), ``pinned_wheel``
(the pinned release's wheel; a module that reads it whole says
``pytestmark = pytest.mark.usefixtures("pinned_wheel")``) or ``release_fn`` (a pure function
of the release run straight out of the wheel). Each skips the test, with pip's reason, when the
release wheel cannot be fetched.
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sglang_release  # noqa: E402


def require_parser(version=sglang_release.PINNED):
    """The release's parser, or pytest.skip when its wheel cannot be fetched."""
    try:
        return sglang_release.real_parser(version)
    except sglang_release.ReleaseUnavailable as exc:
        pytest.skip("sglang %s wheel unavailable: %s" % (version, exc))


@pytest.fixture(scope="session")
def sglang_parser_for():
    return require_parser


@pytest.fixture(scope="session")
def real_sglang_parser():
    return require_parser(sglang_release.PINNED)


@pytest.fixture(scope="session")
def sglang_parse():
    def parse(argv, version=sglang_release.PINNED):
        require_parser(version)
        return sglang_release.parse_cmdline(argv, version)

    return parse


@pytest.fixture(scope="session")
def pinned_wheel():
    try:
        return sglang_release.wheel_path()
    except sglang_release.ReleaseUnavailable as exc:
        pytest.skip("sglang %s wheel unavailable: %s" % (sglang_release.PINNED, exc))


@pytest.fixture(scope="module")
def release_fn(pinned_wheel):
    """``release_fn("sglang.srt.x:name")``: the release's own function, loaded lazily from the wheel."""
    importer = sglang_release._WheelImporter(pinned_wheel)  # pylint: disable=protected-access
    importer.__enter__()
    yield importer.resolve
    importer.__exit__(None, None, None)
