# Sourced by the window scripts: paths, environment and the set-up every GPU window starts with.
# BUNDLE (/root/b): the pieces bundle.sh made; RESULTS (/root/results): everything the window makes,
# never the transfer folder ($OUT), which every call empties.
B=${BUNDLE:-/root/b}
R=${RESULTS:-/root/results}
PY=${PYTHON:-python3}
MODEL=${MODEL:-qwen2.5-0.5b}
WORK=${WORK:-/root/work}
mkdir -p "$R"
export COURSE_SHARED=${COURSE_SHARED:-$B/shared} COURSE_CACHE=${COURSE_CACHE:-/root/cache}
export COURSE_DATA=${COURSE_DATA:-/root/data} COURSE_RUNS=${COURSE_RUNS:-/root/runs}
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/root/inductor}
# the first micro-batch of each run whose gradient was not finite, with its adapter (about 17 MB each:
# outside $R so the packed archive stays small; a later call fetches them in parts)
export COURSE_ENGINE_NON_FINITE_DIR=${COURSE_ENGINE_NON_FINITE_DIR-/root/non_finite}
# several processes share the GPU: freed blocks of one size can serve another (less fragmentation)
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
log() { echo "$(date -u +%T) $*" | tee -a "$R/window.log"; }

check_pieces() {  # every GGUF piece bundle.sh listed is in $B, whole; else the missing ones and their folders
  [ -f "$B/pieces.sha256" ] || return 0
  [ -f "$B/q.gguf" ] && return 0  # joined and checked by an earlier script on this machine
  local missing
  # sha256sum names each absent or changed piece: "q.03: FAILED open or read", "q.04: FAILED"
  missing=$(cd "$B" && sha256sum -c --quiet pieces.sha256 2>/dev/null | sed -n 's/^\(q\.[0-9]*\): .*/\1/p')
  [ -z "$missing" ] && return 0
  # piece q.NN travels in .device/c(NN+1)
  echo "$(date -u +%T) pieces missing or damaged: $(echo $missing) (copy again:$(for q in $missing; do
    printf ' .device/c%02d' $((10#${q#q.} + 1)); done))" | tee -a "$R/window.log"
  return 1
}

setup_model() {  # wheels the image lacks, the GGUF joined and provisioned (all a decode benchmark needs)
  if [ -d "$B/whl" ]; then
    # once a machine: a second script (after.sh) must not reinstall under the first one's running processes
    if [ ! -f /tmp/site/.installed ]; then
      "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$B"/whl/*.whl >>"$R/setup.log" 2>&1 \
        && touch /tmp/site/.installed
    fi
    export PYTHONPATH=/tmp/site:$PWD
  fi
  check_pieces || { log "setup failed"; exit 1; }
  if ls "$B"/q.* >/dev/null 2>&1 && [ ! -f "$B/q.gguf" ]; then
    cat $(ls "$B"/q.[0-9]* | sort) > "$B/q.gguf"
    "$PY" -c "from helpers import models; models.provision('$MODEL', gguf_path='$B/q.gguf')" >>"$R/setup.log" 2>&1 \
      || { log "setup failed"; tail -20 "$R/setup.log"; exit 1; }
  fi
}

setup_window() {  # the model (setup_model), then data, index, synthetic split
  setup_model
  # the synthetic multi-hop split built on the CPU (bundle.sh), with the candidate caches it was built
  # from: rebuilding it here reads every passage six times over (about 4 minutes); set-up keeps it only
  # while its fingerprint matches the rules and verdicts of this checkout (each cache only while its
  # header matches), and rebuilds it otherwise
  if [ -f "$B/synthetic/synthetic.jsonl" ] && [ ! -f "$COURSE_DATA/synthetic.jsonl" ]; then
    mkdir -p "$COURSE_DATA" && cp "$B"/synthetic/* "$COURSE_DATA"/
  fi
  "$PY" -m helpers setup --models "$MODEL" >>"$R/setup.log" 2>&1 || { log "setup failed"; tail -20 "$R/setup.log"; exit 1; }
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>"$R/window.log" 2>&1 || true
  log "setup done"
}

decode_bench() {  # decode_bench NAME FUSE [ARGS...]: bench_grpo_gpu.py decode with COURSE_ENGINE_FUSE=FUSE into
  # $R/NAME.json and .log; its exit status and each batch size's figures (steps/s, KL, tokens) in the log
  local name=$1 fuse=$2 status; shift 2
  COURSE_ENGINE_FUSE=$fuse "$PY" benchmarks/bench_grpo_gpu.py decode --model "$MODEL" "$@" --out "$R/$name.json" \
    >"$R/$name.log" 2>&1
  status=$?
  log "$name exited $status: $(grep -h "steps/s" "$R/$name.log" | tr -s ' ' | tr '\n' ';')"
}

MEMORY_EVERY=${MEMORY_EVERY:-5}
watch_memory() {  # every MEMORY_EVERY s until the script ends: each process's GPU memory into
  # $R/gpu_memory.csv, and the host's memory into $R/host_memory.csv (a machine that stops answering
  # leaves in the last pack whether the host ran out of memory first: its processes share 128 GiB).
  # Both files are appended to, so two scripts run one after the other into one folder keep both rounds
  if [ -z "${HOST_MEMORY_PID-}" ]; then  # once a script; it samples until the script ends
    [ -f "$R/host_memory.csv" ] || echo "time,used_mib,available_mib,python_rss_mib,python_processes" >"$R/host_memory.csv"
    local script=$$
    # its own output goes to the file, not to the script's: a caller reading the script's output through
    # a pipe is not kept waiting by it
    ( while kill -0 "$script" 2>/dev/null; do
        # free's used and available; the summed resident memory of the Python processes (training,
        # evaluation, writer): one line a sample
        echo "$(date -u +%T),$(free -m | awk '/^Mem:/ {print $3 "," $7}'),$(ps -eo rss=,comm= \
          | awk '$2 ~ /^python/ {kib += $1; n++} END {printf "%d,%d", kib / 1024, n}')"
        sleep "$MEMORY_EVERY"
      done ) >>"$R/host_memory.csv" 2>/dev/null </dev/null &
    HOST_MEMORY_PID=$!
    if command -v nvidia-smi >/dev/null; then  # timestamp, pid, used memory: a line per GPU process
      ( while kill -0 "$script" 2>/dev/null; do
          nvidia-smi --query-compute-apps=timestamp,pid,used_memory --format=csv,noheader
          sleep "$MEMORY_EVERY"
        done ) >>"$R/gpu_memory.csv" 2>&1 </dev/null &
    fi
  fi
}
MPS_DIR=${MPS_DIR:-/tmp/course-mps}
start_mps() {  # a CUDA MPS control daemon of the window's own (pipe and log folders under MPS_DIR): the
  # processes started after it are its clients, their kernels sharing the GPU at once instead of in
  # time slices; returns 1 (and starts nothing) where MPS is missing or a client cannot reach it
  command -v nvidia-cuda-mps-control >/dev/null || { log "no nvidia-cuda-mps-control on PATH"; return 1; }
  mkdir -p "$MPS_DIR/pipe" "$MPS_DIR/log"
  export CUDA_MPS_PIPE_DIRECTORY=$MPS_DIR/pipe CUDA_MPS_LOG_DIRECTORY=$MPS_DIR/log
  if ! nvidia-cuda-mps-control -d >>"$R/mps.log" 2>&1; then
    log "nvidia-cuda-mps-control -d failed"; unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; return 1
  fi
  # a client that cannot reach the server fails at its first CUDA call: find out before the runs do
  if ! "$PY" -c "import torch; torch.zeros(1, device='cuda'); print('MPS client reached the GPU')" >>"$R/mps.log" 2>&1; then
    log "an MPS client could not reach the GPU (mps.log)"; stop_mps; return 1
  fi
  log "MPS server up ($MPS_DIR)"
}
stop_mps() {  # quit the daemon start_mps started; its logs beside the window's as mps_<name>.log
  echo quit | nvidia-cuda-mps-control >>"$R/mps.log" 2>&1
  local f; for f in "$MPS_DIR"/log/*.log; do [ -f "$f" ] && cp "$f" "$R/mps_$(basename "$f")"; done
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
  log "MPS server stopped"
}
experiment() {  # experiment NAME ARGS... : one helpers.experiment command ($PRESET), its log and exit status
  local name=$1; shift
  "$PY" -m helpers.experiment --preset "$PRESET" "$@" >"$R/$name.log" 2>&1
  log "$name exited $?"
}
export_stage() {  # export_stage RUN STAGE [NAME] : a bf16 adapter in $R/NAME/adapter (NAME: STAGE) of that stage's
  # policy, the SFT's (STAGE sft) or a plain preset's GRPO (STAGE grpo)
  "$PY" -c "
from pathlib import Path
from helpers.experiment import make_plan, _policy_of, _sft_result, export_adapter, grpo_policy_path
plan = make_plan('$PRESET', '$R/$1', '$WORK/$1')
stage = '$2'
policy = (_sft_result(plan)['sampler_path'] if stage == 'sft' else grpo_policy_path(plan) if stage == 'grpo'
          else _policy_of(plan.stages[stage]))
print(export_adapter(policy, Path('$R/${3:-$2}/adapter')))" >>"$R/export.log" 2>&1
  log "export ${3:-$2}: status $?"
}
grpo_run() {  # grpo_run NAME INIT MINUTES CAP [ARGS...] : GRPO ($PRESET) from the adapter INIT in its own
  # folders, capped at CAP of the GPU's memory; then its policy exported to $R/NAME/adapter (the next
  # stage's INIT, here or in a later window) and its metrics beside it ($R/NAME/grpo*/), as soon as it ends
  local name=$1 init=$2 minutes=$3 cap=$4; shift 4
  # a run folder with a checkpoint resumes it (helpers.session), whatever INIT says: say so, since a
  # second launch reusing a name means to start afresh as often as to go on
  if ls "$WORK/$name"/grpo*/checkpoints.jsonl >/dev/null 2>&1; then
    log "$name: $WORK/$name holds a checkpoint, so it resumes there, not from $init (another name or WORK starts afresh)"
  fi
  COURSE_CUDA_MEMORY_FRACTION=$cap experiment "$name" --out "$R/$name" --work "$WORK/$name" \
    --stage grpo --init-from "$init" --max-minutes "$minutes" "$@"
  export_stage "$name" grpo "$name"
  local run
  for run in "$WORK/$name"/grpo*; do
    [ -f "$run/metrics.jsonl" ] || continue  # a stage of the recipe this run did not train
    mkdir -p "$R/$name/$(basename "$run")"
    cp "$run"/metrics.jsonl "$run"/summary.json "$run"/config.json "$R/$name/$(basename "$run")/" 2>/dev/null
  done
}
passage_budgets() {  # passage_budgets K : "OBSERVATION TRAJECTORY" tokens for K passages a search: 256 a
  # passage (768 for the recorded 3), and the recorded 4,096 a trajectory raised by as much for each of
  # its three searches
  local tool=$(( 256 * $1 ))
  echo "$tool $(( 4096 + 3 * (tool - 768) ))"
}
eval_adapter() {  # eval_adapter ADAPTER K SPLIT LABEL OUTPUT [ARGS...] : an exported adapter evaluated greedy
  # with the recorded budgets (3 searches, 4 turns, 256 tokens a turn), K passages a search and
  # passage_budgets K
  local adapter=$1 k=$2 split=$3 label=$4 output=$5 tool trajectory; shift 5
  read -r tool trajectory < <(passage_budgets "$k")
  "$PY" -m helpers.eval --model "$MODEL" --model-path "$adapter" --split "$split" \
    --search-topk "$k" --rollout.max-search-calls 3 --rollout.max-assistant-turns 4 \
    --rollout.max-assistant-tokens 256 --rollout.max-tool-response-tokens "$tool" \
    --rollout.max-trajectory-tokens "$trajectory" --rollout.search-concurrency 16 \
    --batch-size 600 --label "$label" --output "$output" --tracker none "$@"
}
reading_json() {  # reading_json OUT LABEL=ROWS.jsonl... : helpers.evidence.finding_and_reading per label, as JSON
  local out=$1; shift
  "$PY" -c "
import json, sys
from helpers.evidence import finding_and_reading
from helpers.runs import read_jsonl
print(json.dumps({a.split('=')[0]: finding_and_reading(read_jsonl(a.split('=', 1)[1])) for a in sys.argv[1:]}, indent=1))" \
    "$@" >"$out" 2>>"$R/tables.log"
  log "finding and reading: status $?"
}
eval_run() {  # eval_run NAME [ARGS...] : the test evaluation of what grpo_run NAME trained ($PRESET, as it
  # ran; ARGS such as --set eval.search_topk=5 for what its evaluation must share with its training)
  local name=$1; shift
  experiment "eval_$name" --out "$R/$name" --work "$WORK/$name" --stage eval --only sft_grpo "$@"
}
