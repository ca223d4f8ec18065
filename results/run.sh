#!/usr/bin/env bash
# The whole experiment in one command: about 20 minutes on one H200.
#
#   bash results/run.sh                       # preset h200: results/h200 + results/efficiency
#   PRESET=h200_agent bash results/run.sh     # the search agent's recipe: GRPO in stages (habit, trim)
#   PRESET=h200_staged bash results/run.sh    # in three (habit, answers, trim), from a rewriting SFT teacher
#   PRESET=h200_again bash results/run.sh     # the multi-search agent's: exact match, then trim
#   PRESET=cpu-dry bash results/run.sh /tmp/r/h200 /tmp/w   # the same plumbing, tiny, on a CPU
#
# 1. SFT warm start (scripted teacher, train questions 1-800).
# 2. Then four tracks side by side on the one GPU (decoding is launch-bound, so they overlap well):
#    A  GRPO on train questions 801+ (a staged preset: each stage from the previous one's adapter, for
#       its own minutes) -> eval sft_grpo (the last stage) -> budget sweep
#    B  eval sft (and any base evaluation not yet in OUT/eval) -> budget sweeps of base and sft
#    C  efficiency comparison, plain exact-match reward   (helpers.efficiency compare)
#    D  efficiency comparison, gated reward with penalties
# 3. The report (OUT/README.md, tables, plots, the final adapter).
# Every stage resumes or is skipped when its output exists; logs go to OUT/logs.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
PRESET=${PRESET:-h200}
OUT=${1:-results/$PRESET}
WORK=${2:-runs/$PRESET}
EFF=${EFF_OUT:-$(dirname "$OUT")/efficiency}
# GRPO wall-clock minutes (it checkpoints and stops cleanly); a staged preset sets each stage's own
STAGED=$("$PY" -c "from helpers.experiment import make_plan; print(int(bool(make_plan('$PRESET', 'x').stages)))" 2>/dev/null | tail -1)
if [ "$STAGED" = 1 ]; then GRPO_MIN=${GRPO_MIN:-}; else GRPO_MIN=${GRPO_MIN:-9}; fi
# the final policy, and with a staged preset each earlier stage's policy too (the report's stage rows)
GRPO_EVALS=$("$PY" -c "from helpers.experiment import make_plan, grpo_evaluations
print(','.join(grpo_evaluations(make_plan('$PRESET', 'x'))))" 2>/dev/null | tail -1)
EFF_MIN=${EFF_MIN:-7}            # each efficiency run
EFF_Q=${EFF_Q:-8}                # questions per step in the efficiency runs
EFF_STEPS=${EFF_STEPS:-1000}
BUDGET_Q=${BUDGET_Q:-100}        # test questions per budget in the sweep
BUDGETS=${BUDGETS:-0,1,2,3,4,5,6,7,8,9,10}
LOGS=$OUT/logs
mkdir -p "$LOGS" "$EFF"
RUN=("$PY" -m helpers.experiment --preset "$PRESET" --out "$OUT" --work "$WORK")
MODEL=$("$PY" -c "from helpers.experiment import make_plan; print(make_plan('$PRESET', 'x').grpo.model)" 2>/dev/null | tail -1)
echo "$(date -u +%FT%TZ) start preset=$PRESET model=$MODEL out=$OUT work=$WORK" | tee -a "$LOGS/run.log"

"${RUN[@]}" --stage sft >"$LOGS/sft.log" 2>&1
field() { "$PY" -c "import json; print(json.load(open('$WORK/sft/result.json'))['$1'])"; }
SFT_STATE=$(field state_path)
SFT_SAMPLER=$(field sampler_path)
echo "$(date -u +%FT%TZ) sft done" | tee -a "$LOGS/run.log"
# No warm-up before the tracks: measured on an H200, compiling once up front (227 s) cost more than
# the four processes compiling side by side (185-213 s each); see benchmarks/RESULTS.md.

# the GRPO flags of the preset, for the efficiency runs (same budgets, rank, questions)
EFF_FLAGS=$("$PY" - "$PRESET" <<'EOF'
import sys
from helpers.experiment import make_plan
from helpers.runs import config_flags
grpo = make_plan(sys.argv[1], "x").grpo
skip = {"out", "init_from", "max_minutes", "resume", "max_steps", "questions_per_batch", "backend",
        "data_source", "limit", "save_every", "reward", "reward_options"}  # compare sets its rewards
print(" ".join(config_flags(grpo, skip)))  # word-split by the shell: no value holds a space
EOF
)
budget() {  # budget <out json> NAME=PATH ...
  local out=$1; shift
  local policies=()
  for p in "$@"; do policies+=(--policy "$p"); done
  "$PY" -m helpers.efficiency budget --model "$MODEL" --limit "$BUDGET_Q" --budgets "$BUDGETS" \
    --out "$out" "${policies[@]}"
}

(
  "${RUN[@]}" --stage grpo ${GRPO_MIN:+--max-minutes "$GRPO_MIN"}
  "${RUN[@]}" --stage eval --only "${GRPO_EVALS:-sft_grpo}"
  POLICY=$("$PY" -c "from helpers.experiment import make_plan, grpo_policy_path; print(grpo_policy_path(make_plan('$PRESET', '$OUT', '$WORK')))" | tail -1)
  budget "$EFF/budget_sft_grpo.json" "sft_grpo=$POLICY"
) >"$LOGS/track_a_grpo.log" 2>&1 &
A=$!
(
  "${RUN[@]}" --stage eval --only base_closed_book,base_rag,base_agent,sft
  budget "$EFF/budget_base_sft.json" "base=" "sft=$SFT_SAMPLER"
) >"$LOGS/track_b_eval.log" 2>&1 &
B=$!
for reward in exact_match gated; do
  # shellcheck disable=SC2086
  "$PY" -m helpers.efficiency compare --rewards "$reward" --model "$MODEL" --init-from "$SFT_STATE" \
    $EFF_FLAGS --questions-per-batch "$EFF_Q" --max-steps "$EFF_STEPS" --max-minutes "$EFF_MIN" \
    --out "$EFF" >"$LOGS/track_eff_$reward.log" 2>&1 &
  eval "E_$reward=\$!"
done
status=0
for pid in $A $B $E_exact_match $E_gated; do wait "$pid" || status=1; done
echo "$(date -u +%FT%TZ) tracks done (status $status)" | tee -a "$LOGS/run.log"

"$PY" - "$EFF" <<'EOF'
# one budget file for the notebooks: base, sft, sft_grpo
import json, sys
from pathlib import Path
eff = Path(sys.argv[1])
points = []
for name in ("budget_base_sft.json", "budget_sft_grpo.json"):
    if (eff / name).exists():
        points += json.loads((eff / name).read_text())
(eff / "budget_sweep.json").write_text(json.dumps(points, indent=1))
EOF
"${RUN[@]}" --stage report >"$LOGS/report.log" 2>&1
"$PY" -m helpers.efficiency report --dir "$EFF" >>"$LOGS/report.log" 2>&1
echo "$(date -u +%FT%TZ) done" | tee -a "$LOGS/run.log"
exit $status
