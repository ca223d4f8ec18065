#!/usr/bin/env bash
# Start a second window script once the first one's log says LINE, so that the GPU goes to the second as
# soon as the first stops training (its evaluations then share the GPU with the second's training).
# The second writes into $R/NAME (its own window.log, tables and adapters, which pack.sh also takes) and
# works in $WORK-NAME; its settings come from the environment, as for any window script:
#   (setsid nohup bash benchmarks/gpu/solo.sh >/root/window.out 2>&1 </dev/null &)
#   (SEEDS=3,1 VARIANTS=gain5 setsid nohup bash benchmarks/gpu/after.sh "phase 1 exported" gain \
#      benchmarks/gpu/trim_variants.sh >/root/after.out 2>&1 </dev/null &)
# It gives up (exit 1) when the first script's log says "setup failed" or "all done" without LINE.
set -u
LINE=${1:?the line of the first log to wait for}
NAME=${2:?a folder name for the results of the second script}
SCRIPT=${3:?the second window script}
R=${RESULTS:-/root/results}
WORK=${WORK:-/root/work}
until grep -q -e "$LINE" "$R/window.log" 2>/dev/null; do
  if grep -q -e "setup failed" -e "all done" "$R/window.log" 2>/dev/null; then
    echo "$(date -u +%T) the first script ended without \"$LINE\": $SCRIPT not started" | tee -a "$R/window.log"
    exit 1
  fi
  sleep 5
done
mkdir -p "$R/$NAME"
RESULTS=$R/$NAME WORK=$WORK-$NAME exec bash "$SCRIPT"
