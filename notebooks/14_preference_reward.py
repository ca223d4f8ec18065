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
# # 14 · The preference score s(τ): a reward model that must not care which reply it read first
#
# **What you will build.** The missing factor of notebook 11's gated reward
# $R = r_\text{base}\cdot s - \text{pen}_\text{eff}$: a Bradley–Terry preference model on the
# policy's own backbone, trained so that the order in which it reads two replies does not matter;
# then $s(\tau)$ for a group's trajectories, and what it does to that group's advantages. Last, the
# other half of the post's data: prompts whose $r_\text{base}$ comes from rubrics.
#
# **What you need.** The gated reward and its length penalty (11), group advantages (08).
#
# In notebook 11, $s\equiv 1$: every correct answer was equally good. Perplexity's post replaces it
# with a learned score of what users prefer but a judge's prompt cannot spell out — informative,
# clear, professional — and gates it with correctness so that style never buys back a wrong answer.

# %%
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from helpers import config
from helpers import efficiency as eff
from helpers import preference as pref
from helpers.data import load_examples

torch.manual_seed(0)
FAST = config.is_fast()
SIZES = dict(examples=30, ties=6, epochs=2, lora_layers=1) if FAST else dict(examples=60, ties=12, epochs=2, lora_layers=2)
print("profile:", config.profile(), "| backbone:", config.default_model(), "|", SIZES)

# %% [markdown]
# ## Preference pairs a rule can label
#
# The post trains on curated open data, side-by-side user feedback and in-house annotation. We have
# none offline, so **a rule stands in for the human**: for the same question and the same right
# answer, a reader prefers the reply that states it plainly over one padded with hedges, one that
# restates the question, one with stray citation marks like `[web:3]`, or one in a language the
# question was not asked in. The label $r=1$ means the first reply, $y_a$, is preferred.
#
# One more thing is deliberately realistic: the tool that showed the pairs to our "labellers" put the
# preferred reply **first four times in five**. Nothing about a reply's quality depends on where it
# was shown — but a model trained on these pairs as given can learn that "first" tends to win.

# %%
examples = load_examples("train", limit=SIZES["examples"])
pairs = pref.make_pairs(examples, seed=0, shown_first=0.8)
train_pairs, held_out = pref.split_pairs(pairs, held_out=1 / 3, seed=0)
ties = pref.make_ties(load_examples("validation", limit=SIZES["ties"]), seed=1)
print(f"{len(train_pairs)} training pairs, {len(held_out)} held-out pairs (other questions), {len(ties)} ties")
print(f"preferred reply shown first in {np.mean([p.r for p in train_pairs]):.0%} of the training pairs")
pd.DataFrame([p.as_dict() for p in pairs[:6]])[["rule", "a", "b", "r"]]

# %% [markdown]
# ## A model that reads the pair
#
# The post's model is the policy's backbone with its language-model head swapped for a **value
# head**: one linear map from the last hidden state to a scalar $s_\theta(x, y)$. Two replies are
# compared through their difference,
#
# $$\ell_\text{BT} = -\big[r\log\sigma(\Delta_\theta) + (1-r)\log(1-\sigma(\Delta_\theta))\big],\qquad
# \Delta_\theta = s_\theta(x, y_a) - s_\theta(x, y_b).$$
#
# If each score saw only its own reply, swapping the replies would just flip the sign of $\Delta$ and
# there could be no position bias at all. A judge that *compares* reads both, so ours reads one
# sequence — `Question: x`, `[A] y_a`, `[B] y_b` — and the value head is read at the newline that
# closes each reply. Reply A is scored before B is seen, B after A, behind different markers and at
# different positions: now $\Delta(x, a, b)$ and $-\Delta(x, b, a)$ can differ, and that gap is the
# position bias.
#
# On a CPU only the top blocks train (LoRA), so the frozen blocks below run once per sequence and
# their output is kept: every epoch costs only the top blocks.

