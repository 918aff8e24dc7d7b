"""Fixtures for the contract tests: the real SGLang releases' own parsers.

Any test here may use ``real_sglang_parser`` (pinned release), ``sglang_parser_for``
(``sglang_parser_for("0.5.19")``) or ``sglang_parse`` (``sglang_parse(argv,
version=...)`` -> Namespace, raising ``sglang_release.ArgvRejected``). Each skips
the test, with pip's reason, when the release wheel cannot be fetched.
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
