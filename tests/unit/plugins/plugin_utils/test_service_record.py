"""The node's own record of what it serves and the API key file beside it
(plugins/plugin_utils/service_record.py); moved from tests/unit/plugins/filter/test_service.py and
test_service_schedule.py."""

import pytest
import yaml

from ansible_collections.blackwell.sglang.plugins.plugin_utils import service_args as svc
from ansible_collections.blackwell.sglang.plugins.plugin_utils import service_record as f
from schedule_cases import OLD_RECORD, SCHEDULE_DEFAULTS, SCHEDULE_NOT_GIVEN, settings
from service_cases import base, LEVER_FLAGS, LEVERS, pairs


DEFAULTS = {"speculative_algorithm": "NEXTN", "speculative_num_steps": 3, "speculative_eagle_topk": 1,
            "speculative_num_draft_tokens": None, "speculative_draft_model_path": None,
            "cuda_graph_max_bs": None, "max_running_requests": None}


NOT_GIVEN = dict((k, None) for k in DEFAULTS)


TUNED = {"schema": 1, "release": "0.5.23",
         "setting": {"speculative_algorithm": "NEXTN", "speculative_num_steps": 4, "speculative_eagle_topk": 1,
                     "speculative_num_draft_tokens": 5, "speculative_draft_model_path": None,
                     "cuda_graph_max_bs": 256, "max_running_requests": None},
         "provenance": {"by": "mtp_tune", "run": "r1", "at": "2026-05-01T10:00:00Z", "why": "latency"}}


def given(**over):
    out = dict(NOT_GIVEN)
    out.update(over)
    return out


def test_setting_precedence_variable_then_record_then_defaults():
    # Nothing given: the record decides (install.yml after a tune keeps steps 4 and its override).
    out = f.sglang_service_setting(given(), TUNED, DEFAULTS)
    assert out["setting"]["speculative_num_steps"] == 4 and out["setting"]["cuda_graph_max_bs"] == 256
    assert out["sources"]["speculative_num_steps"] == "node"
    # No record: the defaults.
    out = f.sglang_service_setting(given(), None, DEFAULTS)
    assert out["setting"]["speculative_num_steps"] == 3 and out["sources"]["speculative_num_steps"] == "default"
    # A variable wins over both, extra-vars strings included.
    out = f.sglang_service_setting(given(speculative_num_steps="5", max_running_requests="32"), TUNED, DEFAULTS)
    assert out["setting"]["speculative_num_steps"] == 5 and out["sources"]["speculative_num_steps"] == "variable"
    assert out["setting"]["max_running_requests"] == 32
    # Speculation off is a choice, not "not given".
    out = f.sglang_service_setting(given(speculative_algorithm=""), TUNED, DEFAULTS)
    assert out["setting"]["speculative_algorithm"] == ""


def test_setting_new_steps_never_inherit_old_draft_tokens():
    out = f.sglang_service_setting(given(speculative_num_steps=6), TUNED, DEFAULTS)["setting"]
    assert out["speculative_num_steps"] == 6
    assert out["speculative_num_draft_tokens"] is None  # derived (7), not the record's 5
    assert svc.sglang_service_spec(out)["speculative_num_draft_tokens"] == 7
    # A given member that agrees with the record keeps the rest of the record's decision.
    out = f.sglang_service_setting(given(speculative_eagle_topk=1), TUNED, DEFAULTS)["setting"]
    assert out["speculative_num_steps"] == 4 and out["speculative_num_draft_tokens"] == 5


def test_setting_record_use_off_and_bad_input():
    out = f.sglang_service_setting(given(), {}, DEFAULTS)
    assert out["setting"]["speculative_num_steps"] == 3
    with pytest.raises(svc.AnsibleFilterError, match="given must be a dict"):
        f.sglang_service_setting("steps=4", TUNED, DEFAULTS)


def test_record_kept_with_its_provenance_when_the_setting_is_the_same():
    same = dict(TUNED["setting"], speculative_num_draft_tokens=None, speculative_algorithm="nextn")
    out = f.sglang_service_record(same, TUNED, "0.5.23", {"by": "rollout", "run": "x"}, "2026-06-01T00:00:00Z")
    assert not out["changed"] and not out["setting_changed"]
    assert out["record"]["provenance"] == TUNED["provenance"]
    # A release change is noted without making it a new decision.
    out = f.sglang_service_record(same, TUNED, "0.5.24", {"by": "rollout"}, "later")
    assert out["changed"] and not out["setting_changed"]
    assert out["record"]["release"] == "0.5.24" and out["record"]["provenance"]["by"] == "mtp_tune"


