#!/usr/bin/env bash
# Steps of the real-SGLang checks on a GPU machine without systemd or registry (the lent H200),
# each one callable on its own so a lease can be planned call by call:
#
#   bash tests/gpu/real_sglang/device.sh setup            # unpack the bundle, build the models
#   bash tests/gpu/real_sglang/device.sh smoke            # one plain and one speculative start
#   bash tests/gpu/real_sglang/device.sh STEP [STEP ...]  # several in one call
#
# Needs .cache/real-sglang/site.tar.xz (bundle.sh) carried along. Every step is idempotent:
# what an earlier call of the same lease left in /tmp is reused. Results go to $OUT (or
# build/real-sglang) and are committed from there as fixtures.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# RS_ROOT: the checkout, where this script runs from a copy carried beside it (RS_BUNDLE: the
# folder of the tarballs, default .cache/real-sglang of the checkout)
root=${RS_ROOT:-$(cd "$here/../../.." && pwd)}
export RS_COLLECTION_ROOT=$root
# $OUT brings back 8 files at most: everything goes to $res, packed into $OUT at the end.
res=${RS_RESULTS:-/tmp/rs/results}
out=$res
mkdir -p "$out"
RS=${RS_DIR:-/tmp/rs}
SITE=${RS_SITE:-/tmp/site}
PORT=${RS_PORT:-30000}
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 SGLANG_DISABLE_REQUEST_LOGGING=1
# Multi-GPU kinds of the lent machine set these so no program uses NVLink multicast; keep them.
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} TORCH_SYMM_MEM_DISABLE_MULTICAST=${TORCH_SYMM_MEM_DISABLE_MULTICAST:-1} \
       NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1}
BASE_ARGS=(--model-path "${RS_MODEL:-$RS/models/target}" --host 127.0.0.1 --port "$PORT"
           --attention-backend triton --sampling-backend pytorch --grammar-backend none
           --mem-fraction-static "${RS_MEM_FRACTION:-0.5}" --cuda-graph-max-bs-decode 32
           --context-length 4096)

log() { echo "[$(date +%H:%M:%S)] $*"; }

