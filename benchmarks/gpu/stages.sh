#!/usr/bin/env bash
# One GPU window that continues the search agent's recipe from committed adapters (no SFT in the window):
#   1. side by side for P1_MIN minutes, each process capped at a share of the GPU's memory:
#      `answers` (exact match, synthetic half) and `trim` (the gated reward's tool penalty) from HABIT,
#      the recipe's stage-1 policy, and plain exact match (preset h200) from SFT;
#   2. side by side for P2_MIN minutes: `trim` from `answers` and from the exact-match run (each from
#      the adapter phase 1 exported), beside the evaluations of phase 1's three policies;
#   3. the trims' evaluations, then one table of every policy (EM, second searches, EM when it searched
#      again or stopped, evidence recall against the question as query, rewritten first queries);
#   4. with DECODE_TRACE=1, the decode benchmark under the profiler.
# Every run lands in $R/<name>: its exported adapter, metrics, evaluation. The window takes about
# 19 minutes after set-up with the defaults.
#   setsid nohup bash benchmarks/gpu/stages.sh >/root/window.out 2>&1 </dev/null &
#   PRESET_STAGED=cpu-dry-staged PRESET_EXACT=cpu-dry MODEL=smollm2-135m P1_MIN=0.3 P2_MIN=0.3 HABIT=<state> \
#     SFT=<state> RESULTS=/tmp/r WORK=/tmp/w BUNDLE=/nonexistent bash benchmarks/gpu/stages.sh   # on a CPU
set -u
PRESET_STAGED=${PRESET_STAGED:-h200_staged}  # its stages: habit, answers, trim
PRESET_EXACT=${PRESET_EXACT:-h200}
HABIT=${HABIT:-results/h200_staged/habit/adapter}
SFT=${SFT:-results/h200_search/sft_adapter}
P1_MIN=${P1_MIN:-8}
P2_MIN=${P2_MIN:-5}
CAP=${CAP:-0.3}
PRESET=$PRESET_STAGED
source "$(dirname "$0")/common.sh"
log "start stages staged=$PRESET_STAGED exact=$PRESET_EXACT p1=${P1_MIN}min p2=${P2_MIN}min habit=$HABIT sft=$SFT"
setup_window
watch_memory

grpo_run answers "$HABIT" "$P1_MIN" "$CAP" --grpo-stage answers & A=$!
grpo_run trim_habit "$HABIT" "$P1_MIN" "$CAP" --grpo-stage trim & T=$!
PRESET=$PRESET_EXACT grpo_run exact "$SFT" "$P1_MIN" "$CAP" & E=$!
wait $A $T $E
"$PY" benchmarks/bench_grpo_gpu.py report "$WORK"/answers/grpo_answers "$WORK"/trim_habit/grpo_trim "$WORK"/exact/grpo \
  --out "$R/throughput_phase1.json" 2>&1 | tee -a "$R/window.log"

grpo_run trim_answers "$R/answers/adapter" "$P2_MIN" "$CAP" --grpo-stage trim & A=$!
grpo_run trim_exact "$R/exact/adapter" "$P2_MIN" "$CAP" --grpo-stage trim & E=$!
eval_run answers & V=$!
eval_run trim_habit
wait $V
PRESET=$PRESET_EXACT eval_run exact
wait $A $E
eval_run trim_answers & V=$!
eval_run trim_exact
wait $V
"$PY" benchmarks/bench_grpo_gpu.py report "$WORK"/trim_answers/grpo_trim "$WORK"/trim_exact/grpo_trim \
  --out "$R/throughput_phase2.json" 2>&1 | tee -a "$R/window.log"
evals=()
for name in answers trim_habit exact trim_answers trim_exact; do
  [ -f "$R/$name/eval/sft_grpo.jsonl" ] && evals+=("$name=$R/$name/eval/sft_grpo.jsonl")
done
"$PY" -m helpers.analyse --search-learned "${evals[@]}" >"$R/tables.md" 2>"$R/tables.log"
log "tables: status $?"; cat "$R/tables.md" >>"$R/window.log"
if [ "${DECODE_TRACE:-0}" = 1 ]; then  # the GPU is free now: where a decode step's time goes, with an adapter
  "$PY" benchmarks/bench_grpo_gpu.py decode --model "$MODEL" --adapter "$SFT" --batch-sizes 1,64 --trace 25 \
    --out "$R/decode_trace.json" >"$R/decode_trace.log" 2>&1; log "decode trace: status $?"
  grep -E "steps/s|^trace" "$R/decode_trace.log" | tee -a "$R/window.log"
fi
log "all done"
