#!/usr/bin/env bash
# Three GRPO processes of one recipe side by side (preset h200, exact match, from INIT), each capped at
# a third of the GPU's memory, MINUTES each: the throughput of a GPU shared by three runs.
# MPS=1 runs them as clients of one CUDA MPS server (`start_mps`, common.sh): without it the GPU
# time-slices between the processes, each step's many small kernels waiting for the others' slices;
# under MPS the three processes' kernels can run at once. TAG names the round's folders, so a plain
# round and an MPS round compare in one window:
#   setsid nohup bash benchmarks/gpu/three_side_by_side.sh >/root/window.out 2>&1 < /dev/null &
#   MINUTES=3 TAG=plain bash benchmarks/gpu/three_side_by_side.sh; MINUTES=3 TAG=mps MPS=1 bash ...
set -u
PRESET=${PRESET:-h200}
INIT=${INIT:-results/h200_search/sft_adapter}
MINUTES=${MINUTES:-5}
MPS=${MPS:-0}
TAG=${TAG:-exact}
source "$(dirname "$0")/common.sh"
log "start three side by side preset=$PRESET minutes=$MINUTES init=$INIT mps=$MPS tag=$TAG"
setup_window
if [ "$MPS" = 1 ]; then
  start_mps || { log "MPS unavailable: nothing ran (a plain round is TAG=... without MPS=1)"; log "all done"; exit 3; }
fi
watch_memory
pids=()
for i in 1 2 3; do
  COURSE_CUDA_MEMORY_FRACTION=0.32 experiment "${TAG}_$i" --out "$R/${TAG}_$i" --work "$WORK/${TAG}_$i" --stage grpo \
    --init-from "$INIT" --max-minutes "$MINUTES" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
[ "$MPS" = 1 ] && stop_mps
"$PY" benchmarks/bench_grpo_gpu.py report "$WORK"/"${TAG}"_{1,2,3}/grpo --out "$R/throughput_${TAG}.json" 2>&1 | tee -a "$R/window.log"
log "all done"
