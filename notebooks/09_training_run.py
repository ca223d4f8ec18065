# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 09 · The training run: SFT warm start, then GRPO
#
# **What you will build.** A complete (small) training run on your machine: first a supervised warm
# start that teaches the *format* (call the tool, end with `Answer: …`), then GRPO steps that teach the
# *strategy* from the outcome reward, watched live on a dashboard.
#
# **What you need.** Everything before: rollouts and rewards (05, 03), the observation mask and Datum
# (07), group advantages and micro-batch weighting (08).
#
# One GRPO step, always in this order:
#
# 1. `save_weights_and_get_sampling_client()` — a sampler with the **current** weights, so the old
#    log-probs belong to the policy before this update;
# 2. `rollout_groups(...)` — one group of complete trajectories per question; then
#    `score(groups, reward_fn)` gives each trajectory its reward (exact match unless `TrainConfig.reward`
#    names another) and `assign_advantages(groups)` the group advantages;
# 3. `build_training_datums(...)` — one Datum per trajectory, zero-advantage ones left out;
# 4. `pack_micro_batches(...)`, then for each micro-batch `forward_backward(weighted datums,
#    "importance_sampling")` — gradients accumulate;
# 5. one `optim_step(...)` for the whole step.

# %%
from pathlib import Path

from helpers import config
from helpers.widgets import TrainingDashboard, budgets

values = budgets()
runs = config.RUNS_DIR / f"course-{config.profile()}"
print("model:", config.default_model(), "| runs under", runs)
values

# %% [markdown]
# ## Why a warm start?
#
# The base model almost never writes a well-formed tool call or an `Answer:` line, so every
# trajectory of a group scores −0.1, every group is degenerate and GRPO has nothing to learn from.
# A *scripted teacher* fixes the format first: it searches the question on the local index, searches
# again with the top title if the answer is not in the evidence yet, and answers with the reference
# spelled as the evidence spells it. The model is fine-tuned with `cross_entropy` on the
# **assistant** tokens of these demonstrations only — the same observation mask as in RL.

# %%
from helpers.sft import SFTConfig, run_sft

sft = run_sft(SFTConfig(limit=values["sft_questions"], epochs=values["sft_epochs"], batch_size=min(values["sft_questions"], 16),
                        max_tool_response_tokens=values["max_tool_response_tokens"], out=str(runs / "sft"), resume=False))
print(f"{sft.demonstrations} demonstrations ({sft.skipped} questions skipped: answer never found), "
      f"{sft.steps} steps in {sft.seconds:.0f} s; loss per step: {[round(x, 3) for x in sft.losses]}")

# %% [markdown]
# ## GRPO, live
#
# `train(config, on_step=...)` calls `on_step(metrics)` after every step; the dashboard draws reward,
# exact match, format rate, search calls, the sampler-vs-trainer KL and where the step's time went.
# The budgets come from the profile; in the `full` profile this takes a while on a CPU — the GPU
# run of notebook 10 used the same code with larger numbers.

# %%
from helpers.train import TrainConfig, train
from helpers.widgets.course import rollout_config

grpo_config = TrainConfig(
    init_from=sft.state_path, max_steps=values["grpo_steps"], questions_per_batch=values["grpo_questions"],
    rollout=rollout_config(values, group_size=max(values["group_size"], 2)),  # the profile's budgets
    save_every=0, out=str(runs / "grpo"), resume=False,
    skip=values["sft_questions"],  # GRPO learns on questions the SFT teacher did not script
)
dashboard = TrainingDashboard("GRPO")
dashboard

# %%
summary = train(grpo_config, on_step=dashboard.on_step)
summary

# %% [markdown]
# Every step is also a line of `metrics.jsonl` in the run folder, so a run can be plotted, compared
# or resumed later (`python -m helpers.train --out … ` continues from the last checkpoint).

# %%
import pandas as pd

from helpers.widgets.course import remember

remember("training_09", {"summary": summary, "sft": sft.sampler_path, "history": dashboard.history})
columns = [c for c in ["step", "reward_mean", "exact_match", "valid_format_rate", "search_calls_mean",
                       "degenerate_group_share", "trained_tokens", "time_rollout", "time_training"] if c in dashboard.history[0]]
short = {"reward_mean": "reward", "exact_match": "EM", "valid_format_rate": "format", "search_calls_mean": "searches",
         "degenerate_group_share": "degenerate", "trained_tokens": "trained tokens", "time_rollout": "rollout s",
         "time_training": "training s"}
