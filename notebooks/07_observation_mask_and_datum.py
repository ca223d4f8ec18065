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
# # 07 · The observation mask and the training Datum
#
# **What you will build.** The bridge from a finished trajectory to something the trainer can use:
# one `Datum` per trajectory with, for every position, the input token, the target token, the old
# log-prob and the advantage. Only tokens the policy sampled carry an advantage; everything the
# environment wrote is context with advantage 0 — that is the **observation mask**.
#
# **What you need.** A continuous multi-turn trajectory (notebook 06) with a reward and a group
# advantage (notebooks 03 and 05).
#
# Why mask observations? They are not actions of the policy. Training on them would teach the model
# to *write* Wikipedia passages instead of to *use* them. They still stay in the context, so the
# following assistant tokens are predicted with the evidence in view.

# %%
import copy

import pandas as pd

from helpers.train import build_datum
from helpers.widgets import TokenStrip, token_rows
from helpers.widgets.course import search_trajectory
from helpers.widgets.course import tokenizer as course_tokenizer

tokenizer = course_tokenizer()  # the tokenizer alone: no model weights needed here
trajectory, origin = search_trajectory()
if trajectory.advantage == 0.0:
    # A lone or degenerate trajectory has A = 0 and would be skipped by training; give it the
    # advantage it would have in Happy-LLM §8.3.5's example group [1, 0, 1, 0] so the mask is visible.
    trajectory = copy.deepcopy(trajectory)
    trajectory.advantage = 0.5
print(f"{origin} trajectory: {len(trajectory.turns)} turns, reward {trajectory.reward:+.1f}, advantage {round(trajectory.advantage, 2) + 0.0:+.2f}")  # + 0.0 turns -0.0 into 0.0

# %% [markdown]
# ## Stitch, then shift once
#
# `build_datum` walks the turns. The first turn's prompt (system, tool schema, question) goes in with
# old log-prob 0 and advantage 0. For each later turn, only the part of its prompt that is new — the
# closing tokens of the previous turn, the observation, the next assistant header — is appended, again
# with zeros. Each turn's sampled tokens go in with their sampler log-probs and the trajectory's
# advantage. At the very end the whole sequence is shifted by one: `input = full[:-1]`,
# `target = full[1:]`, and log-probs and advantages move with the targets. This works for any number
# of turns.

# %%
item = build_datum(trajectory)
datum = item.datum
inputs = datum.loss_fn_inputs
targets = inputs["target_tokens"].to_numpy()
old_logprobs = inputs["logprobs"].to_numpy()
advantages = inputs["advantages"].to_numpy()
full_length = len(trajectory.turns[-1].prompt_tokens) + len(trajectory.turns[-1].completion_tokens)
print(f"full sequence {full_length} tokens → Datum of {item.length} positions")
print(f"positions with an advantage: {(advantages != 0).sum()} = sampled tokens {sum(len(t.completion_tokens) for t in trajectory.turns)}")

# %% [markdown]
# What the trainer does with these two columns: at every position it compares the current policy's
# log-probability of the target with the `logprobs` recorded here (their ratio π_θ/μ_old) and
# multiplies by the position's `advantages`; positions whose advantage is 0 add nothing. Notebook 08
# writes that loss out, on the paper trajectory, and you write it yourself there.
#
# Around the first seam (end of turn 1 → observation → turn 2), position by position:

# %%
seam = len(trajectory.turns[0].prompt_tokens) + len(trajectory.turns[0].completion_tokens) - 1
window = range(max(seam - 4, 0), min(seam + 8, item.length))
input_ids = datum.model_input.to_ints()
pd.DataFrame({
    "position": list(window),
    "input": [repr(tokenizer.decode([input_ids[i]])) for i in window],
    "target": [repr(tokenizer.decode([int(targets[i])])) for i in window],
    # + 0.0 turns the -0.0 of a rounded tiny negative log-prob into 0.0
    "old logprob": [round(float(old_logprobs[i]), 3) + 0.0 for i in window],
    "advantage": [float(advantages[i]) + 0.0 for i in window],
})

# %% [markdown]
# ## The mask, visible
#
# The same trajectory as a token strip. Every green (or red) token is a position the loss will push
# up (or down); grey and teal ones only provide context.

# %%
strip = TokenStrip(token_rows(trajectory, tokenizer))
print(strip.summary)
strip

# %% [markdown]
# ## The turns share one advantage
#
# Search calls and the final answer get the **same** advantage: the trajectory's. If the answer was
# right, the queries that led to it are reinforced together with it; if it was wrong, the whole chain
# of actions is pushed down. That is how an outcome reward can teach a tool-use strategy.

# %%
per_turn = []
position = 0
for number, turn in enumerate(trajectory.turns):
    start = len(turn.prompt_tokens) - 1  # shifted: the first sampled token is predicted here
    span = advantages[start:start + len(turn.completion_tokens)]
    per_turn.append({"turn": number, "kind": turn.kind, "sampled": len(turn.completion_tokens),
                     "advantage values": sorted(set(float(a) for a in span))})
pd.DataFrame(per_turn)

