#!/usr/bin/env bash
# One GPU window on the multi-search agent's second stage: which part of `trim` decides whether the
# second search stays where it pays (HotpotQA) or spreads to questions one search answers (NQ)?
# From one committed exact-match policy (INIT), stage `trim` of preset h200_again (15 updates) in
# VARIANTS, side by side, once per round in SEEDS (a round per word; seeds joined by commas, as in "3,1",
# train side by side in one round):
#   base     `trim` as the recipe has it (gated reward, tool-call penalty λ 0.2, synthetic half);
#   synth25  a quarter of each batch from the synthetic multi-hop split instead of half (the split's
#            questions all pay for a second search; does the habit spread from them to NQ?);
#   tool4    the tool-call penalty doubled (λ 0.4; it only charges calls above the group's right answers);
#   nosynth  no synthetic questions at all;
#   gain5    the reward `search_gain` (gain 0.5) instead of the gated one: a second search paid or charged
#            by what the same policy answers when made to answer after its first search;
#   gain5ns  gain5 without synthetic questions (do the second searches it pays spread from them?);
#   charge5  `search_gain` that only charges (gain 0.5, pay false): a second search that lost the answer
#            its first search had found costs half the outcome; none earns more than its outcome;
#   answers  exact match on `trim`'s mix (synthetic half, dynamic sampling): the staged recipe's stage that
#            turns a habit into right answers, from a policy that already searches again;
#   read     `answers` with a reading curriculum: on half of the questions (a fixed half, hashed) the
#            first search, when its query is the question, returns every gold passage in the index's top k
#            (helpers.search.gold_first); the rest, and every other search, meet the index. Rollouts of a
#            handed-over question differ only in how they read, so exact match trains reading. Evaluated
#            with the index alone, as every policy;
#   exact5   exact match, no synthetic questions, 5 passages a search (observation budget 256 tokens a
#            passage, as `passage_budgets` in common.sh) until the minutes end: can the policy learn to read the passages
#            that, untrained, cost it more answers than they found? Evaluated with 5 passages too;
#   exact3   its control: the same with 3 passages (the recorded budgets); exactK for any K passages;
#   NAME-kK  any variant above but exactK, searching with K passages (charge5-k2: charge5, 2 passages a
#            search); both training and its evaluations search with K, with budgets to fit;
#   NAME-rN  any variant above (after its -kK) with at most N dynamic-sampling rounds a step instead of the
#            preset's 3 (answers-k2-r1: one round of 16 questions x 8 rollouts, whatever their signal):
#            what a step costs when dynamic sampling does not repeat its sampling;
#   NAME-f   (last) any variant above trained only on the questions where INIT's group of rollouts had
#            signal (the pass@k filter, helpers.question_filter: judged once from INIT with the first -f
#            variant's reward and passages, before the first round, over the questions it draws: the
#            split's and, with a synthetic share, the synthetic split's). Beside NAME it measures what
#            dropping the groups that carry no gradient buys: informative groups a minute, and what the
#            policy learns from them.
# EVALS=0 leaves the evaluations and tables out (a run measured for its throughput only).
# Each round: the variants train side by side (each capped at CAP of the GPU's memory), are exported
# ($R/<variant>_s<seed>/adapter) and evaluated side by side on the test split (for the record) and the
# validation split (for choosing); then the next round. After every round `tables.md` and `verdicts.md`
# (each policy against the search-again rule, `helpers.course.seeds`) put INIT's test rows (INIT_EVAL)
# first, and its validation rows (INIT_VAL_EVAL, when given) first in the validation verdicts, so a window
# cut short still has its tables; each policy's added second searches are paired with INIT's on the same
# questions. FULLWIKI=1 adds a third evaluation of every policy, on the fullwiki split (458 HotpotQA
# questions: nine times validation's 50, for whether the added second searches pay), and evaluates INIT
# there once (with INIT_TOPK passages a search, as it was trained), paired the same way.
#   setsid nohup bash benchmarks/gpu/trim_variants.sh >/root/window.out 2>&1 </dev/null &
#   PRESET=cpu-dry-again MODEL=smollm2-135m STAGE_MIN=0.3 INIT=<state> RESULTS=/tmp/r WORK=/tmp/w \
#     BUNDLE=/nonexistent [FULLWIKI=1 LIMIT=2] bash benchmarks/gpu/trim_variants.sh   # on a CPU
set -u
PRESET=${PRESET:-h200_again}
INIT=${INIT:-results/h200_replicas/again_s3_exact/adapter}
INIT_EVAL=${INIT_EVAL:-results/h200_again/seeds/eval/seed3_exact.jsonl}
INIT_VAL_EVAL=${INIT_VAL_EVAL:-}  # INIT's validation rows, evaluated with the variants' passages
VARIANTS=${VARIANTS:-base synth25 tool4}
SEEDS=${SEEDS:-3 1}
STAGE_MIN=${STAGE_MIN:-9}
# three `trim` processes held 40.3-40.4 GiB each under 0.3 (2026-12-04); the shares sum under one
CAP=${CAP:-0.3}
# the rounds whose seed is listed here train with COURSE_ENGINE_RECOMPUTE=0 (activations kept, not
# recomputed in backward: the same gradient, less arithmetic, smaller micro-batches); the report's
# trainer tokens a second set them against the other rounds
KEEP_ACTIVATIONS_SEEDS=${KEEP_ACTIVATIONS_SEEDS-1}  # empty: every seed recomputes
FULLWIKI=${FULLWIKI:-0}
EVALS=${EVALS:-1}
INIT_TOPK=${INIT_TOPK:-3}  # the passages a search INIT was trained with (its fullwiki evaluation uses them)
TRIM_MAX_STEPS=${TRIM_MAX_STEPS:-}  # updates a stage at most (empty: the preset's, 15 for h200_again's `trim`)
LIMIT=${LIMIT:-}  # questions of INIT's fullwiki evaluation and of the filter (empty: all; a CPU dry run sets a few)
FILTER_CAP=${FILTER_CAP:-0.6}  # the filter runs alone, before the first round
source "$(dirname "$0")/common.sh"

