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
# # 00 · Set-up and a tour of the course
#
# **What you will build in this course.** A small language model that decides *by itself* when to
# search, what to type into the search box, when it has read enough, and what to answer. It learns
# from questions and their reference answers, with no human-written search queries. Two stages: a
# warm start imitates demonstrations that a *scripted teacher* writes from the reference answers (it
# searches the local index until the evidence shows the answer, then answers; notebook 09), and then
# Search-R1's reinforcement learning: roll out several attempts per question, give each attempt a
# score at the very end, and push the model towards the attempts that scored above their group's
# average (GRPO). The demonstrations teach the moves; the rewards decide which moves pay.
#
# **What this notebook needs.** Only a working set-up (`make setup`). It checks which engine and
# model you have, samples one answer, and shows the road map.
#
# The code lives in the `helpers` package, one module per stage. The notebooks never re-implement
# it: they import it, take it apart and look inside with widgets.
#
# ```
# helpers.data      questions + reference answers            (01)
# helpers.protocol  the prompt, the search tool, the parser  (02)
# helpers.reward    score the final answer                   (03)
# helpers.search    the environment: search backends         (04)
# helpers.rollout   multi-turn rollouts, groups, advantages  (05, 06)
# helpers.train     observation mask, Datum, micro-batches   (07, 08, 09)
# helpers.eval      evaluate base model vs checkpoint        (10)
# ```

# %% [markdown]
# ## The profile: one switch for every budget
#
# `COURSE_PROFILE=fast` (what the tests use) picks the small SmolLM2-135M model and tiny budgets, so
# every notebook runs in a minute or two on a laptop CPU. The default `full` profile uses
# Qwen2.5-0.5B and budgets closer to a real run. Nothing else changes between the two.
#
# **What the fast profile is for:** the test suite and slow machines — it runs every cell of every
# notebook, so you can read the code, move the widgets and check that the whole chain works.
# **What it cannot show:** learning. The 135M model almost never writes a valid search call, so
# most groups score the same (degenerate, advantage 0), its one-step SFT does not teach the call
# format, and a one-step GRPO run changes nothing you could measure. Where a notebook's experiment
# needs a search, it says what happens in this profile (notebook 05 adds a teacher-forced branch).
# To see the agent search, learn and improve, use the `full` profile, or read the recorded GPU run
# in `results/` (notebook 10).

# %%
from helpers import config
from helpers.widgets import budgets

print("profile:", config.profile())
print("model:  ", config.default_model())
print("device: ", config.device(), "| dtype:", config.dtype())
budgets()

# %% [markdown]
# ## The engine
#
# Training and sampling go through the PyTRIO client API. `helpers.engine.connect()` gives you the
# *local* engine: the same calls (`create_sampling_client`, `sample`, `forward_backward`,
# `optim_step`, …) running on your own CPU or GPU. Set `COURSE_BACKEND=pytrio` to send them to the
# hosted service instead; the notebooks do not change.

# %%
from helpers.widgets.course import engine

current = engine()
sampler, tokenizer = current.sampler, current.tokenizer
print(type(current.service).__module__, "→", current.model)
print("vocabulary:", len(tokenizer), "tokens")

# %% [markdown]
# ## One sampled answer
#
# The prompt is built by `helpers.protocol` from a question: a system message with the rules of the
# game, the `search` tool rendered by the model's own chat template, and the question. The sampler
# returns token ids, their log-probabilities under the model and the decoded text. The untrained
# model follows the answer format well enough, but it answers from memory: it almost never calls
# the search tool (the recorded evaluation of the base model, read from `results/` below). Teaching
# it to search, and to search well, is what the rest of the course does.

# %%
import pytrio as trio

from helpers.protocol import build_messages, build_prompt, parse_assistant, stop_sequences
from helpers.running_example import RUNNING_EXAMPLE

question = RUNNING_EXAMPLE.question  # the question the course follows, answered in two searches
prompt_tokens = build_prompt(tokenizer, build_messages(question))
response = sampler.sample(
    prompt=trio.ModelInput.from_ints(prompt_tokens),
    num_samples=1,
    sampling_params=trio.SamplingParams(max_tokens=budgets()["max_assistant_tokens"], temperature=1.0,
                                        seed=0, stop=stop_sequences(tokenizer)),
).result()
sequence = response.sequences[0]
print(f"prompt: {len(prompt_tokens)} tokens; completion: {len(sequence.tokens)} tokens, stopped by {sequence.stop_reason!r}")
print(sequence.text)
print("parsed as:", parse_assistant(sequence.text).kind)

