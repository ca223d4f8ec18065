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
# # 12 · Budget-forced evaluation: accuracy as a function of allowed searches
#
# **What you will build.** The second seed's *tool-efficiency curve*: the same questions answered
# under a hard budget of $b$ search calls, $b = 0$ (no search: what the model knows) to $b = 10$
# (generous multi-hop search), for the base, SFT and trained policies — and, next to it, the tokens
# each question costs.
#
# **What you need.** The rollout (05), evaluation (10), and the checkpoints of notebook 09 if you
# ran it.
#
# One number — "exact match 0.31" — hides *how much searching* bought it. A policy that needs five
# searches for what another gets in one is slower and more expensive in production. The
# budget-forced protocol makes that visible: the system prompt **states** the budget and the rollout
# **enforces** it (a call beyond it ends the trajectory without an answer). Reading the curve:
#
# - its value at $b=0$ is parametric knowledge;
# - its slope at small $b$ is how much each extra call is worth;
# - where it flattens, more searching stops paying (the seed sees this around $b\approx7$ for every
#   model, a property of the questions rather than of the models).

# %%
from helpers import config
from helpers import efficiency as eff
from helpers.protocol import system_prompt

for b in (None, 0, 1, 3):
    rule = next(line for line in system_prompt(b).splitlines() if line.startswith("- Search"))
    print(f"b = {b}: {rule}")

# %% [markdown]
# `budget_config(b)` turns any rollout config into the protocol's: one trajectory per question
# (`group_size=1`), the budget stated (`search_budget=b`) and enforced (`max_search_calls=b`),
# temperature 0.6 as in the seed's evaluation.

# %%
from helpers.widgets import budgets
from helpers.widgets.course import rollout_config

values = budgets()
eff.budget_config(2, rollout_config(values, temperature=0.6))

# %% [markdown]
# ## The sweep, on this machine
#
# The fast profile sweeps a few budgets on a couple of held-out questions; the full profile does
# $b = 0\dots10$. Policies: the base model, and the SFT and GRPO checkpoints of notebook 09 when it
# has been run in this profile.

# %%
from helpers.data import load_examples
from helpers.widgets.course import engine, recall, search_client

fast = config.is_fast()
sweep_budgets = [0, 1, 2] if fast else list(eff.BUDGETS)
questions = load_examples("test", limit=values["eval_questions"])
base_engine = engine()
policies = {"base": base_engine.sampler}
trained = recall("training_09") or {}
for name, key in (("sft", "sft"), ("sft_grpo", "sampler_path")):  # the names of the recorded sweep
    path = trained.get(key) or (trained.get("summary") or {}).get(key)
    if path:
        try:
            policies[name] = eff.sampling_client_for(base_engine.service, base_engine.model, path)
        except Exception as error:  # a checkpoint from another model or profile
            print(f"skipping {name}: {error}")
print("policies:", list(policies), "| budgets:", sweep_budgets, "| questions:", len(questions))

points = []
for name, sampler in policies.items():
    points += eff.budget_sweep(sampler, base_engine.tokenizer, search_client(), questions, sweep_budgets,
                               policy=name, config=rollout_config(values, temperature=0.6))
import pandas as pd

# one row per policy and budget; the columns a reader compares first
pd.DataFrame([p.as_dict() for p in points]).set_index(["policy", "budget"])[
    ["accuracy", "valid_format_rate", "search_calls_mean", "tokens_per_question", "questions"]].round(3)

# %%
import matplotlib.pyplot as plt

eff.plot_tool_efficiency(points)
plt.show()

# %% [markdown]
# A handful of questions (`eval_questions`: 1 in the fast profile, 20 in the full one) is far too
# few to read anything into the accuracy; the point here is the machinery, and the cost side is
# already informative: every search adds an observation the model
# must read on the next turn, so **input** tokens grow much faster than output tokens.
#
# ## The recorded sweep
#
# A longer run of the same function (`python -m helpers.efficiency budget --policy base= --policy
# sft=… --policy sft_grpo=…`, on a GPU) is kept in `results/efficiency/budget_sweep.json` when it has
# been run. Pick the policies and the quantity to plot.

# %%
recorded = eff.load_budget_points(config.RESULTS_DIR / "efficiency" / "budget_sweep.json")
shown = recorded or points
print("showing", "the recorded sweep" if recorded else "this machine's sweep", f"({len(shown)} points)")
curve = eff.budget_curve_widget(shown)
curve

# %% [markdown]
# ## Exercises
#
# 1. At budget $b$, at most how many assistant turns does a trajectory need to use every call and
#    still answer? Answer for $b = 3$.
# 2. For the base policy in `points`, which is the smallest budget at which its accuracy reaches its
#    maximum over the sweep?
# 3. Cost per *correct* answer: tokens per question divided by accuracy. Compute it for the base
#    policy at the largest budget you swept (`float("inf")` if it answered nothing correctly).

# %%
my_turns = None
my_best_budget = None
my_tokens_per_correct = None
eff.check_turns_for_budget(3, my_turns)
eff.check_best_budget(points, "base", my_best_budget)
eff.check_tokens_per_correct(points, "base", sweep_budgets[-1], my_tokens_per_correct)

# %% [markdown]
# ### Solution

# %% tags=["solution"]
base_points = sorted((p for p in points if p.policy == "base"), key=lambda p: p.budget)
top = max(p.accuracy for p in base_points)
last = base_points[-1]
eff.check_turns_for_budget(3, 3 + 1)
eff.check_best_budget(points, "base", next(p.budget for p in base_points if p.accuracy == top))
eff.check_tokens_per_correct(points, "base", last.budget,
                             last.tokens_per_question / last.accuracy if last.accuracy else float("inf"))