# %%
one_order = pref.Preference(pref.PreferenceConfig(symmetrise=False, epochs=SIZES["epochs"], lora_layers=SIZES["lora_layers"]))
pair = held_out[0]
encoded = one_order.encoded(pair.question, pair.a, pair.b)
ids, decode = encoded.ids, one_order.tokenizer.decode
a_end, b_end = encoded.first_end, encoded.second_end
print(decode(ids[:a_end]) + f"⟦{decode(ids[a_end:a_end + 1])}⟧" + decode(ids[a_end + 1:b_end]) + f"⟦{decode(ids[b_end:])}⟧")
print(f"{len(encoded.ids)} tokens; the value head is read at the two ⟦ ⟧ newlines; "
      f"{one_order.model.lora_layers} of {len(one_order.model.backbone.layers)} blocks train")

# %% [markdown]
# ## One order, or both
#
# The post's fix is to use **every training pair in both orders**, the label flipped with it:
#
# $$\mathcal L_\text{sym} = \tfrac12\,\ell_\text{BT}(x, y_a, y_b, r) + \tfrac12\,\ell_\text{BT}(x, y_b, y_a, 1-r).$$
#
# A constant preference for slot A now costs as much in one order as it gains in the other. We train
# two models from the same start on the same pairs: one on the pairs as shown, one on
# $\mathcal L_\text{sym}$ (they share the frozen blocks' output, computed once).

# %%
one_order.fit(train_pairs)
symmetrised = pref.Preference(pref.PreferenceConfig(symmetrise=True, epochs=SIZES["epochs"], lora_layers=SIZES["lora_layers"]))
symmetrised.share_frozen_states(one_order)
symmetrised.fit(train_pairs)
pd.DataFrame({"one order": [h["loss"] for h in one_order.history],
              "symmetrised": [h["loss"] for h in symmetrised.history]},
             index=pd.Index(range(1, SIZES["epochs"] + 1), name="epoch")).plot(marker="o", figsize=(5, 2.8), ylabel="training loss")
plt.tight_layout()

# %% [markdown]
# ## Accuracy and position bias on held-out pairs
#
# Each held-out pair is read in both orders. **Accuracy** is how often the position-free
# probability
#
# $$\bar P_\theta(x, y_a, y_b) = \sigma\Big(\tfrac12\big[\Delta_\theta(x, y_a, y_b) - \Delta_\theta(x, y_b, y_a)\big]\Big)$$
#
# sides with the rule. Position bias has two readings. The post's goal is on the score $s(\tau)$ uses,
# $|\bar P(a,b) + \bar P(b,a) - 1|$, with $\bar P(b,a)$ read from the swapped pair in a call of its own
# (from the same two $\Delta$s it would be $1 - \bar P(a,b)$ by algebra, and a reading that depended on
# the batch or the padding would not show). The **slot preference of the reading itself** is read in
# one order at a time: $P(a,b) + P(b,a) - 1$ with $P=\sigma(\Delta)$, zero for a judge that ignores the
# order, positive when slot A wins more often. It shows best on **ties** — two plain replies no rule
# prefers: whatever the model prefers there is the position.

# %%
report = {name: {"held-out": model.evaluate(held_out, progress=True), "ties": model.evaluate(ties, progress=True)}
          for name, model in (("one order", one_order), ("symmetrised", symmetrised))}
table = pd.DataFrame({name: {"held-out accuracy (P̄)": r["held-out"]["accuracy"],
                             "held-out accuracy, one order read": r["held-out"]["accuracy_one_order"],
                             "|P̄(a,b) + P̄(b,a) - 1|, max (goal ≤ 0.01)": r["held-out"]["p_bar_bias"],
                             "position bias, held-out": r["held-out"]["position_bias"],
                             "position bias, ties": r["ties"]["position_bias"]}
                      for name, r in report.items()})
