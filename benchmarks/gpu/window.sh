#!/usr/bin/env bash
# One GPU window, run detached on the GPU machine from the repository root (see README.md here):
# set-up, decode benchmark, three GRPO runs side by side, their evaluation, the report.
# Everything lands in $RESULTS as it is made, so a window cut short still returns what it measured.
#   setsid nohup bash benchmarks/gpu/window.sh >/root/window.out 2>&1 &
#   PRESET=cpu-dry-agent MODEL=smollm2-135m GRPO_MIN=1 ... bash benchmarks/gpu/window.sh   # the same on a CPU
# EXIT_CHECKS=0, DECODE_GRAPHS=0, DECODE_COMPILED=0 skip those parts.
set -u
B=${BUNDLE:-/root/b}
R=${RESULTS:-/root/results}  # never the transfer folder ($OUT): every call empties it
PY=${PYTHON:-python3}
PRESET=${PRESET:-h200_agent}
STAGE=${STAGE:-habit}
MIN=${GRPO_MIN:-9}
INIT=${INIT:-results/h200_search/sft_adapter}
MODEL=${MODEL:-qwen2.5-0.5b}
DECODE_ARGS=${DECODE_ARGS:---batch-sizes 1,64}
mkdir -p "$R"
export COURSE_SHARED=${COURSE_SHARED:-$B/shared} COURSE_CACHE=${COURSE_CACHE:-/root/cache}
export COURSE_DATA=${COURSE_DATA:-/root/data} COURSE_RUNS=${COURSE_RUNS:-/root/runs}
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
export TORCHINDUCTOR_CACHE_DIR=${TORCHINDUCTOR_CACHE_DIR:-/root/inductor}
WORK=${WORK:-/root/work}
log() { echo "$(date -u +%T) $*" | tee -a "$R/window.log"; }

log "start preset=$PRESET stage=$STAGE minutes=$MIN init=$INIT"
if [ -d "$B/whl" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$B"/whl/*.whl >>"$R/setup.log" 2>&1
  export PYTHONPATH=/tmp/site:$PWD
fi
if ls "$B"/q.* >/dev/null 2>&1 && [ ! -f "$B/q.gguf" ]; then
  cat $(ls "$B"/q.[0-9]* | sort) > "$B/q.gguf"
  "$PY" -c "from helpers import models; models.provision('$MODEL', gguf_path='$B/q.gguf')" >>"$R/setup.log" 2>&1
fi
"$PY" -m helpers setup --models "$MODEL" >>"$R/setup.log" 2>&1 || { log "setup failed"; tail -20 "$R/setup.log"; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>"$R/window.log" 2>&1 || true
log "setup done"

if [ "${EXIT_CHECKS:-1}" = 1 ]; then
# the process exit check: one engine training step and one sample, then exit (status and stderr kept)
"$PY" benchmarks/gpu/exit_check.py --model "$MODEL" >"$R/exit_check.log" 2>&1; log "exit check: status $?"
"$PY" benchmarks/gpu/exit_check.py --model "$MODEL" --keep-worker >"$R/exit_check_old.log" 2>&1
log "exit check without stopping the worker: status $?"
fi
if [ "${DECODE_GRAPHS:-1}" = 1 ]; then

"$PY" benchmarks/bench_grpo_gpu.py decode --model "$MODEL" $DECODE_ARGS --out "$R/decode_graphs.json" \
  >"$R/decode_graphs.log" 2>&1; log "decode (graphs) status $?"; grep steps/s "$R/decode_graphs.log" | tee -a "$R/window.log"
fi
if [ "${DECODE_COMPILED:-1}" = 1 ]; then
COURSE_ENGINE_COMPILE=1 "$PY" benchmarks/bench_grpo_gpu.py decode --model "$MODEL" $DECODE_ARGS \
  --out "$R/decode_compiled.json" >"$R/decode_compiled.log" 2>&1; log "decode (graphs, compiled layers) status $?"
grep steps/s "$R/decode_compiled.log" | tee -a "$R/window.log"
fi

grpo() {  # grpo NAME ENV... : stage $STAGE of $PRESET from $INIT for $MIN minutes
  local name=$1; shift
  env "$@" "$PY" -m helpers.experiment --preset "$PRESET" --out "$R/$name" --work "$WORK/$name" --stage grpo \
    --grpo-stage "$STAGE" --init-from "$INIT" --max-minutes "$MIN" >"$R/grpo_$name.log" 2>&1
  log "grpo $name exited $?"
}
grpo graphs COURSE_ENGINE_DECODE=graphs &
grpo compiled COURSE_ENGINE_DECODE=graphs COURSE_ENGINE_COMPILE=1 &
grpo static COURSE_ENGINE_DECODE=static &
wait
"$PY" benchmarks/bench_grpo_gpu.py report "$WORK"/*/grpo_"$STAGE" --out "$R/report.json" 2>&1 | tee -a "$R/window.log"

evaluate() {
  "$PY" -m helpers.experiment --preset "$PRESET" --out "$R/$1" --work "$WORK/$1" --stage eval --only sft_grpo \
    >"$R/eval_$1.log" 2>&1
  log "eval $1 exited $?"
}
evaluate graphs & evaluate compiled & wait
for name in graphs compiled; do
  "$PY" -m helpers.experiment --preset "$PRESET" --out "$R/$name" --work "$WORK/$name" --stage report \
    >"$R/report_$name.log" 2>&1; log "report $name exited $?"
done
COURSE_ENGINE_DECODE=static timeout 300 "$PY" benchmarks/bench_grpo_gpu.py decode --model "$MODEL" $DECODE_ARGS \
  --out "$R/decode_static.json" >"$R/decode_static.log" 2>&1; log "decode (static, compiled) status $?"
grep steps/s "$R/decode_static.log" | tee -a "$R/window.log"
log "all done"
