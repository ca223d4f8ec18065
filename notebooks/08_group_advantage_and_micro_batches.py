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
# reduces a loss, with a probe. Then the loss all of it feeds, written out on the paper trajectory,
# and what it leaves out compared with DeepSeekMath's GRPO.
#
# **What you need.** Rewards of complete groups (notebooks 03 and 05) and Datums (notebook 07).
#
# $$A_i = R(\tau_i) - \frac{1}{G}\sum_{j=1}^{G} R(\tau_j)$$
#
# The baseline is the group's own mean: a trajectory is good if it did better than its siblings on
# the same question. So the advantage can be computed only once **every** trajectory of the group has
# finished — never per trajectory, and never per micro-batch (that would change the baseline).
# The rule lives in one place, `helpers.advantages.assign_advantages(groups)`: every reward function
# (exact match here, the gated reward of notebook 11) goes through it.

# %%
from helpers.data import SearchExample
from helpers.advantages import assign_advantages
from helpers.course.policies import load_policy
from helpers.rollout import Group, Trajectory, groups_of
from helpers.widgets import AdvantageBars, budgets
from helpers.widgets.adapters import advantage_groups
from helpers.widgets.course import recall, remember, rollout_examples, run_rollout

values = budgets()
rollout = recall("rollout_05")
if rollout is None:  # notebook 05 not run in this profile: roll out with the policy it would have used
    policy = load_policy()
    rollout = list(run_rollout(rollout_examples(values["questions"]), values, sampler=policy.sampler,
                               tokenizer=policy.tokenizer))
    remember("rollout_05", rollout)  # the trajectory below, and later notebooks, take it from here
    remember("rollout_05_policy", policy.name)
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
# ## The loss the course optimises
#
# Everything above feeds one loss: `forward_backward(datums, loss_fn="importance_sampling")`. For a
# step of $N$ trajectories (every trajectory rolled out, degenerate groups included: they are left
# out as Datums but still count in $N$), the engine minimises
#
# $$\mathcal L(\theta) = -\frac{1}{N}\sum_{i=1}^{N}\;\sum_{t\,\in\,\text{sampled}(\tau_i)}
#   \frac{\pi_\theta(y_{i,t}\mid y_{i,<t})}{\mu_{\text{old}}(y_{i,t}\mid y_{i,<t})}\,A_i$$
#
# - **token level**: one ratio per sampled token, between the policy being trained ($\pi_\theta$,
#   the trainer's log-probability now) and the policy that sampled it ($\mu_{\text{old}}$, the
#   Datum's `logprobs`, recorded at rollout time);
# - **times the token's advantage**: the Datum's `advantages`, the trajectory's $A_i$ on its sampled
#   tokens and 0 on the prompt and the observations — the observation mask of notebook 07;
# - **summed over a trajectory's tokens, averaged over trajectories**: one `forward_backward` call
#   sums each datum's token losses and averages over its $n_k$ datums
#   (`helpers/engine/losses.py`), and the $n_k/N$ weights above turn the calls' sum into the mean over
#   all $N$ trajectories of the step (`helpers.train.optimise`). A long trajectory therefore weighs
#   more than a short one with the same advantage: every sampled token is one decision.
#
# Right after sampling the two policies are the same weights, every ratio is 1, and the gradient is
# the policy gradient with the group's mean as baseline:
# $\nabla\mathcal L = -\frac1N\sum_i A_i \sum_t \nabla\log\pi_\theta(y_{i,t}\mid y_{i,<t})$.
# The ratio matters when they differ: the sampler's numerics differ from the trainer's (notebook 13),
# or the weights moved between sampling and training.
#
# On Happy-LLM §8.3.5's paper trajectory (prompt 50, turn 20, observation 300, turn 8; the Datum of
# notebook 07), four of them in a group with rewards `[1, 0, 1, 0]`:

# %%
import matplotlib.pyplot as plt
import torch

from helpers.checkers.loss import PAPER_REWARDS, call_tensors, engine_loss, paper_group

paper = call_tensors(paper_group())  # the four Datums as one call's [4, 377] tensors, ratio 1
logprobs = paper["logprobs"].clone().requires_grad_(True)
loss = engine_loss(logprobs, paper["old_logprobs"], paper["advantages"], paper["mask"])
(gradient,) = torch.autograd.grad(loss, logprobs)
advantages = [row[row != 0][0].item() for row in paper["advantages"]]
print(f"rewards {list(PAPER_REWARDS)} → advantages {advantages} on "
      f"{int((paper['advantages'][0] != 0).sum())} sampled tokens each; loss {loss.item():+.3f} "
      "(the advantages of a group add up to 0)")
push = -gradient.numpy()  # a gradient-descent step moves each token's log-probability along this
limit = abs(push).max()
fig, ax = plt.subplots(figsize=(9, 2.2))
ax.imshow(push, aspect="auto", cmap="coolwarm_r", vmin=-limit, vmax=limit, interpolation="nearest")
ax.set_yticks(range(4), [f"τ{i}  R={r:g}" for i, r in enumerate(PAPER_REWARDS)])
segments = {"prompt": (0, 49), "turn 1": (49, 69), "observation": (69, 369), "turn 2": (369, 377)}
for start, _ in list(segments.values())[1:]:
    ax.axvline(start - 0.5, color="black", lw=0.6)