fig, ax = plt.subplots(figsize=(6, 2.8))
table.loc[["position bias, held-out", "position bias, ties"]].T.plot.barh(ax=ax)
ax.axvline(0, color="grey", lw=0.8)
ax.set_xlabel("P(a,b) + P(b,a) − 1   (> 0: the first slot wins)")
plt.tight_layout()
table.round(3)

# %% [markdown]
# Read the two columns. Both models learned the rule (the flaws are easy to see), but the one-order
# model also learned where the preferred reply tended to sit: on held-out pairs, and most of all on
# ties, it prefers slot A in *both* orders. The symmetrised model's bias on held-out pairs is close
# to zero — it was trained to give the same verdict either way round on pairs like these. (In the
# `fast` profile the small model sees too few pairs to learn much of either; the `full` profile shows
# the contrast: `benchmarks/RESULTS.md` has both.)
#
# Ties are a kind of pair neither model saw in training, and there the symmetrised model may still
# lean to one slot (the second reply is read after the first, so its reading differs): the loss
# removes the bias the *data* teaches, not every asymmetry of the reading. That is why the post also
# averages the two orders at inference: $\bar P$ is position-free for both models (first row, read
# from each order in its own call: float rounding, far below the goal's 0.01), and $s(\tau)$ below is
# always $\bar P$. The one-order row is the lesson: what a model would carry into $s$ if it were
# read in one order, and what the symmetrised loss trains down.
#
# Accuracy per kind of flaw (held-out, symmetrised):

# %%
pd.Series(report["symmetrised"]["held-out"]["by_rule"], name="accuracy").to_frame().T.round(2)

# %% [markdown]
# ## s(τ) on a group's trajectories
#
# In training, $s(\tau_i) = \bar P(\text{the policy's reply} \succ \text{the reference policy's reply})$
# for the same prompt, the reference being the SFT policy (`eff.ReferenceLengths` samples it once
# per question; its `reply(example)` is the reference reply, and its lengths are the length
# penalty's $L^\text{ref}$). Here a group written for the lesson, teacher-forced through the
# rollout's own machinery: five replies with the right answer, padded in different ways, and one
# wrong one. The reference reply is the plain one.

# %%
from helpers.rollout import Group
from helpers.widgets.course import forced_trajectory

question = load_examples("validation", limit=1)[0]
gold = question.answers[0]
replies = {
    "plain": gold,
    "hedged": f"{gold}\nI think it might possibly be {gold}, but I am not entirely sure.",
    "cited": f"{gold}\nThe answer is {gold} [web:2][web:7].",
    "restated": f"{gold}\nYou asked: {question.question} The answer to that is {gold}.",
    "other language": f"{gold}\nЖауабы: {gold}.",
    "wrong, plain": "Dublin",
}
group = Group(question, [forced_trajectory(question, [], text, group_index=i) for i, text in enumerate(replies.values())])
score = pref.PreferenceScore(symmetrised, {question.id: f"The answer is {gold}."})
s = score.scores(group)
print("question:", question.question, "| gold:", gold)
fig, ax = plt.subplots(figsize=(7, 2.6))
ax.barh(list(replies), s, color=["tab:green" if t.exact_match else "tab:red" for t in group.trajectories])
ax.axvline(0.5, color="grey", ls="--", lw=0.8)
ax.set_xlim(0, 1)
ax.set_xlabel("s(τ) = P̄(reply ≻ reference)   (green: exact match)")
ax.invert_yaxis()
plt.tight_layout()

# %% [markdown]
# ## What the gate does to the group's advantages
#
# The same group scored by notebook 11's gated reward twice: with $s\equiv1$, and with $s$ from the
# model. The wrong reply gets no preference credit either way (its $r_\text{base}=0$ multiplies $s$
# away), while the correct replies are now ranked by how they say it. The length penalty's winners
# change too: $\widehat W_g$ is *correct and preferred* ($s\ge 0.5$), so a padded correct reply is
# measured as a loser there.

