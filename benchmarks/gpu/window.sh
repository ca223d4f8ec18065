#!/usr/bin/env bash
# One GPU window, run detached on the GPU machine from the repository root (see README.md here):
# set-up, decode benchmark, two GRPO runs of one recipe stage side by side (graph and static decode), their evaluation, the report.
# Everything lands in $RESULTS as it is made, so a window cut short still returns what it measured.
#   setsid nohup bash benchmarks/gpu/window.sh >/root/window.out 2>&1 &
#   PRESET=cpu-dry-agent MODEL=smollm2-135m GRPO_MIN=1 ... bash benchmarks/gpu/window.sh   # the same on a CPU
# EXIT_CHECKS=0, DECODE_GRAPHS=0 skip those parts.
set -u
PRESET=${PRESET:-h200_agent}
STAGE=${STAGE:-habit}
MIN=${GRPO_MIN:-9}
INIT=${INIT:-results/h200_search/sft_adapter}
DECODE_ARGS=${DECODE_ARGS:---batch-sizes 1,64}
source "$(dirname "$0")/common.sh"
log "start preset=$PRESET stage=$STAGE minutes=$MIN init=$INIT"
setup_window

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

grpo() {  # grpo NAME ENV... : stage $STAGE of $PRESET from $INIT for $MIN minutes
  local name=$1; shift
  env "$@" "$PY" -m helpers.experiment --preset "$PRESET" --out "$R/$name" --work "$WORK/$name" --stage grpo \
    --grpo-stage "$STAGE" --init-from "$INIT" --max-minutes "$MIN" >"$R/grpo_$name.log" 2>&1
  log "grpo $name exited $?"
}
grpo graphs COURSE_ENGINE_DECODE=graphs &
grpo static COURSE_ENGINE_DECODE=static &
wait
"$PY" benchmarks/bench_grpo_gpu.py report "$WORK"/*/grpo_"$STAGE" --out "$R/report.json" 2>&1 | tee -a "$R/window.log"

evaluate() {
  "$PY" -m helpers.experiment --preset "$PRESET" --out "$R/$1" --work "$WORK/$1" --stage eval --only sft_grpo \
    >"$R/eval_$1.log" 2>&1
  log "eval $1 exited $?"
}
evaluate graphs & wait
for name in graphs; do
  "$PY" -m helpers.experiment --preset "$PRESET" --out "$R/$name" --work "$WORK/$name" --stage report \
    >"$R/report_$name.log" 2>&1; log "report $name exited $?"
done
COURSE_ENGINE_DECODE=static timeout 300 "$PY" benchmarks/bench_grpo_gpu.py decode --model "$MODEL" $DECODE_ARGS \
  --out "$R/decode_static.json" >"$R/decode_static.log" 2>&1; log "decode (static, compiled) status $?"
grep steps/s "$R/decode_static.log" | tee -a "$R/window.log"
log "all done"
