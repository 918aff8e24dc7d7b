"""The service filters' registry (plugins/filter/service.py) publishes every decision."""

from ansible_collections.blackwell.sglang.plugins.filter import service as f


def test_filter_module_exports():
    names = f.FilterModule().filters()
    assert set(names) >= {"sglang_service_args", "sglang_service_problems",
                          "sglang_service_summary", "sglang_systemd_exec", "sglang_systemd_env",
                          "sglang_service_setting", "sglang_service_record", "sglang_service_provenance_line",
                          "sglang_service_secrets_yaml", "sglang_service_node_key",
                          "sglang_service_key_in_use"}
