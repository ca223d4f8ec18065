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
# # 11 · Beyond Search-R1: a reward that also counts searches and words
#
# **What you will build.** The reward of Perplexity's post (on post-training search
# agents): correctness still decides, but a correct answer found with fewer searches and fewer words
# scores higher than one found the long way — measured *against the group*, not against a fixed price.
#
# **What you need.** Rewards and group advantages (03, 08), a rollout (05), a training step (09).
#
# The exact-match reward of notebook 03 says nothing about *how* an answer was reached. Perplexity's
# post reports what that does at its scale (large models, long training): a policy trained only on
# exact match learns that one more search never hurts, and drifts towards more calls and longer
# turns. Charging a flat price per call is the obvious fix, and the post reports it backfires: it
# also punishes the searches a hard question needs, so the policy stops exploring. The post's answer
# is a **gated** reward with **group-anchored** penalties:
#
# $$R(\tau) = r_\text{base}(\tau)\cdot s(\tau) \;-\; \big(\lambda_\text{tool}\,\text{pen}_\text{tool}(\tau) + \lambda_\text{len}\,\text{pen}_\text{len}(\tau)\big)$$
#
# - $r_\text{base}\in\{0,1\}$ — exact match. It *gates* the preference score $s\in[0,1]$ (a reward
#   model's verdict; here 1 unless you plug one in — notebook 14 trains that model): style can
#   never buy back a wrong answer.
# - $\text{pen}_\text{tool}$ — searches beyond what the group's **winners** needed.
# - $\text{pen}_\text{len}$ — verbose winners and terse losers, against a reference model's lengths.

# %%
import numpy as np
import pandas as pd

from helpers import config
from helpers import efficiency as eff

print("profile:", config.profile(), "| model:", config.default_model())
eff.EfficiencyConfig()

# %% [markdown]
# ## Predict first: does exact match drift towards more searches here?
#
# The course has a recorded GRPO run with the plain exact-match reward (`results/efficiency/exact_match`:
# Qwen2.5-0.5B from the SFT warm start, a few minutes of GRPO on one GPU). Its SFT start searched
# once on nearly every question. Over the run, did the mean number of searches per
# trajectory go **up**, **down**, or stay **flat**? Write your guess, then run the cell after it.

# %%
my_drift = None  # "up", "down" or "flat"

# %%
from helpers.course.recorded import training_metrics, trend

print(len(training_metrics("exact_match", run="efficiency")), "recorded steps with the exact-match reward")
first, last = trend("exact_match", "search_calls_mean", run="efficiency")
tokens_first, tokens_last = trend("exact_match", "assistant_tokens_mean", run="efficiency")
seen = "up" if last - first > 0.05 else "down" if first - last > 0.05 else "flat"
print(f"searches per trajectory, first quarter of steps → last: {first:.2f} → {last:.2f} ({seen}); "
      f"generated tokens per turn {tokens_first:.1f} → {tokens_last:.1f}"
      + ("" if my_drift is None else f" — you said {my_drift!r}"))

# %% [markdown]
# Flat. The drift the post reports is a finding at scale — many steps, a policy free to explore, a
# budget of many calls — and it did not appear in a short run from a policy whose warm start taught
# one search: nothing made a second search pay, so nothing pushed the count up. (Notebook 10 shows
# the reverse on the recorded run: exact-match GRPO *removed* second searches.) Keep both in mind
# when reading the penalties below: a penalty for extra searches can only act on a policy that makes
# them.

# %% [markdown]
# ## The tool-call penalty, anchored on the winners
#
# In group $g$, the winners are $W_g=\{i : r_\text{base}(\tau_i)=1\}$. A search that failed (the
# backend errored) is not the policy's fault, so only *effective* calls count:
# $\tilde c_i = c_i - e_i$. The group's baseline is drawn between the thriftiest winner and the
# winners' (rounded-up) mean:
#
# $$b_g \sim \mathrm{Unif}\{\min_{W_g}\tilde c,\ \dots,\ \lceil \mathrm{mean}_{W_g}\tilde c\rceil\},\qquad
# p_i = 1-e^{-\max(0,\ \tilde c_i-b_g)}$$
#
# Winners pay $\alpha_\text{win}\,p_i$; everyone else pays $\alpha_\text{lose}\,p_i+\beta_\text{lose}$.
# The draw is an **integer** uniform (calls are counts), seeded per (run seed, step, question), so a
# run is reproducible. Drawing instead of fixing the baseline at the minimum keeps the pressure soft:
# sometimes the second-thriftiest winner is also free.

