#!/usr/bin/env bash
# One GPU window: a new SFT warm start, then three GRPO runs side by side, then the recipe's next stage.
# Run detached on the GPU machine from the repository root (README.md here):
#   1. SFT (the agent preset, its teacher changed by SETS' sft.* fields, e.g.
#      --set sft.rewrite_first_query=no_loss), exported;
#   2. side by side for SIDE_MIN minutes, each process capped at a share of the GPU's memory:
#      stage `habit` of the agent's recipe from the new SFT, exact match (preset h200, the course's
#      gpu recipe) from the new SFT, and the same from INIT (the SFT the course's gpu profile starts
#      from, whose one-process throughput is recorded): three processes of GRPO at once. With FILTER=1
#      a fourth: exact match from INIT on the questions the pass@k filter keeps (helpers.question_filter,
#      judged with INIT while the SFT trains), for informative groups a minute with and without it;
#   3. stage `trim` from `habit` for TRIM_MIN minutes, beside the evaluations of the SFT and the
#      three runs; then trim's evaluation, the reports, the throughput reports, the adapters;
#   4. with DECODE_TRACE=1, the decode benchmark under the profiler.
# A GPU-memory log (nvidia-smi every 5 s) lands beside the rest in $RESULTS, as everything is made.
#   setsid nohup bash benchmarks/gpu/side_by_side.sh >/root/window.out 2>&1 < /dev/null &
#   PRESET=cpu-dry-agent EXACT_PRESET=cpu-dry MODEL=smollm2-135m SIDE_MIN=0.3 TRIM_MIN=0.3 \
#     RESULTS=/tmp/r WORK=/tmp/w BUNDLE=/nonexistent bash benchmarks/gpu/side_by_side.sh   # on a CPU
set -u
PRESET=${PRESET:-h200_agent}
EXACT_PRESET=${EXACT_PRESET:-h200}
INIT=${INIT:-results/h200_search/sft_adapter}
SIDE_MIN=${SIDE_MIN:-8}
TRIM_MIN=${TRIM_MIN:-5}
FILTER=${FILTER:-0}
# memory shares of the side-by-side processes (habit, exact match from the new SFT, from INIT, filtered)
if [ "$FILTER" = 1 ]; then CAPS=(${CAPS:-0.34 0.22 0.22 0.22}); else CAPS=(${CAPS:-0.4 0.28 0.28}); fi
read -r -a SET_ARGS <<< "${SETS:-}"
read -r -a EXACT_SET_ARGS <<< "${EXACT_SETS:-}"
source "$(dirname "$0")/common.sh"
log "start side_by_side preset=$PRESET exact=$EXACT_PRESET side=${SIDE_MIN}min trim=${TRIM_MIN}min init=$INIT"
setup_window
watch_memory
ps_log() { pgrep -af "helpers.experiment" >>"$R/processes.log" 2>/dev/null; }  # pid -> run, for gpu_memory.csv

AGENT=(--out "$R/agent" --work "$WORK/agent" "${SET_ARGS[@]}")
if [ "$FILTER" = 1 ]; then  # beside the SFT: which questions give INIT's groups signal
  "$PY" -m helpers.question_filter --preset "$EXACT_PRESET" "${EXACT_SET_ARGS[@]}" --init-from "$INIT" \
    --out "$R/question_filter.json" >"$R/question_filter.log" 2>&1 &
  F=$!
fi
experiment sft "${AGENT[@]}" --stage sft
[ -f "$WORK/agent/sft/result.json" ] || { log "no SFT result: see $R/sft.log"; exit 1; }
export_stage agent sft
NEW_SFT=$("$PY" -c "import json; print(json.load(open('$WORK/agent/sft/result.json'))['state_path'])")

COURSE_CUDA_MEMORY_FRACTION=${CAPS[0]} experiment habit "${AGENT[@]}" --stage grpo --grpo-stage habit \
  --max-minutes "$SIDE_MIN" &
