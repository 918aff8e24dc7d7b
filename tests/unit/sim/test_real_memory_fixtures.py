"""The simulator's memory plan against a real SGLang 0.5.17 start-up (tests/fixtures/real-sglang).

Two layers:

- the parser of ``tests/gpu/real_sglang/memory_check.py`` on SYNTHETIC lines, rendered here from
  0.5.17's own format strings (quoted beside each pattern in memory_check.SOURCES), and those
  anchors checked against the 0.5.17 source when it is unpacked on this machine;
- the REAL fixtures, once captured: every launch log is parsed completely and the sim's figures
  agree with it within the tolerances below. Without fixtures these tests skip with
  'no real-sglang fixtures captured'.

The tolerances are placeholders until the real numbers arrive; they are named so the decision
is made in one place.
"""

import importlib.util
import json
import os
from pathlib import Path

import pytest

from sglang_sim import config, memory

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "real-sglang"
SRC_0517 = Path(os.environ.get("SGLANG_0517_SRC", "/work/scratch/src/sglang"))

_spec = importlib.util.spec_from_file_location(
    "memory_check", ROOT / "tests" / "gpu" / "real_sglang" / "memory_check.py")
mc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mc)

# Sim vs real, (sim - real) / real. Placeholders: decide once the real numbers are in.
REL_TOL_WEIGHTS = 0.05        # parameter count from config.json vs torch's measured load
# On the H200 a 0.2986 GiB Llama logged "mem usage=0.32 GB" (torch's delta over the load: the
# parameters plus ~20 MiB of allocator and rotary buffers); for a tiny model that is 7 %.
ABS_TOL_WEIGHTS_GB = 0.03
REL_TOL_KV_TOKENS = 0.05      # budget formula; the sim's context/driver constants are guesses
REL_TOL_KV_GB = 0.05          # target pool bytes (tokens x cell)
ABS_TOL_RUNNING_REQUESTS = 0  # resolve_max_num_reqs is integer arithmetic: exact

# The tiny random-weight target of tests/gpu/real_sglang/make_models.py.
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 1024,
    "intermediate_size": 2816, "num_hidden_layers": 8, "num_attention_heads": 16,
    "num_key_value_heads": 8, "vocab_size": 32768, "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16", "tie_word_embeddings": False, "rms_norm_eps": 1e-6,
}
TINY_DRAFT = dict(TINY_LLAMA, hidden_size=512, intermediate_size=1408, num_hidden_layers=2,
                  num_attention_heads=8, num_key_value_heads=4)


# --------------------------------------------------------------------------- synthetic (clearly)

def synthetic_log(steps=None, tokens=4200000, reqs=48):
    """A SYNTHETIC 0.5.17 start-up: each line is the f-string named in memory_check.SOURCES with
    made-up values, in the order the scheduler logs them (target, then draft)."""
    ts = "[2026-01-01 00:00:00] "
    lines = [ts + "server_args=ServerArgs(model_path='/m/target', tp_size=1, "
             "mem_fraction_static=0.5, max_running_requests=%s, speculative_algorithm=%s, "
             "speculative_num_steps=%s, speculative_draft_model_path=%s, context_length=4096)"
             % (reqs if steps else None, "'STANDALONE'" if steps else None, steps,
                "'/m/target'" if steps else None)]
    if steps:
        lines.append(ts + "Max running requests is reset to 48 for speculative decoding. You can "
                     "override this by explicitly setting --max-running-requests.")
    roles = ["target"] + (["draft"] if steps else [])
    for i, _role in enumerate(roles):
        lines += [ts + "Init torch distributed ends. elapsed=0.31 s, mem usage=0.0%d GB" % (9 - 9 * i),
                  ts + "Load weight begin. avail mem=%.2f GB" % (139.05 - 0.45 * i),
                  ts + "Load weight end. elapsed=0.40 s, type=LlamaForCausalLM, avail mem=%.2f GB, "
                  "mem usage=0.45 GB." % (138.60 - 0.45 * i)]
    for i, _role in enumerate(roles):
        lines += [ts + "KV Cache is allocated. dtype: torch.bfloat16, #tokens: %d, K size: 32.04 GB, "
                  "V size: 32.04 GB" % tokens,
                  ts + "Memory pool end. avail mem=%.2f GB" % (74.0 - 64.1 * i)]
    name = "target verify" if steps else "target decode"
    lines.append(ts + "Capture %s CUDA graph end. elapsed=3.10 s, mem usage=0.35 GB, "
                 "avail mem=9.55 GB." % name)
    if steps:
        lines += [ts + "Capture draft decode CUDA graph end. elapsed=2.00 s, mem usage=0.20 GB, "
                  "avail mem=9.35 GB.",
                  ts + "Capture draft extend CUDA graph end. elapsed=1.00 s, mem usage=0.10 GB, "
                  "avail mem=9.25 GB."]
    lines += [ts + "max_total_num_tokens=%d, chunked_prefill_size=8192, max_prefill_tokens=16384, "
              "max_running_requests=%d, context_len=4096, available_gpu_mem=9.25 GB" % (tokens, reqs),
              ts + "The server is fired up and ready to roll!"]
    return "\n".join(lines) + "\n"


