"""Simulator settings: env vars override the JSON config file; bad values are refused."""

import json
import pathlib

import pytest

from sglang_sim import config

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_defaults(tmp_path):
    s = config.load_settings({"SGLANG_SIM_CONFIG": str(tmp_path / "missing.json")})
    assert s["profile"] == "rtx-pro-6000-x4"
    assert s["time_scale"] == 1.0 and s["orphans"] is False
    assert s["state_dir"] == "/run/sglang-sim" and s["dev_dir"] == "/dev"
    assert s["replayssm_drift"] == 0.0


def test_env_overrides_file(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"profile": "b200-x8", "time_scale": 0.5, "orphans": True,
                               "gpu_memory_mib": 50000}))
    s = config.load_settings({"SGLANG_SIM_CONFIG": str(cfg)})
    assert (s["profile"], s["time_scale"], s["orphans"], s["gpu_memory_mib"]) == \
        ("b200-x8", 0.5, True, 50000)
    s = config.load_settings({"SGLANG_SIM_CONFIG": str(cfg), "SGLANG_SIM_PROFILE": "h200-x1",
                              "SGLANG_SIM_ORPHANS": "0"})
    assert s["profile"] == "h200-x1" and s["orphans"] is False


@pytest.mark.parametrize("env,needle", [
    ({"SGLANG_SIM_PROFILE": "nope"}, "unknown SGLANG_SIM_PROFILE"),
    ({"SGLANG_SIM_TIME_SCALE": "fast"}, "SGLANG_SIM_TIME_SCALE must be of type float"),
    ({"SGLANG_SIM_TIME_SCALE": "0"}, "must be > 0"),
    ({"SGLANG_SIM_ORPHANS": "maybe"}, "must be a boolean"),
    ({"SGLANG_SIM_REPLAYSSM_DRIFT": "1.5"}, "SGLANG_SIM_REPLAYSSM_DRIFT is a fraction"),
    ({"SGLANG_SIM_REPLAYSSM_DRIFT": "-0.1"}, "within [0, 1]"),
])
def test_bad_values(tmp_path, env, needle):
    env = dict(env, SGLANG_SIM_CONFIG=str(tmp_path / "missing.json"))
    with pytest.raises(config.SimConfigError) as err:
        config.load_settings(env)
    assert needle in str(err.value)


def test_bad_file(tmp_path):
    cfg = tmp_path / "c.json"
    cfg.write_text("[1, 2]")
    with pytest.raises(config.SimConfigError):
        config.load_settings({"SGLANG_SIM_CONFIG": str(cfg)})


def test_model_lookup(tmp_path):
    assert config.lookup_model("Qwen/Qwen3.5-122B-A10B")[0] == "Qwen/Qwen3.5-122B-A10B"
    local = tmp_path / "Qwen3-8B"
    local.mkdir()
    assert config.lookup_model(str(local))[0] == "Qwen/Qwen3-8B"
    other = tmp_path / "weights"
    other.mkdir()
    (other / "sim_model.json").write_text('{"catalog": "Qwen/Qwen3-Next-80B-A3B-Instruct"}')
    assert config.lookup_model(str(other))[0] == "Qwen/Qwen3-Next-80B-A3B-Instruct"


def test_local_config_json_is_the_model(tmp_path):
    """A local folder's config.json is what the release serves: the trimmed hybrid the real runs
    start (20.6 B parameters, 32 experts) is served at its own size, not the default model's."""
    hyb = tmp_path / "hyb_experts32"
    hyb.mkdir()
    real = ROOT / "tests" / "fixtures" / "real-sglang" / "hybrid" / "config_experts32.json"
    (hyb / "config.json").write_text(real.read_text())
    name, model = config.lookup_model(str(hyb))
    assert name == str(hyb) and model["hybrid"] and model["num_experts"] == 32
    assert 20e9 < model["params"] < 21e9
    # a shape it does not model (a dense config with experts) keeps the catalog's fallback
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "num_experts": 8}))
    assert config.lookup_model(str(odd))[0] == config.DEFAULT_MODEL
    # the marker still wins over a config.json beside it
    (hyb / "sim_model.json").write_text('{"catalog": "Qwen/Qwen3-8B"}')
    assert config.lookup_model(str(hyb))[0] == "Qwen/Qwen3-8B"


def test_fault_switches(tmp_path):
    s = config.load_settings({"SGLANG_SIM_CONFIG": str(tmp_path / "none.json")})
    assert s["orphans_keep_port"] is False and s["wedge_after"] == 0.0
    s = config.load_settings({"SGLANG_SIM_CONFIG": str(tmp_path / "none.json"),
                              "SGLANG_SIM_ORPHANS_KEEP_PORT": "1", "SGLANG_SIM_WEDGE_AFTER": "5"})
    assert s["orphans_keep_port"] is True and s["wedge_after"] == 5.0
