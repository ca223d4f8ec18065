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
runs = config.PROJECT_ROOT / "runs" / f"course-{config.profile()}"
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
    init_from=sft.state_path, max_steps=values["grpo_steps"], questions_per_batch=values["questions"],
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
pd.DataFrame(dashboard.history)[columns]

# %% [markdown]
# ## Exercises
#
# 1. Put the six calls of one GRPO step in order.

# %%
from helpers.widgets.exercises import STEP_ORDER, check_step_order

shuffled = sorted(STEP_ORDER)
print(shuffled)
my_order = None  # a list of the six names
check_step_order(my_order)

# %% [markdown]
# 2. What would go wrong if the sampling client were created once, before the loop, and reused?
# 3. In the metrics, `degenerate_group_share` is the share of groups without signal. What would you
#    change if it stayed near 1?
#
# ### Solution
#
# Read the order off the code that just ran: `train_step` makes the first call, `sample_groups`
# (rollout, rewards, advantages) the second, `train_step` the third, and `optimise` the last three.

# %% tags=["solution"]
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