variant_topk() {  # the passages a variant searches with (exactK, NAME-kK, either with -rN and -f); nothing for the recorded 3
  local name=${1%-f}
  case $name in *-r[1-9]) name=${name%-r*} ;; esac
  case $name in
    exact[1-9]|exact[1-9][0-9]) echo "${name#exact}" ;;
    *-k[1-9]|*-k[1-9][0-9]) echo "${name##*-k}" ;;
  esac
}
variant_args() {  # the --set arguments of a variant, one per line
  case $1 in
    *-f)  # the variant on the filtered questions (the filter's file is written before the first round)
      case ${1%-f} in *-f) return 1 ;; esac
      variant_args "${1%-f}" && echo "trim.question_filter=$R/question_filter.json" ;;
    base) ;;
    synth25) echo "trim.synthetic_share=0.25" ;;
    nosynth) echo "trim.synthetic_share=0" ;;
    tool4) echo 'trim.reward_options={"lambda_tool": 0.4, "lambda_len": 0.0}' ;;
    gain5) echo "trim.reward=search_gain"; echo 'trim.reward_options={"gain": 0.5}' ;;
    gain5ns) echo "trim.reward=search_gain"; echo 'trim.reward_options={"gain": 0.5}'; echo "trim.synthetic_share=0" ;;
    charge5) echo "trim.reward=search_gain"; echo 'trim.reward_options={"gain": 0.5, "pay": false}' ;;
    answers) echo "trim.reward=exact_match"; echo "trim.reward_options={}" ;;
    read) variant_args answers && echo "trim.gold_first_share=0.5" ;;
    exact[1-9]|exact[1-9][0-9]) echo "trim.reward=exact_match"; echo "trim.reward_options={}"; echo "trim.synthetic_share=0"
      echo "trim.max_steps=400"; passages "trim" "$(variant_topk "$1")" ;;
    *-r[1-9])  # any variant above with at most N dynamic-sampling rounds a step
      case ${1%-r*} in *-r*|*-f) return 1 ;; esac
      variant_args "${1%-r*}" && echo "trim.dynamic_sampling_rounds=${1##*-r}" ;;
    *-k[1-9]|*-k[1-9][0-9])  # any other variant searching with K passages
      case ${1%-k*} in exact*|*-k*|*-r*|*-f) return 1 ;; esac  # -rN and -f come after: gain5ns-k2-r1-f
      variant_args "${1%-k*}" && passages "trim" "$(variant_topk "$1")" ;;
    *) return 1 ;;
  esac
}
passages() {  # passages SECTION K : K passages a search, and the budgets to fit them (passage_budgets)
  local tool trajectory
  read -r tool trajectory < <(passage_budgets "$2")
  echo "$1.search_topk=$2"; echo "$1.rollout.max_tool_response_tokens=$tool"
  echo "$1.rollout.max_trajectory_tokens=$trajectory"
}
paired() {  # --paired-with init when INIT's rows are among the runs and another policy is beside them
  [ $# -ge 2 ] && [ "${1%%=*}" = init ] && echo "--paired-with init"
  return 0
}
eval_args() {  # the --set arguments a variant's evaluations need (what it searched with), one per line
  local k
  k=$(variant_topk "$1")
  [ -z "$k" ] || passages eval "$k"
}
if [ -n "$TRIM_MAX_STEPS" ]; then
  case $TRIM_MAX_STEPS in
    *[!0-9]*|0*) echo "TRIM_MAX_STEPS must be a whole number of updates above 0, not $TRIM_MAX_STEPS"; exit 2 ;;
  esac
