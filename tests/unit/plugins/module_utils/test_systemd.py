"""systemd: the one reader of `systemctl show` output that sglang_service_wait and sglang_node_info
share (plugins/module_utils/systemd.py)."""

from ansible_collections.blackwell.sglang.plugins.module_utils import systemd


def test_show_splits_on_the_first_equals_sign_only():
    # ExecStart and Environment values hold '=' of their own.
    text = ("ActiveState=active\nExecStart={ path=/opt/venv/bin/python ; argv[]=python -m sglang.launch_server "
            "--port=30000 }\nEnvironment=A=1 B=2\n")
    assert systemd.parse_show(text) == {
        "ActiveState": "active",
        "ExecStart": "{ path=/opt/venv/bin/python ; argv[]=python -m sglang.launch_server --port=30000 }",
        "Environment": "A=1 B=2"}


def test_show_strips_and_keeps_empty_values():
    assert systemd.parse_show(" NRestarts = 3 \nInvocationID=\nResult=success\r\n") == {
        "NRestarts": "3", "InvocationID": "", "Result": "success"}


def test_show_passes_over_lines_without_a_property():
    assert systemd.parse_show("\nnot a property\nLoadState=not-found\n") == {"LoadState": "not-found"}


def test_show_of_nothing_is_empty():
    assert systemd.parse_show("") == {}
    assert systemd.parse_show(None) == {}


def test_show_last_value_of_a_repeated_property_wins():
    assert systemd.parse_show("SubState=auto-restart\nSubState=running\n") == {"SubState": "running"}


def test_the_modules_read_show_output_with_it():
    """sglang_service_wait and sglang_node_info have no reader of their own."""
    from ansible_collections.blackwell.sglang.plugins.modules import sglang_node_info, sglang_service_wait

    assert sglang_service_wait.parse_show is systemd.parse_show
    unit = sglang_node_info.parse_show("LoadState=loaded\nActiveState= active \nNRestarts=2\nMainPID=0\n")
    assert unit["installed"] is True and unit["active_state"] == "active" and unit["n_restarts"] == 2
