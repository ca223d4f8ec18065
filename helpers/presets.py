"""Every named set of budgets and recipe settings, in one place.

A budget's *default* is a field default of its config (`RolloutConfig`, `TrainConfig`, ...); a
preset is a named choice on top of those defaults, for one kind of run. Everything that runs a
preset refers to it here by name and applies it with `helpers.runs.updated` (an unknown name is
an error there, so a misspelt budget never falls back to its default):

- `PRESETS`: the whole experiment (SFT warm start -> GRPO -> evaluation) per machine:
  `python -m helpers.experiment --preset h200 | h200_search | h200_agent | h200_agent_answers | h200_staged |
  h200_again | cpu-dry | cpu-dry-agent | cpu-dry-staged | cpu-dry-again` (`h200_agent`: the search agent's
  recipe, GRPO in stages; `h200_agent_answers` the same with an exact-match stage between them;
  `h200_staged` that with the rewriting teacher and the gain over plain RAG in `habit`; `h200_again` the
  multi-search agent's: exact match, then `trim`; `cpu-dry*`: the same plumbing on a CPU);
- `PROFILES`: the budgets of the course's small runs per `COURSE_PROFILE` (`fast`, `full`; `gpu` keeps
  the full budgets for the live widgets, its training run is `helpers.course.recipe`'s);
- `CPU_RUN`: the short GRPO run that learns on a laptop CPU, from the recorded SFT adapter;
- `SWEEP_BUDGETS`, `SWEEP_ROLLOUT`: budget-forced evaluation (Perplexity's post), the budgets b
  and the rollout every point of the sweep starts from;
- `EFFICIENCY_COMPARE`: the GRPO run that compares the plain and the gated reward.

Only plain values live here (numbers, strings, dicts), so this module imports nothing and every
layer may read it.
"""

from __future__ import annotations

from typing import Any

# --------------------------------------------------------------------------- the experiment

# Budgets shared by GRPO and every evaluation, so the comparison is like for like.
H200_BUDGETS = dict(max_search_calls=3, max_assistant_turns=4, max_assistant_tokens=256,
                    max_tool_response_tokens=768, max_trajectory_tokens=4096)
CPU_BUDGETS = dict(max_search_calls=1, max_assistant_turns=2, max_assistant_tokens=24,
                   max_tool_response_tokens=400, max_trajectory_tokens=2048)

# The scripted teacher of the recorded run (results/h200_search): HotpotQA bridge searches also after a
# hit, answered from the first evidence, and first queries rewritten as keywords where they retrieve more
# gold (benchmarks/sft_teacher.py measures what each lever demonstrates)
SEARCH_TEACHER = dict(decompose=1.0, rewrite_first_query="gain")

# Per preset: "common" (model, LoRA rank: both training stages), then "sft" (SFTConfig fields), "grpo"
# (TrainConfig fields; "rollout" a dict of RolloutConfig fields), "eval" (EvalConfig fields) and "run".
PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    # One H200, bf16: ~2 min SFT, GRPO sized by --max-minutes (about 20-40 steps), eval on 600 test questions.
    "h200": {
        "common": {"model": "qwen2.5-0.5b", "lora_rank": 16},
        # results/h200_search's recipe (run A); results/h200_balanced had no SEARCH_TEACHER, results/h200 also
        # second_query="top_title", repeat 1, GRPO lr 1e-4, no balance
        "sft": dict(limit=800, epochs=2, batch_size=16, learning_rate=2e-4, micro_batch_datums=16,
                    micro_batch_tokens=32768, max_tool_response_tokens=768, second_query="reachable",
                    repeat_two_search=4, **SEARCH_TEACHER),
        # skip=800: GRPO's questions are the train questions SFT did not script; half of each batch HotpotQA
        "grpo": dict(max_steps=200, questions_per_batch=16, learning_rate=5e-5, save_every=5, skip=800,
                     balance_sources=True, micro_batch_datums=32, micro_batch_tokens=65536,
                     rollout=dict(group_size=8, temperature=1.0, search_concurrency=16, **H200_BUDGETS)),
        "eval": dict(split="test", limit=None, batch_size=600,
                     rollout=dict(temperature=0.0, search_concurrency=16, **H200_BUDGETS)),
        "run": dict(grpo_minutes=10.0),
    },
    # Same script on CPU with the 135M model and tiny budgets: proves the plumbing, not the learning.
    "cpu-dry": {
        "common": {"model": "smollm2-135m", "lora_rank": 8},
        "sft": dict(limit=2, epochs=1, batch_size=2, learning_rate=2e-4, micro_batch_datums=2,
                    micro_batch_tokens=8192, max_tool_response_tokens=400),
        "grpo": dict(max_steps=1, questions_per_batch=1, learning_rate=1e-4, save_every=1, skip=2,
                     micro_batch_datums=2, micro_batch_tokens=8192,
                     rollout=dict(group_size=2, search_concurrency=2, **CPU_BUDGETS)),
        "eval": dict(split="test", limit=2, batch_size=2, rollout=dict(temperature=0.0, search_concurrency=2, **CPU_BUDGETS)),
        "run": dict(grpo_minutes=10.0),
    },
}

