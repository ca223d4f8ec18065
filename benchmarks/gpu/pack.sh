#!/usr/bin/env bash
# Pack what a window made into at most 8 files of at most 16 MiB, 64 MiB together, for the transfer back:
# window.tgz (logs, metrics, evaluations, reports, the adapters' meta.json) and the exported adapters'
# weights as one tar in 15 MiB parts (adapters.tar.part0, part1, …):
#   cat adapters.tar.part* | tar x     # gives results/<run>/adapter/adapter.safetensors again
#   [ADAPTERS="trim_answers trim_exact"] bash benchmarks/gpu/pack.sh /root/results "$OUT"
# Three adapters of the 0.5B (17 MiB each) fit one call: ADAPTERS names the runs to take first (the
# others follow while they fit), so a window's last call brings back the policies that matter; a run of a
# second script (after.sh) is named with its folder, as in ADAPTERS="exact_solo gain/gain5_s3".
set -u
R=${1:-/root/results}; DEST=${2:-$OUT}
LIMIT_MB=${PACK_LIMIT_MB:-62}
mkdir -p "$DEST"
tar czf "$DEST/window.tgz" --exclude='*/adapter/adapter.safetensors' -C "$(dirname "$R")" "$(basename "$R")" 2>/dev/null
base=$(basename "$R")
# a second script's results may sit one folder down ($R/<script>/<run>/adapter)
found=$(cd "$(dirname "$R")" && ls "$base"/*/adapter/adapter.safetensors "$base"/*/*/adapter/adapter.safetensors 2>/dev/null)
ordered=()
for name in ${ADAPTERS:-}; do
  [ -f "$R/$name/adapter/adapter.safetensors" ] && ordered+=("$base/$name/adapter/adapter.safetensors")
done
for file in $found; do
  [[ " ${ordered[*]} " == *" $file "* ]] || ordered+=("$file")
done
total=$(( $(stat -c %s "$DEST/window.tgz") ))
chosen=()
for file in "${ordered[@]}"; do
  size=$(stat -c %s "$(dirname "$R")/$file")
  if [ $(( total + size )) -le $(( LIMIT_MB * 1048576 )) ]; then chosen+=("$file"); total=$(( total + size ))
  else echo "left for a later call: $file"; fi
done
if [ ${#chosen[@]} -gt 0 ]; then
  (cd "$(dirname "$R")" && tar cf - "${chosen[@]}") | split -b 15M -d -a 1 - "$DEST/adapters.tar.part"
fi
ls -la "$DEST"
