#!/usr/bin/env bash
# Pack what a window made into at most 8 files of at most 16 MiB for the transfer back:
# one archive of logs, metrics, evaluations, reports and adapters' meta.json, and each exported
# adapter's weights in 15 MiB parts (<run>_adapter.part0, part1: cat them in order).
#   bash benchmarks/gpu/pack.sh /root/results "$OUT"
set -u
R=${1:-/root/results}; DEST=${2:-$OUT}
mkdir -p "$DEST"
tar czf "$DEST/window.tgz" --exclude='*/adapter/adapter.safetensors' -C "$(dirname "$R")" "$(basename "$R")" 2>/dev/null
for adapter in "$R"/*/adapter/adapter.safetensors; do
  [ -f "$adapter" ] || continue
  run=$(basename "$(dirname "$(dirname "$adapter")")")
  split -b 15M -d -a 1 "$adapter" "$DEST/${run}_adapter.part"
done
ls -la "$DEST"