# h200 with the levers that keep a second search (results/h200_search, run C): GRPO on exact match plus a
# small reward for retrieving gold passages (helpers.evidence), dynamic sampling, and a quarter of each
# batch from the synthetic multi-hop split, whose questions need a second search
PRESETS["h200_search"] = {**PRESETS["h200"], "grpo": {
    **PRESETS["h200"]["grpo"], "reward": "evidence", "dynamic_sampling": True, "dynamic_sampling_rounds": 3,
    "synthetic_share": 0.25}}

# The search agent's recipe: GRPO in stages, each starting from the previous stage's adapter
# ("stages": TrainConfig fields over "grpo"; "run"["stage_minutes"]: each stage's wall-clock minutes).
# 1 "habit": a reward for gold passages retrieved (helpers.evidence) with half of each batch from the
#   synthetic multi-hop split keeps the second search the SFT teacher demonstrated (exact match alone
#   from SFT removes it within ~30 updates);
# 2 "trim": the gated reward (exact match, gated by the answer being right) with its group-anchored
#   tool-call penalty (Perplexity's post) pays for right answers and removes the searches that do not
#   pay. Measured on one H200 (results/h200_agent): from `habit`, 6 minutes of `trim` gave test EM
#   0.378, HotpotQA 0.33, a second search on 25 % of HotpotQA and 1 % of NQ; 6 minutes of plain exact
#   match (ANSWERS_STAGE) then 4.5 of `trim` gave 0.368, 0.26, 23 % and 5 %.
AGENT_STAGES: dict[str, dict[str, Any]] = {
    "habit": dict(reward="evidence", reward_options={"gain": 0.3}, synthetic_share=0.5, dynamic_sampling=True,
                  dynamic_sampling_rounds=3),
    "trim": dict(reward="gated", reward_options={"lambda_tool": 0.2, "lambda_len": 0.0}, synthetic_share=0.5,
                 dynamic_sampling=True, dynamic_sampling_rounds=3),
}
PRESETS["h200_agent"] = {**PRESETS["h200"], "stages": AGENT_STAGES,
                         "run": dict(grpo_minutes=6.0, stage_minutes={"habit": 6.0, "trim": 6.0})}
# The measured alternative: exact match on the same mix between `habit` and `trim` ("answers")
ANSWERS_STAGE = dict(reward="exact_match", synthetic_share=0.5, dynamic_sampling=True, dynamic_sampling_rounds=3)
PRESETS["h200_agent_answers"] = {
    **PRESETS["h200"], "stages": {"habit": AGENT_STAGES["habit"], "answers": ANSWERS_STAGE, "trim": AGENT_STAGES["trim"]},
    "run": dict(grpo_minutes=6.0, stage_minutes={"habit": 6.0, "answers": 6.0, "trim": 4.5})}
