#!/usr/bin/env bash
# One GPU window for the search agent's recipe (helpers.presets AGENT_STAGES), run detached on the
# GPU machine from the repository root (README.md here):
#   0. with SFT=1, the preset's SFT stage first (its teacher changed by SETS' sft.* fields, e.g.
#      --set sft.rewrite_first_query=no_loss), its evaluation beside `habit`, and `habit` from it;
#   1. stage `habit` alone from the SFT adapter (also the one-process throughput figure); HABIT_MIN=0
#      skips it and starts step 2 from INIT (e.g. INIT=results/h200_agent/adapter to train `trim` on);
#   2. from its checkpoint, side by side: stage `trim` (the recipe's path), the measured alternative
#      (ALT_PRESET's ALT_STAGE, default h200_agent_answers' exact-match `answers`), the evaluation of
#      `habit`, and the model-written multi-hop questions (helpers.multihop write);
#   3. both evaluations side by side, the reports, the throughput report, every stage's adapter.
#   4. with DECODE_TRACE=1, the decode benchmark with INIT's adapter under the profiler (bench_grpo_gpu --trace;
#      on a GPU: on a CPU it records nothing and batch 64 takes minutes).
# Everything lands in $RESULTS as it is made, so a window cut short still returns what it measured.
#   setsid nohup bash benchmarks/gpu/recipe.sh >/root/window.out 2>&1 < /dev/null &
#   PRESET=cpu-dry-agent ALT_PRESET=cpu-dry-agent ALT_STAGE=trim MODEL=smollm2-135m HABIT_MIN=0.3 NEXT_MIN=0.3 \
#     INIT=<checkpoint> RESULTS=/tmp/r WORK=/tmp/w BUNDLE=/nonexistent bash benchmarks/gpu/recipe.sh   # on a CPU
set -u
PRESET=${PRESET:-h200_agent}
INIT=${INIT:-results/h200_search/sft_adapter}
HABIT_MIN=${HABIT_MIN:-6}
SFT=${SFT:-0}
NEXT_MIN=${NEXT_MIN:-6}
ALT_PRESET=${ALT_PRESET:-h200_agent_answers}
ALT_STAGE=${ALT_STAGE:-answers}
WRITE_BATCH=${WRITE_BATCH:-64}
# extra options of the recipe's runs and of the alternative, e.g.
#   SETS='--set habit.reward_options={"gain":0.3,"beyond_rag":0.3}'  ALT_SETS='--set grpo.micro_batch_datums=128'
read -r -a SET_ARGS <<< "${SETS:-}"
read -r -a ALT_SET_ARGS <<< "${ALT_SETS:-}"
# a second alternative beside them when ALT2_STAGE is set (ALT2_PRESET, ALT2_SETS as above), e.g. the
# same stage with one setting changed, for a comparison inside one window
ALT2_PRESET=${ALT2_PRESET:-$PRESET}
ALT2_STAGE=${ALT2_STAGE:-}
read -r -a ALT2_SET_ARGS <<< "${ALT2_SETS:-}"
SFT_EVAL=${SFT_EVAL:-results/h200_search/eval/sft.jsonl}  # the same SFT adapter, test split and budgets
source "$(dirname "$0")/common.sh"
log "start recipe preset=$PRESET habit=${HABIT_MIN}min next=${NEXT_MIN}min init=$INIT"
setup_window

AGENT=(--out "$R/agent" --work "$WORK/agent" "${SET_ARGS[@]}")
ALT=(--out "$R/alt" --work "$WORK/alt" "${ALT_SET_ARGS[@]}")
ALT2=(--out "$R/alt2" --work "$WORK/alt2" "${ALT2_SET_ARGS[@]}")
if [ "${PREFERENCE:-0}" = 1 ]; then  # Perplexity's preference model, for a gated reward with s from it:
  # ALT_SETS='--set trim.reward_options={"lambda_tool":0.2,"lambda_len":0.0,"preference":"/root/results/preference"}'
  "$PY" -m helpers.preference train --model "$MODEL" --out "$R/preference" >"$R/preference.log" 2>&1
  log "preference model exited $?: $(tr '\r' '\n' < "$R/preference.log" | grep -i -m1 'held-out accuracy')"
fi

