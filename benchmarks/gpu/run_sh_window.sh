#!/usr/bin/env bash
# One GPU window: the whole experiment, `results/run.sh`, from its first stage to its report, with the
# exit status of the script and of every stage it ran (does it run to its end on a GPU?), and the
# throughput report of its GRPO run. run.sh runs four tracks side by side after SFT (GRPO, the
# evaluations, two efficiency runs); each process is capped at CAP of the GPU's memory so that the four
# and the budget sweeps fit one card (0.24 x 4 on an 80 GB H100). Then the decode step under the profiler.
#   (setsid nohup bash benchmarks/gpu/run_sh_window.sh >/root/window.out 2>&1 </dev/null &)
#   PRESET=cpu-dry MODEL=smollm2-135m RESULTS=/tmp/r WORK=/tmp/w BUNDLE=/nonexistent \
#     PYTHON=.venv/bin/python bash benchmarks/gpu/run_sh_window.sh      # the plumbing, on a CPU
set -u
PRESET=${PRESET:-h200}
CAP=${CAP:-0.24}
source "$(dirname "$0")/common.sh"
log "start run_sh_window preset=$PRESET cap=$CAP"
setup_window
watch_memory
started=$(date +%s)
COURSE_CUDA_MEMORY_FRACTION=$CAP PYTHON=$PY PRESET=$PRESET bash results/run.sh "$R/$PRESET" "$WORK/$PRESET" \
  >"$R/run_sh.log" 2>&1
status=$?
log "results/run.sh exited $status after $(( $(date +%s) - started )) s: $(tail -n 1 "$R/$PRESET/logs/run.log" 2>/dev/null)"
# each stage's own log, and whether it ended in a Python error
for stage_log in "$R/$PRESET"/logs/*.log; do
  [ -f "$stage_log" ] || continue
  if grep -q "^Traceback" "$stage_log"; then verdict="traceback"; else verdict="no traceback"; fi
  log "$(basename "$stage_log"): $verdict"
done
for run in "$WORK/$PRESET"/grpo*; do
  [ -d "$run" ] && "$PY" benchmarks/bench_grpo_gpu.py report "$run" --out "$R/throughput_$(basename "$run").json" 2>&1 | tee -a "$R/window.log"
done
# Then, the GPU to itself: where a decode step's time goes (DECODE_TRACE=0 skips it). The default layer and
# the fastest (LoRA merged, halves compiled), captured, and the fastest uncaptured (each kernel launched
# from the host, so its trace lists every kernel even where replays are not traced), with the run's adapter.
if [ "${DECODE_TRACE:-1}" = 1 ]; then
  adapter=()
  [ -d "$R/$PRESET/adapter" ] && adapter=(--adapter "$R/$PRESET/adapter")  # the report's final adapter
  for variant in "1" "merge,inductor" "merge,inductor --eager"; do
    fuse=${variant%% *}
    extra=${variant#"$fuse"}
    # shellcheck disable=SC2086
    decode_bench "decode_trace_${fuse/,/_}${extra:+_uncaptured}" "$fuse" "${adapter[@]}" --batch-sizes 1,64 --trace 30 $extra
  done
fi
log "all done"
