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

run_check() {  # name, log, command...: a stage that is one check
  local name=$1 log=$2; shift 2
  note "$name"
  local s; s=$(date +%s)
  if "$@" >"$log" 2>&1; then passed=$((passed + 1)); report+=("$name ok ($(( $(date +%s) - s ))s)")
  else failed=$((failed + 1)); report+=("$name FAILED"); stage_fail "$name" "$log"; fi
}

[[ " $stages " == *" lint "* ]] && run_check "ansible-lint" "$logs/ansible-lint.log" ansible-lint --offline
[[ " $stages " == *" sanity "* ]] && run_check "ansible-test sanity" "$logs/sanity.log" bash tools/sanity.sh

# --- molecule ---------------------------------------------------------------------------
if [[ " $stages " == *" molecule "* ]]; then
  scenarios=${SCENARIOS:-$(find molecule -mindepth 2 -maxdepth 2 -name molecule.yml -printf '%h\n' | xargs -rn1 basename | sort)}
  for sc in $scenarios; do
    run_check "molecule $sc" "$logs/molecule-$sc.log" molecule test -s "$sc"
  done
fi

dt=$(( $(date +%s) - t0 ))
echo
echo "== test summary ($(printf '%dm%02ds' $((dt / 60)) $((dt % 60))), logs in build/test-logs) =="
for line in "${report[@]}"; do echo "  $line"; done
if (( failed == 0 && passed > 0 )); then verdict=PASS; else verdict=FAIL; fi
[[ ${#bad_stages[@]} -gt 0 ]] && echo "  failed stages: ${bad_stages[*]}"
echo "$verdict: $passed passed, $failed failed, $skipped skipped"
[[ $verdict == PASS ]]