# %% [markdown]
# ## Exercises
#
# ### 1. The mask on paper
#
# A trajectory: prompt of 50 tokens → assistant turn 1 (20 tokens) → search result (300 tokens) →
# assistant turn 2 (8 tokens). How many positions does its Datum have, and how many of them carry a
# non-zero advantage? Work it out by hand first.

# %%
from helpers.checkers.exercises import check_mask_on_paper

my_positions, my_with_advantage = None, None
check_mask_on_paper(my_positions, my_with_advantage)

# %% [markdown]
# ### 2. Write `build_datum` yourself
#
# Replace the body below. Each `turn` of `trajectory.turns` has `prompt_tokens` (everything the
# sampler saw), `completion_tokens` and `logprobs` (what it sampled). The checker builds small
# trajectories with numbered tokens — among them the paper trajectory of exercise 1 — and compares
# every position of your Datum with the rule; it also checks that broken trajectories are refused
# with a `ValueError`.

# %% tags=["exercise"]
import numpy as np
import pytrio

from helpers.checkers import check_build_datum
from helpers.train import TrainingDatum


def build_datum(trajectory) -> TrainingDatum:
    """One trajectory -> TrainingDatum(datum, length), the whole sequence shifted once.

    Walk the turns, gathering three lists of equal length: tokens, old logprobs, advantages.
    - The first turn's prompt, and for each later turn the part of its prompt that is new (its
      prompt must start with everything gathered so far, else raise ValueError), are context:
      logprob 0.0, advantage 0.0.
    - Each turn's completion tokens keep their sampler logprobs (one per token, else ValueError)
      and carry trajectory.advantage.
    - No turns: ValueError.
    Then shift once: input = full[:-1]; targets, logprobs and advantages = their lists[1:].
    Return TrainingDatum(pytrio.Datum(model_input=pytrio.ModelInput.from_ints(input),
    loss_fn_inputs={"target_tokens": int64 array, "logprobs": float32 array,
    "advantages": float32 array}), len(input)).
    """
    raise NotImplementedError("write build_datum")  # your code here


check_build_datum(build_datum)

# %% [markdown]
# ---
#
# ### Solutions
#
# Try the exercises first; the solution cell is collapsed (click the dots). Exercise 1: build
# exactly that trajectory with `helpers.rollout` types and let `build_datum` count. Exercise 2 is the
# course's `build_datum` in `helpers/datums.py`, run through the same checker.

# %% tags=["solution"] jupyter={"source_hidden": true}
from helpers.data import SearchExample
from helpers.rollout import AssistantTurn, Trajectory
from helpers.train import build_datum

prompt = list(range(1000, 1050))                    # 50 prompt tokens
turn1 = list(range(2000, 2020))                     # 20 sampled tokens
observation = list(range(3000, 3300))               # 300 observation tokens
turn2 = list(range(4000, 4008))                     # 8 sampled tokens
paper = Trajectory(example=SearchExample("paper", "q", ["a"], "demo"), group_index=0, messages=[], advantage=0.5,
                   turns=[AssistantTurn(prompt, turn1, [-1.0] * 20, "call"),
                          AssistantTurn(prompt + turn1 + observation, turn2, [-1.0] * 8, "Answer: a")])
paper_datum = build_datum(paper)
paper_advantages = paper_datum.datum.loss_fn_inputs["advantages"].to_numpy()
print(paper_datum.length, int((paper_advantages != 0).sum()))
check_mask_on_paper(paper_datum.length, int((paper_advantages != 0).sum()))
check_build_datum(build_datum)

# %% [markdown]
# ## Questionnaire
#
# 1. Why do observation tokens stay in the Datum if they carry no advantage?
# 2. What would go wrong if the loss were also applied to the observation tokens?
# 3. Why is the sequence shifted once at the very end, not once per turn?
# 4. What does position *p* of a Datum predict, and which positions carry the advantage?
# 5. Why must a later turn's prompt start with every token gathered so far?
# 6. Every turn of a trajectory gets the same advantage. How can an outcome reward then teach which
#    searches were useful?
#
# <details><summary><b>Answers</b> (open after answering)</summary>
#
# 1. They are the context the next assistant tokens are predicted from: the trainer must see the
#    evidence exactly as the sampler did, or the new logprobs would not match the old ones.
# 2. The policy would be trained to *write* search results (Wikipedia passages, tool-turn markup)
#    instead of to use them, and the environment's text would dominate the gradient by its length.
# 3. A Datum is one sequence: input position *p* predicts token *p + 1* of the full trajectory.
#    Shifting each turn separately would drop the first token of every turn and mis-align the seams.
# 4. Position *p* predicts `full[p + 1]`; it carries the advantage exactly when that target token was
#    sampled by the policy (so the 20 + 8 = 28 sampled tokens of the paper trajectory, out of 377).
# 5. The sampler logprobs belong to exactly those prompt tokens; a re-rendered prompt that differs
#    anywhere (notebook 06) would pair the logprobs with the wrong context, so it is refused.
# 6. Across a group, trajectories whose searches led to right answers get positive advantages and the
#    others negative: over many groups, useful queries are reinforced more often than useless ones.
#
# </details>