# short headers and rounded numbers: the table fits the notebook column
pd.DataFrame(dashboard.history)[columns].set_index("step").round(3).rename(columns=short)

# %% [markdown]
# ## A run that learns on a CPU
#
# The run above starts from an SFT warm start made here, in minutes of CPU time per step, and then
# takes a handful of GRPO steps on questions drawn in file order: most of its groups are degenerate
# (all wrong), so its curves are mostly noise. A short run that *visibly* learns needs two changes:
#
# - **start from a good warm start**: the SFT adapter of the recorded GPU run
#   (`helpers.course.learnable.SFT_START`, one constant), loaded as the initial weights;
# - **learn where learning is possible**: questions this SFT policy answers *sometimes* — its answer
#   rate, measured by sampling it several times per train question (`python -m helpers.course.learnable
#   record`, kept in `helpers.course.learnable.ANSWER_RATES`), lies between 0.25 and 0.75. Such a group
#   almost always mixes right and wrong answers, so every step has a signal.
#
# The run (`CPU_RUN`): the 4 most learnable questions (answer rates 0.5–0.62, measured over 8
# samples each), one question per step (all four in a seeded order, then again), 4 samples each, learning rate 1e-4, 6 steps; it
# stops cleanly at 15 minutes if a step would not fit.
#
# What to expect, measured: the same run on a GPU in the CPU's fp32, 4 seeds
# (`results/h200_search/cpu_run/README.md`). After its 6 steps the 4 questions were answered right
# in 0.88–1.00 of 8 fresh samples each, up from 0.56; the step rewards climbed, with dips, e.g.
# 0.5, 0.5, 1.0, 1.0, 1.0, 1.0. The policy is allowed to learn these answers: this demonstrates the
# update, it is not an evaluation (held-out accuracy is notebook 10's job). On 2 CPU cores the run
# gave 0.75, 0.75, 0.75, 0.5 for the four questions, then 1.0 and 1.0 when two of them came round
# again (each pass over the four is a fresh seeded order): all 4 samples right, so those two groups
# had nothing left to train.
#
# What is noise: each step's reward is one question's 4 samples, so it moves in quarters, and a
# harder question coming round can dip it (0.0 → 1.0 → 1.0 → 0.5 in one seed). Read the trend over
# the steps, and the same question's reward on its next visit, never one step. A learning rate of
# 1e-3 made it worse: the policy lost its answer format within a few steps (reward −0.1).
#
# The adapter is trained on Qwen2.5-0.5B, so this cell runs in the `full` profile (the default
# model); elsewhere, or before the adapter and the answer rates are recorded, it says what is
# missing and runs nothing.

# %%
from IPython.display import display

from helpers.course.learnable import ANSWER_RATES, CPU_RUN, cpu_run_config, learnable_examples
from helpers.course.policies import unavailable_reason
from helpers.train import open_session

missing = unavailable_reason("sft") or (None if ANSWER_RATES.is_file() else
                                        f"no recorded answer rates at {ANSWER_RATES} (python -m helpers.course.learnable record)")
if missing is None:
    learnable = learnable_examples(limit=CPU_RUN["questions"])
    cpu_config = cpu_run_config(rollout_config(values), runs / "grpo_from_recorded_sft")
    print("learning on:", [example.question for example in learnable])
    cpu_dashboard = TrainingDashboard("GRPO from the recorded SFT adapter")
    display(cpu_dashboard)
    cpu_summary = train(cpu_config, on_step=cpu_dashboard.on_step, session=open_session(cpu_config, examples=learnable))
else:
    print("The CPU run that learns does not run here:", missing)

