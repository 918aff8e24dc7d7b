"""The simulator's --speculative-adaptive against the pinned release's source: the default config,
the config loader's errors (run out of the wheel on the same files), the fallback line and its
reasons, the start-step and draft-token resolution, the pool sizing for the deepest candidate, and
the slot routing and EMA dynamics (the wheel's AdaptiveSpeculativeParams and the sim's fed the
same verify results must pick the same step at every batch and log the same lines). Fails when
the wheel's code or texts drift from what the sim does."""

import importlib
import json
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "sim"))

import release_contract as rc  # noqa: E402
from sglang_sim import adaptive  # noqa: E402

PARAMS = "srt/speculative/adaptive_spec_params.py"
HOOK = "srt/arg_groups/speculative_hook.py"
WORKER = "srt/speculative/eagle_worker_v2.py"
SPEC_INFO = "srt/speculative/spec_info.py"
PARAMS_MOD = "sglang.srt.speculative.adaptive_spec_params"

pytestmark = pytest.mark.usefixtures("pinned_wheel")


def _norm(sim_text):
    return rc.normalise(sim_text.replace("{{", "{").replace("}}", "}"))


@pytest.fixture(scope="module")
def release_log(release_fn):
    """The wheel's adaptive_spec_params module with its log_info_on_rank0 (which needs torch)
    replaced by a recorder; yields the list the lines land in."""
    release_fn(PARAMS_MOD + ":AdaptiveSpeculativeParams")
    module = importlib.import_module(PARAMS_MOD)
    lines = []
    module.log_info_on_rank0 = lambda _logger, msg: lines.append(msg)
    return lines


# --------------------------------------------------------------------------- config and texts

def test_default_config_is_the_releases(release_fn):
    assert adaptive.DEFAULT_ADAPTIVE_CONFIG == release_fn(PARAMS_MOD + ":DEFAULT_ADAPTIVE_CONFIG")


def test_slot_defaults_are_the_releases():
    body = rc.function_source(PARAMS, "AdaptiveStepSlot.__init__")
    for key, value in adaptive.SLOT_DEFAULTS.items():
        assert "cfg.get(%r, %r)" % (key, value) in body, key


@pytest.mark.parametrize("sim_text,path,anchor", [
    (adaptive.MSG_BAD_STEPS, PARAMS, "candidate_steps must be a list of non-negative ints"),
    (adaptive.MSG_NO_BS_KEY, PARAMS, "must contain at least one integer-string"),
    (adaptive.MSG_UPDATED, PARAMS, "Adaptive spec params updated"),
    (adaptive.MSG_INITIALIZED, PARAMS, "AdaptiveSpeculativeParams initialized"),
    (adaptive.REASON_ALGO, PARAMS, "(only EAGLE/EAGLE3 are supported)"),
    (adaptive.REASON_TOPK, PARAMS, "(only topk=1 is supported)"),
    (adaptive.REASON_ATTN_DP, PARAMS, "attention DP is not supported"),
    (adaptive.REASON_MULTI_LAYER, PARAMS, "MultiLayerEagleWorkerV2 does not implement adaptive"),
    (adaptive.REASON_TBO, PARAMS, "TboAttnBackend wrapper"),
    (adaptive.REASON_PDMUX, PARAMS, "decode_attn_backend_group"),
    (adaptive.MSG_FALLBACK, HOOK, "speculative_adaptive disabled"),
    (adaptive.MSG_STEPS_NOT_CANDIDATE, HOOK, "is not in the adaptive config candidate_steps"),
    (adaptive.MSG_SWITCH, WORKER, "Switch adaptive runtime state"),
    (adaptive.MSG_BUILT, WORKER, "Built adaptive runtime state"),
], ids=lambda v: v if isinstance(v, str) and len(v) < 40 else None)
def test_sim_prints_the_release_text(sim_text, path, anchor):
    assert _norm(sim_text) == rc.find_template(path, anchor)