def test_parser_reads_every_field_of_a_synthetic_speculative_start():
    got = mc.parse_log(synthetic_log(steps=3))
    t, d = got["target"], got["draft"]
    assert t["weights_gb"] == 0.45 and d["weights_gb"] == 0.45
    assert t["load_begin_avail_gb"] == 139.05 and d["avail_after_weights_gb"] == 138.15
    assert got["avail_before_kv_gb"] == 138.15  # after the draft's weights: what the target sizes
    assert t["kv_tokens"] == d["kv_tokens"] == 4200000
    assert t["k_gb"] == 32.04 and t["kv_gb"] == pytest.approx(64.08) and t["kv_dtype"] == "torch.bfloat16"
    assert t["pool_end_avail_gb"] == 74.0 and d["pool_end_avail_gb"] == pytest.approx(9.9)
    assert t["graphs"] == {"target verify": 0.35}
    assert d["graphs"] == {"draft decode": 0.20, "draft extend": 0.10} and d["graph_gb"] == 0.3
    assert d["avail_after_graph_gb"] == 9.25
    assert (got["max_total_num_tokens"], got["max_running_requests"], got["context_len"],
            got["chunked_prefill_size"], got["max_prefill_tokens"]) == (4200000, 48, 4096, 8192, 16384)
    assert got["available_gpu_mem_gb"] == 9.25
    assert got["reset_to_48"] and got["ready"] and got["failure"] is None
    assert got["server_args"]["speculative_algorithm"] == "STANDALONE"
    assert got["server_args"]["mem_fraction_static"] == 0.5
    assert t["dist_mem_gb"] == 0.09


def test_parser_on_a_synthetic_plain_start_has_no_draft():
    got = mc.parse_log(synthetic_log(steps=None, reqs=4096))
    assert got["draft"] == {} and not got["reset_to_48"]
    assert got["avail_before_kv_gb"] == 138.60 and got["max_running_requests"] == 4096


def test_parser_names_failures_and_warnings():
    text = ("[t] max_running_requests was reduced from the requested 48 to 10 (per dp worker) due "
            "to the available KV cache capacity.\n[t] RuntimeError: Not enough memory. Please try to "
            "increase --mem-fraction-static. Current value: mem_fraction_static=0.05\n")
    got = mc.parse_log(text)
    assert got["failure"]["kind"] == "kv" and not got["ready"]
    assert got["warnings"] == ["max_running_requests was reduced from the requested 48 to 10"]


def test_argv_and_meta_lookup():
    argv = ["--model-path", "/m/t", "--mem-fraction-static", "0.5", "--attention-backend", "triton",
            "--speculative-algorithm", "STANDALONE", "--speculative-num-steps=4",
            "--speculative-draft-model-path", "/m/t", "--cuda-graph-max-bs", "32"]
    args = mc.parse_argv(argv)
    assert args == {"model_path": "/m/t", "mem_fraction_static": 0.5,
                    "speculative_algorithm": "STANDALONE", "speculative_num_steps": 4,
                    "speculative_draft_model_path": "/m/t", "cuda_graph_max_bs_decode": 32}
    meta = {"launches": {"launch_steps4": {"argv": argv}}}
    assert mc.launch_args("launch_steps4.log", {}, meta)["speculative_num_steps"] == 4
    one_for_all = {"argv": "--model-path /m/t --mem-fraction-static 0.4"}
    assert mc.launch_args("launch_nospec.log", {}, one_for_all)["mem_fraction_static"] == 0.4
    logged = {"server_args": {"mem_fraction_static": 0.3, "attention_backend": "triton"}}
    want = {"mem_fraction_static": 0.3, "_source": "server_args line"}
    assert mc.launch_args("launch_nospec.log", logged, {}) == want
    names = sorted(["launch_steps10.log", "launch_steps2.log", "launch_nospec.log"], key=mc.launch_key)
    assert [mc.launch_key(n)[1] for n in names] == [0, 2, 10]


