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
# # 08 · Group advantages and micro-batch weighting
#
# **What you will build.** The last two pieces before an update: the GRPO advantage of every
# trajectory (its reward minus its group's mean reward) and the packing of Datums into micro-batches
# whose losses add up to the mean over the whole rollout — checked against how the engine really
# reduces a loss, with a probe.
#
# **What you need.** Rewards of complete groups (notebooks 03 and 05) and Datums (notebook 07).
#
# $$A_i = R(\tau_i) - \frac{1}{G}\sum_{j=1}^{G} R(\tau_j)$$
#
# The baseline is the group's own mean: a trajectory is good if it did better than its siblings on
# the same question. So the advantage can be computed only once **every** trajectory of the group has
# finished — never per trajectory, and never per micro-batch (that would change the baseline).
# The rule lives in one place, `helpers.reward.assign_advantages(groups)`: every reward function
# (exact match here, the gated reward of notebook 11) goes through it.

# %%
from helpers.data import SearchExample
from helpers.reward import assign_advantages
from helpers.rollout import Group, Trajectory, groups_of
from helpers.widgets import AdvantageBars, budgets
from helpers.widgets.adapters import advantage_groups
from helpers.widgets.course import recall, rollout_examples, run_rollout

values = budgets()
rollout = recall("rollout_05") or list(run_rollout(rollout_examples(values["questions"]), values))
degenerate = assign_advantages(groups_of(rollout))
print(f"{len(rollout)} trajectories, {degenerate} degenerate group(s)")
if degenerate == len({t.question_index for t in rollout}):
    print("every group is degenerate: all its trajectories scored the same, so every advantage is 0. "
          "Expected from an untrained model (the fast profile's 135M one never searches); "
          "the group below lets you set the rewards yourself.")
AdvantageBars(advantage_groups(rollout))

# %% [markdown]
# ## Play with a group
#
# Set the four rewards of a group of four (Happy-LLM §8.3.5's figure uses `[1, 0, 1, 0]`). Every trajectory
# with the same reward gets the same advantage; when all rewards are equal — all right, all wrong,
# or all badly formatted — every advantage is 0 and the group is **degenerate**: it contributes no
# gradient and is left out of training (its share of groups is worth logging: too many means the
# questions are too easy or too hard for the current policy).

# %%
import ipywidgets as widgets
from IPython.display import display


def group_of(rewards):
    example = SearchExample("demo", "a question", ["x"], "demo")
    return Group(example, [Trajectory(example=example, group_index=i, messages=[], reward=r)
                           for i, r in enumerate(rewards)])


pickers = [widgets.Dropdown(options=[1.0, 0.0, -0.1], value=v, description=f"τ{i}", layout=widgets.Layout(width="150px"))
           for i, v in enumerate([1.0, 0.0, 1.0, 0.0])]
bars = AdvantageBars()


def regroup(_=None):
    group = group_of([p.value for p in pickers])
    assign_advantages([group])
    bars.update(advantage_groups(group))


for picker in pickers:
    picker.observe(regroup, names="value")
regroup()
display(widgets.VBox([widgets.HBox(pickers), bars]))

# %% [markdown]
# ## Micro-batches: padding vs memory
#
# Multi-turn trajectories differ a lot in length. Put them all in one padded batch and most of the
# compute goes to padding; so the trainer packs Datums into micro-batches of similar length
# (`pack_micro_batches`: longest first, each into the first micro-batch where it fits under a cap
# on datums and on padded tokens). Hatched = padding.

# %%
from types import SimpleNamespace

from helpers.train import pack_micro_batches
from helpers.widgets import MicroBatchBlocks
from helpers.widgets.budgets import SLIDER_STYLE, slider_layout

lengths = [1480, 1320, 1290, 900, 880, 610, 420, 400]  # a step's trajectory lengths (tokens)
items = [SimpleNamespace(length=n, datum=None) for n in lengths]
max_datums = widgets.IntSlider(value=4, min=1, max=8, description="max_datums", continuous_update=False,
                               style=SLIDER_STYLE, layout=slider_layout())
max_tokens = widgets.IntSlider(value=4096, min=1536, max=12288, step=512, description="max_tokens",
                               continuous_update=False, style=SLIDER_STYLE, layout=slider_layout())
blocks = MicroBatchBlocks()


def repack(_=None):
    blocks.update(pack_micro_batches(items, max_datums=max_datums.value, max_tokens=max_tokens.value))