# %%
numbers = eff.group_numbers(group.trajectories)
plain_s = eff.score_group(**numbers)
model_s = eff.score_group(**numbers, preferences=s)
x = np.arange(len(replies))
fig, ax = plt.subplots(figsize=(8, 3))
ax.bar(x - 0.2, [r.advantage for r in plain_s], 0.4, label="s ≡ 1")
ax.bar(x + 0.2, [r.advantage for r in model_s], 0.4, label="s from the preference model")
ax.set_xticks(x, list(replies), rotation=20, ha="right")
ax.axhline(0, color="grey", lw=0.8)
ax.set_ylabel("advantage")
ax.legend()
plt.tight_layout()
pd.DataFrame({"reply": list(replies), "r_base": [r.r_base for r in model_s], "s": np.round(s, 3),
              "R (s ≡ 1)": [round(r.reward, 3) for r in plain_s], "R (model s)": [round(r.reward, 3) for r in model_s]})

# %% [markdown]
# In training this is one option of the registered reward:
# `make_reward("gated", preference=PreferenceScore(model, reference), reference=reference)` with
# `reference` an `eff.ReferenceLengths` over the SFT policy (its replies for $s$, its lengths for
# $L^\text{ref}$). Without the options the reward is notebook 11's ($s\equiv1$, the group's own lengths).
#
# The trained model is saved beside the adapters, as safetensors (the LoRA tensors and the value
# head) and a json of its config, and loads back to the same scores:

# %%
folder = symmetrised.save(config.RUNS_DIR / "preference" / f"{config.profile()}-{config.default_model()}")
again = pref.Preference.load(folder)
print(sorted(p.name for p in folder.iterdir()), "| same s after loading:",
      np.allclose(pref.PreferenceScore(again, score.reference).scores(group), s, atol=1e-5))

# %% [markdown]
# ## What s did on a GPU
#
# Everything above ran on a CPU, on one group written for the lesson. Does $s$ change what a policy
# *learns*? The recorded search agent (`agent`, notebook 10) was trained further on one GPU with
# notebook 11's gated reward — stage `trim`, its tool penalty on, its length penalty off — in three
# runs from the same adapter: two with $s\equiv1$, and one with $s$ from a preference model trained
# as above on the agent's own backbone, each right answer scored against the starting policy's reply
# to the same question. The two $s\equiv1$ runs differ in one setting: whether the first round of
# dynamic sampling drew two batches of questions (as the $s$ run did) or one. Each run's policy was
# then evaluated greedily on the same test questions as the agent. The cell reads the recorded
# evaluations and training metrics (`results/h200_agent/continued/`, `results/h200_agent/preference_trim/`).

# %%
from helpers.analyse import COLUMN_INCHES, compare, summarise
from helpers.course.policies import AGENT_RUN, recorded_policy
from helpers.course.recorded import eval_rows, evaluated_updates, policy_rows, training_metrics

START = "starting agent"
TRIM_RUNS = {"s ≡ 1, first round of 2 batches": f"{AGENT_RUN}/continued/draw2",
             "s ≡ 1, first round of 1 batch": f"{AGENT_RUN}/continued/draw1",
             "s from the preference model": f"{AGENT_RUN}/preference_trim"}
MODEL_S = "s from the preference model"
COLOURS = dict(zip([START, *TRIM_RUNS], ("#7f7f7f", "#1f77b4", "#9ecae1", "#2ca02c")))
label = recorded_policy("agent").evaluation  # what the agent's evaluations are called in every run

rows = {START: policy_rows("agent")} | {name: eval_rows(label, run) for name, run in TRIM_RUNS.items()}
summaries = {name: summarise(r) for name, r in rows.items()}
curves = {name: training_metrics("grpo_trim", run) for name, run in TRIM_RUNS.items()}
updates = {START: 0} | {name: evaluated_updates(label, run) for name, run in TRIM_RUNS.items()}

