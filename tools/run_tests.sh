#!/usr/bin/env bash
# The whole test suite, from nothing: venv, Docker engine + node image, then pytest (unit,
# contract, integration), ansible-lint, ansible-test sanity, and every molecule scenario.
# Ends with one summary line; exits non-zero if any stage failed.
#   tools/run_tests.sh                 everything
#   STAGES="pytest lint" tools/run_tests.sh     a subset (venv/testbed run as needed)
#   SCENARIOS="default service" tools/run_tests.sh   only these molecule scenarios
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
logs=$root/build/test-logs
rm -rf "$logs"; mkdir -p "$logs"
stages=${STAGES:-pytest lint sanity molecule}
t0=$(date +%s)
declare -a report=()
passed=0; failed=0; skipped=0; bad_stages=()

note() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
stage_fail() { bad_stages+=("$1"); note "FAILED: $1 (log: ${2:-})"; [[ -n ${2:-} && -f $2 ]] && tail -n 60 "$2" | sed 's/^/    /'; }

# --- set-up: these must succeed or nothing else can run ----------------------------------
note "venv"
bash tools/venv.sh 2>&1 | grep -v 'is ignored: it is neither' || { echo "summary: venv could not be created: 0 passed, 1 failed"; exit 1; }
export PATH=$root/.venv/bin:$PATH
ANSIBLE_COLLECTIONS_PATH=$(bash tools/collection_link.sh); export ANSIBLE_COLLECTIONS_PATH
if [[ " $stages " == *" molecule "* ]]; then
  note "test bed (docker engine + node image)"
  SGLANG_NODE_IMAGE=$(bash tools/testbed.sh) || { echo "summary: test bed could not be built: 0 passed, 1 failed"; exit 1; }
  export SGLANG_NODE_IMAGE
  note "node image: $SGLANG_NODE_IMAGE"
fi

# --- ansible-lint and sanity, beside pytest ----------------------------------------------
# Both only read the tree (sanity a mirror of it), and pytest spends most of its time waiting on
# the servers its integration tests start: on two cores the three together take about as long as
# pytest alone. Each writes "ok|FAILED seconds" beside its log (<log>.result), folded in after pytest.
check_bg() {  # name, log, command...
  local name=$1 log=$2; shift 2
  local s; s=$(date +%s)
  note "$name (beside pytest)"
  if "$@" >"$log" 2>&1; then echo "ok $(( $(date +%s) - s ))" >"$log.result"
  else echo "FAILED $(( $(date +%s) - s ))" >"$log.result"; fi
}
checks=()
[[ " $stages " == *" lint "* ]] && checks+=("ansible-lint|$logs/ansible-lint.log|ansible-lint --offline")
[[ " $stages " == *" sanity "* ]] && checks+=("ansible-test sanity|$logs/sanity.log|bash tools/sanity.sh")
(
  for c in "${checks[@]}"; do
    IFS='|' read -r name log cmd <<<"$c"
    # shellcheck disable=SC2086  # the command's words
    check_bg "$name" "$log" $cmd
  done
) &
checks_pid=$!

# --- pytest -----------------------------------------------------------------------------
if [[ " $stages " == *" pytest "* ]]; then
  note "pytest: tests/unit tests/contract tests/integration tests/gpu"
  s=$(date +%s)
  python -m pytest -p no:cacheprovider -q -rs --junitxml="$logs/pytest.xml" \
    tests/unit tests/contract tests/integration tests/gpu >"$logs/pytest.log" 2>&1
  rc=$?
  read -r n f e sk < <(python - "$logs/pytest.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
try:
    r = ET.parse(sys.argv[1]).getroot()
    s = r if r.tag == "testsuite" else r.find("testsuite")
    print(s.get("tests", 0), s.get("failures", 0), s.get("errors", 0), s.get("skipped", 0))
except Exception:
    print(0, 0, 0, 0)
PY
)
  ok=$((n - f - e - sk)); passed=$((passed + ok)); failed=$((failed + f + e)); skipped=$((skipped + sk))
  grep -E '^SKIPPED' "$logs/pytest.log" | sed 's/^/    /' | head -20
  report+=("pytest ${ok}/${n} passed, ${sk} skipped ($(( $(date +%s) - s ))s)")
  if [[ $rc == 5 ]]; then failed=$((failed + 1)); stage_fail "pytest collected no tests" "$logs/pytest.log"
  elif [[ $rc != 0 ]]; then stage_fail "pytest" "$logs/pytest.log"; fi
fi

wait "$checks_pid"
for c in "${checks[@]}"; do
  IFS='|' read -r name log _cmd <<<"$c"
  st=FAILED; sec=0
  [[ -f $log.result ]] && read -r st sec <"$log.result"
  if [[ $st == ok ]]; then passed=$((passed + 1)); report+=("$name ok (${sec}s, beside pytest)")
  else failed=$((failed + 1)); report+=("$name FAILED"); stage_fail "$name" "$log"; fi
done