def test_record_new_setting_names_who_when_why_and_keeps_the_previous():
    new = dict(TUNED["setting"], speculative_num_steps=5, speculative_num_draft_tokens=None, cuda_graph_max_bs=None)
    out = f.sglang_service_record(new, TUNED, "0.5.23", {"by": "rollout", "run": "r9", "why": "steps=5", "x": ""},
                                  "2026-06-01T00:00:00Z")
    rec = out["record"]
    assert out["changed"] and out["setting_changed"]
    assert rec["setting"]["speculative_num_steps"] == 5 and rec["setting"]["speculative_num_draft_tokens"] == 6
    assert rec["provenance"] == {"by": "rollout", "run": "r9", "why": "steps=5", "at": "2026-06-01T00:00:00Z"}
    assert rec["previous"]["provenance"]["by"] == "mtp_tune"
    assert "previous" not in f.sglang_service_record(new, None, "0.5.23", None, "t")["record"]
    assert f.sglang_service_record(new, None, "0.5.23", None, "t")["record"]["provenance"]["by"] == "service"
    off = f.sglang_service_record(dict(new, speculative_algorithm=""), None, "0.5.23", None, "t")["record"]
    assert off["setting"]["speculative_algorithm"] is None and off["setting"]["speculative_num_steps"] is None
    with pytest.raises(svc.AnsibleFilterError, match="provenance must be a dict"):
        f.sglang_service_record(new, None, "0.5.23", "me", "t")


def test_provenance_line_is_one_line():
    line = f.sglang_service_provenance_line({"provenance": {"by": "rollout", "run": "r1", "at": "T", "why": "a\nb"}})
    assert line == "rollout r1 at T: a b"
    assert f.sglang_service_provenance_line({}) == ""


@pytest.mark.parametrize("key", ["plain", "12345", "true", "with 'quotes' and \"double\"", "back\\slash #x: y",
                                 "ünïcödé", "null"])
def test_secrets_yaml_reads_back_verbatim(key):
    text = f.sglang_service_secrets_yaml(key, ["managed"])
    assert text.startswith("# managed\n")
    assert yaml.safe_load(text) == {"api-key": key}
    assert f.sglang_service_node_key(text) == key


def test_node_key_from_each_layout():
    assert f.sglang_service_node_key("SGLANG_API_KEY='old-key'\n", "env") == "old-key"
    assert f.sglang_service_node_key("# x\nSGLANG_API_KEY=bare\n", "env") == "bare"
    assert f.sglang_service_node_key("OTHER=1\n", "env") == ""
    assert f.sglang_service_node_key("") == ""
    assert f.sglang_service_node_key("- a list\n") == ""
    with pytest.raises(svc.AnsibleFilterError, match="not valid YAML") as exc:
        f.sglang_service_node_key("api-key: [unclosed-secret")
    assert "unclosed-secret" not in str(exc.value)
    with pytest.raises(svc.AnsibleFilterError, match="kind must be"):
        f.sglang_service_node_key("x", "ini")


def _b64(text):
    import base64
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def test_key_in_use_given_replaces_the_nodes_and_absent_removes_it():
    config = _b64(f.sglang_service_secrets_yaml("node-key", ["managed"]))
    assert f.sglang_service_key_in_use("new-key", "present", config, None) == "new-key"
    assert f.sglang_service_key_in_use("new-key", "absent", config, None) == ""
    assert f.sglang_service_key_in_use("", "absent", config, _b64("SGLANG_API_KEY=old\n")) == ""


def test_key_in_use_not_given_keeps_the_nodes():
    config = _b64(f.sglang_service_secrets_yaml("ünï 'key'", ["managed"]))
    assert f.sglang_service_key_in_use("", "present", config, None) == "ünï 'key'"
    # the --config file wins over the older EnvironmentFile, which is read only when there is none
    assert f.sglang_service_key_in_use("", "present", config, _b64("SGLANG_API_KEY=old\n")) == "ünï 'key'"
    assert f.sglang_service_key_in_use("", "present", None, _b64("SGLANG_API_KEY='old'\n")) == "old"
    # a --config file read but holding no key: none, the EnvironmentFile is not consulted
    assert f.sglang_service_key_in_use("", "present", _b64("other: 1\n"), _b64("SGLANG_API_KEY=old\n")) == ""
    assert f.sglang_service_key_in_use("", "present", None, None) == ""
    assert f.sglang_service_key_in_use(None) == ""


def test_key_in_use_names_a_broken_config_file_without_its_text():
    with pytest.raises(svc.AnsibleFilterError, match="not valid YAML") as exc:
        f.sglang_service_key_in_use("", "present", _b64("api-key: [unclosed-secret"))
    assert "unclosed-secret" not in str(exc.value)


