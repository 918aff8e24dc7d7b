"""Every flag the simulator accepts is accepted by the real SGLang 0.5.23, with the same
spec (dest, choices, nargs, action, default, type behaviour), so a unit file that works on
the sim works on a real node and vice versa."""

import argparse
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "sim"))

from sglang_sim import server_args as sim_args  # noqa: E402

VERSION = "0.5.23"


@pytest.fixture(scope="module")
def real():
    import sglang_release  # lazily: it may need to fetch the wheel

    try:
        return sglang_release.real_parser(VERSION)
    except sglang_release.ReleaseUnavailable as exc:
        pytest.skip("sglang %s wheel unavailable: %s" % (VERSION, exc))


def _actions(parser):
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        for name in action.option_strings:
            out[name] = action
    return out


ALL_SIM_ACTIONS = _actions(sim_args.build_parser())
# Flags the sim models (full spec); the others are accepted with their arity only.
SIM_ACTIONS = {k: a for k, a in ALL_SIM_ACTIONS.items() if not getattr(a, "sim_ignored", False)}


def test_every_real_flag_is_accepted_with_its_arity(real):
    theirs = _actions(real)
    assert set(theirs) == set(ALL_SIM_ACTIONS)
    for name, action in theirs.items():
        assert ALL_SIM_ACTIONS[name].nargs == action.nargs, name


def test_usage_order_matches(real):
    # same registration order -> same abbreviation/ambiguity messages
    mine = [a.option_strings for a in sim_args.build_parser()._actions]
    assert mine == [a.option_strings for a in real._actions]


@pytest.mark.parametrize("flag", sorted(SIM_ACTIONS))
def test_flag_exists_in_real_release(real, flag):
    assert flag in _actions(real), "%s is not a flag of sglang %s" % (flag, VERSION)


@pytest.mark.parametrize("flag", sorted(SIM_ACTIONS))
def test_flag_spec_matches(real, flag):
    mine = SIM_ACTIONS[flag]
    theirs = _actions(real).get(flag)
    if theirs is None:
        pytest.fail("%s missing in the real parser" % flag)
    assert mine.dest == theirs.dest
    assert set(mine.option_strings) == set(theirs.option_strings)
    assert mine.nargs == theirs.nargs
    assert mine.required == theirs.required
    assert (list(mine.choices) if mine.choices is not None else None) == \
        (list(theirs.choices) if theirs.choices is not None else None)
    assert mine.default == theirs.default
    store_true = (argparse._StoreTrueAction,)
    assert isinstance(mine, store_true) == isinstance(theirs, store_true)
    assert (mine.nargs == 0) == (theirs.nargs == 0)


SAMPLE_VALUES = ["4", "0", "-1", "0.85", "1k", "32Ki", "abc", "1.5Ki", "EAGLE"]


@pytest.mark.parametrize("flag", sorted(f for f, a in SIM_ACTIONS.items() if a.type is not None))
def test_type_conversion_matches(real, flag):
    mine = SIM_ACTIONS[flag].type
    theirs = _actions(real)[flag].type
    for value in SAMPLE_VALUES:
        def conv(fn):
            try:
                return ("ok", fn(value))
            except (argparse.ArgumentTypeError, ValueError, TypeError):
                return ("error", None)
        assert conv(mine) == conv(theirs), (flag, value)


CMDLINES = [
    ["--model-path", "Qwen/Qwen3.5-122B-A10B", "--tp-size", "4", "--kv-cache-dtype", "bf16",
     "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
     "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
     "--cuda-graph-max-bs-decode", "64", "--max-running-requests", "32",
     "--mem-fraction-static", "0.85", "--host", "127.0.0.1", "--port", "30000"],
    ["--model", "m", "--tp", "4", "--speculative-algo", "EAGLE", "--mem-fraction", "0.8"],
    ["--model-path", "m", "--context-length", "32Ki", "--max-total-tokens", "1M",
     "--reasoning-parser", "qwen3", "--tool-call-parser", "qwen3_coder", "--trust-remote-code",
     "--enable-metrics", "--api-key", "k", "--skip-server-warmup", "--load-format", "dummy",
     "--mamba-ssm-dtype", "bfloat16", "--attention-backend", "flashinfer",
     "--served-model-name", "qwen", "--watchdog-timeout", "600", "--log-level", "warning"],
]


@pytest.mark.parametrize("argv", CMDLINES)
def test_same_parse_result(real, argv):
    mine = vars(sim_args.build_parser().parse_args(argv))
    theirs = vars(real.parse_args(argv))
    for key, value in mine.items():
        if key.startswith("_"):
            continue
        assert theirs[key] == value, key


REJECTED = [
    ["--model-path", "m", "--cuda-graph-max-bs", "64"],  # ambiguous since 0.5.23
    ["--model-path", "m", "--speculative-draft", "x"],
    ["--model-path", "m", "--no-such-flag"],
    ["--model-path", "m", "--kv-cache-dtype", "fp9"],
    ["--model-path", "m", "--tp-size", "four"],
    ["--model-path", "m", "--mamba-ssm-dtype", "int8"],
    ["--tp-size", "4"],  # --model-path is required
]


@pytest.mark.parametrize("argv", REJECTED)
def test_both_reject(real, argv, capsys):
    with pytest.raises(SystemExit) as sim_exit:
        sim_args.build_parser().parse_args(argv)
    sim_err = capsys.readouterr().err.strip().splitlines()[-1]
    with pytest.raises(SystemExit) as real_exit:
        real.parse_args(argv)
    real_err = capsys.readouterr().err.strip().splitlines()[-1]
    assert sim_exit.value.code == real_exit.value.code == 2
    assert sim_err == real_err
