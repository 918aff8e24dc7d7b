"""The rebuilt parsers behave like the real SGLang releases' CLIs.

Expected behaviours come from reading each wheel (see shared/reference/sglang.md
§0/§1); the parser itself is rebuilt from the wheel by sglang_release.py.
"""

import ast
import json
import sys
import zipfile

import pytest

import sglang_release as sr

MTP_ARGV = [
    "--model-path", "x", "--tp-size", "4",
    "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
    "--cuda-graph-max-bs-decode", "64", "--kv-cache-dtype", "bf16",
]


def rejected(sglang_parse, argv, version=sr.PINNED):
    with pytest.raises(sr.ArgvRejected) as info:
        sglang_parse(argv, version)
    return info.value


@pytest.mark.parametrize("version", sr.SUPPORTED)
def test_mtp_command_line_is_accepted(sglang_parse, version):
    ns = sglang_parse(MTP_ARGV, version)
    assert ns.model_path == "x"
    assert ns.tp_size == 4
    assert ns.speculative_algorithm == "EAGLE"
    assert (ns.speculative_num_steps, ns.speculative_eagle_topk, ns.speculative_num_draft_tokens) == (3, 1, 4)
    assert ns.cuda_graph_max_bs_decode == 64
    assert ns.kv_cache_dtype == "bf16"
    # Defaults come from the release's field definitions.
    assert (ns.host, ns.port) == ("127.0.0.1", 30000)


def test_pinned_rejects_old_cuda_graph_max_bs_as_ambiguous(sglang_parse):
    err = rejected(sglang_parse, ["--model-path", "x", "--cuda-graph-max-bs", "64"])
    assert err.exit_code == 2
    assert "ambiguous option: --cuda-graph-max-bs could match" in err.message
    assert "--cuda-graph-max-bs-decode" in err.message
    assert "--cuda-graph-max-bs-prefill" in err.message


def test_0_5_19_still_accepts_cuda_graph_max_bs_as_deprecated_alias(sglang_parse, sglang_parser_for):
    ns = sglang_parse(["--model-path", "x", "--cuda-graph-max-bs", "64"], "0.5.19")
    assert ns.cuda_graph_max_bs_decode == 64
    action = next(a for a in sglang_parser_for("0.5.19")._actions if "--cuda-graph-max-bs" in a.option_strings)
    assert type(action).__name__.startswith("Deprecated")
    assert "--cuda-graph-max-bs" not in sr.flag_names(sr.PINNED)


@pytest.mark.parametrize("version", sr.SUPPORTED)
def test_long_aliases(sglang_parse, version):
    ns = sglang_parse(["--model", "m", "--tensor-parallel-size", "2", "--speculative-draft-model", "d"], version)
    assert (ns.model_path, ns.tp_size, ns.speculative_draft_model_path) == ("m", 2, "d")


def test_unique_prefixes_work_like_the_real_parser(sglang_parse, real_sglang_parser):
    assert real_sglang_parser.allow_abbrev is True
    assert real_sglang_parser.prog == "sglang serve"
    ns = sglang_parse(["--model-path", "x", "--tp", "2", "--mem-fraction", "0.8", "--speculative-algo", "NEXTN"])
    assert (ns.tp_size, ns.mem_fraction_static, ns.speculative_algorithm) == (2, 0.8, "NEXTN")


@pytest.mark.parametrize("version", sr.SUPPORTED)
def test_bad_choice_names_the_flag(sglang_parse, version):
    err = rejected(sglang_parse, ["--model-path", "x", "--kv-cache-dtype", "bogus"], version)
    assert err.exit_code == 2
    assert "argument --kv-cache-dtype: invalid choice: 'bogus'" in err.message
    assert "'fp8_e4m3'" in err.message


@pytest.mark.parametrize("version", sr.SUPPORTED)
def test_unknown_flag_and_missing_model_fail(sglang_parse, version):
    err = rejected(sglang_parse, ["--model-path", "x", "--no-such-flag"], version)
    assert "unrecognized arguments: --no-such-flag" in err.message
    err = rejected(sglang_parse, ["--tp-size", "2"], version)
    assert "required: --model-path" in err.message
    assert "sglang %s rejects" % version in str(err)


def test_human_readable_int_comes_from_the_release(sglang_parse):
    assert sglang_parse(["--model-path", "x", "--context-length", "32Ki"]).context_length == 32768
    assert sglang_parse(["--model-path", "x", "--context-length", "25.6k"]).context_length == 25600
    err = rejected(sglang_parse, ["--model-path", "x", "--context-length", "lots"])
    assert "argument --context-length" in err.message