@pytest.mark.skipif(not (SRC_0517 / "srt").is_dir(), reason="SGLang 0.5.17 source not unpacked")
@pytest.mark.parametrize("name", sorted(mc.SOURCES))
def test_format_anchor_is_in_the_0_5_17_source(name):
    path, func, anchor, _rx = mc.SOURCES[name]
    text = (SRC_0517 / "srt" / path).read_text()
    assert anchor in text, "%s: %r not in %s" % (name, anchor, path)
    assert "def %s(" % func.rsplit(".", 1)[-1] in text, "%s: no %s in %s" % (name, func, path)


# --------------------------------------------------------------------------- the sim side

def test_sim_takes_an_hf_config_and_keeps_the_catalog():
    tiny = config.model_from_hf_config(TINY_LLAMA)
    # embed + lm_head + 8 x (qkv + o + mlp + 2 norms) + final norm
    per_layer = 1024 * (1024 + 2 * 512) + 1024 * 1024 + 3 * 1024 * 2816 + 2 * 1024
    assert tiny["params"] == 2 * 32768 * 1024 + 8 * per_layer + 1024
    # STANDALONE with itself as the draft: 8 + 8 layers per token (DefaultPoolConfigurator).
    assert memory.kv_bytes_per_token(tiny, 1, "auto", True, tiny) == 16 * 8 * 64 * 2 * 2
    # The smaller draft: its 2 layers at the target's cell size, as 0.5.17 charges them.
    draft = config.model_from_hf_config(TINY_DRAFT)
    assert memory.kv_bytes_per_token(tiny, 1, "auto", True, draft) == 10 * 8 * 64 * 2 * 2
    # Catalog entries still add their one MTP layer.
    q = config.CATALOG["Qwen/Qwen3-8B"]
    assert memory.kv_bytes_per_token(q, 1, "auto", True) == 37 * 8 * 128 * 2 * 2
    with pytest.raises(ValueError, match="dense"):
        config.model_from_hf_config(dict(TINY_LLAMA, num_local_experts=8))


@pytest.mark.parametrize("steps", [None, 1, 8])
def test_sim_plan_for_the_tiny_model_on_an_h200(steps):
    args = {"model_path": "/m/t", "tp_size": 1, "mem_fraction_static": 0.5,
            "cuda_graph_max_bs_decode": 32, "context_length": 4096}
    if steps:
        args.update(speculative_algorithm="STANDALONE", speculative_num_steps=steps,
                    speculative_eagle_topk=1, speculative_num_draft_tokens=steps + 1,
                    speculative_draft_model_path="/m/t")
    p = mc.sim_plan(args, TINY_LLAMA, TINY_LLAMA if steps else None)
    assert "error" not in p, p
    assert p["max_running_requests"] == (48 if steps else 4096)
    assert p["kv_gb_target"] == pytest.approx(p["kv_mib"] / 1024 / (2 if steps else 1))
    assert p["draft_weights_mib"] == (p["weights_mib"] if steps else 0)


