#!/usr/bin/env bash
# One GPU window, three runs one after the other, each with the GPU to itself, from one policy (INIT):
#   1. `read-k2` (trim_variants.sh): exact match on `trim`'s mix with the reading curriculum (the gold
#      passages handed to the first search on half of the questions), READ_MIN minutes, evaluated on the
#      test and validation splits with the index alone; then the reader ceiling of INIT and of it on the
#      test split's HotpotQA questions (benchmarks/reader_ceiling.py --searches gold: what each makes of
#      the gold passages once they are in hand; did the curriculum teach reading?), side by side;
#   2. `answers-k2-r1`, THROUGHPUT_MIN minutes, not evaluated: one dynamic-sampling round a step;
#   3. `answers-k2`, THROUGHPUT_MIN minutes, not evaluated: the recorded three rounds, on the same GPU.
# Results: $RESULTS (1 and the ceilings), $RESULTS2 (2; $RESULTS/tp_r1), $RESULTS3 (3; $RESULTS/tp_r3), each with a window.log ending
# "all done". Runs 2 and 3 compare updates and informative groups a minute and the step's parts.
#   (setsid nohup bash benchmarks/gpu/read_window.sh >/root/window.out 2>&1 </dev/null &)
#   PRESET=cpu-dry-again MODEL=smollm2-135m READ_MIN=0.3 THROUGHPUT_MIN=0.3 INIT=<state> RESULTS=/tmp/r \
#     RESULTS2=/tmp/r2 RESULTS3=/tmp/r3 WORK=/tmp/w BUNDLE=/nonexistent LIMIT=2 bash benchmarks/gpu/read_window.sh
set -u
here=$(dirname "$0")
R=${RESULTS:-/root/results}
R2=${RESULTS2:-$R/tp_r1}
R3=${RESULTS3:-$R/tp_r3}
W=${WORK:-/root/work}
READ_MIN=${READ_MIN:-6}
THROUGHPUT_MIN=${THROUGHPUT_MIN:-3}
INIT=${INIT:-results/h200_replicas/gain5ns-k2_41/adapter}
# INIT's own rows (test, and validation searched with 2 passages), first in the read run's tables
INIT_EVAL=${INIT_EVAL:-$(dirname "$INIT")/eval/test.jsonl}
INIT_VAL_EVAL=${INIT_VAL_EVAL:-$(dirname "$INIT")/eval/validation.jsonl}
LIMIT=${LIMIT:-}  # questions of each reader ceiling (empty: the split's 100 HotpotQA questions)
PY=${PYTHON:-python3}
MODEL=${MODEL:-qwen2.5-0.5b}
export INIT INIT_EVAL INIT_VAL_EVAL INIT_TOPK=2 SEEDS=1 CAP=${CAP:-0.6} TRIM_MAX_STEPS=${TRIM_MAX_STEPS:-400} KEEP_ACTIVATIONS_SEEDS=

RESULTS=$R WORK=$W/read VARIANTS=read-k2 STAGE_MIN=$READ_MIN bash "$here/trim_variants.sh"
ceiling() {  # ceiling LABEL ADAPTER : the reader ceiling (gold passages handed over) of one policy
  COURSE_CUDA_MEMORY_FRACTION=0.4 "$PY" benchmarks/reader_ceiling.py --model "$MODEL" --model-path "$2" --topk 2 \
    --split test --searches gold --batch 64 ${LIMIT:+--limit "$LIMIT"} --out "$R/ceiling_$1.json" >"$R/ceiling_$1.log" 2>&1
  local status=$?
  echo "$(date -u +%T) reader ceiling $1 exited $status: $(grep '^| gold' "$R/ceiling_$1.log")" | tee -a "$R/window.log"
}
ceiling init "$INIT" & first=$!
ceiling read "$R/read-k2_s1/adapter"
wait $first
echo "$(date -u +%T) ceilings done" | tee -a "$R/window.log"
for run in "answers-k2-r1 $R2" "answers-k2 $R3"; do
  set -- $run
  RESULTS=$2 WORK=$W/$1 VARIANTS=$1 STAGE_MIN=$THROUGHPUT_MIN EVALS=0 bash "$here/trim_variants.sh"
done