def test_levers_are_record_keys():
    assert set(LEVERS) <= set(f.RECORD_KEYS)


RECORD_SCHEMA_BEFORE_LEVERS = {"schema": 1, "release": "0.5.23", "setting": dict(TUNED["setting"]),
                               "provenance": dict(TUNED["provenance"])}


def test_a_record_from_before_the_levers_is_kept_byte_for_byte():
    # the setting read from such a record, served again: nothing to rewrite, nothing to restart
    chosen = f.sglang_service_setting(given(), RECORD_SCHEMA_BEFORE_LEVERS, DEFAULTS)["setting"]
    assert all(chosen[k] is None for k in LEVERS)
    out = f.sglang_service_record(base(**chosen), RECORD_SCHEMA_BEFORE_LEVERS, "0.5.23", {"by": "service"}, "t")
    assert not out["changed"] and out["record"] == RECORD_SCHEMA_BEFORE_LEVERS


def test_lever_sequence_render_keep_by_record_then_change():
    """Run 1 gives the levers; run 2 restates nothing and keeps them from the record (same unit,
    record untouched); run 3 gives another ratio: a new unit and a new record."""
    defaults = dict(DEFAULTS, **dict((k, None) for k in LEVERS))
    not_given = dict((k, None) for k in defaults)

    def run(given_now, record):
        chosen = f.sglang_service_setting(given_now, record, defaults)
        settings = base(**chosen["setting"])
        argv = svc.sglang_service_args(settings, LEVER_FLAGS)
        return chosen, argv, f.sglang_service_record(settings, record, "0.5.23", {"by": "service"}, "t")

    first_given = dict(not_given, mamba_full_memory_ratio="4", max_mamba_cache_size=96,
                       enable_linear_replayssm_spec=True)
    chosen1, argv1, rec1 = run(first_given, RECORD_SCHEMA_BEFORE_LEVERS)
    assert chosen1["sources"]["mamba_full_memory_ratio"] == "variable"
    assert rec1["setting_changed"]
    assert dict((k, rec1["record"]["setting"][k]) for k in LEVERS) == {
        "mamba_full_memory_ratio": 4.0, "max_mamba_cache_size": 96, "enable_linear_replayssm_spec": True}
    got = pairs(argv1)
    assert got["--mamba-full-memory-ratio"] == "4.0" and got["--max-mamba-cache-size"] == "96"
    assert got["--enable-linear-replayssm-spec"] is True

    chosen2, argv2, rec2 = run(not_given, rec1["record"])
    assert dict((k, chosen2["sources"][k]) for k in LEVERS) == dict((k, "node") for k in LEVERS)
    assert argv2 == argv1  # same unit: no restart
    assert not rec2["changed"] and rec2["record"] == rec1["record"]

    # a spelling of the same value is the same setting too
    _c, argv2b, rec2b = run(dict(not_given, mamba_full_memory_ratio=4), rec1["record"])
    assert argv2b == argv1 and not rec2b["setting_changed"]

    chosen3, argv3, rec3 = run(dict(not_given, mamba_full_memory_ratio=2.5), rec1["record"])
    assert pairs(argv3)["--mamba-full-memory-ratio"] == "2.5"
    assert pairs(argv3)["--max-mamba-cache-size"] == "96"  # the other levers stay as recorded
    assert rec3["setting_changed"] and rec3["record"]["setting"]["mamba_full_memory_ratio"] == 2.5
    assert rec3["record"]["previous"]["setting"]["mamba_full_memory_ratio"] == 4.0

    # ReplaySSM given false turns a recorded true off; the record says "not set", as the unit does
    _c, argv4, rec4 = run(dict(not_given, enable_linear_replayssm_spec=False), rec3["record"])
    assert "--enable-linear-replayssm-spec" not in argv4
    assert rec4["setting_changed"] and rec4["record"]["setting"]["enable_linear_replayssm_spec"] is None
    _c, argv5, rec5 = run(not_given, rec4["record"])
    assert argv5 == argv4 and not rec5["changed"]


def test_a_record_from_before_the_schedule_is_kept_byte_for_byte():
    chosen = f.sglang_service_setting(SCHEDULE_NOT_GIVEN, OLD_RECORD, SCHEDULE_DEFAULTS)["setting"]
    assert chosen["speculative_adaptive"] is None and chosen["speculative_adaptive_config"] is None
    now = settings(**chosen)
    out = f.sglang_service_record(now, OLD_RECORD, "0.5.23", {"by": "service"}, "t")
    assert not out["changed"] and out["record"] == OLD_RECORD
    assert set(svc.ADAPTIVE_KEYS) <= set(f.RECORD_KEYS)