def test_table_from_synthetic_fixtures(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    (tmp_path / "launch_nospec.log").write_text(synthetic_log(None, reqs=4096))
    (tmp_path / "launch_steps3.log").write_text(synthetic_log(3))
    assert mc.main([str(tmp_path), "--json", str(tmp_path / "out.json")]) == 0
    table = capsys.readouterr().out
    assert "| steps3 | KV tokens | 4200000 |" in table
    dump = json.loads((tmp_path / "out.json").read_text())
    assert [r["launch"] for r in dump] == ["launch_nospec.log", "launch_steps3.log"]
    assert dump[1]["args"]["_source"] == "server_args line"


# --------------------------------------------------------------------------- real fixtures

# The first captures (plain and steps 3, the failures) and the tune sweep's launches at every
# depth 1..8 (depths/: each log cut to the lines memory_check reads, the ServerArgs line included).
FIXTURE_DIRS = (FIXTURES, FIXTURES / "depths")


def _fixture_logs():
    names = [os.path.relpath(os.path.join(str(d), n), str(FIXTURES))
             for d in FIXTURE_DIRS for n in mc.launch_logs(str(d))]
    if not names:
        return [pytest.param(None, marks=pytest.mark.skip(reason="no real-sglang fixtures captured"))]
    return names


@pytest.fixture(scope="module")
def results():
    out = {}
    for d in FIXTURE_DIRS:
        for r in mc.check(str(d)):
            out[os.path.relpath(os.path.join(str(d), r["launch"]), str(FIXTURES))] = r
    return out


@pytest.mark.parametrize("log", _fixture_logs())
def test_real_log_parses_completely(log, results):
    real = results[log]["real"]
    if real["failure"]:
        pytest.skip("%s failed at start-up (%s): nothing to size" % (log, real["failure"]["kind"]))
    # A start that died after its pools (the deep_gemm import in the draft's graph capture on
    # the H200) never logs the scheduler's summary: its pools are still worth checking.
    summary = "max_total_num_tokens" in real
    if summary:
        for key in ("max_running_requests", "context_len", "chunked_prefill_size",
                    "available_gpu_mem_gb", "avail_before_kv_gb"):
            assert key in real, key
    roles = ("target", "draft") if results[log]["args"].get("speculative_algorithm") else ("target",)
    for role in roles:
        for key in ("load_begin_avail_gb", "weights_gb", "avail_after_weights_gb", "kv_tokens",
                    "k_gb", "v_gb", "kv_gb", "pool_end_avail_gb"):
            assert key in real[role], (role, key)
        if summary:
            assert real[role]["kv_tokens"] == real["max_total_num_tokens"]
    assert real["target"].get("graphs"), "no graph capture line"
    args = results[log]["args"]
    # The logged ServerArgs already holds the hook's 48; a typed argv holds no flag.
    default_cap = args.get("max_running_requests") is None or (
        args["_source"] == "server_args line" and args["max_running_requests"] == 48)
    assert real["reset_to_48"] == (len(roles) == 2 and default_cap)


def _row(res, quantity):
    return next(r for r in res["rows"] if r["quantity"] == quantity)


@pytest.mark.parametrize("log", _fixture_logs())
@pytest.mark.parametrize("quantity,tol", [
    ("weights GB (target)", REL_TOL_WEIGHTS),
    ("weights GB (draft)", REL_TOL_WEIGHTS),
    ("KV tokens", REL_TOL_KV_TOKENS),
    ("KV GB (target pool)", REL_TOL_KV_GB),
])
def test_sim_agrees_with_real(log, quantity, tol, results):
    res = results[log]
    if res["real"]["failure"] or "error" in res["sim"]:
        pytest.skip("%s: real %s / sim %s" % (log, res["real"]["failure"], res["sim"].get("error")))
    row = _row(res, quantity)
    if row["real"] is None and quantity.endswith("(draft)"):
        pytest.skip("no draft in %s" % log)
    assert row["rel_diff"] is not None, row
    if quantity.startswith("weights"):
        assert abs(row["rel_diff"]) <= tol or abs(row["sim"] - row["real"]) <= ABS_TOL_WEIGHTS_GB, row
    else:
        assert abs(row["rel_diff"]) <= tol, row


@pytest.mark.parametrize("log", _fixture_logs())
def test_sim_running_request_cap_matches(log, results):
    res = results[log]
    if res["real"]["failure"] or "error" in res["sim"]:
        pytest.skip("%s: real %s / sim %s" % (log, res["real"]["failure"], res["sim"].get("error")))
    row = _row(res, "running-request cap")
    real = row["real"]
    if real is None:
        # died before the summary: the speculative hook's reset line is the cap it was given
        assert res["real"]["reset_to_48"], "%s logged neither the summary nor the 48 reset" % log
        real = 48
    assert abs(row["sim"] - real) <= ABS_TOL_RUNNING_REQUESTS, row