fi
case $EVALS in 0|1) ;; *) echo "EVALS is 1 (evaluate every policy) or 0 (throughput only), not $EVALS"; exit 2 ;; esac
for variant in $VARIANTS; do
  variant_args "$variant" >/dev/null || { echo "unknown variant $variant (base, synth25, nosynth, tool4, gain5, gain5ns, charge5, answers, read, exactK; any but exactK with -kK; any with -rN, then -f)"; exit 2; }
done

log "start trim_variants preset=$PRESET init=$INIT variants=$VARIANTS seeds=$SEEDS stage=${STAGE_MIN}min"
setup_window
watch_memory

filtered=""  # the first -f variant: its reward and passages judge the questions
for variant in $VARIANTS; do case $variant in *-f) filtered=$variant; break ;; esac; done
if [ -n "$filtered" ]; then
  fargs=()
  while IFS= read -r item; do [ -n "$item" ] && fargs+=(--set "$item"); done < <(variant_args "${filtered%-f}")
  COURSE_CUDA_MEMORY_FRACTION=$FILTER_CAP "$PY" -m helpers.question_filter --preset "$PRESET" --stage trim \
    "${fargs[@]}" --init-from "$INIT" --out "$R/question_filter.json" ${LIMIT:+--limit "$LIMIT"} \
    >"$R/question_filter.log" 2>&1
  status=$?
  log "question filter ($filtered) exited $status: $(grep -o '"kept": [0-9]*\|"judged": [0-9]*\|"seconds": [0-9.]*' \
    "$R/question_filter.log" | tr '\n' ' ')"
  if [ $status != 0 ] || [ ! -f "$R/question_filter.json" ]; then  # the -f variants would fail at their start
    VARIANTS=$(for variant in $VARIANTS; do case $variant in *-f) ;; *) printf '%s ' "$variant" ;; esac; done)
    log "no filter: the -f variants are left out (variants: $VARIANTS)"
  fi
fi

