#!/usr/bin/env bash
# The H200 experiment, in commands of at most ~9 minutes each (every stage resumes where it stopped).
#   bash results/run.sh            # all stages, one after the other
#   bash results/run.sh grpo       # one stage (sft | grpo | eval | report)
# Outputs: results/h200/ (metrics, eval JSONL, tables, plots, adapter); checkpoints: runs/h200/ (ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
RUN=("$PY" -m helpers.experiment --preset h200 --out results/h200 --work runs/h200)
stage=${1:-all}
if [[ $stage == all || $stage == sft ]]; then "${RUN[@]}" --stage sft; fi
if [[ $stage == all || $stage == grpo ]]; then
  "${RUN[@]}" --stage grpo --max-minutes 8
  "${RUN[@]}" --stage grpo --max-minutes 4   # resumes from the last checkpoint, same data order
fi
if [[ $stage == all || $stage == eval ]]; then "${RUN[@]}" --stage eval --max-minutes 8; fi
if [[ $stage == all || $stage == report ]]; then "${RUN[@]}" --stage report; fi
