"""The simulator's missing-model failure follows the pinned release: 0.5.23 loads the model
config while resolving its arguments, through transformers' AutoConfig, so a --model-path that is
no folder and no cached model dies with transformers' / huggingface_hub's error before any GPU
work (sim/sglang_sim/launch_server.py _check_model_path, journal class model_missing)."""

import re
import zipfile

import pytest

import sglang_release as sr


def _wheel_text(member):
    try:
        wheel = sr.wheel_path(sr.PINNED)
    except sr.ReleaseUnavailable as exc:
        pytest.skip("the sglang %s wheel cannot be fetched: %s" % (sr.PINNED, exc))
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.endswith(member)]
        assert names, "%s is not in the %s wheel: the missing-model path moved" % (member, sr.PINNED)
        return zf.read(names[0]).decode("utf-8")


def test_model_config_is_loaded_through_transformers_autoconfig():
    text = _wheel_text("sglang/srt/utils/hf_transformers/config.py")
    assert re.search(r"^def get_config\(", text, re.M)
    assert "AutoConfig.from_pretrained(" in text
    # get_config re-raises what the parser raised unless the path is a pointer adapter
    assert "except (OSError, ValueError):" in text


def test_resolution_pipeline_handles_model_paths_before_serving():
    text = _wheel_text("sglang/srt/arg_groups/pipeline.py")
    assert "def run_resolution_pipeline(" in text and "handle_model_source_paths" in text


def test_transformers_pin_is_the_one_the_sim_names():
    try:
        wheel = sr.wheel_path(sr.PINNED)
    except sr.ReleaseUnavailable as exc:
        pytest.skip("the sglang %s wheel cannot be fetched: %s" % (sr.PINNED, exc))
    with zipfile.ZipFile(wheel) as zf:
        meta = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")][0]
        text = zf.read(meta).decode("utf-8")
    assert "Requires-Dist: transformers==5.19.0" in text