evaluation = pd.DataFrame({name: {
    "updates": updates[name],
    "EM": s["all"]["em_strict"], "EM HotpotQA": s["hotpotqa"]["em_strict"], "EM NQ": s["nq"]["em_strict"],
    "gen. tokens": s["all"]["sampled_tokens_mean"], "searches": s["all"]["search_calls_mean"],
    "≥ 2 searches HotpotQA": s["hotpotqa"]["multi_search_share"], "≥ 2 searches NQ": s["nq"]["multi_search_share"],
} for name, s in summaries.items()}).T.astype({"updates": int})
training = pd.DataFrame({name: {
    "updates logged": len(m), "evaluated after": updates[name],
    "seconds per update": np.mean([r["time_step"] for r in m]),
    "mean s of the samples": np.mean([r["eff/preference_mean"] for r in m]),
} for name, m in curves.items()}).T.astype({"updates logged": int, "evaluated after": int})

fig = plt.figure(figsize=(COLUMN_INCHES, 6.4))
grid = fig.add_gridspec(2, 4, height_ratios=(1, 1.15), hspace=0.45, wspace=0.45)
bars = [("test: EM (strict)", ["EM"]), ("test: generated tokens", ["gen. tokens"]), ("test: searches", ["searches"]),
        ("test: ≥ 2 searches", ["≥ 2 searches HotpotQA", "≥ 2 searches NQ"])]
for column, (title, keys) in enumerate(bars):
    ax = fig.add_subplot(grid[0, column])
    width = 0.8 / len(evaluation)
    for i, name in enumerate(evaluation.index):
        ax.bar(np.arange(len(keys)) + (i - (len(evaluation) - 1) / 2) * width, evaluation.loc[name, keys],
               width, color=COLOURS[name], label=name if name == START else f"{name}: {updates[name]} updates")
    ax.set_xticks(range(len(keys)), ["HotpotQA", "NQ"] if len(keys) == 2 else [""])
    ax.set_title(title, fontsize=9)
for column, (key, title) in enumerate((("search_calls_mean", "in training: searches per trajectory"),
                                       ("assistant_tokens_mean", "in training: generated tokens per trajectory"))):
    ax = fig.add_subplot(grid[1, 2 * column:2 * column + 2])
    for name, m in curves.items():
        ax.plot([r["step"] for r in m], [r[key] for r in m], marker="o", color=COLOURS[name])
        ax.axvline(updates[name], color=COLOURS[name], ls=":", lw=1.2)
    ax.set_xlabel("updates before the batch was sampled", fontsize=8)
    ax.set_title(title, fontsize=9)
fig.legend(*fig.axes[0].get_legend_handles_labels(), loc="upper center", ncol=2, fontsize=8, frameon=False)
fig.text(0.5, 0.015, "dotted: the checkpoint each run's evaluation used", ha="center", fontsize=8)
fig.subplots_adjust(top=0.87, bottom=0.11)
plt.show()

both = compare(rows[START], rows[MODEL_S], labels=(START, MODEL_S))["all"]
print(f"of the {both['paired']} test questions: right only for the {START} {both['a_only']}, "
      f"right only for {MODEL_S} {both['b_only']}")
display(evaluation.round(3), training.round(2))