step_setup() {
  local t t0
  for t in "${RS_BUNDLE:-$root/.cache/real-sglang}"/*.tar.xz; do
    [[ -f $SITE/.unpacked.$(basename "$t") ]] && continue
    t0=$SECONDS
    mkdir -p "$SITE" && xz -T0 -dc "$t" | tar -C "$SITE" -xf - \
      && touch "$SITE/.unpacked.$(basename "$t")" || { log "setup: $t did not unpack"; return 1; }
    log "setup: $(basename "$t") unpacked in $((SECONDS - t0)) s"
  done
  [[ -n ${RS_NO_LLAMA:-} ]] || python3 "$here/make_models.py" "$RS/models" || return 1
  python3 - <<'EOF' | tee "$out/versions.txt"
import importlib.metadata as md, platform, torch
print("python", platform.python_version(), "torch", torch.__version__, "cuda", torch.version.cuda,
      "gpu", torch.cuda.get_device_name(0))
for n in ("sglang", "sglang-kernel", "transformers", "tokenizers", "triton", "xgrammar", "fastapi", "uvicorn"):
    try: print(n, md.version(n))
    except Exception as e: print(n, "missing", e)
EOF
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv | tee -a "$out/versions.txt"
}

# start LABEL ARGS...: launch a server in its own session, log to $out/LABEL.log; waits ready.
start() {
  local label=$1; shift
  : > "$out/$label.log"
  setsid python3 -m "${RS_SERVER_MODULE:-sglang.launch_server}" "$@" >> "$out/$label.log" 2>&1 &
  echo $! > "$RS/server.pid"
  local t0=$SECONDS
  while (( SECONDS - t0 < ${RS_READY_TIMEOUT:-300} )); do
    if grep -q "The server is fired up and ready to roll" "$out/$label.log"; then
      log "$label: ready in $((SECONDS - t0)) s"; return 0
    fi
    kill -0 "$(cat "$RS/server.pid")" 2>/dev/null || { log "$label: exited before ready"; tail -n 25 "$out/$label.log"; return 1; }
    sleep 1
  done
  log "$label: not ready after $((SECONDS - t0)) s"; tail -n 25 "$out/$label.log"; return 1
}

stop() {
  local pid; pid=$(cat "$RS/server.pid" 2>/dev/null) || return 0
  kill -TERM -- "-$pid" 2>/dev/null
  for _ in $(seq 1 30); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL -- "-$pid" 2>/dev/null
  rm -f "$RS/server.pid"
}

gen() {
  curl -s --max-time 60 "http://127.0.0.1:$PORT/generate" -H 'Content-Type: application/json' \
    -d '{"text": "kalo mine suta", "sampling_params": {"max_new_tokens": 64, "temperature": 0, "ignore_eos": true}}'
}

step_smoke() {
  start nospec "${BASE_ARGS[@]}" && gen > "$out/nospec_generate.json"; stop
  start steps3 "${BASE_ARGS[@]}" --speculative-algorithm STANDALONE \
    --speculative-draft-model-path "$RS/models/target" --speculative-num-steps 3 \
    --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 \
    && gen > "$out/steps3_generate.json"; stop
  head -c 1500 "$out"/*_generate.json; echo
}

# Imports the server's processes make. A missing package is stood in for by an empty module
# (for this listing only, never for a served start) so one call names all of them, not one.
step_imports() {
  python3 - <<'EOF'
import importlib, importlib.abc, importlib.machinery, sys, types
missing = {}
class Stub(types.ModuleType):
    __path__ = []
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {"__init__": lambda s, *a, **k: None, "__call__": lambda s, *a, **k: None})
class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        for f in sys.meta_path:
            if f is self: continue
            try:
                if f.find_spec(name, path, target): return None
            except Exception: pass
        missing.setdefault(name.split(".")[0], name)
        return importlib.machinery.ModuleSpec(name, self)
    def create_module(self, spec): return Stub(spec.name)
    def exec_module(self, module): pass
sys.meta_path.append(Finder())
for m in ("sglang.launch_server", "sglang.srt.entrypoints.http_server", "sglang.srt.managers.scheduler",
          "sglang.srt.managers.tokenizer_manager", "sglang.srt.managers.detokenizer_manager",
          "sglang.srt.model_executor.model_runner", "sglang.srt.models.llama",
          "sglang.srt.layers.attention.triton_backend", "sglang.srt.speculative.standalone_worker_v2",
          "sglang.srt.entrypoints.openai.serving_chat", "sglang.benchmark.serving"):
    try:
        importlib.import_module(m); print("ok", m)
    except Exception as e:
        print("FAIL", m, type(e).__name__, str(e)[:200])
print("MISSING", sorted(missing.values()))
open("/tmp/rs/results/imports.txt", "w").write(repr(sorted(missing.values())))
EOF
}

SPEC_SELF=(--speculative-algorithm STANDALONE --speculative-draft-model-path "$RS/models/target"
           --speculative-eagle-topk 1)

# The collection's client beside bench_serving, on a self-draft server at 3 steps.
step_bench() {
  start bench_steps3 "${BASE_ARGS[@]}" "${SPEC_SELF[@]}" --speculative-num-steps 3 \
    --speculative-num-draft-tokens 4 || { stop; return 1; }
  # RS_BENCH_SETS="generate:32 chat:1,8": several (endpoint, levels) sets on one started server
  local set
  for set in ${RS_BENCH_SETS:-generate,chat:${RS_LEVELS:-1,8,32}}; do
    python3 "$here/bench_compare.py" --url "http://127.0.0.1:$PORT" --tokenizer "$RS/models/target" \
      --model "$RS/models/target" --endpoints "${set%%:*}" --levels "${set#*:}" --out "$res/bench" \
      --label "steps3_${set//[:,]/_}" ${RS_BENCH_OPTS:-}
  done
  stop
}

# Whether the usage object the collection asks for in every chat chunk slows the server it
# measures: one started server, the collection's runs with it and without it (--no-chunk-usage)
# alternated, RS_CU_ROUNDS pairs, each run bracketing one of bench_serving's on the same prompts.
step_chunkusage() {
  start chunkusage_steps3 "${BASE_ARGS[@]}" "${SPEC_SELF[@]}" --speculative-num-steps 3 \
    --speculative-num-draft-tokens 4 || { stop; return 1; }
  local i mode
  for i in $(seq 1 "${RS_CU_ROUNDS:-2}"); do
    for mode in "" --no-chunk-usage; do
      python3 "$here/bench_compare.py" --url "http://127.0.0.1:$PORT" --tokenizer "$RS/models/target" \
        --model "$RS/models/target" --endpoints chat --levels "${RS_CU_LEVELS:-1}" --out "$res/bench" \
        --label "chunkusage_r${i}" $mode ${RS_BENCH_OPTS:-}
    done
  done
  stop
}

# Start failures provoked for real; each log is a classifier fixture.
step_failures() {
  RS_READY_TIMEOUT=120 start fail_mem_high "${BASE_ARGS[@]/0.5/0.999}"; stop
  local args=("${BASE_ARGS[@]}")
  RS_READY_TIMEOUT=120 start fail_mem_low "${args[@]}" --mem-fraction-static 0.0005; stop
  RS_READY_TIMEOUT=120 start fail_context "${args[@]}" --context-length 1000000; stop
  RS_READY_TIMEOUT=120 start fail_model_missing "${args[@]}" --model-path "$RS/models/nope"; stop
  RS_READY_TIMEOUT=120 start fail_unknown_flag "${args[@]}" --no-such-flag 1; stop
  python3 -c "import socket,time; s=socket.socket(); s.bind(('127.0.0.1', $PORT)); s.listen(); time.sleep(200)" &
  local holder=$!
  sleep 1; RS_READY_TIMEOUT=120 start fail_port_in_use "${args[@]}"; stop
  kill "$holder" 2>/dev/null
  RS_READY_TIMEOUT=120 start fail_spec_mismatch "${args[@]}" --speculative-algorithm STANDALONE \
    --speculative-draft-model-path "$RS/models/target" --speculative-num-steps 3 \
    --speculative-eagle-topk 1 --speculative-num-draft-tokens 2; stop
  for f in "$res"/fail_*.log; do echo "--- $(basename "$f")"; grep -E "Error|error|Exception|memory|usage:" "$f" | tail -n 4; done
}

# A port held by another process when the server starts.
step_failport() {
  python3 -c "import socket,time; s=socket.socket(); s.bind(('127.0.0.1', $PORT)); s.listen(); time.sleep(300)" &
  local holder=$!
  sleep 1; RS_READY_TIMEOUT=150 start fail_port_in_use "${BASE_ARGS[@]}"; stop
  kill "$holder" 2>/dev/null
  grep -E "Errno|address|port" "$res/fail_port_in_use.log" | tail -n 3
}

# The collection's search over steps 1..8 with the self-draft, restarting the real server per
# candidate (tune_real.py); stopped by TERM after RS_TUNE_SECONDS, resumable from its JSON.
step_tune() {
  local strategy=${RS_TUNE_STRATEGY:-adaptive}
  timeout -s TERM "${RS_TUNE_SECONDS:-300}" python3 "$here/tune_real.py" \
    --server-args "--model-path $RS/models/target --attention-backend triton --sampling-backend pytorch --grammar-backend none --mem-fraction-static ${RS_MEM_FRACTION:-0.5} --cuda-graph-max-bs-decode 32 --context-length 4096" \
    --algorithm STANDALONE --draft "$RS/models/target" --strategy "$strategy" --steps "${RS_STEPS:-1-8}" \
    --levels 1 --bench-prompt-format text --bench-input-len 256 --bench-output-len 128 \
    --bench-requests 8 --ready-timeout 240 --python python3 --port "$PORT" \
    --relaunch-noise "${RS_NOISE:-0}" --out "$res/tune_$strategy.json" --log-dir "$res/logs_$strategy" \
    $([[ -f $res/tune_$strategy.json ]] && echo --resume "$res/tune_$strategy.json")
}

# The collection's search on the trimmed hybrid (step_hybrid's server, NEXTN with its own MTP
# head), the accept length pinned per candidate at RS_ACC_P as step_hybrid pins it: the role's
# defaults (strategy climb, objective latency) over RS_STEPS, judged at RS_TUNE_LEVELS. Stopped
# by TERM after RS_TUNE_SECONDS and resumed from its JSON by the next call.
step_tunehyb() {
  local trim=${RS_TRIM:-experts32} model strategy=${RS_TUNE_STRATEGY:-climb} name
  model=$(hybrid_model "$trim") || return 1
  name=tunehyb_${trim}_${strategy}_p${RS_ACC_P:-0.8}
  timeout -s TERM "${RS_TUNE_SECONDS:-540}" python3 "$here/tune_real.py" \
    --server-args "--model-path $model --load-format dummy --attention-backend triton --sampling-backend pytorch --grammar-backend none --mem-fraction-static ${RS_MEM_FRACTION:-0.88} --context-length 4096 --cuda-graph-max-bs-decode 32 ${RS_HYB_ARGS:-}" \
    --server-module "${RS_SERVER_MODULE:-sglang.launch_server}" --algorithm NEXTN --draft '' --accept-p "${RS_ACC_P:-0.8}" --strategy "$strategy" \
    --steps "${RS_STEPS:-1-10}" --levels "${RS_TUNE_LEVELS:-1}" --bench-prompt-format text \
    --bench-input-len 256 --bench-output-len "${RS_TUNE_OUTPUT_LEN:-96}" --bench-requests "${RS_TUNE_REQUESTS:-8}" \
    --ready-timeout "${RS_HYB_READY_S:-260}" --python python3 --port "$PORT" \
    --relaunch-noise "${RS_NOISE:-0}" --out "$res/$name.json" --log-dir "$res/logs_$name" \
    $([[ -f $res/$name.json ]] && echo --resume "$res/$name.json")
  local rc=$?
  [[ -z ${OUT:-} ]] || pack
  return $rc
}

# What a crashed SGLang leaves on the GPU, and the unit guard's clean start ending it: start a
# plain server, SIGKILL its parent only (what an OOM kill or `kill -9` of the main pid does), record
# which of its processes survive and what the driver still lists, then run the guard the unit runs
# before every start (roles/service/files/sglang_unit_guard.py, no systemd needed) and time it.
# Safety: the guard ends only processes titled sglang:: of this user outside any other unit; on
# the lent machine those are this step's own. The step checks that before running it.
# Rehearsal on the simulator (no GPU): PYTHONPATH=sim RS_SERVER_MODULE=sglang_sim.launch_server
# RS_MODEL=Qwen/Qwen3-8B SGLANG_SIM_PROFILE=h200-x1 SGLANG_SIM_ORPHANS=1 SGLANG_SIM_STATE_DIR=D/state
# SGLANG_SIM_DEV_DIR=D/dev RS_GUARD_ARGS="--dev-dir D/dev --nvidia-smi <sim nvidia-smi wrapper>"
step_reset() {
  start reset_nospec "${BASE_ARGS[@]}" || { stop; return 1; }
  local parent pids t0 t1
  parent=$(cat "$RS/server.pid")
  pids=$(ps -o pid= -s "$parent" | tr -d ' ' | sort -n | tr '\n' ' ')
  ps -o pid=,ppid=,args= -s "$parent" > "$res/reset_1_running.txt"
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv > "$res/reset_1_gpu.csv" 2>&1
  kill -KILL "$parent"; rm -f "$RS/server.pid"
  sleep "${RS_RESET_SETTLE:-5}"
  ps -o pid=,ppid=,args= -s "$parent" > "$res/reset_2_after_kill.txt"
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv > "$res/reset_2_gpu.csv" 2>&1
  local foreign
  foreign=$(ps -eo pid=,sid=,args= | awk -v s="$parent" '$3 ~ /^sglang::/ && $2 != s {print $1}')
  if [[ -n $foreign ]]; then log "reset: sglang:: processes not ours ($foreign): guard not run"; return 1; fi
  t0=$(date +%s.%N)
  python3 "$root/roles/service/files/sglang_unit_guard.py" clean-start --unit sglang-rs.service \
    --state-dir "$RS/guard" --grace 3 --wait 60 ${RS_GUARD_ARGS:-} > "$res/reset_3_guard.txt" 2>&1
  local rc=$?
  t1=$(date +%s.%N)
  # zombies (ended, not yet reaped by whoever adopted them) hold nothing: not counted
  ps -o pid=,ppid=,stat=,args= -s "$parent" | awk '$3 !~ /^Z/' > "$res/reset_4_left.txt"
  nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv > "$res/reset_4_gpu.csv" 2>&1
  python3 "$root/roles/service/files/sglang_unit_guard.py" clean-start --unit sglang-rs.service \
    --state-dir "$RS/guard" --grace 3 --wait 60 ${RS_GUARD_ARGS:-} > "$res/reset_5_guard_again.txt" 2>&1
  log "reset: server pids [$pids], after SIGKILL of $parent: $(wc -l < "$res/reset_2_after_kill.txt") left;" \
      "guard rc $rc in $(python3 -c "print(round($t1 - $t0, 2))") s; left after it: $(wc -l < "$res/reset_4_left.txt")"
  cat "$res/reset_3_guard.txt" "$res/reset_5_guard_again.txt"
}

# The trimmed hybrid MoE (make_hybrid.py, random weights from --load-format dummy), plain and
# with its own MTP head (NEXTN, no draft path), one start per entry of RS_HYB_DEPTHS:
#   K       depth K (0: no speculation), draft tokens K + 1, topk 1
#   KrN     the same, launch N (a relaunch: its own label)
#   K@F     the same with --mem-fraction-static F (the failure boundary)
# The accept length is pinned per depth by SGLang's own knob (speculative/spec_utils.py
# generate_simulated_accept_index, method match-expected: each round accepts floor or ceil of
# the target, the real draft and verify kernels still run) to (1 - p^(K+1)) / (1 - p), p =
# RS_ACC_P (a draft accepted with probability p per position). Per start: the memory lines of its
# log and nvidia-smi's used memory (mem_LABEL.txt), then hybrid_bench.py at RS_HYB_LEVELS.
# An entry is not started when fewer than RS_HYB_NEED_S seconds remain before RS_DEADLINE_S
# (seconds since this script began), so a call ends inside its limit with what it measured.
MEM_LINES="Init torch distributed ends|Load weight (begin|end)|KV Cache is allocated|Mamba Cache is allocated"
MEM_LINES+="|Memory pool end|Capture .* end|max_total_num_tokens=|capped to|is reset to|mamba"
acc_len() { python3 -c "p = ${RS_ACC_P:-0.8}; k = $1; print(round((1 - p ** (k + 1)) / (1 - p), 4))"; }

hybrid_model() {
  local trim=$1 model=$RS/models/hyb_$1
  python3 "$here/make_hybrid.py" "$model" --trim "$trim" ${RS_TRIM_ARGS:-} \
    --tokenizer "${RS_TOKENIZER:-$RS/models/tokenizer}" >&2 || return 1
  cp "$model/config.json" "$res/config_$trim.json"
  echo "$model"
}

step_hybrid() {
  local trim=${RS_TRIM:-experts32} model k
  model=$(hybrid_model "$trim") || return 1
  local entry lo hi n mid i
  for entry in ${RS_HYB_DEPTHS-0 1 2 3 4 5 6 8 10 12}; do
    hybrid_entry "$trim" "$model" "$entry"
    # a benchmarked entry that does not start says the others will not either: end the call
    [[ $? == 2 ]] && { log "hybrid: $entry did not start; the rest not tried"; return 1; }
  done
  # RS_HYB_BISECT="K LO HI N": N starts at depth K, halving [LO, HI] of --mem-fraction-static
  # around the boundary where the start fails (LO assumed to fail, HI to start)
  if [[ -n ${RS_HYB_BISECT:-} ]]; then
    read -r k lo hi n <<< "$RS_HYB_BISECT"
    for i in $(seq 1 "$n"); do
      mid=$(python3 -c "print(round(($lo + $hi) / 2, 3))")
      hybrid_entry "$trim" "$model" "$k@$mid" || break
      if grep -q "^ready=1" "$res/mem_hyb_${trim}_s${k}_f$mid.txt"; then hi=$mid; else lo=$mid; fi
      log "bisect: depth $k fails at $lo, starts at $hi"
    done
  fi
}

# One entry (see step_hybrid); returns 1 when no time is left for it.
hybrid_entry() {
  local trim=$1 model=$2 entry=$3 k rest tag frac label acc
  if (( SECONDS + ${RS_HYB_NEED_S:-100} > ${RS_DEADLINE_S:-540} )); then log "hybrid: no time left for $entry"; return 1; fi
  k=${entry%%[r@]*}; rest=${entry#"$k"}; frac=${RS_MEM_FRACTION:-0.88}; tag=
  [[ $rest == *@* ]] && frac=${rest#*@} && tag=f$frac
  [[ $rest == r* ]] && tag=${rest%%@*}
  label=hyb_${trim}_s$k${tag:+_$tag}
  local args=(--model-path "$model" --load-format dummy --host 127.0.0.1 --port "$PORT"
              --attention-backend triton --sampling-backend pytorch --grammar-backend none
              --mem-fraction-static "$frac" --context-length 4096 --cuda-graph-max-bs-decode 32 ${RS_HYB_ARGS:-})
  acc=
  if (( k > 0 )); then
    acc=$(acc_len "$k")
    args+=(--speculative-algorithm NEXTN --speculative-num-steps "$k" --speculative-eagle-topk 1
           --speculative-num-draft-tokens $((k + 1)))
  fi
  echo "entry=$entry depth=$k accept_pinned=${acc:-none} mem_fraction=$frac trim=$trim args=${args[*]}" > "$res/mem_$label.txt"
  local ok=0
  SGLANG_SIMULATE_ACC_LEN=${acc:--1} SGLANG_SIMULATE_ACC_METHOD=match-expected \
    RS_READY_TIMEOUT=${RS_HYB_READY_S:-200} start "$label" "${args[@]}" && ok=1
  echo "ready=$ok" >> "$res/mem_$label.txt"
  (( ok )) && nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader >> "$res/mem_$label.txt"
  grep -E "$MEM_LINES" "$res/$label.log" | grep -v "server_args=" | cut -c1-600 >> "$res/mem_$label.txt"
  # a boundary entry (K@F) only starts; the others are benchmarked
  if (( ok )) && [[ $tag != f* ]]; then
    timeout -s TERM "${RS_HYB_BENCH_S:-150}" python3 "$here/hybrid_bench.py" --url "http://127.0.0.1:$PORT" \
      --levels "${RS_HYB_LEVELS:-1,4,16,32}" --out "$res/bench_$label.json" --label "$label" ${RS_HYB_BENCH_OPTS:-}
    # RS_HYB_COMPARE="generate,chat:1 chat:1+nocu generate,chat:8,32": bench truth
    # (bench_compare.py) on this same server, one run per set in that order (a set ending in
    # +nocu: the collection's requests without per-chunk usage); at the entries named in
    # RS_HYB_COMPARE_AT (default: every benchmarked entry)
    local set cu
    if [[ -z ${RS_HYB_COMPARE_AT:-} || " $RS_HYB_COMPARE_AT " == *" $entry "* ]]; then
      for set in ${RS_HYB_COMPARE:-}; do
        cu=; [[ $set == *+nocu ]] && cu=--no-chunk-usage && set=${set%+nocu}
        timeout -s TERM "${RS_HYB_COMPARE_S:-240}" python3 "$here/bench_compare.py" --url "http://127.0.0.1:$PORT" \
          --tokenizer "$model" --model "$model" --endpoints "${set%%:*}" --levels "${set#*:}" \
          --out "$res/compare_$label" --label "${label}_${set//[:,]/_}" $cu ${RS_HYB_COMPARE_OPTS:-}
      done
    fi
  fi
  stop
  [[ -n ${OUT:-} ]] && pack
  # the next start must not be measured beside a dying one
  for _ in $(seq 1 20); do
    [[ $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | wc -l) == 0 ]] && break; sleep 0.5
  done
  (( ok )) || [[ $tag == f* ]] || return 2
}

# One tarball, rewritten whole (atomically) after every hybrid entry and at the end: a call cut
# by its time limit still brings back what it measured.
pack() {
  tar -C "$res" -czf "$OUT/.results.tgz.part" . 2>/dev/null && mv "$OUT/.results.tgz.part" "$OUT/results.tgz" \
    && ls -la "$OUT/results.tgz"
}

trap 'stop; [[ -n ${OUT:-} ]] && pack' EXIT
for s in "$@"; do
  log "== $s"
  "step_$s" || log "step $s failed (rc $?)"
done
