#!/usr/bin/env bash
# A short GPU window with no data set-up: the model from the bundle's pieces, then a whole decode step
# with the draw's two-level inverse CDF against the one float64 scan it replaced (`--one-scan`), for the
# default layer and the merged + compiled one (FUSES), batch 64, with ADAPTER's LoRA (the tokens must match).
#   (setsid nohup bash benchmarks/gpu/draw_window.sh >/root/window.out 2>&1 </dev/null &)
#   MODEL=smollm2-135m BATCH=2 ADAPTER= RESULTS=/tmp/r BUNDLE=/nonexistent PYTHON=.venv/bin/python \
#     bash benchmarks/gpu/draw_window.sh                                  # the plumbing, on a CPU
set -u
source "$(dirname "$0")/common.sh"
ADAPTER=${ADAPTER-results/h200_agent/adapter}
BATCH=${BATCH:-64}
log "start draw_window model=$MODEL batch=$BATCH adapter=${ADAPTER:-none}"
setup_model
log "setup done"
adapter=()
[ -n "$ADAPTER" ] && adapter=(--adapter "$ADAPTER")
for fuse in ${FUSES:-1 merge,inductor}; do
  for draw in "" "--one-scan"; do
    # shellcheck disable=SC2086
    decode_bench "decode_${fuse/,/_}${draw:+_one_scan}" "$fuse" "${adapter[@]}" --batch-sizes "$BATCH" \
      --repeats "${REPEATS:-3}" $draw
  done
done
log "all done"