# %%
calls = [1, 2, 4, 3, 0]
r_base = [1, 1, 1, 0, 0]
print("baseline range:", eff.baseline_range(calls, [bool(r) for r in r_base]))
draws = [eff.sample_tool_baseline(calls, [bool(r) for r in r_base], seed) for seed in range(2000)]
print("share of each baseline over 2000 seeds:", pd.Series(draws).value_counts(normalize=True).sort_index().round(3).to_dict())
rows = eff.score_group(r_base, calls, lengths=[60, 70, 90, 50, 20])
pd.DataFrame([r.as_dict() for r in rows])[["r_base", "effective_calls", "tool_baseline", "pen_tool", "pen_len", "reward", "advantage"]]

# %% [markdown]
# **A group with no winner.** Then there is no efficient solution to anchor on. Perplexity's post leaves this
# case open; here $\Delta=0$ for everyone, so every member pays exactly $\beta_\text{lose}$ — a constant
# that cancels in the group-mean advantage. A group where nobody found the answer is never pushed
# towards searching *less*: that is exactly the exploration a hard question needs.

# %%
lost = eff.score_group([0, 0, 0, 0], calls=[0, 1, 3, 6], lengths=[40, 40, 40, 40],
                       config=eff.EfficiencyConfig(lambda_len=0.0))
[(r.effective_calls, r.pen_tool, round(r.advantage, 6)) for r in lost]

# %% [markdown]
# ## The length penalty, against a reference
#
# $L_i$ is the number of tokens the policy generated; $L^\text{ref}_i$ the length of a reference
# model's generation on the same prompt. The **preferred winners** are
# $\widehat W_g=\{i\in W_g: s(\tau_i)\ge 0.5\}$, and the baselines are mean reference lengths:
# $b_\text{win}$ over $\widehat W_g$, $b_\text{lose}$ over everyone else. Then
#
# - longer than every reference of the group: $\text{pen}_\text{len}=1$ (hard cap);
# - a preferred winner: $1-e^{-\max(0,\ L_i/b_\text{win}-1)}$ — verbosity costs;
# - anyone else: $1-e^{-\max(0,\ b_\text{lose}/L_i-1)}$ — a *short* loser pays: a quick wrong
#   answer must not look cheaper than a careful failed attempt.
#
# Without reference lengths, `helpers.efficiency` uses the group's own lengths (self-anchored; the
# hard cap then never fires).

# %%
lengths = [150, 80, 40, 260]
refs = [100, 120, 90, 110]
preferred = [True, True, False, False]
print("b_win, b_lose =", eff.length_baselines(refs, preferred))
np.round(eff.length_penalties(lengths, preferred, refs), 3)

# %% [markdown]
# ## A real group, and the sliders
#
# A group from the rollout of notebook 05 (recomputed if you skipped it), plus teacher-forced
# trajectories on the same question that search 0, 1 and 3 times — real tokens, real search results,
# real log-probs (the base model rarely searches on its own, so the forced ones make the group
# interesting). Move the sliders: every penalty, reward and advantage is recomputed.

# %%
from helpers.widgets import budgets
from helpers.widgets.course import forced_trajectory, recall, remember, rollout_examples, run_rollout

values = budgets()
sampled = recall("rollout_05")
if sampled is None:  # notebook 05 not run in this profile: roll out now, and keep it for the others
    sampled = list(run_rollout(rollout_examples(values["questions"]), values))
    remember("rollout_05", sampled)
question = sampled[0].example
group = [t for t in sampled if t.question_index == sampled[0].question_index]
plans = [([], question.answers[0]), ([question.question], question.answers[0]),
         ([question.question, question.question + " wikipedia", question.answers[0]], question.answers[0]),
         ([question.question], "I do not know")]
forced = [forced_trajectory(question, queries, answer, group_index=len(group) + k)
          for k, (queries, answer) in enumerate(plans)]
group = group + forced
labels = [f"sampled {i}" for i in range(len(group) - len(forced))] + ["forced: 0 searches", "forced: 1 search",
                                                                      "forced: 3 searches", "forced: wrong"]
print("question:", question.question, "| gold:", question.answers)
pd.DataFrame({"trajectory": labels, "exact_match": [t.exact_match for t in group],
              "searches": [t.search_calls for t in group], "generated tokens": [eff.generated_length(t) for t in group]})

# %%
explorer = eff.penalty_explorer(group, labels=labels)
explorer

