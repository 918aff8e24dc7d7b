"""What SGLang prints about its arguments at startup, read from the pinned wheel: one
``server_args={...}`` line from the main process with every resolved argument, in which only
watermark secrets are hidden, so the API key is printed in clear (the reason the service role
starts SGLang through roles/service/files/sglang_launch_redacted.py). The simulator prints the
same line; this fails when the release changes either."""

import ast
import zipfile

import pytest

import sglang_release
from sglang_sim import launch_server


@pytest.fixture(scope="module")
def wheel_source():
    try:
        path = sglang_release.wheel_path(sglang_release.PINNED)
    except sglang_release.ReleaseUnavailable as exc:
        pytest.skip("sglang %s wheel unavailable: %s" % (sglang_release.PINNED, exc))

    def read(name):
        with zipfile.ZipFile(str(path)) as whl:
            return whl.read("sglang/" + name).decode()

    return read


def _function(source, name):
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return ast.get_source_segment(source, node)
    raise AssertionError("%s not found" % name)


def test_release_logs_every_argument_with_only_watermark_secrets_hidden(wheel_source):
    engine = wheel_source("srt/entrypoints/engine.py")
    launch = _function(engine, "_launch_subprocesses")
    assert 'logger.info(f"server_args={_server_args_for_logging(server_args)}")' in launch
    assert "configure_logger(server_args)" in launch  # INFO by default: the line is printed
    helper = _function(engine, "_server_args_for_logging")
    assert "redact_watermark_secrets(server_args.resolved_dict())" in helper
    watermark = wheel_source("srt/sampling/watermarking/core.py")
    tree = ast.parse(watermark)
    names = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "WATERMARK_SECRET_FIELD_NAMES":
            names = ast.literal_eval(node.value.args[0])
    assert names == {"watermark_key", "watermark_key_b", "watermark_config"}
    assert "api_key" not in names and "admin_api_key" not in names
    # The key really is one of the fields resolved_dict serializes.
    serving = wheel_source("srt/arg_groups/fields/serving.py")
    assert "    api_key: A[" in serving


def test_release_answers_server_info_with_every_argument(wheel_source):
    common = wheel_source("srt/utils/common.py")
    assert "result = server_args.resolved_dict()" in _function(common, "build_server_info")
    http = wheel_source("srt/entrypoints/http_server.py")
    assert "build_server_info(server_args" in _function(http, "server_info")


def test_sim_prints_the_same_line():
    line = launch_server.server_args_line({"model_path": "m", "api_key": "k-1", "tp_size": 4, "_internal": 1})
    assert line == "server_args={'model_path': 'm', 'api_key': 'k-1', 'tp_size': 4}"
