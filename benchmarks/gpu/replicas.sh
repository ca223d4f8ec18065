#!/usr/bin/env bash
# One GPU window for the recipe SFT -> exact match -> trim, three times over (how much one run varies,
# and the shared GPU's throughput with three training processes of one recipe):
#   1. three exact-match runs (PRESET_EXACT) from SFT side by side for P1_MIN minutes, each capped at
#      CAP of the GPU's memory: `exact_a`, `exact_b`, `exact_c`;
#   2. `trim` (PRESET_STAGED's stage: the gated reward's tool penalty, synthetic half) from each of them
#      side by side for P2_MIN minutes (`trim_a`, …), beside the evaluations of phase 1's policies;
#   3. the trims' evaluations, then one table of every policy.
# Each run exports its adapter and copies its metrics into $R/<name> as soon as it ends; the log says
# "phase 1 exported" once the three exact-match adapters are there (wait_and_pack.sh can stop on it).
#   setsid nohup bash benchmarks/gpu/replicas.sh >/root/window.out 2>&1 </dev/null &
#   PRESET_STAGED=cpu-dry-staged PRESET_EXACT=cpu-dry MODEL=smollm2-135m P1_MIN=0.3 P2_MIN=0.3 SFT=<state> \
#     RESULTS=/tmp/r WORK=/tmp/w BUNDLE=/nonexistent bash benchmarks/gpu/replicas.sh   # on a CPU
set -u
PRESET_STAGED=${PRESET_STAGED:-h200_staged}
PRESET_EXACT=${PRESET_EXACT:-h200}
SFT=${SFT:-results/h200_search/sft_adapter}
P1_MIN=${P1_MIN:-9}
P2_MIN=${P2_MIN:-5}
CAP=${CAP:-0.3}
PRESET=$PRESET_STAGED
source "$(dirname "$0")/common.sh"
log "start replicas staged=$PRESET_STAGED exact=$PRESET_EXACT p1=${P1_MIN}min p2=${P2_MIN}min sft=$SFT"
setup_window
watch_memory
RUNS="a b c"

pids=()
for x in $RUNS; do PRESET=$PRESET_EXACT grpo_run "exact_$x" "$SFT" "$P1_MIN" "$CAP" & pids+=($!); done
wait "${pids[@]}"
log "phase 1 exported"
"$PY" benchmarks/bench_grpo_gpu.py report "$WORK"/exact_{a,b,c}/grpo --out "$R/throughput_phase1.json" 2>&1 | tee -a "$R/window.log"

pids=()
for x in $RUNS; do grpo_run "trim_$x" "$R/exact_$x/adapter" "$P2_MIN" "$CAP" --grpo-stage trim & pids+=($!); done
PRESET=$PRESET_EXACT eval_run exact_a & V=$!
PRESET=$PRESET_EXACT eval_run exact_b
wait $V
PRESET=$PRESET_EXACT eval_run exact_c
wait "${pids[@]}"
log "phase 2 exported"
eval_run trim_a & V=$!
eval_run trim_b & W=$!
eval_run trim_c
wait $V $W
"$PY" benchmarks/bench_grpo_gpu.py report "$WORK"/trim_{a,b,c}/grpo_trim --out "$R/throughput_phase2.json" 2>&1 | tee -a "$R/window.log"
evals=()
for name in exact_a exact_b exact_c trim_a trim_b trim_c; do
  [ -f "$R/$name/eval/sft_grpo.jsonl" ] && evals+=("$name=$R/$name/eval/sft_grpo.jsonl")
done
"$PY" -m helpers.analyse --search-learned "${evals[@]}" >"$R/tables.md" 2>"$R/tables.log"
log "tables: status $?"; cat "$R/tables.md" >>"$R/window.log"
grep -h "engine: non-finite" "$R"/*.log >"$R/non_finite.log" 2>/dev/null; log "non-finite lines: $(wc -l <"$R/non_finite.log")"
log "all done"
