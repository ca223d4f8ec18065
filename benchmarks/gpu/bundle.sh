#!/usr/bin/env bash
# Prepare what a GPU machine without network needs, in pieces that fit one transfer each (64 MiB
# with the working tree):
#   .device/c01…  the Qwen2.5-0.5B GGUF in PIECE_MB pieces (the six model packages' pieces,
#                 concatenated in order; the window scripts join them, check the sha256, provision)
#   next          the wheels the GPU image lacks, the offline data pack and the synthetic split built
#                 here; with COURSE=1 also the notebook kernel's and widgets' wheels (course_window.sh
#                 runs notebooks there)
#   last (COURSE=1)  the recorded adapters the notebooks open, laid out as in results/
# Each piece is copied to the same folder there (/root/b): `cp -r .device/cNN/* /root/b/`.
#   PIECE_MB=56 [COURSE=1] bash benchmarks/gpu/bundle.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}
PIECE_MB=${PIECE_MB:-56}
rm -rf .device && mkdir -p .device/extra/whl .device/extra/shared

download() {  # download DEST PACKAGE... : binary wheels for the image's Python 3.12 on x86_64, no deps
  local dest=$1; shift
  for pkg in "$@"; do
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      --platform manylinux1_x86_64 -d "$dest" "$pkg" 2>&1 | grep -v "^WARNING" || true
  done
}
installed() {  # the version installed here, so the GPU runs what the tests ran
  local version
  version=$("$PY" -m pip show "$1" 2>/dev/null | sed -n 's/^Version: //p' || true)
  echo "$1${version:+==$version}"
}

download .device/extra/whl pytrio==0.2.9 pydantic pydantic-core annotated-types typing-inspection \
  typing_extensions bm25s PyStemmer gguf python-dotenv tomli
cp -r "${COURSE_SHARED:-../shared}/data" .device/extra/shared/
# the synthetic multi-hop split, built here (or found current) once, so a window's set-up need not
# rebuild it (setup_window copies it into the data folder), with the candidate caches it was built from
# (synthetic_candidates.jsonl, …), so the solvers there (multihop_write.sh) start judging at once instead
# of regenerating every pass's candidates
"$PY" -c "from helpers.multihop import build; build.prepare_synthetic(show_progress=False)"
mkdir -p .device/extra/synthetic
cp "${COURSE_DATA:-data}"/synthetic.jsonl "${COURSE_DATA:-data}"/synthetic_report.json \
  "${COURSE_DATA:-data}"/synthetic_*.jsonl .device/extra/synthetic/
if [ "${COURSE:-0}" = 1 ]; then
  kernel="nbclient nbformat fastjsonschema jsonschema jsonschema-specifications referencing rpds-py
          ipykernel ipython ipython_pygments_lexers comm debugpy jupyter_client jupyter_core matplotlib-inline
          nest-asyncio2 pyzmq tornado traitlets jedi parso prompt_toolkit wcwidth pexpect ptyprocess
          stack-data asttokens executing pure_eval platformdirs
          ipywidgets widgetsnbextension jupyterlab_widgets anywidget psygnal
          swanlab orjson pydantic-settings pyecharts pyroaring watchdog prettytable"
  for pkg in $kernel; do download .device/extra/whl "$(installed "$pkg")"; done
  "$PY" -m pip wheel -q --no-deps -w .device/extra/whl pwinput 2>&1 | grep -v "^WARNING" || true  # sdist only
fi

gguf=$("$PY" -c "from helpers import models; print(models.assemble_gguf('qwen2.5-0.5b'))")
split -b "${PIECE_MB}M" -d -a 2 "$gguf" .device/q.
# the pieces' names and checksums travel with the last piece, so the set-up there can say which
# piece did not arrive (a transfer refused for size leaves a gap that would otherwise surface as a
# bad GGUF minutes later)
(cd .device && sha256sum q.* > extra/pieces.sha256)
i=1
for piece in .device/q.*; do
  dir=$(printf ".device/c%02d" "$i"); mkdir -p "$dir"; mv "$piece" "$dir/"; i=$((i + 1))
done
mv .device/extra "$(printf ".device/c%02d" "$i")"; i=$((i + 1))
if [ "${COURSE:-0}" = 1 ]; then
  dir=$(printf ".device/c%02d" "$i")
  # the recorded policies the notebooks offer by name (helpers.course.policies)
  adapters=$("$PY" -c "from helpers.course.policies import RECORDED_POLICIES as P
print(' '.join(sorted({f'{p.run}/{p.adapter}' for p in P.values() if p})))")
  for adapter in $adapters; do
    mkdir -p "$dir/adapters/$(dirname "$adapter")"; cp -r "results/$adapter" "$dir/adapters/$adapter"
  done
fi
du -sh .device/c* | tr '\n' ' '; echo
