"""The release map, settings and records the per-load schedule's unit tests share (moved from
tests/unit/plugins/filter/test_service_schedule.py)."""

from pathlib import Path

import yaml

from ansible_collections.blackwell.sglang.plugins.plugin_utils import service_args as svc
from ansible_collections.blackwell.sglang.plugins.plugin_utils import service_record


ROOT = Path(__file__).resolve().parents[4]


ROLE = ROOT / "roles" / "service"


MAP = yaml.safe_load((ROLE / "vars" / "sglang_releases.yml").read_text())


SCHEDULE_FLAGS = MAP["_sglang_service_releases"]["0.5.23"]


DEFAULT_523 = MAP["_sglang_service_adaptive_defaults"]["0.5.23"]


DIR = "/etc/sglang/qwen"


VAR = "sglang_service_speculative_adaptive_config"


# The operator's table on the sim's calibrated node: steps 4 at C=1, 3 at C=4..8, 2 from C=16.
SCHEDULE = {1: {"candidate_steps": [4, 3]}, 4: {"candidate_steps": [3, 2]}, 16: {"candidate_steps": [2, 3]}}


def settings(**over):
    out = {"model_path": "/models/q", "port": 30000, "tp_size": 4, "speculative_algorithm": "NEXTN",
           "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": None,
           "speculative_adaptive": True, "speculative_adaptive_config": SCHEDULE,
           "speculative_adaptive_dir": DIR, "extra_args": []}
    out.update(over)
    return out


SCHEDULE_DEFAULTS = {"speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
                     "speculative_num_draft_tokens": None, "speculative_draft_model_path": None, "cuda_graph_max_bs": None,
                     "max_running_requests": None, "mamba_full_memory_ratio": None, "max_mamba_cache_size": None,
                     "enable_linear_replayssm_spec": None, "speculative_adaptive": None, "speculative_adaptive_config": None}


SCHEDULE_NOT_GIVEN = dict((k, None) for k in SCHEDULE_DEFAULTS)


OLD_RECORD = {"schema": 1, "release": "0.5.23",
              "setting": {"speculative_algorithm": "EAGLE", "speculative_num_steps": 4, "speculative_eagle_topk": 1,
                          "speculative_num_draft_tokens": 5, "speculative_draft_model_path": None,
                          "cuda_graph_max_bs": None, "max_running_requests": None},
              "provenance": {"by": "mtp_tune", "run": "r1", "at": "2026-05-01T10:00:00Z"}}


def run(given, record):
    """One run of the role on a node: the setting chosen, its argv and file, the record after it."""
    chosen = service_record.sglang_service_setting(given, record, SCHEDULE_DEFAULTS)
    now = settings(**chosen["setting"])
    assert svc.sglang_service_problems(now, SCHEDULE_FLAGS, DEFAULT_523) == []
    argv = svc.sglang_service_args(now, SCHEDULE_FLAGS)
    rec = service_record.sglang_service_record(now, record, "0.5.23", {"by": "service"}, "t")
    return chosen, argv, svc.sglang_service_adaptive_file(now), rec
