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
#
# The Datums of step 3 carry each sampled token's old log-probability and its advantage; step 4
# minimises $-\frac1N\sum_i\sum_t \frac{\pi_\theta}{\mu_{\text{old}}}A_i$ over them, with no std
# normalisation, no clipping and no KL term (notebook 08, "The loss the course optimises").

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
# The base model answers in the right format almost every time — but it does not search. In the
# recorded evaluation (600 test questions, the agent loop with 3 searches allowed) it ends with a
# well-formed `Answer:` line and no search at all on nearly every question, and nearly every answer is
# wrong: its groups score 0, all of them alike. GRPO can only push towards behaviour some trajectory of
# a group shows; a group in which nobody searches cannot teach searching, and one in which everybody
# scores 0 teaches nothing at all. it searches the question on the local index, searches
# again with the top title if the answer is not in the evidence yet, and answers with the reference
# spelled as the evidence spells it. The model is fine-tuned with `cross_entropy` on the
# **assistant** tokens of these demonstrations only — the same observation mask as in RL.

# %%
from helpers.course.policies import RECORDED_RUN
from helpers.course.recorded import eval_summary, reward_shares

base = eval_summary("base_agent")
shares = reward_shares("base_agent")
print(f"base model, recorded run {RECORDED_RUN} ({base['n']} questions): valid format {base['format_rate']:.1%}, "
      f"no search {base['no_search_share']:.1%} (mean {base['search_calls_mean']:.3f} searches), "
      f"strict EM {base['em_strict']:.3f}")
print("share of questions per reward:", {f"{r:+g}": f"{share:.1%}" for r, share in shares.items()})
print(f"SFT after the warm start: no search {eval_summary('sft')['no_search_share']:.1%}, "
      f"strict EM {eval_summary('sft')['em_strict']:.3f}")

# %% [markdown]
# Then the warm start, on this machine:

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

from helpers.course.learnable import ANSWER_RATES, CPU_RUN, SFT_START, cpu_run_config, learnable_examples
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
    cpu_summary = None
    print("The CPU run that learns does not run here:", missing)
# notebook 10 evaluates this run on held-out questions (the one-step run above when this one did not run)
remember("learning_09", {"summary": cpu_summary, "start": str(SFT_START)} if missing is None else None)

# %% [markdown]
# ## The real recipe, on a GPU (the `gpu` profile)
#
# Everything above is the recipe at toy scale. On a machine with a GPU, `COURSE_PROFILE=gpu` runs the
# real one here, in this notebook: the recorded run's recipe (`python -m helpers.experiment --preset
# h200`): the SFT warm start on hundreds of scripted demonstrations, then minutes of GRPO on large
# groups — the sizes are printed below — with its GRPO steps drawn on the dashboard. Notebook 10
# then evaluates it on the held-out test questions. Both notebooks together take about 14 minutes on
# one H200 (SFT 2.4, GRPO 9, the two evaluations 1; `benchmarks/RESULTS.md`), and every stage resumes
# if the kernel stops. In a terminal, the same run is these commands:

# %%
from helpers.course.recipe import GPU_RUN, commands, gpu_plan, train_stages

recipe = gpu_plan()
print(f"SFT on {recipe.sft.limit} train questions × {recipe.sft.epochs} epochs; GRPO on "
      f"{recipe.grpo.questions_per_batch} questions × {recipe.grpo.rollout.group_size} samples per step for "
      f"{GPU_RUN['grpo_minutes']:g} minutes; evaluation on the whole {recipe.eval.split} split")
print("\n".join(commands(recipe)))
if config.is_gpu():
    recipe_dashboard = TrainingDashboard(f"GRPO, preset {GPU_RUN['preset']}")
    display(recipe_dashboard)
    recipe_run = train_stages(recipe, on_step=recipe_dashboard.on_step)
    print(f"SFT: {recipe_run['sft']['demonstrations']} demonstrations; GRPO: {recipe_run['grpo'].get('steps_done')} steps")
else:
    print(f"profile {config.profile()!r}: the GPU recipe runs with COURSE_PROFILE=gpu on a machine with a GPU "
          f"(this one: {config.device()}).")

# %% [markdown]
# ## What each profile costs, and where the time goes
#
# | profile | what runs in this notebook | where the time goes |
# | --- | --- | --- |
# | `fast` | smollm2-135m, SFT on 2 questions, 1 GRPO step of 1 question × 2 | seconds: the plumbing only, nothing learns |
# | `full` | Qwen2.5-0.5B, SFT on 4 questions, 1 GRPO step of 1 question × 4, then the run that learns (`CPU_RUN`) | minutes per step: on a CPU the forward-backward over a group's few thousand tokens costs more than sampling them |
# | `gpu` | the recorded run's recipe: SFT on 800 questions, 9 minutes of GRPO (16 questions × 8 per step) | the rollout (decoding token after token, and the searches) takes most of a step; the update is one batched pass |
#
# On a CPU the trainer is the bottleneck, so a run that learns must be small in tokens: few
# questions, short turns, one question per step. On a GPU the update is cheap and the rollout, token
# after token, is the cost, which is why the recipe samples a whole batch of groups at once and why
# budgets on searches and turn length matter for speed as much as for behaviour. The measured times
# of every profile are in `benchmarks/RESULTS.md`.

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
# 1. The base model answers in a valid format but almost never searches, and its answers are mostly
#    wrong: its groups score 0 throughout (degenerate), and none of its trajectories shows a search
#    that GRPO could reinforce. SFT teaches the search-then-answer behaviour first; GRPO then chooses
#    among behaviours the policy already shows.
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