ax.set_xticks([(a + b) / 2 - 0.5 for a, b in segments.values()], list(segments), fontsize=8)
ax.set_xlabel("Datum position (the paper trajectory's segments)", fontsize=8)
ax.set_title("−∂L/∂log π per position: blue pushed up, red pushed down, grey untouched", fontsize=9)
plt.show()

# %% [markdown]
# Only the 28 sampled tokens of each trajectory move; the 300 observation tokens and the prompt
# are context. The loss itself is 0 here (the group's advantages add up to 0) — its value says
# nothing, its gradient is the update. After an update, the same group has ratios away from 1 and
# a loss that is no longer 0:

# %%
drifted = call_tensors(paper_group(), drift=0.4)
ratios = torch.exp(drifted["logprobs"] - drifted["old_logprobs"])[drifted["advantages"] != 0]
print(f"ratios {ratios.min():.2f}–{ratios.max():.2f}: loss "
      f"{engine_loss(**drifted).item():+.3f}")

# %% [markdown]
# <div style="border-left: 4px solid #888; padding: 0.4em 1em; background: rgba(127,127,127,0.08)">
#
# **What this GRPO leaves out, compared with DeepSeekMath's — and why**
#
# DeepSeekMath's GRPO divides each advantage by its group's standard deviation, clips the ratio
# (PPO's `min(r·A, clip(r, 1−ε, 1+ε)·A)`), averages each output's token losses over its length
# $1/|o_i|$, and adds a KL penalty to a frozen reference model. The course keeps the update of
# Happy-LLM §8.3 (GRPO + `importance_sampling`) and leaves out:
#
# - **the std normalisation**: $A_i = R_i - \bar R$ only. With rewards 1 / 0 / −0.1, dividing by the
#   std would give a group that differs only by a formatting slip (`[0, 0, 0, −0.1]`) the same push
#   as one where a right answer stands out, and it inflates groups that are almost degenerate.
# - **the clipping**: every step samples with the current weights
#   (`save_weights_and_get_sampling_client`) and takes **one** optimiser step on that rollout, so
#   the ratio stays near 1 and there is nothing to clip. Clipping protects several updates on one
#   rollout; the engine has it as `loss_fn="ppo"` if you take more.
# - **the KL term**: no reference model to keep in memory and run on every token; a LoRA adapter,
#   a small learning rate and a few dozen steps keep the policy close to where it started. Without
#   it nothing pulls a long run back — watch the format rate and the sampler-vs-trainer KL on the
#   dashboard of notebook 09.
# - **the $1/|o_i|$ average**: tokens are summed per trajectory, and the mean is over trajectories.
#
# </div>
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
# 6. **Write the loss yourself.** `importance_sampling_loss` gets one call's tensors, each `[B, T]`
#    (B datums padded to T positions): the current log-probabilities (with a gradient), the
#    sampler's, the advantages and a mask (1 on real positions, 0 on padding, which may hold any
#    value). The checker compares the loss **and its gradient** with those of the engine's own loss
#    on the paper group (at ratio 1 and after an update) and on a padded micro-batch of three lengths.

# %% tags=["exercise"]
import torch

from helpers.checkers import check_importance_sampling_loss


def importance_sampling_loss(logprobs, old_logprobs, advantages, mask) -> torch.Tensor:
    """The importance-sampling loss of one forward_backward call, as one number (a 0-d tensor).

    Per position: the ratio exp(logprobs - old_logprobs) times the advantage, negated (the optimiser
    minimises), counted only where mask is 1. Reduce as the engine does: a sum over each datum's
    positions, then the mean over the B datums.
    """
    raise NotImplementedError("write importance_sampling_loss")  # your code here


check_importance_sampling_loss(importance_sampling_loss)

# %% [markdown]
# ---
#
# ### Solutions
#
# Try the exercises first; the solution cell is collapsed (click the dots). Exercises 4 and 5 are the
# course's own functions (`helpers/rollout/loop.py`, `helpers/datums.py`) run through the same checkers;
# exercise 6 is the engine's loss (`helpers/engine/losses.py`) written out.

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


def importance_sampling_loss(logprobs, old_logprobs, advantages, mask):
    per_token = -torch.exp(logprobs - old_logprobs) * advantages * mask
    return per_token.sum(dim=1).mean()


check_importance_sampling_loss(importance_sampling_loss)

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
# 7. Write the loss the course optimises. What is the ratio in it, and what are the two policies?
# 8. Name three things DeepSeekMath's GRPO has that this loss leaves out, and why each can be left
#    out here.
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
# 7. $\mathcal L = -\frac1N\sum_i\sum_{t\in\text{sampled}(\tau_i)} \frac{\pi_\theta(y_t)}{\mu_{\text{old}}(y_t)}A_i$:
#    token-level importance sampling, summed over a trajectory's sampled tokens, averaged over the
#    step's N trajectories. The ratio compares the policy being trained with the sampler that
#    produced the token (its recorded `logprobs`); right after sampling it is 1 up to numerics.
# 8. The std normalisation of the advantage (with 1 / 0 / −0.1 rewards it would blow a formatting
#    slip up to the size of a right answer), the ratio clipping (one optimiser step per rollout
#    keeps the ratio near 1), the KL penalty to a reference model (no second model; LoRA, a small
#    learning rate and few steps keep the policy close), and the per-output $1/|o_i|$ average.
#
# </details>
