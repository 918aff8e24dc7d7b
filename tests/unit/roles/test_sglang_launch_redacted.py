"""The pure parts of roles/service/files/sglang_launch_redacted.py: which values are secrets,
how they can be spelled in a log, and the streaming replacement."""

import importlib.util
import random
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[3] / "roles" / "service" / "files" / "sglang_launch_redacted.py"
_spec = importlib.util.spec_from_file_location("sglang_launch_redacted", str(PATH))
launcher = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(launcher)

KEY = b"s3cr3t-K3Y-value"


def stream(redactor, chunks):
    return b"".join(redactor.feed(c) for c in chunks) + redactor.flush()


def test_secrets_are_the_key_like_options_only():
    config = {"api-key": "k1", "admin_api_key": "k2", "ssl-keyfile-password": "pw", "hf-token": 123,
              "ssl-keyfile": "/etc/x.pem", "model-path": "m", "enable-foo": True, "watermark-key": None}
    assert launcher.secrets_of(config) == ["123", "k1", "k2", "pw"]


def test_config_file_as_the_role_writes_it(tmp_path):
    from ansible_collections.blackwell.sglang.plugins.plugin_utils.service_record import sglang_service_secrets_yaml

    key = "a'b\"c\\d #: e"
    path = tmp_path / "secrets.yaml"
    path.write_text(sglang_service_secrets_yaml(key, ["Ansible managed"]))
    assert launcher.secrets_of(launcher.load_config(str(path))) == [key]
    # Without PyYAML (a minimal venv), the same file reads the same.
    assert launcher.secrets_of(launcher._load_flat_yaml(path.read_text())) == [key]


def test_flat_reader_refuses_what_it_cannot_read():
    with pytest.raises(ValueError):
        launcher._load_flat_yaml("api-key:\n  nested: x\n")


def test_config_path_is_the_word_after_config():
    assert launcher.config_path(["py", "-m", "sglang.launch_server", "--config", "/e/s.yaml", "--port", "1"]) == "/e/s.yaml"
    assert launcher.config_path(["py", "--config=/e/s.yaml"]) is None  # SGLang does not merge that form
    assert launcher.config_path(["py", "--config"]) is None


def test_spellings_cover_repr_and_json():
    forms = launcher.spellings("ab'c\\d\"é")
    assert "ab'c\\d\"é".encode() in forms
    assert repr("ab'c\\d\"é")[1:-1].encode() in forms       # SGLang logs a dict repr
    assert b'ab\'c\\\\d\\"\\u00e9' in forms                   # JSON, ASCII-escaped
    assert forms == sorted(forms, key=len, reverse=True)


def test_whole_key_in_one_write():
    r = launcher.Redactor([KEY])
    assert stream(r, [b"[t] server_args={'api_key': '" + KEY + b"', 'port': 1}\n"]) == \
        b"[t] server_args={'api_key': '<redacted>', 'port': 1}\n"


def test_key_split_over_writes_at_every_position():
    line = b"x api_key=" + KEY + b" y\n" + KEY + b"\n"
    for cut in range(1, len(line)):
        for cut2 in range(cut, len(line), 3):
            r = launcher.Redactor([KEY])
            out = stream(r, [line[:cut], line[cut:cut2], line[cut2:]])
            assert out == b"x api_key=<redacted> y\n<redacted>\n", (cut, cut2)


def test_key_split_byte_by_byte_and_random_chunks():
    rng = random.Random(7)
    text = b"".join(rng.choice([b"a", b"s3c", b"\n", KEY, KEY[:5], b"'"]) for _piece in range(400))
    expected = text.replace(KEY, b"<redacted>")
    assert stream(launcher.Redactor([KEY]), [bytes([b]) for b in text]) == expected
    for _round in range(50):
        cuts = sorted(rng.sample(range(1, len(text)), 30))
        chunks = [text[a:b] for a, b in zip([0] + cuts, cuts + [len(text)])]
        assert stream(launcher.Redactor([KEY]), chunks) == expected


def test_only_a_possible_key_start_is_held_back():
    r = launcher.Redactor([KEY])
    assert r.feed(b"progress 10%\r") == b"progress 10%\r"
    assert r.feed(b"ends with s3c") == b"ends with "   # could be the key's start
    assert r.feed(b"ond\n") == b"s3cond\n"             # was not
    assert r.feed(b"tail s3") == b"tail "
    assert r.flush() == b"s3"


def test_several_keys_and_overlapping_prefixes():
    r = launcher.Redactor([b"abcd", b"abxy", b"bc"])
    assert stream(r, [b"1 ab", b"cd 2 a", b"bx", b"y 3 b", b"c 4 ab\n"]) == \
        b"1 <redacted> 2 <redacted> 3 <redacted> 4 ab\n"


def test_no_patterns_passes_through():
    r = launcher.Redactor([])
    assert r.feed(b"anything") == b"anything" and r.flush() == b""