def test_int_flags_reject_text(sglang_parse):
    err = rejected(sglang_parse, ["--model-path", "x", "--speculative-num-steps", "three"])
    assert "argument --speculative-num-steps: invalid int value: 'three'" in err.message


def test_deprecated_disable_cuda_graph_still_sets_the_field(sglang_parse):
    assert sglang_parse(["--model-path", "x", "--disable-cuda-graph"]).disable_cuda_graph is True
    assert sglang_parse(["--model-path", "x"]).disable_cuda_graph is False


def test_version_traps_from_reference_notes(sglang_parse):
    # 0.5.23 removed --mamba-scheduler-strategy; --mamba-radix-cache-strategy replaced it.
    assert "--mamba-scheduler-strategy" not in sr.flag_names()
    ns = sglang_parse(["--model-path", "x", "--mamba-radix-cache-strategy", "extra_buffer"])
    assert ns.mamba_radix_cache_strategy == "extra_buffer"
    err = rejected(sglang_parse, ["--model-path", "x", "--cuda-graph-backend-decode", "tc_piecewise"])
    assert "tc_piecewise was removed" in err.message


def test_flag_names_has_aliases_but_not_help():
    names = sr.flag_names()
    assert {"--model-path", "--model", "--tp-size", "--tensor-parallel-size"} <= names
    assert "--help" not in names and "-h" not in names


def _cli_fields_from_source(wheel):
    """Independent of the rebuild: field names declared as A[...] in fields/*.py."""
    expected = set()
    with zipfile.ZipFile(wheel) as zf:
        # 0.5.23 declares fields per namespace in arg_groups/fields/; 0.5.19 in server_args.py.
        paths = [n for n in zf.namelist()
                 if (n.startswith("sglang/srt/arg_groups/fields/") and n.endswith(".py"))
                 or n == "sglang/srt/server_args.py"]
        for path in paths:
            for node in ast.walk(ast.parse(zf.read(path))):
                if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                    continue
                ann = node.annotation
                if not (isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id == "A"):
                    continue
                # Like the generator: the first help string or Arg(...) among the extras.
                extras = ann.slice.elts[1:] if isinstance(ann.slice, ast.Tuple) else []
                meta = next((e for e in extras if (isinstance(e, ast.Constant) and isinstance(e.value, str))
                             or (isinstance(e, ast.Call) and getattr(e.func, "id", None) == "Arg")), None)
                cli_name = "--" + node.target.id.replace("_", "-")
                if isinstance(meta, ast.Call):
                    kw = {k.arg: k.value for k in meta.keywords}
                    if isinstance(kw.get("no_cli"), ast.Constant) and kw["no_cli"].value is True:
                        continue
                    if isinstance(kw.get("cli_name"), ast.Constant):
                        cli_name = kw["cli_name"].value
                    if isinstance(kw.get("aliases"), ast.List):
                        expected.update(e.value for e in kw["aliases"].elts if isinstance(e, ast.Constant))
                elif meta is None:
                    continue  # A[T] / A[T, NS(...)] without help or Arg: not registered
                expected.add(cli_name)
    return expected


@pytest.mark.parametrize("version", sr.SUPPORTED)
def test_every_declared_field_is_a_flag(sglang_parser_for, version):
    sglang_parser_for(version)
    expected = _cli_fields_from_source(sr.wheel_path(version))
    assert len(expected) > 300
    missing = expected - sr.flag_names(version)
    assert not missing, "declared in the wheel but absent from the rebuilt parser: %s" % sorted(missing)


@pytest.mark.parametrize("version", sr.SUPPORTED)
def test_cached_spec_matches_a_fresh_rebuild(sglang_parser_for, version):
    sglang_parser_for(version)
    cached = sr.spec(version)
    fresh = sr._build_spec(version, sr.wheel_path(version))
    fresh_json = json.loads(json.dumps(fresh))
    assert cached["arguments"] == fresh_json["arguments"]
    assert cached["wheel"] == sr.wheel_path(version).name


def test_fetch_failure_is_a_clear_release_unavailable(monkeypatch, tmp_path):
    monkeypatch.setattr(sr, "WHEELS", tmp_path / "wheels")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    with pytest.raises(sr.ReleaseUnavailable, match="pip download sglang==0.5.19 failed"):
        sr.wheel_path("0.5.19")


def test_unsupported_release_is_refused():
    with pytest.raises(ValueError, match="unsupported SGLang release '0.4.0'"):
        sr.wheel_path("0.4.0")


def test_parse_leaves_no_sglang_modules_behind(sglang_parse):
    sglang_parse(["--model-path", "x", "--context-length", "1k"])
    assert not [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]
