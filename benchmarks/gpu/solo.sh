#!/usr/bin/env bash
# One GPU window with the GPU to one process: what a training step's time goes to, how many updates one
# process makes in STAGE_MIN minutes, and what a longer exact-match stage does to the second search.
#   1. the trainer alone (`bench_grpo_gpu.py train`: one step of agent-shaped datums), recomputing
#      activations (with a kernel trace) and keeping them, each in its own process;
#   2. exact-match GRPO from the recorded SFT (preset h200_again, stage `exact`, its step count raised to
#      MAX_STEPS so that the minutes end it), alone on the GPU; exported to $R/exact_solo/adapter;
#   3. its evaluations on the test and validation splits side by side; the tables, the verdicts of the
#      search-again rule, and the paired reading against COMPARE_EVAL (seed 3's exact-match policy of 64
#      updates): where the longer run searched again and that policy did not, right answers before/after.
# The log says "phase 1 exported" once the adapter is out (wait_and_pack.sh can stop on it).
#   setsid nohup bash benchmarks/gpu/solo.sh >/root/window.out 2>&1 </dev/null &
#   PRESET=cpu-dry-again MODEL=smollm2-135m STAGE_MIN=0.3 SFT=<state> COMPARE_EVAL=<rows> RESULTS=/tmp/r \
#     WORK=/tmp/w BUNDLE=/nonexistent TRAIN_BENCH="--rows 2 --length 64 --trained 8 --repeats 1" \
#     bash benchmarks/gpu/solo.sh   # on a CPU
set -u
PRESET=${PRESET:-h200_again}
SFT=${SFT:-results/h200_search/sft_adapter}
SEED=${SEED:-3}
STAGE_MIN=${STAGE_MIN:-9}
MAX_STEPS=${MAX_STEPS:-400}
# alone on the GPU; the two evaluations after it take EVAL_CAP each (less where another script trains
# beside them)
CAP=${CAP:-0.9}
EVAL_CAP=${EVAL_CAP:-0.45}
COMPARE_EVAL=${COMPARE_EVAL:-results/h200_again/seeds/eval/seed3_exact.jsonl}
# a search agent's GRPO step on the GPU: 64-128 trajectories of about 1,200 tokens, a few dozen its own
# (TRAIN_BENCH= , empty, skips the trainer benchmark)
TRAIN_BENCH=${TRAIN_BENCH---rows 96 --length 1200 --trained 48}
source "$(dirname "$0")/common.sh"
log "start solo preset=$PRESET sft=$SFT seed=$SEED stage=${STAGE_MIN}min max_steps=$MAX_STEPS"
setup_window
watch_memory

if [ -n "$TRAIN_BENCH" ]; then
  # shellcheck disable=SC2086  # TRAIN_BENCH is a list of arguments
  "$PY" benchmarks/bench_grpo_gpu.py train --model "$MODEL" $TRAIN_BENCH --trace 25 \
    --out "$R/train_recompute.json" >"$R/train_recompute.log" 2>&1
  log "trainer, activations recomputed: status $?"
  # shellcheck disable=SC2086
  COURSE_ENGINE_RECOMPUTE=0 "$PY" benchmarks/bench_grpo_gpu.py train --model "$MODEL" $TRAIN_BENCH \
    --out "$R/train_keep.json" >"$R/train_keep.log" 2>&1
  log "trainer, activations kept: status $?"
  grep -h -E "^\[train|^trace|^ +[0-9.]+%" "$R/train_recompute.log" "$R/train_keep.log" | tee -a "$R/window.log"
fi

grpo_run exact_solo "$SFT" "$STAGE_MIN" "$CAP" --grpo-stage exact --set "exact.seed=$SEED" \
  --set "exact.max_steps=$MAX_STEPS"
log "phase 1 exported"
"$PY" benchmarks/bench_grpo_gpu.py report "$WORK"/exact_solo/grpo_* --out "$R/throughput.json" 2>&1 | tee -a "$R/window.log"

( COURSE_CUDA_MEMORY_FRACTION=$EVAL_CAP eval_run exact_solo ) & test_pid=$!
COURSE_CUDA_MEMORY_FRACTION=$EVAL_CAP experiment val_exact_solo --out "$R/exact_solo/validation" --work "$WORK/exact_solo" \
  --stage eval --only sft_grpo --set eval.split=validation & val_pid=$!
wait $test_pid $val_pid

TEST_ROWS=$R/exact_solo/eval/sft_grpo.jsonl VAL_ROWS=$R/exact_solo/validation/eval/sft_grpo.jsonl
evals=()
[ -f "$COMPARE_EVAL" ] && evals+=("exact_64=$COMPARE_EVAL")
[ -f "$TEST_ROWS" ] && evals+=("exact_solo=$TEST_ROWS")
if [ ${#evals[@]} -gt 0 ]; then
  "$PY" -m helpers.analyse --search-learned "${evals[@]}" >"$R/tables.md" 2>"$R/tables.log"
  log "tables: status $?"
  { echo "test split"; "$PY" -m helpers.course.seeds "${evals[@]}"
    [ -f "$VAL_ROWS" ] && echo && echo "validation split" && "$PY" -m helpers.course.seeds "exact_solo=$VAL_ROWS"
  } >"$R/verdicts.md" 2>>"$R/tables.log"
  log "verdicts: status $?"
fi
if [ -f "$COMPARE_EVAL" ] && [ -f "$TEST_ROWS" ]; then
  "$PY" -c "
import json
from helpers.course.seeds import added_search_gain
from helpers.runs import read_jsonl
print(json.dumps(added_search_gain(read_jsonl('$COMPARE_EVAL'), read_jsonl('$TEST_ROWS')), indent=1))" \
    >"$R/paired.json" 2>>"$R/tables.log"
  log "paired against $COMPARE_EVAL: status $?"
fi
cat "$R/verdicts.md" "$R/paired.json" >>"$R/window.log" 2>/dev/null
grep -h "engine: non-finite" "$R"/*.log >"$R/non_finite.log" 2>/dev/null; log "non-finite lines: $(wc -l <"$R/non_finite.log")"
log "all done"
