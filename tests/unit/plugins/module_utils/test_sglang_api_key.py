"""sglang_api_key: the key read on the node from the --config file the service role writes, so the
controller never holds it. The texts are the role's own (sglang_service_secrets_yaml) and the forms
a person editing the file by hand would write."""

import json
import os

import pytest

from ansible_collections.blackwell.sglang.plugins.module_utils import sglang_api_key as ak

KEYS = ["sk-plain", 'with "quotes" and \\ backslash', "a: b # not a comment", "123", "true", "ünïcode"]


@pytest.mark.parametrize("key", KEYS)
def test_role_written_text_round_trips(key):
    # the role writes the key as a JSON string under a comment header (filter sglang_service_secrets_yaml)
    text = "# managed by blackwell.sglang\napi-key: %s\n" % json.dumps(key)
    assert ak.key_from_text(text) == key


@pytest.mark.parametrize("key", KEYS)
def test_role_written_text_round_trips_without_yaml(monkeypatch, key):
    # a node without PyYAML reads the same file the same way
    monkeypatch.setitem(__import__("sys").modules, "yaml", None)
    text = "api-key: %s\n" % json.dumps(key)
    assert ak.key_from_text(text) == key


@pytest.mark.parametrize("text,key", [
    ("api_key: plain\n", "plain"),
    ("api-key: 'it''s'\n", "it's"),
    ("other: 1\n", ""),
    ("", ""),
    ("api-key: \n", ""),
])
def test_hand_written_forms(text, key):
    assert ak.key_from_text(text) == key


def test_missing_file_is_no_key(tmp_path):
    assert ak.read_key_file(str(tmp_path / "secrets.yaml")) == ""


def test_broken_file_names_the_path_never_the_text(tmp_path):
    path = tmp_path / "secrets.yaml"
    path.write_text("api-key: [unclosed sk-secret-value\n")
    with pytest.raises(ak.ApiKeyFileError) as err:
        ak.read_key_file(str(path))
    assert str(path) in str(err.value)
    assert "sk-secret-value" not in str(err.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a 0000 file: the unreadable case needs a non-root user")
def test_unreadable_file_says_what_to_do(tmp_path):
    path = tmp_path / "secrets.yaml"
    path.write_text('api-key: "k"\n')
    path.chmod(0)
    with pytest.raises(ak.ApiKeyFileError, match="cannot be read"):
        ak.read_key_file(str(path))


def test_resolve_fills_api_key_only_from_the_file(tmp_path):
    path = tmp_path / "secrets.yaml"
    path.write_text('api-key: "sk-1"\n')
    params = {"api_key": None, "api_key_file": str(path)}
    assert ak.resolve(params) is None and params["api_key"] == "sk-1"
    params = {"api_key": "given", "api_key_file": None}
    assert ak.resolve(params) is None and params["api_key"] == "given"
    params = {"api_key": None, "api_key_file": str(tmp_path / "absent.yaml")}
    assert ak.resolve(params) is None and params["api_key"] is None
    path.write_text("- a list\n- not a mapping\n")
    params = {"api_key": None, "api_key_file": str(path)}
    assert ak.resolve(params) is None and params["api_key"] is None
    path.write_text("api-key: {unclosed\n")
    assert "api_key_file" in ak.resolve({"api_key": None, "api_key_file": str(path)})