max_datums.observe(repack, names="value")
max_tokens.observe(repack, names="value")
repack()
display(widgets.VBox([max_datums, max_tokens, blocks]))

# %% [markdown]
# ## Weighting micro-batches so the mean stays global
#
# One `forward_backward` call reduces the loss over its datums; the micro-batches only *accumulate*
# gradients and a single `optim_step` follows. If a call averages over its $n_k$ datums, summing the
# calls would give every micro-batch the same total weight — a trajectory in a small micro-batch
# would count more. Scaling the advantages of micro-batch $k$ by $n_k/N$ fixes it, because the
# importance-sampling loss is linear in the advantage:
#
# $$\sum_k \frac{n_k}{N}\,\operatorname{mean}(\mathcal L_k) = \frac{1}{N}\sum_{i=1}^{N}\mathcal L_i.$$
#
# The numbers, for eight losses split 5 + 3:

# %%
import numpy as np

losses = np.array([0.9, 0.1, 0.4, 0.7, 0.3, 1.2, 0.05, 0.6])
first, second = losses[:5], losses[5:]
print("global mean:              ", losses.mean())
print("unweighted sum of means:  ", first.mean() + second.mean())
print("weighted (5/8, 3/8):      ", 5 / 8 * first.mean() + 3 / 8 * second.mean())

# %% [markdown]
# `weight_micro_batch_for_global_mean` applies the weight to a real micro-batch (targets and old
# log-probs untouched):

# %%
import copy

from helpers.train import build_training_datums, weight_micro_batch_for_global_mean
from helpers.widgets.course import search_trajectory

trajectory, origin = search_trajectory(values)
pair = [copy.deepcopy(trajectory), copy.deepcopy(trajectory)]
pair[0].advantage, pair[1].advantage = 0.5, -0.5
datums = build_training_datums(pair)
weighted = weight_micro_batch_for_global_mean(datums[:1], total_samples=8)
before = datums[0].datum.loss_fn_inputs["advantages"].to_numpy()
after = weighted[0].loss_fn_inputs["advantages"].to_numpy()
print("advantage on sampled tokens before:", before[before != 0][:3], "after (× 1/8):", after[after != 0][:3])

# %% [markdown]
# ## Does the engine really average? Measure it
#
# That weighting is right only if a call takes the **mean** over datums. The engine's gradients are
# not visible (the hosted service does not return them), so `probe_loss_normalisation` measures their
# *effect*: it takes tiny SGD-like steps with `[d]`, `[d, d]` and `d` plus zero-advantage padding and
# compares how much the probe's score moved. `[d, d]` moving as much as `[d]` means a mean over
# datums; twice as much, a sum. It changes weights, so it uses a throwaway training client.

# %%
from helpers.engine import connect, probe_loss_normalisation
from helpers.widgets.course import engine

throwaway = connect().create_lora_training_client(engine().model, rank=4, seed=0)
report = probe_loss_normalisation(throwaway)
print(report.summary())

# %% [markdown]
# If the probe says **mean** over datums, the $n_k/N$ weights above give the global mean. Had it said
# **sum**, the right weight would be $1/N$ for every micro-batch instead. Run the probe whenever you
# switch engines (`COURSE_BACKEND=pytrio`): it is the cheapest way to be sure.
#
# ## Exercises
#
# 1. Rewards `[1, 0, 1, 0]`: the advantages?
# 2. Of the groups `[1, 1, 1, 1]`, `[0, 0, 0, 0]`, `[-0.1, -0.1, -0.1, -0.1]`, `[1, 0, 0, 0]`,
#    `[-0.1, 0, -0.1, 0]`, how many are degenerate?
# 3. Eight trajectories in micro-batches of 5 and 3: the weights?

# %%
from helpers.checkers.exercises import check_degenerate, check_group_advantages, check_micro_batch_weights

groups = [[1, 1, 1, 1], [0, 0, 0, 0], [-0.1, -0.1, -0.1, -0.1], [1, 0, 0, 0], [-0.1, 0, -0.1, 0]]
my_advantages, my_degenerate, my_weights = None, None, None
check_group_advantages([1, 0, 1, 0], my_advantages)
check_degenerate(groups, my_degenerate)
check_micro_batch_weights([5, 3], my_weights)