# %% [markdown]
# ## What each profile costs
#
# Measured on a 2-core AMD EPYC machine (2026-12-01; `benchmarks/RESULTS.md`) and one H200:
#
# | profile | where | what runs | measured |
# | --- | --- | --- | --- |
# | `fast` | 2 CPU cores | smollm2-135m, 2 SFT questions, 1 GRPO step of 1 question × 2 | notebook 09 in 45 s (idle machine) |
# | `full` | 2 CPU cores | Qwen2.5-0.5B, SFT on 4 questions × 1 epoch, 1 GRPO step of 1 question × 4 | SFT 72 s, the GRPO step 155 s |
# | `full`, run that learns | 2 CPU cores | GRPO from the recorded SFT adapter, `CPU_RUN` (4 questions, one per step, × 4 samples, 6 steps) | 725 s: 149–169 s a step (training 123–133 s for about 3,100 tokens), 43 s for a step whose group is all right (nothing to train); step rewards 0.75, 0.75, 0.75, 0.5, 1.0, 1.0 |
# | `full`, the whole notebook | 2 CPU cores | all of the above | 932–981 s (15.5–16.4 min, two runs) |
# | GPU recipe | one H200 | SFT on 800 questions with a decomposing teacher, 9 minutes of GRPO, 600-question evaluations | 17.9 min in all (`results/h200_search/README.md`) |
#
# The real run is one command on a GPU machine: `bash results/run.sh`.

# %% [markdown]
# ## Exercises
#
# 1. Put the six calls of one GRPO step in order.

# %%
from helpers.checkers.exercises import STEP_ORDER, check_step_order

shuffled = sorted(STEP_ORDER)
print(shuffled)
my_order = None  # a list of the six names
check_step_order(my_order)

# %% [markdown]
# 2. What would go wrong if the sampling client were created once, before the loop, and reused?
# 3. In the metrics, `degenerate_group_share` is the share of groups without signal. What would you
#    change if it stayed near 1?
#
# ---
#
# ### Solution
#
# Try the exercises first; the solution cell is collapsed (click the dots).
#
# <details><summary><b>Answers to 2 and 3</b></summary>
#
# 2. Every rollout would keep sampling the initial weights. The old logprobs would belong to that
#    first policy, not to the one being updated, so the importance ratio π_θ/π_old drifts further from
#    1 every step: the update becomes off-policy with a growing mismatch, the ratios (and their
#    clipping, where used) stop meaning what the loss assumes, and the agent is trained on behaviour it
#    no longer has.
# 3. A share near 1 means almost every group is all right or all wrong: the questions are too easy or
#    too hard for the current policy. Change the questions (pick ones it answers sometimes, as the run
#    that learns above does), raise `group_size` so a rare right answer appears in the group, improve
#    the warm start (SFT) so answers become possible, or filter degenerate groups and roll out more
#    questions (dynamic sampling).
#
# </details>
#
# Read the order off the code that just ran: `train_step` makes the first call, `sample_groups`
# (rollout, rewards, advantages) the second, `train_step` the third, and `optimise` the last three.

# %% tags=["solution"] jupyter={"source_hidden": true}
import inspect

from helpers import train as train_module

# the step's source with sample_groups written out where train_step calls it: the calls in the order they run
step_source = inspect.getsource(train_module.train_step).replace(
    "sample_groups(", inspect.getsource(train_module.sample_groups), 1)
optimise_source = inspect.getsource(train_module.optimise)


def call_position(name):
    if name + "(" in step_source:
        return (0, step_source.index(name + "("))
    return (1, optimise_source.index(name + "("))


check_step_order(sorted(STEP_ORDER, key=call_position))

# %% [markdown]
# ## Questionnaire
#
# 1. Why does the run start with supervised fine-tuning before GRPO?
# 2. What does the SFT loss train on, and what does it leave out?
# 3. Why is `save_weights_and_get_sampling_client` the first call of every step?
# 4. Why is there one `optim_step` per step, however many micro-batches there are?
# 5. Why should a short CPU run learn on questions the policy answers *sometimes*?
# 6. A training curve moves by one answer in sixteen from one step to the next. Signal or noise?
#
# <details><summary><b>Answers</b> (open after answering)</summary>
#
# 1. The base model rarely writes a valid call or an `Answer:` line: every trajectory scores −0.1,
#    every group is degenerate and GRPO has no signal. SFT teaches the format first.
# 2. The assistant tokens of the teacher's demonstrations (`cross_entropy`); the prompt and the
#    observations are masked out, as in RL.
# 3. The old logprobs must come from the policy *before* this update; a fresh sampler on the current
#    weights guarantees it.
# 4. The micro-batches only split one batch for memory; their gradients accumulate into one update, as
#    if the whole rollout had been one batch.
# 5. A question it always or never answers gives a degenerate group (all rewards equal): no gradient.
#    With few steps, every group should carry signal.
# 6. Noise: with 16 trajectories one answer is 0.06. Only a trend over several steps says anything.
#
# </details>