H=$!
COURSE_CUDA_MEMORY_FRACTION=${CAPS[1]} PRESET=$EXACT_PRESET experiment exact_new \
  --out "$R/exact_new" --work "$WORK/exact_new" "${EXACT_SET_ARGS[@]}" --stage grpo --init-from "$NEW_SFT" \
  --max-minutes "$SIDE_MIN" &
N=$!
COURSE_CUDA_MEMORY_FRACTION=${CAPS[2]} PRESET=$EXACT_PRESET experiment exact_init \
  --out "$R/exact_init" --work "$WORK/exact_init" "${EXACT_SET_ARGS[@]}" --stage grpo --init-from "$INIT" \
  --max-minutes "$SIDE_MIN" &
I=$!
Q=
if [ "$FILTER" = 1 ]; then
  wait $F; log "question filter exited $?: $(tail -c 300 "$R/question_filter.log" | tr '\n' ' ')"
  COURSE_CUDA_MEMORY_FRACTION=${CAPS[3]} PRESET=$EXACT_PRESET experiment exact_filtered \
    --out "$R/exact_filtered" --work "$WORK/exact_filtered" "${EXACT_SET_ARGS[@]}" \
    --set "grpo.question_filter=$R/question_filter.json" --stage grpo --init-from "$INIT" --max-minutes "$SIDE_MIN" &
  Q=$!
fi
sleep 20; ps_log
wait $H $N $I $Q
"$PY" benchmarks/bench_grpo_gpu.py report "$WORK/agent/grpo_habit" "$WORK/exact_new/grpo" "$WORK/exact_init/grpo" \
  ${Q:+"$WORK/exact_filtered/grpo"} --out "$R/throughput_side_by_side.json" 2>&1 | tee -a "$R/window.log"
export_stage agent habit
PRESET=$EXACT_PRESET export_stage exact_new grpo exact_new
PRESET=$EXACT_PRESET export_stage exact_init grpo exact_init
[ -n "$Q" ] && PRESET=$EXACT_PRESET export_stage exact_filtered grpo exact_filtered
HABIT=$("$PY" -c "import json; print(json.load(open('$WORK/agent/grpo_habit/summary.json'))['checkpoint'])")
log "habit checkpoint $HABIT"

experiment trim "${AGENT[@]}" --stage grpo --grpo-stage trim --init-from "$HABIT" --max-minutes "$TRIM_MIN" & T=$!
sleep 5; ps_log
# beside trim, the evaluations two at a time
experiment eval_sft "${AGENT[@]}" --stage eval --only sft & E=$!
experiment eval_habit "${AGENT[@]}" --stage eval --only stage_habit
wait $E
PRESET=$EXACT_PRESET experiment eval_exact_new --out "$R/exact_new" --work "$WORK/exact_new" --stage eval --only sft_grpo & E=$!
PRESET=$EXACT_PRESET experiment eval_exact_init --out "$R/exact_init" --work "$WORK/exact_init" --stage eval --only sft_grpo
wait $E
[ -n "$Q" ] && PRESET=$EXACT_PRESET experiment eval_exact_filtered --out "$R/exact_filtered" \
  --work "$WORK/exact_filtered" --stage eval --only sft_grpo
wait $T
"$PY" benchmarks/bench_grpo_gpu.py report "$WORK/agent/grpo_trim" --out "$R/throughput_trim.json" 2>&1 | tee -a "$R/window.log"
export_stage agent trim
experiment eval_trim "${AGENT[@]}" --stage eval --only sft_grpo
experiment report_agent "${AGENT[@]}" --stage report
if [ "${DECODE_TRACE:-0}" = 1 ]; then  # the GPU is free now: where a decode step's time goes, with an adapter
  "$PY" benchmarks/bench_grpo_gpu.py decode --model "$MODEL" --adapter "$INIT" --batch-sizes 1,64 --trace 25 \
    --out "$R/decode_trace.json" >"$R/decode_trace.log" 2>&1; log "decode trace: status $?"
  grep -E "steps/s|^trace" "$R/decode_trace.log" | tee -a "$R/window.log"
fi
log "all done"
