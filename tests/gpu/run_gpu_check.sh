#!/usr/bin/env bash
# Real-GPU check of gpu_info and gpu_reset (gpu_free): see tests/gpu/README.md.
#
# Starts its own GPU holders (a process named like an SGLang scheduler rank, plus an orphaned
# CUDA child that ignores SIGTERM), runs tests/gpu/gpu_check.yml through ansible-core with a
# local connection, and writes figures (TERM -> memory freed) and the raw driver outputs.
# Only the pids it started are ever signalled: the playbook passes them as only_pids, and the
# device holders seen before the start (plus the sampler) as exclude_pids. No bare fuser -k.
#
# Exit: 0 passed, or "SKIP: <why>" on stdout when there is no usable GPU; 1 a check failed;
# 2 the set-up is incomplete on a GPU node (no ansible-core, no torch).
#
# Environment (all optional):
#   GPU_CHECK_VIA             role | module | both | auto (default auto: the role when
#                             roles/gpu_reset has tasks, else the module)
#   GPU_CHECK_PYTHON          python that has torch with CUDA (default python3)
#   GPU_CHECK_ANSIBLE_PYTHON  python that has ansible-core >= 2.16 (default: GPU_CHECK_PYTHON)
#   GPU_CHECK_WHEELS          folder of ansible-core wheels installed into a temp dir when the
#                             ansible python lacks ansible (default .cache/gpu-wheels)
#   GPU_CHECK_GIB / GPU_CHECK_ORPHAN_GIB   memory the holders take (default 20 / 2 GiB)
#   GPU_CHECK_GRACE           gpu_free grace_period, TERM -> KILL (default 3 s)
#   GPU_CHECK_TOLERANCE_MIB   slack over the idle figure (default 64)
#   GPU_CHECK_DEVICES         glob of the device files (default /dev/nvidia*; another only for
#                             rehearsals against a stand-in nvidia-smi)
#   GPU_CHECK_RESULTS         where results go (default build/gpu-check/<UTC time>); with $OUT
#                             set, a copy goes there too (figures.json, log, tarball)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
tpy=${GPU_CHECK_PYTHON:-python3}
apy=${GPU_CHECK_ANSIBLE_PYTHON:-$tpy}
via=${GPU_CHECK_VIA:-auto}
gib=${GPU_CHECK_GIB:-20}
ogib=${GPU_CHECK_ORPHAN_GIB:-2}
grace=${GPU_CHECK_GRACE:-3}
tol=${GPU_CHECK_TOLERANCE_MIB:-64}
wheels=${GPU_CHECK_WHEELS:-$root/.cache/gpu-wheels}
dev_glob=${GPU_CHECK_DEVICES:-/dev/nvidia*}
export LC_ALL=C.UTF-8 LANG=C.UTF-8 PYTHONUNBUFFERED=1

say() { printf '[gpu-check %s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
skip() { echo "SKIP: $*"; exit 0; }
setup_error() { echo "ERROR: $*" >&2; exit 2; }

# --- is there a GPU at all? (no: skip, so CI without one stays green) --------------------
command -v nvidia-smi >/dev/null 2>&1 || skip "nvidia-smi not found (no NVIDIA driver on this machine)"
if ! gpu_list=$(nvidia-smi -L 2>&1) || ! grep -q '^GPU [0-9]' <<<"$gpu_list"; then
  skip "nvidia-smi lists no GPU: $(head -n1 <<<"$gpu_list")"
fi
case $via in role|module|both|auto) ;; *) setup_error "GPU_CHECK_VIA must be role, module, both or auto, not '$via'";; esac
if [[ $via == auto ]]; then
  if [[ -f $root/roles/gpu_reset/tasks/main.yml ]]; then via=role; else via=module; fi
fi

"$tpy" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null \
  || setup_error "$tpy has no torch that sees a CUDA GPU; set GPU_CHECK_PYTHON to one that does"