START=(--init-from "$INIT")
if [ "$SFT" = 1 ]; then  # a new warm start: habit starts from this run's SFT, not from INIT
  [ "$HABIT_MIN" = 0 ] && { log "SFT=1 needs HABIT_MIN > 0"; exit 2; }
  experiment sft "${AGENT[@]}" --stage sft
  [ -f "$WORK/agent/sft/result.json" ] || { log "no SFT result: see $R/sft.log"; exit 1; }
  export_stage agent sft
  experiment eval_sft "${AGENT[@]}" --stage eval --only sft &
  START=()
fi
if [ "$HABIT_MIN" = 0 ]; then  # continue from INIT (e.g. the recorded agent): stage 2 and the alternative only
  HABIT=$INIT
else
  experiment habit "${AGENT[@]}" --stage grpo --grpo-stage habit "${START[@]}" --max-minutes "$HABIT_MIN"
  "$PY" benchmarks/bench_grpo_gpu.py report "$WORK/agent/grpo_habit" --out "$R/throughput_alone.json" 2>&1 | tee -a "$R/window.log"
  export_stage agent habit
  HABIT=$("$PY" -c "import json; print(json.load(open('$WORK/agent/grpo_habit/summary.json'))['checkpoint'])")
  log "habit checkpoint $HABIT"
  experiment eval_habit "${AGENT[@]}" --stage eval --only stage_habit &
fi
experiment trim "${AGENT[@]}" --stage grpo --grpo-stage trim --init-from "$HABIT" --max-minutes "$NEXT_MIN" & T=$!
PRESET=$ALT_PRESET experiment alt "${ALT[@]}" --stage grpo --grpo-stage "$ALT_STAGE" \
  --init-from "$HABIT" --max-minutes "$NEXT_MIN" & A=$!
A2=
if [ -n "$ALT2_STAGE" ]; then
  PRESET=$ALT2_PRESET experiment alt2 "${ALT2[@]}" --stage grpo --grpo-stage "$ALT2_STAGE" \
    --init-from "$HABIT" --max-minutes "$NEXT_MIN" & A2=$!
fi
UNTIL=$(date -u -d "+$(python3 -c "print(int(float('$NEXT_MIN') + 0.5))") min" +%H:%M)
"$PY" -m helpers.multihop write --model "$MODEL" --batch "$WRITE_BATCH" --until "$UNTIL" \
  --progress "$R/written_progress.jsonl" --out "$R/written.jsonl" --verdicts "$R/verdicts.jsonl" \
  >"$R/multihop_write.log" 2>&1 &
W=$!
wait $A $T $A2
"$PY" benchmarks/bench_grpo_gpu.py report "$WORK/agent/grpo_trim" "$WORK/alt/grpo_$ALT_STAGE" \
  ${ALT2_STAGE:+"$WORK/alt2/grpo_$ALT2_STAGE"} --out "$R/throughput_side_by_side.json" 2>&1 | tee -a "$R/window.log"
log "trained: every stage's adapter is in its run's checkpoint; evaluations next"

experiment eval_trim "${AGENT[@]}" --stage eval --only sft_grpo &
PRESET=$ALT_PRESET experiment eval_alt "${ALT[@]}" --stage eval --only sft_grpo &
[ -n "$ALT2_STAGE" ] && { PRESET=$ALT2_PRESET experiment eval_alt2 "${ALT2[@]}" --stage eval --only sft_grpo & }
wait  # the evaluations, the habit's evaluation and the writer
log "multihop write: $(tail -c 400 "$R/multihop_write.log" | tr '\r' '\n' | grep '^{' | tail -1)"
[ -f "$SFT_EVAL" ] && mkdir -p "$R/agent/eval" && cp -n "$SFT_EVAL" "$R/agent/eval/sft.jsonl"
experiment report_agent "${AGENT[@]}" --stage report
PRESET=$ALT_PRESET experiment report_alt "${ALT[@]}" --stage report
[ -n "$ALT2_STAGE" ] && PRESET=$ALT2_PRESET experiment report_alt2 "${ALT2[@]}" --stage report
if [ "${DECODE_TRACE:-0}" = 1 ]; then  # the GPU is free now: where a decode step's time goes, with an adapter
  "$PY" benchmarks/bench_grpo_gpu.py decode --model "$MODEL" --adapter "$INIT" --batch-sizes 1,64 --trace 25 \
    --out "$R/decode_trace.json" >"$R/decode_trace.log" 2>&1; log "decode trace: status $?"
  grep -E "steps/s|^trace" "$R/decode_trace.log" | tee -a "$R/window.log"
fi
log "all done"
