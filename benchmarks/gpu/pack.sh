#!/usr/bin/env bash
# Pack what a window made into at most 8 files of at most 16 MiB for the transfer back:
# window.tgz (logs, metrics, evaluations, reports, the adapters' meta.json) and the exported adapters'
# weights as one tar in 15 MiB parts (adapters.tar.part0, part1, …):
#   cat adapters.tar.part* | tar x     # gives results/<run>/adapter/adapter.safetensors again
#   bash benchmarks/gpu/pack.sh /root/results "$OUT"
set -u
R=${1:-/root/results}; DEST=${2:-$OUT}
mkdir -p "$DEST"
tar czf "$DEST/window.tgz" --exclude='*/adapter/adapter.safetensors' -C "$(dirname "$R")" "$(basename "$R")" 2>/dev/null
adapters=$(cd "$(dirname "$R")" && ls "$(basename "$R")"/*/adapter/adapter.safetensors 2>/dev/null)
if [ -n "$adapters" ]; then
  (cd "$(dirname "$R")" && tar cf - $adapters) | split -b 15M -d -a 1 - "$DEST/adapters.tar.part"
fi
ls -la "$DEST"