# %% [markdown]
# 4. **Write `assign_group_advantages` yourself.** The checker hands it groups of trajectories
#    (several questions interleaved, degenerate groups, rewards of −0.1) and a hypothesis property
#    test, and compares every advantage and the returned count.
# 5. **Write `weight_micro_batch_for_global_mean` yourself.** Besides checking that only the
#    advantages change, the checker computes a real gradient: a one-table policy, the
#    importance-sampling loss summed over each datum's tokens and averaged over the datums of each
#    call (as this engine does, see the probe above), summed over the calls of 5 + 3 and 4 + 3 + 1
#    micro-batches — it must equal the gradient of the mean over all N trajectories.

# %% tags=["exercise"]
import numpy as np
import pytrio

from helpers.checkers import check_assign_group_advantages, check_weight_micro_batch


def assign_group_advantages(trajectories) -> int:
    """Set trajectory.advantage = reward - the mean reward of its group, for every trajectory.

    A group is the trajectories with the same question_index (they may come interleaved). A group
    whose rewards are all equal is degenerate: every advantage exactly 0.0 (no float residue such
    as 1e-17). Return the number of degenerate groups.
    """
    raise NotImplementedError("write assign_group_advantages")  # your code here


def weight_micro_batch_for_global_mean(micro_batch, total_samples: int) -> list:
    """New pytrio.Datum objects whose advantages are scaled by n_k / N.

    micro_batch: a list of TrainingDatum (each has .datum, a pytrio.Datum); n_k = len(micro_batch),
    N = total_samples (all trajectories of the step). model_input, target_tokens and logprobs stay
    as they are. Raise ValueError when total_samples < len(micro_batch) or total_samples < 1.
    Read an input with datum.loss_fn_inputs["advantages"].to_numpy().
    """
    raise NotImplementedError("write weight_micro_batch_for_global_mean")  # your code here


check_assign_group_advantages(assign_group_advantages)
check_weight_micro_batch(weight_micro_batch_for_global_mean)

# %% [markdown]
# ---
#
# ### Solutions
#
# Try the exercises first; the solution cell is collapsed (click the dots). Exercises 4 and 5 are the
# course's own functions (`helpers/rollout.py`, `helpers/train.py`) run through the same checkers.

# %% tags=["solution"] jupyter={"source_hidden": true}
from helpers.rollout import assign_group_advantages
from helpers.train import weight_micro_batch_for_global_mean

seed_group = group_of([1, 0, 1, 0])
assign_advantages([seed_group])
check_group_advantages([1, 0, 1, 0], seed_group.advantages)
check_degenerate(groups, sum(assign_advantages([group_of(g)]) for g in groups))
check_micro_batch_weights([5, 3], [5 / 8, 3 / 8])
check_assign_group_advantages(assign_group_advantages)
check_weight_micro_batch(weight_micro_batch_for_global_mean)

# %% [markdown]
# ## Questionnaire
#
# 1. What is the baseline of a GRPO advantage, and why can it be computed only after the whole group
#    has finished?
# 2. Why would computing the mean per micro-batch be wrong?
# 3. What is a degenerate group, and what does a high share of them tell you about the questions?
# 4. Why are micro-batches packed by length?
# 5. Why does the weight $n_k/N$ give the global mean, and what would the weight be on an engine that
#    *sums* the loss over datums?
# 6. Why measure the engine's reduction with a probe instead of reading its documentation?
#
# <details><summary><b>Answers</b> (open after answering)</summary>
#
# 1. The mean reward of the other attempts at the same question. It needs every reward of the group,
#    so it waits until every trajectory of the group has ended.
# 2. A micro-batch holds an arbitrary subset of groups (packed by length): its mean is not any
#    question's baseline, so the advantages would depend on packing instead of on the question.
# 3. A group whose rewards are all equal (all right, all wrong, all badly formatted): every advantage
#    is 0 and it gives no gradient. Many of them mean the questions are too easy or too hard for the
#    current policy.
# 4. A padded micro-batch costs its longest row times its size; similar lengths together keep padding,
#    memory and compute small.
# 5. One call averages over its $n_k$ datums; the loss is linear in the advantage, so scaling by
#    $n_k/N$ turns $\sum_k \operatorname{mean}(\mathcal L_k)$ into $\frac1N\sum_i \mathcal L_i$.
#    On a summing engine every micro-batch would take $1/N$.
# 6. A wrong assumption here silently changes the effective learning rate per micro-batch; the probe
#    measures the effect of the gradient on this engine (the hosted service does not return gradients),
#    so switching engines cannot go unnoticed.
#
# </details>
