#!/usr/bin/env bash
# One GPU window step: evaluate exported adapters side by side, each with its own number of passages a
# search returns. EVALS holds NAME=ADAPTER@K words; each is evaluated greedy on SPLIT with the recorded
# budgets (3 searches, 4 turns, 256 tokens a turn), its observation budget 256 tokens a passage and its
# trajectory budget raised by as much for each of the three searches (`eval_adapter`, common.sh), all at once
# under CAP of the GPU's memory each; rows in $R/NAME/SPLIT.jsonl, then one table and finding/reading.
#   EVALS="top5=results/x/adapter@5 trim=results/y/adapter@3" \
#     setsid nohup bash benchmarks/gpu/adapter_evals.sh >/root/window.out 2>&1 </dev/null &
#   MODEL=smollm2-135m EVALS="a=<adapter>@3" LIMIT=2 RESULTS=/tmp/r BUNDLE=/nonexistent \
#     bash benchmarks/gpu/adapter_evals.sh   # on a CPU
set -u
EVALS=${EVALS:?NAME=ADAPTER@K words}
SPLIT=${SPLIT:-test}
CAP=${CAP:-0.15}
LIMIT=${LIMIT:-}
for item in $EVALS; do  # before the set-up, so a typo costs seconds, not a window's minutes
  [[ $item =~ ^[A-Za-z0-9_.-]+=.+@[1-9][0-9]*$ ]] || { echo "expected NAME=ADAPTER@K (K passages, >= 1), got $item"; exit 2; }
done
source "$(dirname "$0")/common.sh"
log "start adapter_evals split=$SPLIT evals=$EVALS"
setup_window

limit=()
[ -n "$LIMIT" ] && limit=(--limit "$LIMIT")
pids=()
names=()
for item in $EVALS; do
  name=${item%%=*}; rest=${item#*=}; adapter=${rest%@*}; k=${rest##*@}
  mkdir -p "$R/$name"
  COURSE_CUDA_MEMORY_FRACTION=$CAP eval_adapter "$adapter" "$k" "$SPLIT" "$name" "$R/$name/$SPLIT.jsonl" "${limit[@]}" \
    >"$R/$name.log" 2>&1 &
  pids+=($!); names+=("$name")
done
for i in "${!pids[@]}"; do wait "${pids[$i]}"; log "${names[$i]}: evaluation exited $?"; done

evals=()
for name in "${names[@]}"; do [ -f "$R/$name/$SPLIT.jsonl" ] && evals+=("$name=$R/$name/$SPLIT.jsonl"); done
if [ ${#evals[@]} -gt 0 ]; then
  "$PY" -m helpers.analyse --search-learned "${evals[@]}" >"$R/tables.md" 2>"$R/tables.log"
  log "tables: status $?"
  reading_json "$R/reading.json" "${evals[@]}"
  cat "$R/tables.md" >>"$R/window.log"
fi
log "all done"
