"""Roles talk through their public interfaces only: no role reads or sets another role's private
names (`_<prefix>` role vars and facts, `__<prefix>` registered results). What crosses a role
boundary goes through a documented variable, an entry point's argument spec, or a published fact
(`sglang_service_names`, `sglang_service_result`)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# each role's variable prefix, as its defaults and argument specs name them
PREFIXES = {"service": "sglang_service_", "install": "sglang_install_", "gpu_reset": "sglang_gpu_reset_",
            "mtp_tune": "mtp_tune_", "rollout": "rollout_"}


def _files(role):
    base = ROOT / "roles" / role
    return sorted(p for p in base.rglob("*") if p.suffix in (".yml", ".yaml", ".j2") and p.is_file())


def test_every_role_is_covered():
    assert sorted(p.name for p in (ROOT / "roles").iterdir() if p.is_dir()) == sorted(PREFIXES)


@pytest.mark.parametrize("role", sorted(PREFIXES))
def test_no_role_reads_another_roles_private_names(role):
    crossing = []
    for path in _files(role):
        text = path.read_text()
        for other, prefix in PREFIXES.items():
            if other == role:
                continue
            for match in re.finditer(r"(?<![A-Za-z0-9_])(_{1,2}%s[a-z0-9_]*)" % prefix, text):
                line = text.count("\n", 0, match.start()) + 1
                crossing.append("%s:%d %s (private to %s)" % (path.relative_to(ROOT), line, match.group(1), other))
    assert not crossing, "\n".join(crossing)


def test_the_check_sees_a_crossing(tmp_path):
    # the pattern the test relies on: a private name of another role is found, a public one is not
    pattern = r"(?<![A-Za-z0-9_])(_{1,2}%s[a-z0-9_]*)" % PREFIXES["service"]
    assert re.findall(pattern, "url: '{{ _sglang_service_base_url }}'") == ["_sglang_service_base_url"]
    assert re.findall(pattern, "x: '{{ __sglang_service_wait.ready }}'") == ["__sglang_service_wait"]
    assert re.findall(pattern, "x: '{{ sglang_service_result.ready }}' y: mtp_sglang_service_x") == []