# %% [markdown]
# Things to try: set $\lambda_\text{tool}=\lambda_\text{len}=0$ — you are back to the plain reward and
# all winners tie. Raise $\lambda_\text{tool}$: the three-search winner falls behind the one-search
# winner, but (with these defaults) it still beats every loser — the gate keeps correctness first as
# long as $\lambda_\text{tool}\alpha_\text{win}+\lambda_\text{len}<1$. Change the seed: the baseline
# moves inside its range.

# %% [markdown]
# ## What it changes in a GRPO update
#
# The advantage is what the update sees. For the group above, plain exact match (Search-R1's reward,
# notebook 03) against the gated reward, with the explorer's current slider values:

# %%
import copy

import matplotlib.pyplot as plt

from helpers.advantages import assign_advantages
from helpers.rollout import groups_of

plain = [copy.copy(t) for t in group]  # rewarded by exact match
assign_advantages(groups_of(plain))
gated_rows = eff.score_group(**eff.group_numbers(group),
                             config=eff.EfficiencyConfig(**{k: s.value for k, s in explorer.sliders.items()}))
x = np.arange(len(group))
fig, ax = plt.subplots(figsize=(9, 3.2))
ax.bar(x - 0.2, [t.advantage for t in plain], 0.4, label="exact match")
ax.bar(x + 0.2, [r.advantage for r in gated_rows], 0.4, label="gated")
ax.set_xticks(x, labels, rotation=20, ha="right")
ax.axhline(0, color="grey", lw=0.8)
ax.set_ylabel("advantage")
ax.legend()
plt.tight_layout()

# %% [markdown]
# ## Training with it
#
# The gated reward is a *reward function* of a group (`eff.GatedReward`, registered under the name
# "gated"), so training with it is notebook 09's step with one setting changed:
# `TrainConfig(reward="gated", reward_options={"lambda_tool": 0.2})`. The step scores each group with
# it, then applies the same `assign_advantages` as for exact match. `python -m helpers.efficiency
# compare` runs the same configuration twice, once per reward, from the same start (the plain run
# logs every gated term too, so the two are comparable); a recorded run is kept in
# `results/efficiency/` (a GPU run: the CPU is too slow for enough steps to see a trend).

# %%
recorded = {name: eff.load_metrics(config.RESULTS_DIR / "efficiency" / name) for name in eff.REWARDS}
if all(recorded.values()):
    print("recorded run:", {k: len(v) for k, v in recorded.items()}, "steps")
    eff.plot_reward_comparison(recorded)
    plt.tight_layout()
    summary = pd.DataFrame({name: rows[-1] for name, rows in recorded.items()}).loc[
        ["search_calls_mean", "assistant_tokens_mean", "exact_match", "eff/pen_tool_mean", "eff/pen_len_mean"]]
else:
    summary = None
    print("No recorded comparison in results/efficiency/ yet. To make one (a GPU is advised):\n"
          "  python -m helpers.efficiency compare --init-from <SFT state_path> --max-steps 20 \\\n"
          "      --questions-per-batch 16 --rollout.group-size 8 --out results/efficiency")
summary

# %% [markdown]
# ## Exercises
#
# 1. A group's winners made 1, 2 and 4 effective calls, its one loser 3; the drawn baseline is
#    $b_g=2$, with $\alpha_\text{win}=1$, $\alpha_\text{lose}=0.5$, $\beta_\text{lose}=0.1$. Give the
#    four tool penalties (winners first, in that order).
# 2. A group of four all-wrong trajectories made 0, 1, 3 and 6 calls. With $\lambda_\text{len}=0$ and
#    the defaults otherwise, what are their four advantages?
# 3. A preferred winner generated 300 tokens; the preferred winners' mean reference length is 200
#    and no reference is longer than 320. What is its length penalty?

# %%
from helpers.checkers.efficiency import check_length_penalty, check_no_winner_advantages, check_tool_penalties

my_tool_penalties = None  # e.g. [0.0, 0.1, 0.2, 0.3]
my_no_winner_advantages = None
my_length_penalty = None
check_tool_penalties(my_tool_penalties)
check_no_winner_advantages(my_no_winner_advantages)
check_length_penalty(my_length_penalty)

# %% [markdown]
# 4. **Write the group-anchored tool penalty yourself.** The checker runs the unit test's group, the
#    group of exercise 1, a group without a winner and other weights, plus a hypothesis property
#    test (every penalty stays within its weights, and more calls never cost less).

# %% tags=["exercise"]
import math

from helpers.checkers import check_tool_penalty


