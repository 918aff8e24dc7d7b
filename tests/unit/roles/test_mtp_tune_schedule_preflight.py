# -*- coding: utf-8 -*-
"""The mtp_tune role's preflight with mtp_tune_schedule (tasks/preflight.yml, preflight_schedule.yml),
run through ansible-playbook on the controller: each setting a per-load schedule cannot be tuned
under is refused with a message naming the variable and the fix, before anything is written or
restarted (the results and state directories stay empty: no node is touched, no results file is
made); a schedule run that is fine gets past every check, plans every level for every launch and
carries the schedule into its spec and settings; the role's files wire the schedule through."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
ROLE = os.path.join(ROOT, "roles", "mtp_tune")

BASE = {"sglang_service_name": "qwen", "sglang_service_model_path": "Qwen/Q", "sglang_service_tp": 4,
        "mtp_tune_schedule": True, "mtp_tune_objective": "throughput", "mtp_tune_concurrency": [1, 16],
        "mtp_tune_steps": [3, 4], "mtp_tune_run_name": "schedule"}

# (case, vars over BASE, what the refusal must say)
REFUSED = [
    ("latency objective", {"mtp_tune_objective": "latency"},
     "mtp_tune_schedule=true judges every level on its own by its aggregate output tok/s: set "
     "mtp_tune_objective=throughput (got latency)"),
    ("one level", {"mtp_tune_concurrency": [16]},
     "mtp_tune_schedule=true needs at least two levels in mtp_tune_concurrency, one per load the schedule serves "
     "(got [16])"),
    ("another algorithm", {"sglang_service_speculative_algorithm": "STANDALONE"},
     "needs a speculative algorithm SGLang schedules per load (NEXTN, EAGLE or EAGLE3), got \"STANDALONE\" from "
     "sglang_service_speculative_algorithm"),
    ("speculation off", {"sglang_service_speculative_algorithm": ""}, "(NEXTN, EAGLE or EAGLE3), got \"\""),
    ("a starting point without a schedule", {"sglang_service_setting_defaults": {"speculative_algorithm": "NGRAM"}},
     "got \"NGRAM\""),
    ("trees", {"mtp_tune_topk": [1, 2], "mtp_tune_draft_tokens": [5]},
     "mtp_tune_schedule=true needs topk 1 candidates only (SGLang's schedule moves the step count of a chain draft): "
     "set mtp_tune_topk to [1] (got [1, 2])"),
    ("a pool", {"mtp_tune_pool": True}, "mtp_tune_schedule=true tunes one node: set mtp_tune_pool=false"),
    ("the play's own schedule", {"sglang_service_speculative_adaptive": True},
     "mtp_tune_schedule=true sets each launch's schedule itself: leave sglang_service_speculative_adaptive and "
     "sglang_service_speculative_adaptive_config unset in the play (got true and null)"),
    ("a static tune given a schedule", {"mtp_tune_schedule": False, "mtp_tune_objective": "latency",
                                        "sglang_service_speculative_adaptive": True},
     "mtp_tune measures static settings, so sglang_service_speculative_adaptive(_config) would not be served"),
    ("a static tune given a config", {"mtp_tune_schedule": False,
                                      "sglang_service_speculative_adaptive_config": {"1": {"candidate_steps": [3]}}},
     "or set mtp_tune_schedule=true to tune a per-load schedule"),
]
PASSES = [
    ("schedule", {}),
    ("EAGLE3, levels given judged", {"sglang_service_speculative_algorithm": "EAGLE3", "mtp_tune_search_levels": "judged",
                                     "mtp_tune_concurrency": [1, 4, 16]}),
    ("a static tune with the schedule off", {"mtp_tune_schedule": False, "sglang_service_speculative_adaptive": False}),
]


def _play(name, variables, tmp):
    case = dict(BASE, mtp_tune_results_dir=os.path.join(tmp, "results"), mtp_tune_state_dir=os.path.join(tmp, "state"))
    case.update(variables)
    tasks = textwrap.dedent("""\
        - name: Preflight
          block:
            - name: The role's preflight
              ansible.builtin.include_role:
                name: blackwell.sglang.mtp_tune
                tasks_from: preflight
            - name: Passed
              ansible.builtin.debug:
                msg: "CASE {name} PASSED {{{{ {{'plan': _mtp_tune_plan, 'spec': _mtp_tune_spec, 'settings': _mtp_tune_settings}} | to_json }}}}"
          rescue:
            - name: Refused
              ansible.builtin.debug:
                msg: "CASE {name} REFUSED {{{{ ansible_failed_result.msg }}}}"
        """).format(name=name.replace(" ", "_"))
    return {"hosts": "localhost", "gather_facts": False, "vars": case, "tasks": yaml.safe_load(tasks)}


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    """Every case in one ansible-playbook run (a play each): {case: (PASSED|REFUSED, text)}."""
    ap = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    if not os.path.exists(ap):
        pytest.skip("no ansible-playbook beside this interpreter (make venv)")
    out = {}
    tmp = tmp_path_factory.mktemp("preflight")
    plays = []
    for name, variables, *_rest in REFUSED + PASSES:
        case_dir = tmp / name.replace(" ", "_")
        case_dir.mkdir()
        plays.append(_play(name, variables, str(case_dir)))
    pb = tmp / "pb.yml"
    pb.write_text(yaml.safe_dump(plays, sort_keys=False))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false", ANSIBLE_NOCOLOR="1",
               ANSIBLE_STDOUT_CALLBACK="json", ANSIBLE_DEPRECATION_WARNINGS="false")
    # the modules run by this interpreter, not one discovered on PATH (a pyenv shim may not run here)
    res = subprocess.run([ap, "-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=" + sys.executable, str(pb)],
                         env=env, capture_output=True, text=True,
                         timeout=300, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    doc = json.loads(res.stdout[res.stdout.index("{"):])
    for play in doc["plays"]:
        for task in play["tasks"]:
            msg = str(task["hosts"].get("localhost", {}).get("msg", ""))
            if msg.startswith("CASE "):
                _c, name, verdict, text = msg.split(" ", 3)
                out[name.replace("_", " ")] = (verdict, text)
    return out, tmp


@pytest.mark.parametrize("name,variables,says", REFUSED, ids=[r[0] for r in REFUSED])
def test_each_refusal_names_the_variable_before_anything_is_written(outcome, name, variables, says):
    got, tmp = outcome
    verdict, text = got[name]
    assert verdict == "REFUSED" and says in " ".join(text.split()), text
    # nothing written on the controller, nothing read or written on the node's state directory
    case_dir = tmp / name.replace(" ", "_")
    assert list(case_dir.iterdir()) == [], list(case_dir.iterdir())


@pytest.mark.parametrize("name,variables", PASSES, ids=[r[0] for r in PASSES])
def test_a_schedule_run_that_is_fine_passes_and_plans_every_level(outcome, name, variables):
    verdict, text = outcome[0][name]
    assert verdict == "PASSED", text
    facts = json.loads(text)
    schedule = dict(BASE, **variables)["mtp_tune_schedule"]
    levels = sorted(dict(BASE, **variables)["mtp_tune_concurrency"])
    assert facts["plan"]["levels"] == levels
    assert facts["spec"]["schedule"] is schedule and facts["spec"]["schedule_default"] is True
    if schedule:
        # every launch benchmarks every level, whatever mtp_tune_search_levels says
        assert facts["plan"]["search"] == levels
        assert facts["settings"]["schedule"] is True and facts["settings"]["schedule_default"] is True
    else:
        # a static run's settings stay those earlier runs recorded (a re-run still finds them unchanged)
        assert "schedule" not in facts["settings"] and "schedule_default" not in facts["settings"]


def test_role_wires_the_schedule():
    defaults = yaml.safe_load(open(os.path.join(ROLE, "defaults", "main.yml")))
    specs = yaml.safe_load(open(os.path.join(ROLE, "meta", "argument_specs.yml")))["argument_specs"]["main"]["options"]
    for var, default in (("mtp_tune_schedule", False), ("mtp_tune_schedule_default", True)):
        assert defaults[var] is default and specs[var]["default"] is default and specs[var]["type"] == "bool"
    with open(os.path.join(ROLE, "README.md")) as fh:
        readme = fh.read()
    assert "## Per-load schedule" in readme and "`mtp_tune_schedule`:" in readme and "`mtp_tune_schedule_default`:" in readme
    # each launch and the converge serve the schedule of their overrides, and null (static) without one
    for name, var in (("candidate.yml", "_mtp_tune_next"), ("converge.yml", "_mtp_tune_winner")):
        with open(os.path.join(ROLE, "tasks", name)) as fh:
            text = fh.read()
        for key in ("speculative_adaptive", "speculative_adaptive_config"):
            assert 'sglang_service_%s: "{{ %s.overrides.%s | default(none) }}"' % (key, var, key) in text, (name, key)
    # a schedule's launch is measured as it serves: its cap (its pools follow its deepest step) is no failure
    with open(os.path.join(ROLE, "tasks", "candidate.yml")) as fh:
        cap_task = [t for t in yaml.safe_load(fh)[-2]["block"] if t["name"] == "Note a server capped below the judged concurrency"][0]
    assert "and (_mtp_tune_next.schedule | default(none)) is none else none" in " ".join(
        cap_task["ansible.builtin.set_fact"]["_mtp_tune_cap"].split())
    # the schedule checks come before anything that reads or writes (the results file, the node's state)
    with open(os.path.join(ROLE, "tasks", "preflight.yml")) as fh:
        preflight = fh.read()
    assert preflight.index("preflight_schedule.yml") < preflight.index("op: load") < preflight.index("include_tasks: resume.yml")
    assert "schedule: \"{{ mtp_tune_schedule | bool }}\"" in preflight
