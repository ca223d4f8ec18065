#!/usr/bin/env bash
# Pack what a window made into at most 8 files of at most 16 MiB for the transfer back:
# one archive of logs, metrics, evaluations and reports, and each exported adapter in 15 MiB parts.
#   bash benchmarks/gpu/pack.sh /root/results "$OUT"
set -u
R=${1:-/root/results}; DEST=${2:-$OUT}
mkdir -p "$DEST"
tar czf "$DEST/window.tgz" --exclude='*/adapter/*' -C "$(dirname "$R")" "$(basename "$R")" 2>/dev/null
for adapter in "$R"/*/adapter/adapter.safetensors; do
  [ -f "$adapter" ] || continue
  run=$(basename "$(dirname "$(dirname "$adapter")")")
  cp "$(dirname "$adapter")/meta.json" "$DEST/${run}_adapter_meta.json"
  split -b 15M -d -a 1 "$adapter" "$DEST/${run}_adapter.part"
done
ls -la "$DEST"