def tool_penalties(eff_calls, winners, baseline, alpha_win=1.0, alpha_lose=0.5, beta_lose=0.1) -> list[float]:
    """pen_tool for every member of a group.

    eff_calls: effective calls per member; winners: True where r_base = 1; baseline: the drawn
    b_g (None when the group has no winner). p = 1 - exp(-max(0, c - b_g)), and p = 0 when
    baseline is None. A winner pays alpha_win * p; anyone else alpha_lose * p + beta_lose.
    """
    raise NotImplementedError("write tool_penalties")  # your code here


check_tool_penalty(tool_penalties)

# %% [markdown]
# 5. **Plug in a reward of your own.** A reward is a function of a group (`helpers.reward`): it
#    reads `group.example` (the question, its answers and `metadata`, here the
#    `gold_passage_ids`) and each trajectory (`valid_format`, `exact_match`, `searches`: a
#    `SearchRecord` per call, with its `query` and the `passage_ids` its observation showed), and
#    returns `GroupRewards(rewards, components)`. Write `rewrite_bonus`: exact match, plus a bonus of
#    0.1 for a trajectory whose **first** query is not the question itself and brought a gold
#    passage — a reward for *searching well*, which exact match cannot see (notebook 10: the recorded
#    policies search the question verbatim). Only with a valid answer, so searching can never pay for
#    not answering. Then register it and train with it, below.

# %% tags=["exercise"]
from helpers.checkers import check_rewrite_bonus
from helpers.evidence import gold_passage_ids, query_differs
from helpers.reward import GroupRewards, outcome_reward

BONUS = 0.1


def rewrite_bonus(group) -> GroupRewards:
    """Exact match (outcome_reward(t.valid_format, t.exact_match)) plus BONUS per trajectory when it
    ended with a valid answer, its first search's query differs from the question
    (query_differs(query, group.example.question)) and that search's passage_ids hold one of
    gold_passage_ids(group.example). Log the bonus as a component: {"rewrite_bonus": [...]}.
    """
    raise NotImplementedError("write rewrite_bonus")  # your code here


check_rewrite_bonus(rewrite_bonus)

# %% [markdown]
# ---
#
# ### Solutions
#
# Try the exercises first; the solution cell is collapsed (click the dots). Exercise 4 is the
# course's `tool_penalties` (`helpers/efficiency/rewards.py`) run through the same checker.

# %% tags=["solution"] jupyter={"source_hidden": true}
check_tool_penalties(eff.tool_penalties([1, 2, 4, 3], [True, True, True, False], baseline=2,
                                            alpha_win=1.0, alpha_lose=0.5, beta_lose=0.1))
check_no_winner_advantages([r.advantage for r in eff.score_group(
    [0, 0, 0, 0], calls=[0, 1, 3, 6], lengths=[40, 40, 40, 40], config=eff.EfficiencyConfig(lambda_len=0.0))])
check_length_penalty(eff.length_penalties([300, 50], [True, False], [200, 320])[0])
check_tool_penalty(eff.tool_penalties)


def rewrite_bonus(group) -> GroupRewards:
    gold = set(gold_passage_ids(group.example))
    rewards, bonuses = [], []
    for trajectory in group.trajectories:
        first = trajectory.searches[0] if trajectory.searches else None
        earned = (trajectory.valid_format and first is not None
                  and query_differs(first.query, group.example.question) and bool(gold & set(first.passage_ids)))
        bonuses.append(BONUS if earned else 0.0)
        rewards.append(outcome_reward(trajectory.valid_format, trajectory.exact_match) + bonuses[-1])
    return GroupRewards(rewards, {"rewrite_bonus": bonuses})


check_rewrite_bonus(rewrite_bonus)

# %% [markdown]
# ## Train with your reward
#
# `register_reward(name, factory)` makes a reward available by name wherever the course takes one:
# `TrainConfig(reward=name)`, the CLI's `--reward name`, the experiment's `--set grpo.reward=name`.
# The factory takes the reward's options (`reward_options`) and returns the function. Then the
# training step is notebook 09's, unchanged: your reward scores each group, `assign_advantages`
# turns the rewards into advantages, and the loss of notebook 08 does the rest. A few steps on
# this machine (in the `full` profile from the recorded SFT adapter; in the `fast` one the small
# model, which shows the plumbing, not a trend); each step's `rewrite_bonus` mean is in its metrics.

# %%
from IPython.display import display

from helpers.course.learnable import SFT_START
from helpers.course.policies import unavailable_reason
from helpers.reward import register_reward
from helpers.reward_functions import make_reward
from helpers.train import TrainConfig, train
from helpers.widgets import TrainingDashboard
from helpers.widgets.course import rollout_config