# --- molecule ---------------------------------------------------------------------------
# Scenarios run in MOLECULE_LANES parallel lanes (default 2), each lane one after another with
# its own node container name (SGLANG_NODE_NAME; MOLECULE_NODE_PREFIX for a second suite run
# beside the first), so two lanes never touch the same container.
# Most of a scenario's time is the simulated server's waits, not CPU, so two lanes overlap well on
# two cores; a third loads the simulated servers enough to move the figures the scenarios check.
# Each scenario's seconds in a fresh-clone run on a 2-core machine; the lanes take the split whose
# longest lane is shortest (below).
declare -A scenario_weight=([sequences]=633 [pool]=567 [resume]=533 [rollout]=520 [schedule]=349 [levers]=325
                            [realpkg]=305 [tune]=295 [production]=208 [service]=198 [default]=27)
lane_run() {  # lane number, scenarios...: one lane; one result line per scenario in its file
  local lane=$1; shift
  local sc s
  for sc in "$@"; do
    s=$(date +%s)
    note "molecule $sc (lane $lane)"
    if SGLANG_NODE_NAME="${MOLECULE_NODE_PREFIX:-sglang-node-l}$lane" molecule test -s "$sc" >"$logs/molecule-$sc.log" 2>&1; then
      echo "ok $sc $(( $(date +%s) - s ))" >>"$logs/lane-$lane.results"
    else
      echo "FAILED $sc $(( $(date +%s) - s ))" >>"$logs/lane-$lane.results"
      note "FAILED: molecule $sc (lane $lane)"
    fi
  done
}
if [[ " $stages " == *" molecule "* ]]; then
  scenarios=${SCENARIOS:-$(find molecule -mindepth 2 -maxdepth 2 -name molecule.yml -printf '%h\n' | xargs -rn1 basename | sort)}
  lanes=${MOLECULE_LANES:-2}
  declare -a lane_list=()
  for ((i = 0; i < lanes; i++)); do lane_list[i]=""; done
  # The split with the shortest longest lane (every split is tried: a dozen scenarios on two or
  # three lanes is a few thousand), longest scenarios first within a lane.
  i=0
  while read -r line; do lane_list[i]=${line:+ $line}; i=$((i + 1)); done < <(
    for sc in $scenarios; do echo "$sc ${scenario_weight[$sc]:-300}"; done | python -c '
import itertools, sys
lanes = int(sys.argv[1])
items = sorted((line.split() for line in sys.stdin if line.strip()), key=lambda x: -int(x[1]))
best = None
for split in itertools.product(range(lanes), repeat=max(len(items) - 1, 0)):
    load = [0] * lanes
    for (name, w), lane in zip(items, (0,) + split):
        load[lane] += int(w)
    if best is None or max(load) < best[0]:
        best = (max(load), (0,) + split)
for lane in range(lanes):
    print(" ".join(name for (name, w), k in zip(items, best[1]) if k == lane))
' "$lanes")
  s=$(date +%s)
  pids=()
  for ((i = 0; i < lanes; i++)); do
    [[ -n ${lane_list[i]} ]] || continue
    note "lane $i:${lane_list[i]}"
    # shellcheck disable=SC2086  # the lane's scenario names are words
    lane_run "$i" ${lane_list[i]} &
    pids+=($!)
  done
  wait "${pids[@]}"
  for sc in $scenarios; do
    line=$(cat "$logs"/lane-*.results 2>/dev/null | awk -v sc="$sc" '$2 == sc' | tail -n 1)
    if [[ $line == ok* ]]; then
      passed=$((passed + 1)); report+=("molecule $sc ok (${line##* }s)")
    else
      failed=$((failed + 1)); report+=("molecule $sc FAILED"); stage_fail "molecule $sc" "$logs/molecule-$sc.log"
    fi
  done
  report+=("molecule: ${lanes} lanes, $(( $(date +%s) - s ))s wall")
fi

dt=$(( $(date +%s) - t0 ))
echo
echo "== test summary ($(printf '%dm%02ds' $((dt / 60)) $((dt % 60))), logs in build/test-logs) =="
for line in "${report[@]}"; do echo "  $line"; done
if (( failed == 0 && passed > 0 )); then verdict=PASS; else verdict=FAIL; fi
[[ ${#bad_stages[@]} -gt 0 ]] && echo "  failed stages: ${bad_stages[*]}"
# What failed, where CI shows it (the end of the output): a molecule log's tail is its destroy
# step, so its first failed task is quoted instead.
for sc in ${scenarios:-}; do
  f=$logs/molecule-$sc.log
  [[ " ${bad_stages[*]} " == *" molecule $sc "* && -f $f ]] || continue
  echo "  first failure in molecule $sc:"
  # a failure the play ignores ("...ignoring") is part of a test, not what failed it
  sed 's/\x1b\[[0-9;]*m//g' "$f" | awk '
    /TASK \[|PLAY \[|RECAP/ { if (n && !ign) { print blk; done = 1; exit } n = 0; ign = 0; blk = "" }
    /fatal: \[|FAILED! =>|\[ERROR\]/ { n = 1 }
    n { if (/\.\.\.ignoring/) ign = 1; if (n++ <= 18) blk = blk substr($0, 1, 160) "\n" }
    END { if (!done && n && !ign) printf "%s", blk }' | sed 's/^/    /'
done
echo "$verdict: $passed passed, $failed failed, $skipped skipped"
[[ $verdict == PASS ]]