PRESETS["cpu-dry-agent"] = {**PRESETS["cpu-dry"], "stages": AGENT_STAGES,
                            "run": dict(grpo_minutes=10.0, stage_minutes={})}
# The recipe in three stages, its SFT teacher writing keyword first queries wherever they lose no gold
# ("no_loss") and its `habit` also paying for gold recall above the question's own top 3 (s3's gain over
# plain RAG, `beyond_rag`). Measured on one H200 (benchmarks/RESULTS.md, 2026-12-03): the no_loss SFT
# rewrites 87 % of first queries but searches again on 6 % of HotpotQA (47 % for the `gain` teacher);
# 12 steps of this `habit` brought it to 60 % of HotpotQA and 3 % of NQ, evidence recall 8 points above
# the question's top 3 on HotpotQA, 42 % of first queries rewritten with no loss of recall, at EM 0.337
# (SFT 0.305): the habit and the queries, not yet the answers, which `answers` and `trim` are for.
STAGED_STAGES: dict[str, dict[str, Any]] = {
    "habit": {**AGENT_STAGES["habit"], "reward_options": {"gain": 0.3, "beyond_rag": 0.3}},
    "answers": ANSWERS_STAGE,
    "trim": AGENT_STAGES["trim"],
}
PRESETS["h200_staged"] = {
    **PRESETS["h200"], "sft": {**PRESETS["h200"]["sft"], "rewrite_first_query": "no_loss"}, "stages": STAGED_STAGES,
    "run": dict(grpo_minutes=6.0, stage_minutes={"habit": 7.0, "answers": 8.0, "trim": 5.0})}
PRESETS["cpu-dry-staged"] = {**PRESETS["cpu-dry"], "stages": STAGED_STAGES, "run": dict(grpo_minutes=10.0, stage_minutes={})}
# The multi-search agent's recipe (results/h200_again): no evidence reward, the two stages counted in
# updates, since the habit depends on how far exact match has run, not on minutes. From SFT, exact
# match first removes the second search (~30 updates), then brings it back where it finds the answer:
# measured on one H200 (three replicas, 64-70 steps) a second search on 39-52 % of HotpotQA and 5-11 %
# of NQ; run on to 138 updates it spread to 24 % of NQ, to 208 to every question. `trim` then pays
# for right answers and charges only the calls above those of the group's right answers: 15 steps
# from the 64-step replica gave 79 % of HotpotQA and 10 % of NQ, EM 0.387; from the 70-step one,
# whose right answers mostly used one search, 28 steps removed the habit (8 % of HotpotQA). Run again
# with three seeds, exact match was steady (18-28 % of HotpotQA, <= 2 % of NQ) and `trim` varied: one
# seed gave 30 % / 2.4 %, two spread the second search to 22 % of NQ, where it rarely pays.
AGAIN_STAGES: dict[str, dict[str, Any]] = {
    "exact": dict(max_steps=64),
    "trim": {**AGENT_STAGES["trim"], "max_steps": 15},
}
PRESETS["h200_again"] = {**PRESETS["h200"], "stages": AGAIN_STAGES,
                         "run": dict(grpo_minutes=10.0, stage_minutes={"exact": 12.0, "trim": 8.0})}
# the same stages on a CPU, one step each (the dry run's own max_steps)
PRESETS["cpu-dry-again"] = {**PRESETS["cpu-dry"], "run": dict(grpo_minutes=10.0, stage_minutes={}), "stages": {
    name: {key: value for key, value in stage.items() if key != "max_steps"} for name, stage in AGAIN_STAGES.items()}}

# --------------------------------------------------------------------------- the course's profiles

