#!/usr/bin/env bash
# One GPU window for the multi-search agent's recipe (preset h200_again: exact match, then `trim`, each
# counted in steps), run from the recorded SFT once per seed, side by side: does every run of the recipe
# make a policy that searches again where it pays, or did one run get lucky?
#   1. one process per seed in SEEDS, each capped at CAP of the GPU's memory, trains both stages
#      (`again_s<seed>`; each stage also stops at STAGE_MIN minutes); its last stage's adapter and its
#      `exact` stage's adapter are exported ($R/again_s<seed>/adapter, $R/again_s<seed>_exact/adapter);
#   2. the test evaluations of both stages of every run (one process a run, under the same share: an
#      uncapped evaluation grew to 59 GiB), side by side;
#   3. one table of every policy, the recorded multi-search agent's rows (AGAIN_EVAL) first.
# The log says "phase 1 exported" once every run has its adapters (wait_and_pack.sh can stop on it).
#   setsid nohup bash benchmarks/gpu/again.sh >/root/window.out 2>&1 </dev/null &
#   PRESET=cpu-dry-again MODEL=smollm2-135m STAGE_MIN=0.3 SFT=<state> RESULTS=/tmp/r WORK=/tmp/w \
#     BUNDLE=/nonexistent bash benchmarks/gpu/again.sh   # on a CPU
set -u
PRESET=${PRESET:-h200_again}
SFT=${SFT:-results/h200_search/sft_adapter}
SEEDS=${SEEDS:-1 2 3}
STAGE_MIN=${STAGE_MIN:-12}
# three training processes of plain exact match held 30-42 GiB each on the multi-turn batches of
# `trim`; the shares sum under one
CAP=${CAP:-0.3}
AGAIN_EVAL=${AGAIN_EVAL:-results/h200_again/eval/sft_grpo.jsonl}
source "$(dirname "$0")/common.sh"
log "start again preset=$PRESET seeds=$SEEDS stage=${STAGE_MIN}min sft=$SFT"
setup_window
watch_memory

pids=()
for seed in $SEEDS; do
  ( grpo_run "again_s$seed" "$SFT" "$STAGE_MIN" "$CAP" --set "exact.seed=$seed" --set "trim.seed=$seed"
    export_stage "again_s$seed" exact "again_s${seed}_exact" ) & pids+=($!)
done
wait "${pids[@]}"
log "phase 1 exported"
"$PY" benchmarks/bench_grpo_gpu.py report "$WORK"/again_s*/grpo_* --out "$R/throughput.json" 2>&1 | tee -a "$R/window.log"

pids=()
for seed in $SEEDS; do
  COURSE_CUDA_MEMORY_FRACTION=$CAP experiment "eval_again_s$seed" --out "$R/again_s$seed" --work "$WORK/again_s$seed" --stage eval \
    --only stage_exact,sft_grpo & pids+=($!)
done
wait "${pids[@]}"
evals=()
[ -f "$AGAIN_EVAL" ] && evals+=("recorded=$AGAIN_EVAL")
for seed in $SEEDS; do
  for label in stage_exact sft_grpo; do
    [ -f "$R/again_s$seed/eval/$label.jsonl" ] && evals+=("s${seed}_$label=$R/again_s$seed/eval/$label.jsonl")
  done
done
"$PY" -m helpers.analyse --search-learned "${evals[@]}" >"$R/tables.md" 2>"$R/tables.log"
log "tables: status $?"; cat "$R/tables.md" >>"$R/window.log"
grep -h "engine: non-finite" "$R"/*.log >"$R/non_finite.log" 2>/dev/null; log "non-finite lines: $(wc -l <"$R/non_finite.log")"
log "all done"
