#!/usr/bin/env bash
# One GPU window that continues from one committed policy (INIT, an exact-match policy that searches
# again) with the three ways on the recipe has measured, side by side, and judges a policy trained earlier:
#   1. for P1_MIN minutes, each process capped at its share of the GPU's memory (the shares sum under
#      one: a trim and an evaluation beside two others over-ran the GPU once):
#      `trim` (the gated reward's group-anchored tool penalty, synthetic half), `answers` (exact match,
#      synthetic half) and `more` (plain exact match, PRESET_EXACT) from INIT; beside them the test
#      evaluation of JUDGE (an exported adapter; empty: none) as `judged`; RUNS names the runs to train;
#   2. the test evaluations of the runs, side by side;
#   3. one table of every policy (INIT's own evaluation rows, INIT_EVAL, first).
# Every run lands in $R/<name>: its exported adapter, metrics, evaluation; "phase 1 exported" in the log
# once the three adapters are there.
#   setsid nohup bash benchmarks/gpu/continue.sh >/root/window.out 2>&1 </dev/null &
#   PRESET_STAGED=cpu-dry-staged PRESET_EXACT=cpu-dry MODEL=smollm2-135m P1_MIN=0.3 INIT=<state> JUDGE=<state> \
#     INIT_EVAL=<rows> RESULTS=/tmp/r WORK=/tmp/w BUNDLE=/nonexistent bash benchmarks/gpu/continue.sh   # on a CPU
set -u
PRESET_STAGED=${PRESET_STAGED:-h200_staged}  # its stages `answers` and `trim`
PRESET_EXACT=${PRESET_EXACT:-h200}
INIT=${INIT:-results/h200_replicas/exact_a/adapter}
INIT_EVAL=${INIT_EVAL:-benchmarks/gpu/windows/2026-12-03-replicas/exact_a/eval.jsonl}
JUDGE=${JUDGE:-results/h200_replicas/trim_b/adapter}
P1_MIN=${P1_MIN:-11}
# memory shares (measured: an evaluation with no cap grew to 38 GiB and under 0.15 died at once; under
# 0.26 / 0.26 / 0.20 the stages on the multi-hop half held 38 GiB each and plain exact match 30, and two
# of the three ran out in the sampler's prefill after 9 minutes, before the sampler split such batches)
RUNS=${RUNS:-trim answers more}
CAP_STAGE=${CAP_STAGE:-0.26}
CAP_EXACT=${CAP_EXACT:-0.2}
CAP_EVAL=${CAP_EVAL:-0.15}
PRESET=$PRESET_STAGED
source "$(dirname "$0")/common.sh"
log "start continue staged=$PRESET_STAGED exact=$PRESET_EXACT p1=${P1_MIN}min init=$INIT judge=$JUDGE"
setup_window
watch_memory

pids=()
for name in $RUNS; do
  case $name in
    trim|answers) grpo_run "$name" "$INIT" "$P1_MIN" "$CAP_STAGE" --grpo-stage "$name" & pids+=($!) ;;
    more) PRESET=$PRESET_EXACT grpo_run more "$INIT" "$P1_MIN" "$CAP_EXACT" & pids+=($!) ;;
    *) log "unknown run $name (trim, answers, more)" ;;
  esac
done
if [ -n "$JUDGE" ]; then
  PRESET=$PRESET_EXACT COURSE_CUDA_MEMORY_FRACTION=$CAP_EVAL experiment eval_judged --out "$R/judged" \
    --work "$WORK/judged" --stage eval --only sft_grpo --policy "$JUDGE"
fi
wait "${pids[@]}"
log "phase 1 exported"
"$PY" benchmarks/bench_grpo_gpu.py report "$WORK"/*/grpo* --out "$R/throughput.json" 2>&1 | tee -a "$R/window.log"

pids=()
for name in $RUNS; do
  if [ "$name" = more ]; then PRESET=$PRESET_EXACT eval_run more & pids+=($!); else eval_run "$name" & pids+=($!); fi
done
wait "${pids[@]}"
evals=()
[ -f "$INIT_EVAL" ] && evals+=("init=$INIT_EVAL")
for name in judged $RUNS; do
  [ -f "$R/$name/eval/sft_grpo.jsonl" ] && evals+=("$name=$R/$name/eval/sft_grpo.jsonl")
done
"$PY" -m helpers.analyse --search-learned "${evals[@]}" >"$R/tables.md" 2>"$R/tables.log"
log "tables: status $?"; cat "$R/tables.md" >>"$R/window.log"
grep -h "engine: non-finite" "$R"/*.log >"$R/non_finite.log" 2>/dev/null; log "non-finite lines: $(wc -l <"$R/non_finite.log")"
log "all done"