# Keys that are RolloutConfig fields set the rollouts; the others size the course's runs. The fast
# profile (COURSE_PROFILE=fast, the tests) shrinks every number; nothing else changes.
PROFILES: dict[str, dict[str, Any]] = {
    "fast": {
        "questions": 1,
        "group_size": 2,
        "max_search_calls": 1,
        "max_assistant_turns": 3,
        "max_assistant_tokens": 48,
        "max_tool_response_tokens": 224,
        "max_trajectory_tokens": 1024,
        "temperature": 1.0,
        "search_topk": 3,
        "eval_questions": 1,
        "sweep_budgets": [0, 1, 2],  # the budgets b of a small budget-forced sweep (the recorded GPU sweep has 0-10)
        "sweep_questions": 1,
        "sweep_assistant_tokens": 48,
        "sft_questions": 2,
        "sft_epochs": 1,
        "grpo_questions": 1,
        "grpo_steps": 1,
    },
    "full": {
        "questions": 2,
        "group_size": 4,
        "max_search_calls": 3,
        "max_assistant_turns": 4,
        "max_assistant_tokens": 192,
        "max_tool_response_tokens": 384,
        "max_trajectory_tokens": 3072,
        "temperature": 1.0,
        "search_topk": 3,
        "eval_questions": 8,  # four evaluations of the trained policies, each a batch decoded to its longest answer
        # a budget sweep is policies x budgets x questions rollouts, each policy's batch decoded until
        # its longest turn ends: sized to minutes on 2 CPU cores (a search call is about 31 tokens)
        "sweep_budgets": [0, 1, 3],
        "sweep_questions": 4,
        "sweep_assistant_tokens": 96,
        # the training run from scratch shows the mechanics in minutes on a CPU; the run that learns
        # starts from the recorded SFT adapter (CPU_RUN), the real run is the GPU's
        "sft_questions": 4,
        "sft_epochs": 1,
        "grpo_questions": 1,  # one question x group_size: the minutes go to the run that learns
        "grpo_steps": 1,
    },
}

# The GRPO run that learns on a CPU (full profile, 2 cores): four questions, one per step, each sampled
# 4 times, for 6 steps, and a wall-clock budget after which training stops cleanly with what it has.
# Chosen by a sweep of this exact run (fp32, as on a CPU) on an H200, 4 seeds per setting
# (results/h200_search/cpu_run/README.md): at this learning rate the 4 questions' answer rate rose
# from 0.56 to 0.88-1.00; at 1e-3 the policy lost its format within a few steps.
CPU_RUN = {"questions": 4, "questions_per_step": 1, "group_size": 4, "steps": 6, "learning_rate": 1e-4,
           "minutes": 15.0}

# The rollouts the live widgets' offered questions are measured with on a CPU (helpers.widgets.measured):
# the playground's, one greedy trajectory; the budget sweep's, at its own temperature (Perplexity's post)
MEASURED_PLAYGROUND = dict(seed=1, group_size=1, temperature=0.0)
MEASURED_SWEEP = dict(budgets=(1, 3), temperature=0.6)  # b = 0 needs no measurement: a call ends the branch (−0.1)

# --------------------------------------------------------------------------- Perplexity's post

SWEEP_BUDGETS = tuple(range(11))  # b = 0 (no search: parametric knowledge only) ... 10 (generous)
# The sweep's own rollout: room for up to 10 searches, and some sampling spread
SWEEP_ROLLOUT = dict(temperature=0.6, max_assistant_turns=12, max_tool_response_tokens=512,
                     max_trajectory_tokens=8192)
# GRPO with the plain and with the gated reward (TrainConfig fields; "rollout" a dict of RolloutConfig fields)
EFFICIENCY_COMPARE = dict(max_steps=10, questions_per_batch=4, rollout=dict(group_size=4),
                          out="results/efficiency")


def profile_budgets(name: str) -> dict[str, Any]:
    """A fresh copy of the budgets of profile `name` ("fast", "full", or "gpu": the full budgets)."""
    name = "full" if name == "gpu" else name
    if name not in PROFILES:
        raise ValueError(f"profile must be one of {sorted(PROFILES)}, got {name!r}")
    return {key: list(value) if isinstance(value, list) else value for key, value in PROFILES[name].items()}