# %% [markdown]
# **What the numbers say.** With $s\equiv1$, more `trim` drifted towards searching: in the run drawn
# like the $s$ run, the searches and the generated tokens of the sampled trajectories rose update
# after update, and greedy on the test questions it searched twice on most HotpotQA questions and on
# many NQ questions, which one search usually settles — with the lowest exact match of the four. The
# other $s\equiv1$ run stayed flat for its first updates and then began the same climb. The run with
# $s$ from the model stayed where all three started, and greedy it kept the starting agent's exact
# match (the pairs printed above: a handful of questions either way) while searching twice on more
# HotpotQA questions than the agent did and on fewer NQ questions than either $s\equiv1$ run.
#
# **What they cannot say.**
#
# - *Three updates.* The curves are the only like-for-like comparison, and they are short: by its
#   third batch the $s\equiv1$ run drawn the same way had begun to climb and the $s$ run had not, but
#   the other $s\equiv1$ run was just as flat for longer than that. Three updates cannot tell "s
#   stopped the drift" from "the drift had not started yet".
# - *Unequal arms.* The evaluations are of checkpoints after different numbers of updates (the
#   dotted lines). A policy trained less has drifted less, whatever its reward.
# - *One run each.* No run was repeated, and on HotpotQA's share of the test set a gap of a few
#   points is a few questions.
# - *Taste or scale.* With the length penalty off, $s$ only multiplies a right answer's reward, and
#   its mean sat near one half (the table): against the same tool penalty, a right answer was worth
#   about half as much as with $s\equiv1$, and its advantage (reward minus the group's mean, notebook
#   08) shrank with it. Whether the model's judgement held the policy still or only this change of
#   scale did, these runs cannot tell; a run with $s\equiv\tfrac12$ could.
#
# And $s$ is not free: every update scores each right answer against the reference policy's reply,
# which has to be sampled first, so an update with $s$ took far longer (the table's seconds).
# Perplexity's post introduces $s$ for how an answer reads — informative, clear — not to count
# searches; anything it did to searching here went through the gate's arithmetic.

# %% [markdown]
# ## Rubric prompts, the pass@4 filter and the 90/10 mix
#
# The post's general-chat data has no single right answer, so its $r_\text{base}$ is "meets every
# rubric": a few criteria per prompt, each **objective** (checkable without taste) and **necessary**
# (needed to answer, not a style wish). Our rubric set asks questions whose answer is in the corpus,
# with instructions; each instruction is a rubric a rule checks.

# %%
from helpers.multihop.mix import batch_with_share
from helpers.rubrics import RUBRIC_SHARE, pass_at_k_filter, rubric_set

prompts = rubric_set()
example = prompts[0]
print(f"{len(prompts)} prompts, {min(len(p.rubrics) for p in prompts)}–{max(len(p.rubrics) for p in prompts)} rubrics each\n")
print("prompt:", example.prompt)
for rubric in example.rubrics:
    print("  -", rubric.text)

# %% [markdown]
# **pass@4.** Sample four replies per prompt and keep the prompt only if *some but not all* meet every
# rubric: a prompt nobody passes, or everybody passes, gives every sample the same reward — zero
# advantage, no signal. A policy's samples would go here (`sample(prompt, k)`); on a CPU we use a
# stand-in that writes each reply in one of the pairs' styles, which is enough to see the filter at work.

# %%
import random

from helpers.preference.pairs import worse_reply


rng = random.Random(0)


def stand_in_sampler(prompt, k):
    """k replies to `prompt`, each plain or flawed in one of the rule's ways (a stand-in for a policy)."""
    styles = ["plain", "hedged", "cited", "language", "restated", "wrong"]
    weights = [6, 1, 1, 1, 1, 1] if rng.random() < 0.5 else [1, 2, 2, 2, 2, 2]
    out = []
    for style in rng.choices(styles, weights, k=k):
        if style == "plain":
            out.append(f"{prompt.answers[0]}.")
        elif style == "wrong":
            out.append("I do not know.")
        else:
            out.append(worse_reply(style, prompt.question, prompt.answers[0], rng))
    return out


filtered = pass_at_k_filter(prompts, stand_in_sampler, k=4)
pd.Series(filtered.counts()).to_frame("prompts").T

# %% [markdown]
# **The mix.** Rubric rewards are easier to earn early in training, so they would produce larger,
# more frequent updates and crowd out the harder verifiable signal. The post reweights the prompt
# mix: 90 % verifiable questions, 10 % rubric prompts.

