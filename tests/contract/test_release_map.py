"""roles/service/vars/sglang_releases.yml can never drift from the real releases."""

import json
from pathlib import Path

import pytest
import yaml

import sglang_release as sr

MAP_FILE = Path(__file__).resolve().parents[2] / "roles" / "service" / "vars" / "sglang_releases.yml"
RELEASES = yaml.safe_load(MAP_FILE.read_text())["_sglang_service_releases"]

LOGICAL = (
    "model_path served_model_name tp_size host port kv_cache_dtype mem_fraction_static "
    "cuda_graph_max_bs max_running_requests context_length attention_backend "
    "speculative_algorithm speculative_num_steps speculative_eagle_topk "
    "speculative_num_draft_tokens speculative_draft_model_path enable_metrics "
    "trust_remote_code disable_cuda_graph api_key config "
    "mamba_full_memory_ratio max_mamba_cache_size enable_linear_replayssm_spec "
    "speculative_adaptive speculative_adaptive_config"
).split()
DEFAULTS = yaml.safe_load(MAP_FILE.read_text())["_sglang_service_adaptive_defaults"]

# The release field that holds each logical setting, where it is not the same name:
# the max CUDA-graph batch size is the decode-phase one since the -decode/-prefill split.
DEST = {"cuda_graph_max_bs": "cuda_graph_max_bs_decode"}


def _deprecated(action):
    text = (action.help or "").lstrip("(").lower()
    return type(action).__name__.startswith("Deprecated") or text.startswith("deprecated")


def _canonical(parser, dest):
    """The release's own spelling for a field: first option of its non-deprecated action."""
    actions = [a for a in parser._actions if a.dest == dest and a.option_strings]
    current = [a for a in actions if not _deprecated(a)]
    chosen = current or actions  # only a deprecated spelling exists (disable_cuda_graph)
    return chosen[0].option_strings[0] if chosen else None


def test_map_covers_supported_releases_and_settings():
    assert set(RELEASES) == set(sr.SUPPORTED)
    for version, flags in RELEASES.items():
        assert sorted(flags) == sorted(LOGICAL), version


@pytest.mark.parametrize("version", sr.SUPPORTED)
def test_every_mapped_flag_exists_verbatim(sglang_parser_for, version):
    sglang_parser_for(version)
    missing = {k: v for k, v in RELEASES[version].items() if v not in sr.flag_names(version)}
    assert not missing, "sglang %s has no such flags: %s" % (version, missing)


@pytest.mark.parametrize("version", sr.SUPPORTED)
@pytest.mark.parametrize("setting", LOGICAL)
def test_mapped_flag_is_the_release_spelling_for_the_setting(sglang_parser_for, version, setting):
    parser = sglang_parser_for(version)
    dest = DEST.get(setting, setting)
    assert RELEASES[version][setting] == _canonical(parser, dest)


@pytest.mark.parametrize("version", sr.SUPPORTED)
def test_rendered_style_command_line_parses(sglang_parse, version):
    flags = RELEASES[version]
    values = {
        "model_path": "/models/m", "served_model_name": "m", "tp_size": "4", "host": "127.0.0.1",
        "port": "30000", "kv_cache_dtype": "fp8_e4m3", "mem_fraction_static": "0.85",
        "cuda_graph_max_bs": "64", "max_running_requests": "48", "context_length": "32768",
        "attention_backend": "flashinfer", "speculative_algorithm": "EAGLE",
        "speculative_num_steps": "3", "speculative_eagle_topk": "1",
        "speculative_num_draft_tokens": "4", "speculative_draft_model_path": "/models/d",
        "mamba_full_memory_ratio": "4.0", "max_mamba_cache_size": "96",
    }
    values["speculative_adaptive_config"] = "/etc/sglang/qwen/adaptive-0123456789abcdef.json"
    switches = ["enable_metrics", "trust_remote_code", "disable_cuda_graph", "enable_linear_replayssm_spec",
                "speculative_adaptive"]
    argv = [tok for k, v in values.items() for tok in (flags[k], v)] + [flags[s] for s in switches]
    ns = sglang_parse(argv, version)
    assert ns.speculative_adaptive is True and ns.speculative_adaptive_config == values["speculative_adaptive_config"]
    assert ns.cuda_graph_max_bs_decode == 64 and ns.tp_size == 4
    assert ns.enable_metrics and ns.trust_remote_code and ns.disable_cuda_graph
    assert ns.mamba_full_memory_ratio == 4.0 and ns.max_mamba_cache_size == 96 and ns.enable_linear_replayssm_spec


def _release_default_schedule(version):
    """DEFAULT_ADAPTIVE_CONFIG of the release, read from its wheel's source (a literal)."""
    import ast
    import zipfile

    with zipfile.ZipFile(sr.wheel_path(version)) as whl:
        source = whl.read("sglang/srt/speculative/adaptive_spec_params.py").decode()
    for node in ast.parse(source).body:
        target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
        if getattr(target, "id", None) == "DEFAULT_ADAPTIVE_CONFIG":
            return ast.literal_eval(node.value)
    raise AssertionError("sglang %s has no DEFAULT_ADAPTIVE_CONFIG" % version)


@pytest.mark.parametrize("version", sr.SUPPORTED)
def test_built_in_schedule_is_the_release_s(sglang_parser_for, version):
    sglang_parser_for(version)  # skips, with pip's reason, when the wheel cannot be fetched
    assert set(DEFAULTS) == set(sr.SUPPORTED)
    assert DEFAULTS[version] == _release_default_schedule(version)


def test_schedule_file_passes_the_release_loader(release_fn, tmp_path):
    """The file the role writes for a schedule is what the pinned release loads, tier for tier, and
    each malformed schedule the role refuses for the release's own reason is refused by it too."""
    from ansible_collections.blackwell.sglang.plugins.plugin_utils import spec_schedule

    load = release_fn("sglang.srt.speculative.adaptive_spec_params:_load_adaptive_config")
    union = release_fn("sglang.srt.speculative.adaptive_spec_params:resolve_candidate_steps_from_config")
    schedule = {1: {"candidate_steps": [4, 3, 3]}, 16: {"candidate_steps": [2, 3], "ema_alpha": 0.3},
                "48": {"candidate_steps": [0, 2], "down_hysteresis": -0.5, "update_interval": 3}}
    path = tmp_path / spec_schedule.file_name(schedule)
    path.write_text(spec_schedule.text(schedule))
    _cfg, tiers = load(str(path))
    assert sorted(tiers) == [1, 16, 48]
    assert tiers[16]["ema_alpha"] == 0.3 and tiers[48]["update_interval"] == 3
    assert union(str(path)) == spec_schedule.candidate_union(schedule) == [0, 2, 3, 4]
    for bad in ({1: {"candidate_steps": []}}, {2: {"candidate_steps": [-1]}}, {4: {"candidate_steps": "3"}}):
        assert spec_schedule.problems(bad)
        path.write_text(json.dumps(dict((str(k), v) for k, v in bad.items())))
        with pytest.raises(ValueError, match="candidate_steps must be a list of non-negative ints"):
            load(str(path))
    path.write_text(json.dumps({"ema_alpha": 0.3}))
    assert spec_schedule.problems({"ema_alpha": 0.3})
    with pytest.raises(ValueError, match="must contain at least one integer-string BS key"):
        load(str(path))
