#!/usr/bin/env bash
# One GPU window step: does a search that returns more passages raise a policy's exact match? The recorded
# runs read BM25's top 3; the question as typed has NQ's gold passage in its top 3 for 69 % of the test
# questions, its top 5 for 80 %, its top 8 for 86 %. POLICY (an exported adapter) evaluated greedy with
# the recorded budgets (3 searches, 4 turns, 256 tokens a turn) and each k in TOPKS, its observation
# budget scaled with k (256 tokens a passage: 768 for the recorded 3) and its trajectory budget by as
# much for each of the three searches; test and validation, one k at a time, the two splits side by side.
# Then per k: the tables, and finding against reading (`helpers.evidence.finding_and_reading`).
#   setsid nohup bash benchmarks/gpu/topk_evals.sh >/root/window.out 2>&1 </dev/null &
#   MODEL=smollm2-135m POLICY=<adapter> LIMIT=2 RESULTS=/tmp/r BUNDLE=/nonexistent \
#     bash benchmarks/gpu/topk_evals.sh   # on a CPU
set -u
POLICY=${POLICY:-results/h200_replicas/again_s3_exact/adapter}
TOPKS=${TOPKS:-3 5 8}
SPLITS=${SPLITS:-test validation}
CAP=${CAP:-0.3}
LIMIT=${LIMIT:-}
source "$(dirname "$0")/common.sh"
log "start topk_evals policy=$POLICY topks=$TOPKS splits=$SPLITS"
setup_window

limit=()
[ -n "$LIMIT" ] && limit=(--limit "$LIMIT")
for k in $TOPKS; do
  pids=()
  for split in $SPLITS; do
    mkdir -p "$R/top$k"
    COURSE_CUDA_MEMORY_FRACTION=$CAP eval_adapter "$POLICY" "$k" "$split" "top$k" "$R/top$k/$split.jsonl" "${limit[@]}" \
      >"$R/top${k}_$split.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; log "top $k: an evaluation exited $?"; done
done

evals=()
for k in $TOPKS; do [ -f "$R/top$k/test.jsonl" ] && evals+=("top$k=$R/top$k/test.jsonl"); done
if [ ${#evals[@]} -gt 0 ]; then
  "$PY" -m helpers.analyse --search-learned "${evals[@]}" >"$R/tables.md" 2>"$R/tables.log"
  log "tables: status $?"
fi
rows=()
for k in $TOPKS; do
  for split in $SPLITS; do [ -f "$R/top$k/$split.jsonl" ] && rows+=("top$k/$split=$R/top$k/$split.jsonl"); done
done
[ ${#rows[@]} -gt 0 ] && reading_json "$R/reading.json" "${rows[@]}"
cat "$R/tables.md" >>"$R/window.log" 2>/dev/null
log "all done"