# %%
# step 0 of a run with rubric_share = RUBRIC_SHARE: the same mixing as the synthetic share
batch = batch_with_share(load_examples("train", limit=100), filtered.kept, step=0, size=20, seed=0, share=RUBRIC_SHARE)
print(f"a batch of {len(batch)}: {sum(hasattr(p, 'rubrics') for p in batch)} rubric prompts, "
      f"{sum(not hasattr(p, 'rubrics') for p in batch)} verifiable questions")

# %% [markdown]
# ---
#
# ## Exercises
#
# 1. **Write the symmetrised loss.** `delta_ab` and `delta_ba` are the model's $\Delta$ for each pair
#    read in the two orders, `r` the labels of the first order (1: $y_a$ preferred). The checker
#    runs worked numbers and a property test: the loss must not change when every pair is presented
#    the other way round.

# %% tags=["exercise"]
import torch.nn.functional as F

from helpers.checkers import check_symmetrised_loss


def symmetrised_loss(delta_ab, delta_ba, r):
    """L_sym = 1/2 l(delta_ab, r) + 1/2 l(delta_ba, 1 - r), averaged over the batch.

    l(Delta, r) = -[r log sigma(Delta) + (1 - r) log(1 - sigma(Delta))]; use F.logsigmoid
    (log(1 - sigma(x)) = logsigmoid(-x)) so large margins stay finite.
    """
    raise NotImplementedError("write symmetrised_loss")  # your code here


check_symmetrised_loss(symmetrised_loss)

# %% [markdown]
# 2. **Write the gate.** For a group, `r_base` (0/1), `s` (preference scores in [0, 1]) and `pen_eff`
#    (efficiency penalties) give the rewards $R_i$. The checker includes the property the post's
#    design rests on: a wrong answer never gets preference credit, whatever its $s$.

# %% tags=["exercise"]
from helpers.checkers import check_gate


def gate(r_base, s, pen_eff):
    """R_i = r_base_i * s_i - pen_eff_i for every member of a group (a list of floats)."""
    raise NotImplementedError("write gate")  # your code here


check_gate(gate)

# %% [markdown]
# 3. **Think.** Why would $R = r_\text{base} + s - \text{pen}$ be hackable? Which replies of the group
#    above would gain under it?
# 4. **Try.** Train the one-order model with `shown_first=0.5` data. Does its bias on ties go away?

# %% [markdown]
# ### Solutions
#
# Try the exercises first; the solution cell is collapsed. They are the course's own functions run
# through the same checkers.

# %% tags=["solution"] jupyter={"source_hidden": true}
check_symmetrised_loss(pref.symmetrised_loss)
check_gate(lambda r_base, s, pen_eff: [eff.gated_reward(*member) for member in zip(r_base, s, pen_eff)])

# %% [markdown]
# ## What to take away
#
# - A judge that reads two replies can prefer a *slot*; train it on both orders (the symmetrised
#   loss) and score with the averaged $\bar P$, and the order stops mattering.
# - $s(\tau)$ compares the policy's reply with the reference policy's reply for the same prompt, so
#   $s\ge 0.5$ means "at least as good as where training started".
# - The gate makes correctness a hard requirement: $r_\text{base}\cdot s$ is 0 for a wrong answer,
#   and only correct, preferred replies set the length penalty's winners' baseline.
# - On a GPU, $s$ from the model kept the search agent near where it started over its few updates,
#   while $s\equiv1$ drifted towards more searches: a hint from one short run, in which $s$ also
#   halved a right answer's reward, not yet a result.
# - Rubric prompts give a binary $r_\text{base}$ beyond exact match; pass@4 keeps the prompts that
#   teach something, and the 90/10 mix keeps the easier signal from dominating.
#
# Answers: 3. with a sum, a wrong but nicely written reply earns $s$; the "wrong, plain" reply
# (preferred style, wrong answer) would beat a correct but hedged one. 4. mostly: with balanced
# orders there is no slot to learn, though the one-order model still has no reason to be exactly
# consistent.
