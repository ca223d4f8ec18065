#!/usr/bin/env bash
# One GPU window for the course's `gpu` profile: notebooks 09 then 10 executed headless with
# COURSE_PROFILE=gpu (09 runs the real recipe, SFT then GRPO, inside its dashboard; 10 evaluates
# that run on the 600 test questions), timed per notebook and per cell, then the throughput report
# of the recipe's GRPO run. Run detached on the GPU machine from the repository root:
#   setsid nohup bash benchmarks/gpu/course_window.sh > /root/window.out 2>&1 < /dev/null &
# The notebooks run in a copy of the working tree (REPO, /root/repo): every call of the device tool
# copies the tree again, which would replace what a running notebook reads and writes. The recorded
# adapters the notebooks open travel in the bundle (ADAPTERS, /root/b/adapters, laid out as in
# results/) because the tree with them is over one transfer; they are put back into the copy.
# On a CPU the same script checks the plumbing in the fast profile:
#   NB_PROFILE=fast MODEL=smollm2-135m RESULTS=/tmp/r WORK=/tmp/w REPO=/tmp/repo BUNDLE=/nonexistent \
#     PYTHON=.venv/bin/python bash benchmarks/gpu/course_window.sh
set -u
NB_PROFILE=${NB_PROFILE:-gpu}
NOTEBOOKS=${NOTEBOOKS:-09 10}
REPO=${REPO:-/root/repo}
source "$(dirname "$0")/common.sh"
ADAPTERS=${ADAPTERS:-$B/adapters}
log "start course window profile=$NB_PROFILE notebooks=$NOTEBOOKS"
setup_window

rm -rf "$REPO" && mkdir -p "$REPO" && tar cf - --exclude=./.git --exclude=./.venv --exclude=./.device . | tar xf - -C "$REPO"
if [ -d "$ADAPTERS" ]; then cp -r "$ADAPTERS"/. "$REPO/results/"; fi
log "working copy in $REPO: $(du -sh "$REPO/results" | cut -f1) of results"
cd "$REPO" || exit 1
# the copy's helpers, not the tree's (setup_window put the tree on the path)
export PYTHONPATH=$([ -d "$B/whl" ] && echo /tmp/site:)$REPO
# shellcheck disable=SC2086
COURSE_PROFILE=$NB_PROFILE "$PY" benchmarks/bench_course.py --profile "$NB_PROFILE" $NOTEBOOKS \
  --json "$R/course_$NB_PROFILE.json" --save "$R/notebooks" 2>&1 | tee -a "$R/window.log"
log "notebooks done"
GRPO_RUN="$COURSE_RUNS/gpu-recipe/work/grpo"
if [ -d "$GRPO_RUN" ]; then
  "$PY" benchmarks/bench_grpo_gpu.py report "$GRPO_RUN" --out "$R/throughput_recipe.json" 2>&1 | tee -a "$R/window.log"
  cp -r "$COURSE_RUNS/gpu-recipe/results" "$R/gpu_recipe" 2>/dev/null
  cp "$GRPO_RUN/metrics.jsonl" "$R/gpu_recipe_grpo_metrics.jsonl"  # every step's figures (the KL per step)
fi
log "all done"
