#!/usr/bin/env bash
# Inside one device call: wait until the window's log says "all done" or "setup failed" (nothing more
# will come) or SECONDS_LEFT pass, print the log's tail, and pack what is there into $OUT (each call
# packs, so a machine lost later still leaves the last packed results; UNTIL="phase 1 exported" stops
# on another line of the log). Launch and wait in the same call where the work fits in it:
#   (setsid nohup bash benchmarks/gpu/side_by_side.sh >/root/window.out 2>&1 </dev/null &); \
#     bash benchmarks/gpu/wait_and_pack.sh 540
set -u
LIMIT=${1:?seconds to wait at most}
UNTIL=${UNTIL:-all done}
R=${RESULTS:-/root/results}
start=$(date +%s)
while [ $(( $(date +%s) - start )) -lt "$LIMIT" ] && ! grep -q -e "$UNTIL" -e "all done" -e "setup failed" "$R/window.log" 2>/dev/null; do
  sleep 5
done
tail -n 25 "$R/window.log" 2>/dev/null || tail -n 25 /root/window.out
bash "$(dirname "$0")/pack.sh" "$R" "${OUT:?set OUT to the folder that comes back}" | tail -n 9
