#!/usr/bin/env bash
# Three GRPO processes of one recipe side by side (preset h200, exact match, from INIT), each capped at
# a third of the GPU's memory, MINUTES each: the throughput of a GPU shared by three runs.
#   setsid nohup bash benchmarks/gpu/three_side_by_side.sh >/root/window.out 2>&1 < /dev/null &
set -u
PRESET=${PRESET:-h200}
INIT=${INIT:-results/h200_search/sft_adapter}
MINUTES=${MINUTES:-5}
source "$(dirname "$0")/common.sh"
log "start three side by side preset=$PRESET minutes=$MINUTES init=$INIT"
setup_window
command -v nvidia-smi >/dev/null && \
  { nvidia-smi --query-compute-apps=timestamp,pid,used_memory --format=csv,noheader -l 5 >"$R/gpu_memory.csv" 2>&1 & }
pids=()
for i in 1 2 3; do
  COURSE_CUDA_MEMORY_FRACTION=0.32 experiment "exact_$i" --out "$R/exact_$i" --work "$WORK/exact_$i" --stage grpo \
    --init-from "$INIT" --max-minutes "$MINUTES" &
  pids+=($!)
done
wait "${pids[@]}"
"$PY" benchmarks/bench_grpo_gpu.py report "$WORK"/exact_{1,2,3}/grpo --out "$R/throughput_three.json" 2>&1 | tee -a "$R/window.log"
log "all done"