def test_the_fallback_is_a_warning_and_the_update_an_info_line():
    assert ("warning", _norm(adaptive.MSG_FALLBACK)) in [(m, t) for m, t, _n in rc.log_calls(HOOK)]
    body = rc.function_source(PARAMS, "AdaptiveStepSlot._apply_target_steps")
    assert "log_info_on_rank0(logger, f'Adaptive spec params updated: steps {old_steps} -> {target} " \
           "(ema_accept_len={self.ema_accept_len:.2f})')" in body
    assert adaptive.MSG_UPDATED.format(old=3, new=5, ema=2.9649) == \
        "Adaptive spec params updated: steps 3 -> 5 (ema_accept_len=2.96)"


BAD_CONFIGS = [
    ("top_level_list", "[1, 2]"),
    ("empty", "{}"),
    ("no_digit_key", '{"ema_alpha": 0.3, "x": {"candidate_steps": [1]}}'),
    ("empty_steps", '{"1": {"candidate_steps": []}}'),
    ("negative", '{"1": {"candidate_steps": [1, -1]}}'),
    ("float", '{"1": {"candidate_steps": [1, 2.0]}}'),
    ("string", '{"4": {"candidate_steps": "3"}}'),
    ("missing", '{"1": {"up_hysteresis": 0.1}}'),
    ("entry_list", '{"1": [1, 3]}'),
    ("not_json", '{"1": {"candidate_steps": [1, 3]'),
    ("not_a_file", None),
]