# %%
from helpers.course.recorded import eval_summary

base = eval_summary("base_agent")  # the recorded run's base model in the agent loop, 3 searches allowed
print(f"recorded base model, {base['n']} test questions: valid `Answer:` line {base['format_rate']:.0%}, "
      f"no search at all {base['no_search_share']:.0%}, strict exact match {base['em_strict']:.3f}")

# %% [markdown]
# Each sampled token comes with the log-probability the model gave it. These *old log-probs* are
# kept with the tokens all the way to the training step (notebooks 06–08).

# %%
for token, logprob in list(zip(sequence.tokens, sequence.logprobs))[:10]:
    print(f"{token:>6}  {tokenizer.decode([token])!r:<16} {logprob:8.3f}")

# %% [markdown]
# ## The road map
#
# | notebook | idea |
# | --- | --- |
# | 01 | the data: questions and reference answers, nothing else |
# | 02 | the protocol: the search tool and a strict three-way parser |
# | 03 | the reward: 1, 0 or −0.1 for the final line only |
# | 04 | search as the environment: backends, evidence text, budgets |
# | 05 | the rollout tree: a shared root, branches, concurrency |
# | 06 | token continuity: never re-tokenise what the sampler produced |
# | 07 | the observation mask and the training Datum |
# | 08 | group advantages, micro-batches and the loss normalisation |
# | 09 | the training run: SFT warm start, then GRPO, with a live dashboard |
# | 10 | evaluation and analysis, and the trained agent answering your question |
# | 11 | beyond Search-R1: a reward that also counts searches and words (Perplexity's post), and your own reward |
# | 12 | budget-forced evaluation: accuracy as a function of the search budget |
# | 13 | the train/inference mismatch: when the sampler and the trainer disagree |
# | 14 | the preference score $s(\tau)$ of Perplexity's post, reference lengths and rubric-checked data |

# %% [markdown]
# ## Exercises
#
# 1. How many tokens does `"Answer: France"` take in this tokenizer (no special tokens)? Replace
#    `None` and run the cell.

# %%
from helpers.checkers.exercises import check_token_count

my_count = None  # your answer
check_token_count(tokenizer, "Answer: France", my_count)

# %% [markdown]
# 2. Switch the profile: restart the kernel with `COURSE_PROFILE=fast` (or `full`) in the
#    environment and run the first cells again. Which numbers in `budgets()` change?
#
# ---
#
# ### Solution
#
# Try the exercises first; the solution cell is collapsed (click the dots). For 2: the model
# (smollm2-135m in `fast`, Qwen2.5-0.5B in `full`) and every budget — questions, group size, search
# calls, tokens per turn and per observation, SFT and GRPO sizes; `helpers.widgets.budgets` holds
# both tables.

# %% tags=["solution"] jupyter={"source_hidden": true}
check_token_count(tokenizer, "Answer: France", len(tokenizer.encode("Answer: France", add_special_tokens=False)))

# %% [markdown]
# ## Questionnaire
#
# 1. What does the agent learn from, and what is it never given?
# 2. What is the difference between the `fast` and the `full` profile, and what stays the same?
# 3. Why does the course run a local engine that mirrors the PyTRIO client API instead of its own API?
# 4. What are the *old log-probs* of a sampled turn, and why are they kept?
# 5. Why count tokens rather than characters when budgeting prompts and observations?
#
# <details><summary><b>Answers</b> (open after answering)</summary>
#
# 1. Questions and their reference answers, and a score at the very end of each attempt. It is never
#    given search queries written by people; the SFT warm start of notebook 09 imitates trajectories
#    that a scripted teacher writes from the reference answers, and GRPO then learns from the scores
#    alone.
# 2. `fast` uses the small model (smollm2-135m) and tiny budgets so every notebook runs in seconds to
#    minutes; `full` uses Qwen2.5-0.5B and larger budgets. The code path is the same: no cell is
#    skipped, only numbers shrink.
# 3. The same notebook code then runs against the hosted PyTRIO service (`COURSE_BACKEND=pytrio`):
#    what you learn here is the real client API.
# 4. The log-probability the sampling model gave each token it produced. They travel with the tokens
#    to the training step, where the update compares the new policy's log-probs with them
#    (notebooks 06–08).
# 5. The model's context, the sampler's limits and the cost of training are all counted in tokens, and
#    the same text can be a different number of tokens in another tokenizer.
#
# </details>
