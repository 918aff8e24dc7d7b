"""The sim's CLI behaves like `sglang serve` 0.5.23 (argparse errors, spec resolution)."""

import argparse

import pytest

from sglang_sim import server_args

BASE = ["--model-path", "Qwen/Qwen3.5-122B-A10B"]
GPU = 97887


def _err(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        server_args.parse(argv)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_prog_name_and_unknown_flag(capsys):
    err = _err(capsys, BASE + ["--no-such-flag"])
    assert "sglang serve: error: unrecognized arguments: --no-such-flag" in err


def test_old_cuda_graph_max_bs_is_ambiguous(capsys):
    err = _err(capsys, BASE + ["--cuda-graph-max-bs", "64"])
    assert "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, " \
           "--cuda-graph-max-bs-prefill" in err


def test_bad_values(capsys):
    err = _err(capsys, BASE + ["--kv-cache-dtype", "fp9"])
    assert "argument --kv-cache-dtype: invalid choice: 'fp9'" in err
    err = _err(capsys, BASE + ["--tp-size", "four"])
    assert "argument --tp-size/--tensor-parallel-size: invalid int value: 'four'" in err
    err = _err(capsys, BASE + ["--mem-fraction-static", "lots"])
    assert "invalid float value: 'lots'" in err
    err = _err(capsys, [])
    assert "the following arguments are required: --model-path/--model" in err


def test_aliases_and_prefixes():
    ns = server_args.parse(["--model", "m", "--tensor-parallel-size", "4"])
    assert ns.model_path == "m" and ns.tp_size == 4
    ns = server_args.parse(["--model-path", "m", "--tp", "2", "--speculative-algo", "NEXTN",
                            "--mem-fraction", "0.8"])
    assert ns.tp_size == 2 and ns.speculative_algorithm == "NEXTN" and ns.mem_fraction_static == 0.8


def test_human_readable_int():
    assert server_args.human_readable_int("32Ki") == 32768
    assert server_args.human_readable_int("1k") == 1000
    assert server_args.human_readable_int("25.6k") == 25600
    with pytest.raises(argparse.ArgumentTypeError):
        server_args.human_readable_int("1.5Ki")
    with pytest.raises(argparse.ArgumentTypeError):
        server_args.human_readable_int("lots")


def _resolve(argv):
    return server_args.resolve(server_args.parse(BASE + argv), GPU)


def test_speculative_auto_params_and_mrr_reset():
    args, warnings = _resolve(["--speculative-algorithm", "nextn"])
    assert args["speculative_algorithm"] == "EAGLE"  # NEXTN is an EAGLE alias
    assert (args["speculative_num_steps"], args["speculative_eagle_topk"],
            args["speculative_num_draft_tokens"]) == (3, 1, 4)
    assert args["max_running_requests"] == 48
    assert ("Max running requests is reset to 48 for speculative decoding. You can override this "
            "by explicitly setting --max-running-requests.") in warnings


def test_explicit_mrr_is_kept():
    args, warnings = _resolve(["--speculative-algorithm", "EAGLE", "--max-running-requests", "8",
                               "--speculative-num-steps", "2"])
    assert args["max_running_requests"] == 8
    assert not any("reset to 48" in w for w in warnings)


def test_topk1_forces_draft_tokens():
    args, warnings = _resolve(["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "5",
                               "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "9"])
    assert args["speculative_num_draft_tokens"] == 6
    assert ("speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
            "speculative_eagle_topk == 1") in warnings


def test_auto_params_require_topk_and_draft_unset():
    with pytest.raises(server_args.ArgsError) as exc:
        _resolve(["--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "1"])
    assert exc.value.exc_type == "AssertionError"


def test_unknown_algorithm():
    with pytest.raises(server_args.ArgsError) as exc:
        _resolve(["--speculative-algorithm", "MEDUSA"])
    assert exc.value.message == "Unknown speculative algorithm name: MEDUSA"


def test_trtllm_mha_topk():
    with pytest.raises(server_args.ArgsError) as exc:
        _resolve(["--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
                  "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8",
                  "--attention-backend", "trtllm_mha"])
    assert exc.value.message == "trtllm_mha backend only supports topk = 1 for speculative decoding."


def test_deprecated_disable_cuda_graph_warns():
    args, warnings = _resolve(["--disable-cuda-graph"])
    assert args["disable_cuda_graph"] is True
    assert any("'--disable-cuda-graph' is deprecated" in w for w in warnings)


def test_no_speculation_leaves_mrr_unset():
    args, warnings = _resolve([])
    assert args["speculative_algorithm"] is None
    assert args["max_running_requests"] is None
    assert args["served_model_name"] == "Qwen/Qwen3.5-122B-A10B"


# --config, as srt/server_args.py prepare_server_args merges it (ConfigArgumentMerger).

def _config(tmp_path, text, name="secrets.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_config_file_options_come_first_so_the_command_line_wins(tmp_path):
    path = _config(tmp_path, '# managed\napi-key: "k\'e\\"y #1"\ntp-size: 2\ntrust-remote-code: true\n')
    ns = server_args.parse(BASE + ["--config", path, "--tp-size", "4"])
    assert ns.api_key == 'k\'e"y #1'
    assert ns.tp_size == 4
    assert ns.trust_remote_code is True


def test_config_merge_matches_the_release_argv(tmp_path):
    path = _config(tmp_path, "api_key: abc\nenable-metrics: false\nmax-running-requests: 8\n")
    merged = server_args.merge_config(server_args.build_parser(), BASE + ["--config", path, "--port", "1"])
    # store_true false -> left out; the rest "--key value", in file order, before the CLI.
    assert merged == ["--api_key", "abc", "--max-running-requests", "8"] + BASE + ["--port", "1"]


def test_flat_reader_without_pyyaml_agrees_with_yaml(tmp_path):
    import yaml
    text = ("# c\napi-key: \"a\\\\b\\\"c\"\nport: 31000\nhost: '0.0.0.0'\nlog-level: info # x\n"
            "enable-metrics: true\nchunked-prefill-size: null\n")
    assert server_args._load_flat_yaml(text, "f.yaml") == yaml.safe_load(text)
    assert server_args._load_flat_yaml('{"api-key": "x"}', "f.yaml") == {"api-key": "x"}


@pytest.mark.parametrize("argv_tail,text,name,needle", [
    (["--config"], None, None, "No config file specified after --config flag!"),
    (["--config", "/nonexistent/x.yaml"], None, None, "Config file not found: /nonexistent/x.yaml"),
    (["--config", "{path}"], "api-key: x\n", "secrets.env", "Config file must be YAML format, got: .env"),
    (["--config", "{path}"], "- a\n- b\n", "s.yaml", "Config file must contain a dictionary at root level"),
    (["--config", "{path}", "--config", "{path}"], "a: 1\n", "s.yaml", "Multiple config files specified!"),
])
def test_config_errors_end_like_the_release(tmp_path, capsys, argv_tail, text, name, needle):
    path = _config(tmp_path, text, name) if text is not None else ""
    with pytest.raises(SystemExit) as exc:
        server_args.parse(BASE + [w.replace("{path}", path) for w in argv_tail])
    assert exc.value.code == 1
    err = capsys.readouterr().err
    assert "ValueError: " + needle in err
    assert "in prepare_server_args" in err


def test_config_equals_form_is_not_merged(tmp_path):
    # The release only merges the exact word "--config"; "--config=PATH" parses and does nothing.
    path = _config(tmp_path, "api-key: x\n")
    ns = server_args.parse(BASE + ["--config=" + path])
    assert ns.api_key is None
