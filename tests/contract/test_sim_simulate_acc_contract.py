"""SGLang's accept-length knob (SGLANG_SIMULATE_ACC_LEN, _METHOD, _TOKEN_MODE) as the simulator
follows it, against the pinned release's source: the defaults, the two sampling methods, one draw
per verified batch, the token the "fixed" mode writes, the texts of what it rejects. The real-GPU
checks pin the accept length with it (tests/gpu/real_sglang), so a sim rehearsal of those steps
measures what the real server would be asked to do. Fails when the wheel drifts."""

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "sim"))

import release_contract as rc  # noqa: E402
from sglang_sim import perf  # noqa: E402

SPEC_UTILS = "srt/speculative/spec_utils.py"
EAGLE_UTILS = "srt/speculative/eagle_utils.py"

pytestmark = pytest.mark.usefixtures("pinned_wheel")


def _env_defaults():
    """environ.py's class attributes NAME = EnvX(default), for the three knobs."""
    out = {}
    for node in ast.walk(rc.tree("srt/environ.py")):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id.startswith("SGLANG_SIMULATE_ACC") and isinstance(node.value, ast.Call)):
            out[node.targets[0].id] = (node.value.func.id, ast.literal_eval(node.value.args[0]))
    return out


def test_the_knobs_and_their_defaults():
    env = _env_defaults()
    assert env["SGLANG_SIMULATE_ACC_LEN"] == ("EnvFloat", -1)
    assert env["SGLANG_SIMULATE_ACC_METHOD"] == ("EnvStr", "match-expected")
    assert env["SGLANG_SIMULATE_ACC_TOKEN_MODE"] == ("EnvStr", "fixed")
    # off at -1 (the default) and so in the sim; the same parse error text as EnvFloat.parse
    assert perf.simulated_accept({}) is None and perf.simulated_accept({"SGLANG_SIMULATE_ACC_LEN": "-1"}) is None
    assert perf.simulated_accept({"SGLANG_SIMULATE_ACC_LEN": "2.5"}) == (2.5, "match-expected", "fixed")
    float_parse = rc.function_source("srt/environ.py", "EnvFloat.parse")
    with pytest.raises(ValueError) as exc:
        perf.simulated_accept({"SGLANG_SIMULATE_ACC_LEN": "x"})
    assert rc.normalise(str(exc.value).replace('"x"', '"{}"')) in [rc.normalise(t) for t in rc.templates("srt/environ.py")]
    assert "float(value)" in float_parse
    assert 'SIMULATE_ACC_LEN = envs.SGLANG_SIMULATE_ACC_LEN.get()  # turn off if < 0' in rc.source(SPEC_UTILS)


@pytest.mark.parametrize("expr", [
    "if simulate_acc_method == 'multinomial':",
    "simulated_values = torch.normal(mean=simulate_acc_len, std=1.0, size=(1,), device='cpu')",
    "simulated_values = torch.clamp(simulated_values, min=1.0, max=max_len)",
    "simulate_acc_len = int(simulated_values.round().item())",
    "elif simulate_acc_method == 'match-expected':",
    "simulate_acc_len = max(1.0, min(max_len, simulate_acc_len))",
    "lower = int(simulate_acc_len // 1)",
    "upper = lower + 1 if lower < max_len else lower",
    "weight_upper = simulate_acc_len - lower",
    "simulate_acc_len = lower if sampled_index == 0 else upper",
])
def test_the_draw(expr):
    # one draw of size (1,) per call, not per request: the whole batch gets one length
    assert expr in rc.function_source(SPEC_UTILS, "sample_simulated_acc_len")


def test_the_methods_and_their_error():
    body = rc.function_source(SPEC_UTILS, "sample_simulated_acc_len")
    assert tuple(re.findall(r"simulate_acc_method == '([\w-]+)'", body)) == perf.SIMULATE_ACC_METHODS
    with pytest.raises(ValueError) as exc:
        perf.simulated_accept({"SGLANG_SIMULATE_ACC_LEN": "3", "SGLANG_SIMULATE_ACC_METHOD": "uniform"})
    assert rc.normalise(str(exc.value).replace("uniform", "{}")) == rc.find_template(SPEC_UTILS, "Invalid simulate_acc_method")


def test_the_verify_draws_once_per_batch_at_the_trees_width():
    gen = rc.function_source(SPEC_UTILS, "generate_simulated_accept_index")
    assert "simulate_acc_len = sample_simulated_acc_len(simulate_acc_len, simulate_acc_method, spec_steps + 1)" in gen
    assert "num_correct_drafts.fill_(simulate_acc_len - 1)" in gen
    # token mode "fixed": every verified position becomes one token id, on the CPU path and in
    # the CUDA kernel alike
    assert "predict.fill_(%d)" % perf.SIMULATED_TOKEN_ID in gen
    kernel = rc.function_source("kernels/ops/speculative/simulated_accept.py", "_simulated_accept_kernel")
    assert "tl.store(predict_tokens + offset * PREDICT_STRIDE, %d, offset < PREDICT_SIZE)" % perf.SIMULATED_TOKEN_ID in kernel
    verify = rc.source(EAGLE_UTILS)
    assert "spec_steps=verify_input.max_tree_depth - 1," in verify
    assert "if SIMULATE_ACC_LEN > 0:" in verify


def test_the_token_mode_and_its_error():
    assert perf.SIMULATE_ACC_TOKEN_MODES == ("fixed", "real-draft-token")
    with pytest.raises(ValueError) as exc:
        perf.simulated_accept({"SGLANG_SIMULATE_ACC_LEN": "3", "SGLANG_SIMULATE_ACC_TOKEN_MODE": "both"})
    theirs = rc.find_template(EAGLE_UTILS, "Invalid SGLANG_SIMULATE_ACC_TOKEN_MODE")
    assert rc.normalise(str(exc.value).replace("'both'", "%r")) == theirs
