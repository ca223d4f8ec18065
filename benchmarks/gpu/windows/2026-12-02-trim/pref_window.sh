#!/usr/bin/env bash
# the preference arm, restarted after the preference model's device fix
set -u
PRESET=h200_agent
NAME=${NAME:-pref}
source benchmarks/gpu/common.sh
export PYTHONPATH=/tmp/site:$PWD
[ -f "$R/preference/preference.safetensors" ] || "$PY" -m helpers.preference train --model "$MODEL" --out "$R/preference" >"$R/preference.log" 2>&1
log "preference model exited $?: $(tr '\r' '\n' < "$R/preference.log" | grep -i -m1 'held-out accuracy')"
SETS=(--set grpo.micro_batch_tokens=${MB_TOKENS:-65536} --set trim.dynamic_sampling_draw=2 --set 'trim.reward_options={"lambda_tool":0.2,"lambda_len":0.0,"preference":"/root/results/preference"}')
"$PY" -m helpers.experiment --preset $PRESET --out "$R/$NAME" --work "$WORK/$NAME" "${SETS[@]}" --stage grpo --grpo-stage trim \
  --init-from results/h200_agent/adapter --max-minutes "${NEXT_MIN:-8}" >"$R/$NAME.log" 2>&1
log "pref exited $?"
"$PY" benchmarks/bench_grpo_gpu.py report "$WORK/$NAME/grpo_trim" --out "$R/throughput_$NAME.json" 2>&1 | tee -a "$R/window.log"
"$PY" -m helpers.experiment --preset $PRESET --out "$R/$NAME" --work "$WORK/$NAME" "${SETS[@]}" --stage eval --only sft_grpo >"$R/eval_$NAME.log" 2>&1
log "eval_pref exited $?"
"$PY" -m helpers.experiment --preset $PRESET --out "$R/$NAME" --work "$WORK/$NAME" "${SETS[@]}" --stage report >"$R/report_$NAME.log" 2>&1
log "report_pref exited $? (pref all done)"