work=$(mktemp -d /tmp/gpu-check.XXXXXX)
results=${GPU_CHECK_RESULTS:-$root/build/gpu-check/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$results"
exec > >(tee -a "$results/run.log") 2>&1

# --- ansible-core: installed, or from carried wheels -------------------------------------
if ! "$apy" -c 'import ansible.release' 2>/dev/null; then
  compgen -G "$wheels/*.whl" >/dev/null || setup_error "$apy has no ansible-core and $wheels holds no wheels (README.md says how to get them)"
  say "installing ansible-core from $wheels into $work/site"
  "$apy" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$work/site" "$wheels"/*.whl \
    || setup_error "pip could not install the wheels in $wheels"
  export PYTHONPATH=$work/site${PYTHONPATH:+:$PYTHONPATH}
fi
ansible_version=$("$apy" -c 'import ansible.release as r; print(r.__version__)') || setup_error "ansible-core not importable by $apy"
mkdir -p "$work/collections/ansible_collections/blackwell"
ln -s "$root" "$work/collections/ansible_collections/blackwell/sglang"
export ANSIBLE_COLLECTIONS_PATH=$work/collections ANSIBLE_HOME=$work/ansible ANSIBLE_LOCAL_TEMP=$work/ansible/tmp \
  ANSIBLE_NOCOLOR=1 ANSIBLE_RETRY_FILES_ENABLED=0 ANSIBLE_LOCALHOST_WARNING=0 ANSIBLE_INVENTORY_UNPARSED_WARNING=0 \
  ANSIBLE_CALLBACK_RESULT_FORMAT=yaml ANSIBLE_FORCE_COLOR=0
fuser_bin=$(PATH=$PATH:/usr/sbin:/sbin command -v fuser || true)
say "GPU: $(head -n1 <<<"$gpu_list"); torch python: $tpy; ansible-core $ansible_version ($apy); fuser: ${fuser_bin:-absent (modules read /proc)}; via: $via"

# Pids this run started; the only ones the cleanup may signal (and only while their command
# line is still ours, so a recycled pid is left alone).
started=()
ours() { [[ -r /proc/$1/cmdline ]] && tr '\0' ' ' </proc/"$1"/cmdline | grep -q "$here/gpu_holders.py"; }
cleanup() {
  local pid
  for pid in "${started[@]}"; do
    if ours "$pid"; then kill -KILL "$pid" 2>/dev/null && say "cleanup: killed leftover test pid $pid"; fi
  done
  rm -rf "$work"
}
trap cleanup EXIT

capture() {  # capture <dir> <tag>: the driver's view, in the formats of tests/fixtures/nvidia-h200
  local d=$1 t=$2 f devs=()
  for f in $dev_glob; do [[ -d $f ]] || devs+=("$f"); done
  nvidia-smi >"$d/nvidia-smi-$t.txt" 2>&1
  nvidia-smi --query-gpu=index,uuid,name,memory.used,memory.total,compute_cap,driver_version \
    --format=csv,noheader,nounits >"$d/query-gpu-$t.csv" 2>&1
  nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv,noheader,nounits \
    >"$d/compute-apps-$t.csv" 2>&1
  {
    ls -l $dev_glob 2>&1
    echo ---
    if [[ -n $fuser_bin ]]; then
      "$fuser_bin" -v "${devs[@]}" 2>&1; echo "rc=$?"; echo ---
      "$fuser_bin" "${devs[@]}" 2>&1; echo "rc=$?"
    else
      echo "fuser not installed"
    fi
  } >"$d/fuser-$t.txt"
}

phase() {  # phase <role|module>: one full round with fresh holders; returns 0 when it passed
  local v=$1 d=$results/$1 state=$work/state-$1
  mkdir -p "$d" "$state"
  say "[$v] idle figures"
  capture "$d" idle
  # Device holders already there (other users, agents) are never ours: spare them explicitly.
  local foreign
  foreign=$(PYTHONPATH=$work/collections${PYTHONPATH:+:$PYTHONPATH} "$apy" - "$fuser_bin" "$dev_glob" <<'PY'
import glob, json, os, subprocess, sys
from ansible_collections.blackwell.sglang.plugins.module_utils import procs
files = [f for f in sorted(glob.glob(sys.argv[2])) if not os.path.isdir(f)]
if sys.argv[1]:
    out = subprocess.run(procs.fuser_argv(sys.argv[1], files), stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout.decode()
    holders = procs.parse_fuser(out, files)
else:
    holders = procs.holders_from_proc(files)
for h in holders:  # who they are, read now: a transient holder is gone by the time bash looks
    proc = procs.read_process(h["pid"]) or {}
    sys.stderr.write("  holder before the test: pid %s ppid %s (%s)%s\n" % (
        h["pid"], proc.get("ppid"), proc.get("cmdline") or h.get("command"), " = this lister" if h["pid"] == os.getpid() else ""))
print(json.dumps(sorted(h["pid"] for h in holders if h["pid"] != os.getpid())))
PY
  ) || { say "[$v] could not list the device holders"; return 1; }
  local idle_max
  idle_max=$(awk -F', ' '{ if ($4 + 0 > m) m = $4 + 0 } END { print m + 0 }' "$d/query-gpu-idle.csv")
  local free0
  free0=$(awk -F', ' 'NR == 1 { print $5 - $4 }' "$d/query-gpu-idle.csv")
  if (( free0 < (gib + ogib + 2) * 1024 )); then
    say "[$v] GPU 0 has only $free0 MiB free; lower GPU_CHECK_GIB"; return 1
  fi
  say "[$v] idle: max $idle_max MiB used per GPU; holders already there: $foreign"

  # The memory timeline (NVML, in one process whose pid is spared).
  "$tpy" "$here/gpu_holders.py" sample --out "$d/timeline.jsonl" --max-seconds 400 >"$d/sampler.log" 2>&1 &
  local sampler=$!; started+=("$sampler")
  "$tpy" "$here/gpu_holders.py" hold --title sglang::scheduler_TP0 --gib "$gib" --orphan-gib "$ogib" \
    --orphan-ignore-term --state "$state" --max-seconds 400 >"$d/holders.log" 2>&1 &
  local main=$!; started+=("$main")
  local waited=0 orphan=
  while (( waited < 240 )); do
    orphan=$(grep -l '"role": "orphan"' "$state"/ready-*.json 2>/dev/null | head -n1 | sed 's/.*ready-\([0-9]*\)\.json/\1/')
    [[ -n $orphan && -f $state/ready-$main.json ]] && break
    kill -0 "$main" 2>/dev/null || { say "[$v] holder $main died:"; cat "$d/holders.log"; return 1; }
    sleep 0.5; waited=$((waited + 1))
  done
  [[ -n $orphan ]] && started+=("$orphan")
  [[ -n $orphan && -f $state/ready-$main.json ]] || { say "[$v] holders not ready after 120 s"; cat "$d/holders.log"; return 1; }
  [[ -f $d/timeline.jsonl.ready ]] || { say "[$v] sampler not running (no NVML?): no timeline"; cat "$d/sampler.log"; }
  say "[$v] holders: main $main ($(cat /proc/"$main"/comm)), orphan $orphan ($(cat /proc/"$orphan"/comm), parent $(awk '{ print $4 }' /proc/"$orphan"/stat))"
  capture "$d" busy
  {
    for pid in "$main" "$orphan"; do
      echo "== $pid comm=$(cat /proc/"$pid"/comm) cmdline=$(tr '\0' ' ' </proc/"$pid"/cmdline)"
      awk '{ print "stat: pid=" $1 " state=" $3 " ppid=" $4 }' /proc/"$pid"/stat
      ls -l /proc/"$pid"/fd 2>/dev/null | grep nvidia
      grep nvidia /proc/"$pid"/maps | awk '{ print $6 }' | sort | uniq -c
    done
    ps -eo pid,ppid,stat,comm,args 2>&1 | head -n 60
  } >"$d/procs-busy.txt"

  local exclude
  exclude=$("$apy" -c 'import json, sys; print(json.dumps(sorted(set(json.loads(sys.argv[1]) + [int(sys.argv[2])]))))' "$foreign" "$sampler")
  cat >"$d/vars.json" <<EOF
{"gpu_check_main_pid": $main, "gpu_check_orphan_pid": $orphan,
 "gpu_check_min_mib": $("$apy" -c "print(int(min($gib, $ogib) * 1024))"),
 "gpu_check_exclude_pids": $exclude, "gpu_check_idle_mib": $((idle_max + tol)),
 "gpu_check_via": "$v", "gpu_check_grace": $grace, "gpu_check_timeout": 60,
 "gpu_check_results": "$d/playbook-results.json", "gpu_check_devices": ["$dev_glob"],
 "ansible_python_interpreter": "$(command -v "$apy")"}
EOF
  say "[$v] ansible-playbook gpu_check.yml (only_pids [$main, $orphan], exclude_pids $exclude)"
  # Without a running systemd the role's first step (systemctl show) cannot work; a stand-in
  # answers "no such unit", as a systemd host without the SGLang unit would (README.md).
  local path=$PATH shim=false
  if [[ $v == role && ! -d /run/systemd/system ]]; then
    path=$here/shim:$PATH; shim=true
    say "[$v] systemd is not running here: the role sees tests/gpu/shim/systemctl (unit not-found)"
  fi
  local t0 rc
  t0=$(date +%s.%N)
  PATH=$path GPU_CHECK_SHIM_LOG=$d/systemctl-shim.log \
    "$apy" -m ansible playbook -i localhost, -c local "$here/gpu_check.yml" -e @"$d/vars.json" >"$d/playbook.log" 2>&1
  rc=$?
  cat "$d/playbook.log"
  say "[$v] playbook rc=$rc in $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
  sleep 0.5  # a last timeline sample after the end
  kill -TERM "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
  capture "$d" after
  local alive=()
  for pid in "$main" "$orphan"; do
    if [[ -r /proc/$pid/stat ]] && [[ $(awk '{ print $3 }' /proc/"$pid"/stat) != Z ]]; then alive+=("$pid"); fi
  done
  (( ${#alive[@]} == 0 )) || { say "[$v] FAIL: test pids still alive: ${alive[*]}"; rc=1; }
  cp "$state"/*.json "$d/" 2>/dev/null
  "$apy" "$here/gpu_figures.py" --dir "$d" --main "$main" --orphan "$orphan" --idle-mib "$idle_max" \
    --tolerance-mib "$tol" --grace "$grace" --playbook-rc "$rc" --ansible "$ansible_version" --systemctl-shim "$shim" \
    --fixtures "$root/tests/fixtures/nvidia-h200" >"$d/figures.json" || rc=1
  cat "$d/figures.json"
  return $(( rc == 0 ? 0 : 1 ))
}

status=0
declare -A outcome=()
case $via in
  both) phases=(role module);;
  *) phases=("$via");;
esac
for v in "${phases[@]}"; do
  if phase "$v"; then outcome[$v]=passed; else outcome[$v]=FAILED; status=1; fi
done
"$apy" - "$results" "${phases[@]}" >"$results/figures.json" <<'PY'
import json, os, sys
res, phases = sys.argv[1], sys.argv[2:]
out = {}
for v in phases:
    try:
        with open(os.path.join(res, v, "figures.json")) as f:
            out[v] = json.load(f)
    except (OSError, ValueError) as exc:
        out[v] = {"error": "no figures: %s" % exc}
print(json.dumps(out, indent=2))
PY
for v in "${phases[@]}"; do say "result [$v]: ${outcome[$v]}"; done
say "results in $results"
if [[ -n ${OUT:-} && -d ${OUT:-} ]]; then
  cp "$results/figures.json" "$OUT/figures.json"
  tar -C "$(dirname "$results")" -czf "$OUT/gpu-check.tar.gz" "$(basename "$results")"
fi
if (( status == 0 )); then echo "PASS: gpu_info and gpu_reset (${phases[*]}) on the real driver"; else echo "FAIL: see $results"; fi
exit $status
