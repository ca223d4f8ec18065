#!/usr/bin/env bash
# One GPU window step beside training: first the solvers' verdicts for the rule-made questions that have
# none (`python -m helpers.multihop solve`, merged into $R/verdicts.jsonl, which starts as a copy of the
# committed verdicts, so the packed file is the whole merged file), then the model-written multi-hop
# questions (`python -m helpers.multihop write`: the fresh 2- and 3-hop chains of `written.py`, written by the course's model, held to every check,
# solvers included) for MINUTES at most, under CAP of the GPU's memory. The survivors land in
# $R/written.jsonl (candidate format, to be appended to helpers/multihop/written.jsonl) with their verdicts in
# $R/verdicts.jsonl; $R/written_progress.jsonl lets a later window resume. Started after the first
# script's set-up, so the two share it:
#   (MINUTES=8 setsid nohup bash benchmarks/gpu/after.sh "setup done" write benchmarks/gpu/multihop_write.sh \
#      >/root/write.out 2>&1 </dev/null &)
set -u
MINUTES=${MINUTES:-8}
CAP=${CAP:-0.04}
BATCH=${BATCH:-32}
source "$(dirname "$0")/common.sh"
log "start multihop_write minutes=$MINUTES cap=$CAP batch=$BATCH"
setup_window
until_time=$(date -u -d "+$MINUTES min" +%H:%M)
[ -f "$R/verdicts.jsonl" ] || cp helpers/multihop/verdicts.jsonl "$R/verdicts.jsonl"
COURSE_CUDA_MEMORY_FRACTION=$CAP "$PY" -m helpers.multihop solve --model "$MODEL" --batch "$BATCH" \
  --until "$until_time" --out "$R/verdicts.jsonl" >"$R/multihop_solve.log" 2>&1
log "multihop solve exited $? (until $until_time UTC): $(tail -c 400 "$R/multihop_solve.log" | tr '\r' '\n' | grep '^{' | tail -1)"
COURSE_CUDA_MEMORY_FRACTION=$CAP "$PY" -m helpers.multihop write --model "$MODEL" --batch "$BATCH" \
  --until "$until_time" --progress "$R/written_progress.jsonl" --out "$R/written.jsonl" \
  --verdicts "$R/verdicts.jsonl" >"$R/multihop_write.log" 2>&1
log "multihop write exited $? (until $until_time UTC): $(tail -c 400 "$R/multihop_write.log" | tr '\r' '\n' | grep '^{' | tail -1)"
log "all done"