for round in $SEEDS; do
  log "round s$round"
  pids=()
  for seed in ${round//,/ }; do
    recompute=1
    case " $KEEP_ACTIVATIONS_SEEDS " in *" $seed "*) recompute=0 ;; esac
    log "seed $seed: COURSE_ENGINE_RECOMPUTE=$recompute"
    for variant in $VARIANTS; do
      args=(--grpo-stage trim --set "trim.seed=$seed")
      while IFS= read -r item; do [ -n "$item" ] && args+=(--set "$item"); done < <(variant_args "$variant")
      # after the variant's own settings, so it also bounds exactK's
      [ -n "$TRIM_MAX_STEPS" ] && args+=(--set "trim.max_steps=$TRIM_MAX_STEPS")
      COURSE_ENGINE_RECOMPUTE=$recompute grpo_run "${variant}_s$seed" "$INIT" "$STAGE_MIN" "$CAP" "${args[@]}" & pids+=($!)
    done
  done
  wait "${pids[@]}"
  log "round s$round exported"
  [ "$EVALS" = 0 ] && continue  # throughput only
  pids=()
  for seed in ${round//,/ }; do
    for variant in $VARIANTS; do
      name=${variant}_s$seed
      # the test split for the record, the validation split (50 HotpotQA, 200 NQ) for choosing
      eargs=()
      while IFS= read -r item; do [ -n "$item" ] && eargs+=(--set "$item"); done < <(eval_args "$variant")
      ( COURSE_CUDA_MEMORY_FRACTION=$CAP eval_run "$name" "${eargs[@]}"
        COURSE_CUDA_MEMORY_FRACTION=$CAP experiment "val_$name" --out "$R/$name/validation" --work "$WORK/$name" \
          --stage eval --only sft_grpo --set eval.split=validation "${eargs[@]}"
        [ "$FULLWIKI" = 1 ] && COURSE_CUDA_MEMORY_FRACTION=$CAP experiment "wiki_$name" --out "$R/$name/fullwiki" \
          --work "$WORK/$name" --stage eval --only sft_grpo --set eval.split=fullwiki "${eargs[@]}" ) & pids+=($!)
    done
  done
  if [ "$FULLWIKI" = 1 ] && [ ! -f "$R/init/fullwiki.jsonl" ]; then  # once, beside the first round's evaluations
    mkdir -p "$R/init"
    ( COURSE_CUDA_MEMORY_FRACTION=$CAP eval_adapter "$INIT" "$INIT_TOPK" fullwiki init "$R/init/fullwiki.jsonl" \
        ${LIMIT:+--limit "$LIMIT"} >"$R/init_fullwiki.log" 2>&1
      log "init fullwiki exited $?" ) & pids+=($!)
  fi
  wait "${pids[@]}"
  evals=() chosen=() wiki=()
  [ -f "$INIT_EVAL" ] && evals+=("init=$INIT_EVAL")
  [ -n "$INIT_VAL_EVAL" ] && [ -f "$INIT_VAL_EVAL" ] && chosen+=("init=$INIT_VAL_EVAL")
  [ -f "$R/init/fullwiki.jsonl" ] && wiki+=("init=$R/init/fullwiki.jsonl")
  for run in "$R"/*_s[0-9]*/eval/sft_grpo.jsonl; do
    name=$(basename "$(dirname "$(dirname "$run")")")
    evals+=("$name=$run")
    [ -f "$R/$name/validation/eval/sft_grpo.jsonl" ] && chosen+=("$name=$R/$name/validation/eval/sft_grpo.jsonl")
    [ -f "$R/$name/fullwiki/eval/sft_grpo.jsonl" ] && wiki+=("$name=$R/$name/fullwiki/eval/sft_grpo.jsonl")
  done
  "$PY" -m helpers.analyse --search-learned "${evals[@]}" >"$R/tables.md" 2>"$R/tables.log"
  log "round s$round tables: status $?"
  { echo "test split"; "$PY" -m helpers.course.seeds "${evals[@]}" $(paired "${evals[@]}")
    [ ${#chosen[@]} -gt 0 ] && echo && echo "validation split" && "$PY" -m helpers.course.seeds "${chosen[@]}" $(paired "${chosen[@]}")
    if [ ${#wiki[@]} -gt 0 ]; then echo; echo "fullwiki split"; "$PY" -m helpers.course.seeds "${wiki[@]}" $(paired "${wiki[@]}"); fi
  } >"$R/verdicts.md" 2>>"$R/tables.log"
  log "round s$round verdicts: status $?"
done
"$PY" benchmarks/bench_grpo_gpu.py report "$WORK"/*/grpo_* --out "$R/throughput.json" 2>&1 | tee -a "$R/window.log"
cat "$R/verdicts.md" "$R/tables.md" >>"$R/window.log" 2>/dev/null
grep -h "engine: non-finite" "$R"/*.log >"$R/non_finite.log" 2>/dev/null; log "non-finite lines: $(wc -l <"$R/non_finite.log")"
log "all done"