register_reward("rewrite_bonus", lambda: rewrite_bonus)  # the factory: no options, the function itself
print("registered:", make_reward("rewrite_bonus").__name__)
own_config = TrainConfig(
    reward="rewrite_bonus", max_steps=max(values["grpo_steps"], 2), questions_per_batch=values["grpo_questions"],
    rollout=rollout_config(values, group_size=max(values["group_size"], 2)), save_every=0, resume=False,
    init_from=str(SFT_START) if unavailable_reason("sft") is None else None,
    out=str(config.RUNS_DIR / f"course-{config.profile()}" / "grpo_rewrite_bonus"))
own_dashboard = TrainingDashboard("GRPO with your reward")
display(own_dashboard)
own_summary = train(own_config, on_step=own_dashboard.on_step)
pd.DataFrame(own_dashboard.history).set_index("step")[
    [c for c in ("reward_mean", "exact_match", "rewrite_bonus", "search_calls_mean") if c in own_dashboard.history[0]]].round(3)

# %% [markdown]
# ## What we observed and why
#
# The recorded comparison (`results/efficiency`: both runs from the same SFT checkpoint, the same
# questions in the same order, the same minutes on one GPU), first quarter of the steps against the
# last, read from its metrics:

# %%
rows = []
for name in eff.REWARDS:
    metrics = training_metrics(name, run="efficiency")
    row = {"reward": name, "steps": len(metrics)}
    for key in ("search_calls_mean", "assistant_tokens_mean", "exact_match", "eff/pen_tool_mean"):
        first, last = trend(name, key, run="efficiency")
        row[key] = f"{first:.2f} → {last:.2f}"
    rows.append(row)
pd.DataFrame(rows).set_index("reward")

# %% [markdown]
# **The gated reward changed almost nothing**: both runs end at one search per trajectory and about
# the same generated length, and exact match on the training batches rose in both (a step holds a
# few dozen trajectories, so one step swings by ±0.2: compare the trends, not single steps).
#
# Why: the starting SFT policy already made exactly one search on nearly all of its trajectories.
# With every winner at one effective call, the baseline $b_g$ is 1 and the surplus
# $\tilde c_i - b_g$ is 0, so winners pay no tool penalty at all; the logged `eff/pen_tool_mean`
# is only the $\beta_\text{lose}$ floor paid by losers, a constant within a group
# that cancels in the group-mean advantage. A penalty anchored on the winners can only cut searches a
# policy makes *beyond* what its winners need — and this policy made none. To see it work, start
# from a policy that over-searches.
#
# ## Questionnaire
#
# 1. Why does the preference score $s$ multiply $r_\text{base}$ instead of being added to it?
# 2. Why is the tool penalty anchored on the group's winners rather than a fixed price per call?
# 3. Why do failed searches not count against the agent?
# 4. Why does a terse *loser* pay a length penalty?
# 5. In the recorded run the gated reward left searches and lengths unchanged. Why?
# 6. How do you add a reward of your own to training, and what must it return?
# 7. Whatever the reward, what loss does the update then minimise, and what in it does the reward
#    change?
#
# <details><summary><b>Answers</b> (open after answering)</summary>
#
# 1. The gate: style can never buy back a wrong answer; a wrong answer scores 0 whatever $s$ says.
# 2. A fixed price also punishes the searches a hard question needs, and the policy stops exploring.
#    Anchored on the winners, only calls beyond what a successful sibling needed cost anything, and a
#    group with no winner is never pushed to search less.
# 3. A backend error is the environment's fault, not a decision of the policy: $\tilde c = c - e$.
# 4. Otherwise a quick wrong answer would look cheaper than a careful failed attempt, and the policy
#    would learn to give up early.
# 5. Its winners all made one search, so the baseline was 1 and nobody had a surplus: the only term
#    left was the losers' constant $\beta_\text{lose}$, which cancels in the advantage.
# 6. Write a function of a group that returns `GroupRewards(rewards, components)`: one reward per
#    trajectory in group order, reading only the group's example (question, answers, `metadata`
#    such as `gold_passage_ids`) and what its trajectories did; register it with
#    `register_reward(name, factory)` and train with `TrainConfig(reward=name)` (options in
#    `reward_options`). Its components are logged as metrics. Keep correctness first: a bonus that
#    outweighs a right answer, or pays without a valid answer, teaches the bonus instead.
# 7. The same token-level importance-sampling loss of notebook 08,
#    $-\frac1N\sum_i\sum_t \frac{\pi_\theta}{\mu_{\text{old}}}A_i$, with no std normalisation,
#    clipping or KL term. The reward enters only through the advantages $A_i = R_i - \bar R$ of
#    each group: a term that is the same for every member of a group cancels.
#
# </details>