@pytest.mark.parametrize("name,text", BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_config_errors_are_the_releases(release_fn, tmp_path, name, text):
    path = tmp_path / ("%s.json" % name)
    if text is not None:
        path.write_text(text)
    theirs = release_fn(PARAMS_MOD + ":_load_adaptive_config")
    with pytest.raises(Exception) as real:
        theirs(str(path))
    with pytest.raises(adaptive.ConfigError) as mine:
        adaptive.load_config(str(path))
    assert mine.value.exc_type.rsplit(".", 1)[-1] == real.value.__class__.__name__
    assert mine.value.message == str(real.value)


@pytest.mark.parametrize("cfg", [
    None,
    {"1": {"candidate_steps": [2, 4, 4]}, "16": {"candidate_steps": [0, 2]}, "ema_alpha": 0.5},
    {"8": {"candidate_steps": [6]}},
])
def test_candidate_steps_and_pool_width_are_the_releases(release_fn, tmp_path, cfg):
    path = None
    if cfg is not None:
        path = str(tmp_path / "cfg.json")
        Path(path).write_text(json.dumps(cfg))
    theirs = release_fn(PARAMS_MOD + ":resolve_candidate_steps_from_config")(cfg_path=path)
    assert adaptive.candidate_steps(path) == theirs
    # spec_info.py: the pools are sized for the deepest candidate
    body = rc.function_source(SPEC_INFO, "SpeculativeAlgorithm.resolve_max_speculative_num_draft_tokens")
    assert "return max(candidate_steps) + 1" in body
    assert adaptive.max_draft_tokens(theirs) == max(theirs) + 1


def test_start_step_topk_and_draft_tokens_are_the_hooks():
    body = rc.function_source(HOOK, "_init_adaptive_speculative_params")
    assert "speculative_eagle_topk=1" in body
    assert "speculative_num_steps=candidate_steps[len(candidate_steps) // 2]" in body
    assert "speculative_num_draft_tokens=cfg.speculative_num_steps + 1" in body
    hook = rc.function_source(HOOK, "handle_speculative_decoding")
    # the fallback check runs after the NEXTN alias and before the algorithm's own handler
    assert hook.index("_resolve_speculative_algorithm_alias") < hook.index("_maybe_disable_adaptive") \
        < hook.index("algo.handle_server_args(server_args)")
    # the auto params (3, 1, 4) are skipped under adaptive
    assert "if not cfg.speculative_adaptive and cfg.speculative_num_steps is None:" in \
        rc.function_source(HOOK, "_handle_eagle_family")


def test_reasons_come_in_the_releases_order():
    body = rc.function_source(PARAMS, "adaptive_unsupported_reason")
    order = ["only EAGLE/EAGLE3", "only topk=1", "attention DP", "enable_multi_layer_eagle",
             "enable_two_batch_overlap", "enable_pdmux"]
    assert [body.index(o) for o in order] == sorted(body.index(o) for o in order)
    assert adaptive.unsupported_reason("STANDALONE", None, pdmux=True) == \
        "speculative_algorithm=STANDALONE (only EAGLE/EAGLE3 are supported)"
    assert adaptive.unsupported_reason("EAGLE", 4, attn_dp=True).startswith("speculative_eagle_topk=4")


def test_states_per_candidate_follow_init_states():
    body = rc.function_source("srt/speculative/adaptive_runtime_state.py", "AdaptiveController.init_states")
    assert "if steps in self._states:" in body  # the startup state is not rebuilt
    assert "pruned_bs = self.params.cuda_graph_bs_for_step(steps)" in body
    assert "speculative_num_draft_tokens=steps + 1" in body
    # the list handed over is --cuda-graph-bs-decode (None unless given)
    worker = rc.function_source(WORKER, "EAGLEWorkerV2.init_cuda_graphs")
    assert "get_exec().graph.cuda_graph_bs_decode" in worker


# --------------------------------------------------------------------------- dynamics, run side by side

SCENARIOS = {
    "default": None,
    "hysteresis_ceiling": {"ema_alpha": 0.3, "update_interval": 3, "warmup_batches": 4,
                           "1": {"candidate_steps": [1, 2, 4, 6], "up_hysteresis": 0.2,
                                 "down_hysteresis": -0.4, "ceiling_coeff": 1.5},
                           "6": {"candidate_steps": [0, 2, 3], "ceiling_coeff": 0.8},
                           "20": {"candidate_steps": [0]}},
    # --speculative-num-steps 0: the slots start without drafting, so the first probe resets
    # the (negative) EMA
    "start_at_zero": {"1": {"candidate_steps": [0, 2, 4]}, "10": {"candidate_steps": [0, 1]}},
}
START = {"start_at_zero": 0}


@pytest.mark.parametrize("graph_bs", [None, [1, 2, 4, 8, 12, 16, 24, 32, 48]], ids=["no-graph-list", "graph-list"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_routing_and_dynamics_match_the_wheel(release_fn, release_log, tmp_path, scenario, graph_bs):
    path = None
    if SCENARIOS[scenario] is not None:
        path = str(tmp_path / "cfg.json")
        Path(path).write_text(json.dumps(SCENARIOS[scenario]))
    start = START.get(scenario, adaptive.candidate_steps(path)[len(adaptive.candidate_steps(path)) // 2])
    del release_log[:]
    theirs = release_fn(PARAMS_MOD + ":AdaptiveSpeculativeParams")(initial_steps=start, cfg_path=path)
    mine_log = []
    mine = adaptive.AdaptiveParams(start, path, log=mine_log.append)
    theirs.set_cuda_graph_bs(graph_bs)
    mine.set_cuda_graph_bs(graph_bs)
    assert theirs.candidate_steps == mine.candidate_steps
    for step in theirs.candidate_steps:
        assert theirs.cuda_graph_bs_for_step(step) == mine.cuda_graph_bs_for_step(step)
    rng = random.Random(scenario)
    # a load that moves: phases of batch sizes at acceptance rates that sweep the EMA across the
    # thresholds, a few fixed ones first, then 150 drawn ones
    phases = [(2, 0.95), (40, 0.95), (9, 0.3), (3, 0.05), (1, 0.99), (70, 0.6), (5, 0.6), (13, 0.99)]
    phases += [(rng.choice([1, 2, 3, 5, 7, 8, 10, 20, 31, 33, 64]), rng.random()) for _p in range(150)]
    moved = set()
    for batch, alpha in phases:
        for _i in range(rng.randint(5, 40)):
            steps = theirs.get_steps_for_batch(batch)
            assert mine.steps_for_batch(batch) == steps, (batch, alpha)
            correct = []
            for _r in range(batch):
                n = 0
                while n < steps and rng.random() < alpha:
                    n += 1
                correct.append(n)
            assert mine.on_verify_complete(correct, batch) == theirs.on_verify_complete(correct, batch)
            moved.add(steps)
            for key, slot in mine.slots.items():
                theirs_slot = theirs._slots[key]  # pylint: disable=protected-access
                assert (slot.ema_accept_len, slot.current_steps) == \
                    (theirs_slot.ema_accept_len, theirs_slot.current_steps)
    assert mine_log == release_log
    assert len(moved) >= 3 and any(line.startswith("Adaptive spec params updated") for line in mine_log)
