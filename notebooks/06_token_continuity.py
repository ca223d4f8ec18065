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
# # 06 · Token continuity: keep the tokens the sampler gave you
#
# **What you will build.** The rule that keeps a multi-turn trajectory trainable: the assistant's
# tokens are stored *exactly as sampled*, together with their old log-probabilities, and the chat
# template is used only to produce the **new** tokens between turns (the end of the assistant turn
# and the observation). You will see each trap on real tokens.
#
# **What you need.** A multi-turn trajectory from the rollout of notebook 05 (recomputed here if you
# have not run it).
#
# Why it matters: the trainer compares, token by token, the log-probability the policy gives *now*
# with the one the sampler recorded. If the tokens it trains on are not the tokens that were
# sampled, those pairs no longer line up and the gradient is wrong — while the text still looks
# perfectly fine.

# %%
from helpers.rollout import check_continuity
from helpers.widgets import TokenStrip, token_rows
from helpers.widgets.course import search_trajectory
from helpers.widgets.course import tokenizer as course_tokenizer

tokenizer = course_tokenizer()  # the tokenizer alone: no model weights needed here
# A sampled trajectory that searched, from notebook 05; if the untrained model never searched,
# a teacher-forced one: its turns are given, but fed through the same rollout code.
trajectory, origin = search_trajectory()
print(f"a {origin} trajectory with {len(trajectory.turns)} turns")
[(turn.kind, len(turn.prompt_tokens), len(turn.completion_tokens)) for turn in trajectory.turns]

# %% [markdown]
# ## Trap 1 — text is not tokens
#
# Many token sequences decode to the same text, and the tokenizer picks only one of them when it
# encodes. So `encode(decode(sampled))` may differ from `sampled`. Here is the same word built from
# two different token sequences:

# %%
whole = tokenizer.encode("Paris", add_special_tokens=False)
pieces = tokenizer.encode("Par", add_special_tokens=False) + tokenizer.encode("is", add_special_tokens=False)
print(whole, "→", repr(tokenizer.decode(whole)))
print(pieces, "→", repr(tokenizer.decode(pieces)))
print("same text:", tokenizer.decode(whole) == tokenizer.decode(pieces), "| same tokens:", whole == pieces)

# %% [markdown]
# A sampler can produce the second kind. And on real turns, re-encoding the text also drops or
# rewrites special tokens such as the end-of-turn marker:

# %%
for number, turn in enumerate(trajectory.turns):
    again = tokenizer.encode(turn.text, add_special_tokens=False)
    print(f"turn {number}: sampled {len(turn.completion_tokens)} tokens, re-encoded text gives {len(again)}; "
          f"identical: {again == turn.completion_tokens}")
    print("   sampled ends with", [tokenizer.decode([t]) for t in turn.completion_tokens[-3:]])

# %% [markdown]
# ## Trap 2 — the end of the assistant turn
#
# The template closes an assistant turn with a few tokens (for ChatML: `<|im_end|>` and a newline).
# The sampler may already have produced the first of them (it stopped *on* the stop token) or not
# (it hit the token limit). `build_next_prompt` appends only the closing tokens that are missing —
# the longest tail of the completion that is also a head of the closing sequence is not repeated —
# and then the observation tokens. Either way the next prompt is the same:

# %%
from helpers.protocol import build_messages, template_family, tool_message
from helpers.rollout import assistant_closing_tokens, build_next_prompt

messages = build_messages(trajectory.example.question, None, template_family(tokenizer))
first = trajectory.turns[0]
closing = assistant_closing_tokens(tokenizer, messages)
print("closing tokens:", closing, [tokenizer.decode([t]) for t in closing])
observation = tool_message("search-demo", "[1] Title: Demo\n    Content: evidence text")
with_stop = build_next_prompt(tokenizer, messages, first.text, first.prompt_tokens, first.completion_tokens, observation)
stops = set(closing[:1])
bare = [t for t in first.completion_tokens if t not in stops]
without_stop = build_next_prompt(tokenizer, messages, first.text, first.prompt_tokens, bare, observation)
print("completion with its stop token →", len(with_stop), "tokens; without →", len(without_stop), "tokens; equal:", with_stop == without_stop)

# %% [markdown]
# ## Trap 3 — a template that rewrites history
#
# Some templates re-render earlier turns differently once more messages follow (reasoning models'
# templates often delete old `<think>` blocks). Then the prompt of turn 2 no longer *starts with*
# the tokens of turn 1, and the old log-probs of turn 1 would be matched to the wrong tokens. The
# rollout checks this on tokens, not text, and refuses to continue. Here we damage one token of the
# second prompt to trigger it:

# %%
import copy

check_continuity(trajectory)  # passes: every prompt extends the previous prompt + sampled tokens
if len(trajectory.turns) >= 2:
    broken = copy.deepcopy(trajectory)
    broken.turns[1].prompt_tokens[len(broken.turns[0].prompt_tokens) + 1] += 1
    try:
        check_continuity(broken)
    except ValueError as error:
        print(type(error).__name__, "→", error)

# %% [markdown]
# ## Trap 4 — the same model file, two tokenizers
#
# Continuity also breaks *between machines*. A tokenizer is software around the weights, not part of
# them: the same model file, read by two versions of a library, can split the chat template's
# markers differently — Qwen's `<tool_call>` as one special id, or as four ordinary pieces (`<`,
# `tool`, `_call`, `>`). A policy trained under one split and sampled under the other sees prompts,
# and is asked to write tokens, it never saw in training.
#
# Which split is right? Ask the weights. An id that pre-training never used has an embedding row
# that was never trained. In Qwen2.5-Coder-0.5B the rows of `<tool_call>` and `</tool_call>` are the
# same vector (the plot below): under the single ids the model cannot tell the opening marker from
# the closing one, and a short warm start would have to teach it two new tokens from nothing. Under
# the four pieces it reads and writes text it already knows. So the course spells an untrained
# marker in pieces whatever the library version (`helpers.models.settle_marker_tokens`), every
# checkpoint records how its tokenizer splits the template markers, and the engine refuses weights
# trained under another split:

# %%
import json

from helpers.models import tokenizer_fingerprint
from helpers.course.policies import run_dir

print("this tokenizer:       ", tokenizer_fingerprint(tokenizer))
recorded = run_dir() / "adapter" / "meta.json"  # the recorded run's SFT + GRPO adapter
if recorded.exists():
    meta = json.loads(recorded.read_text())
    print("recorded GPU adapter: ", meta.get("tokenizer"), f"({meta['base_model']})")

# %% [markdown]
# See it in the weights of the model you are running: the cosine between the embedding rows of the
# template markers that are single tokens in its tokenizer (four in Qwen2.5; two in SmolLM2, where
# the tool-call markers are plain text). The colour scale starts at 0.8 (lower if a cosine is). A yellow
# cell off the diagonal, at 1.00, is two markers the model cannot tell apart: in Qwen2.5,
# `<tool_call>` and `</tool_call>`.

# %%
import matplotlib.pyplot as plt
import numpy as np

from helpers.models import marker_cosines

names, cosine = marker_cosines()
values = cosine.numpy()
low = min(0.8, float(values.min()))  # the interesting range is close to 1: spread it over the colours
fig, ax = plt.subplots(figsize=(4.6, 3.6))
image = ax.imshow(values, vmin=low, vmax=1, cmap="viridis")
fig.colorbar(image, ax=ax, label="cosine")
ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
ax.set_yticks(range(len(names)), names)
for (i, j), value in np.ndenumerate(values):
    light = (value - low) / (1 - low) > 0.6  # viridis is light at the top of its range
    ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=9, color="black" if light else "white")
ax.set_title("cosine of marker embeddings", fontsize=10)
plt.show()

# %% [markdown]
# ## The seams, token by token
#
# The strip shows the whole trajectory as the trainer will see it. Grey: the first prompt. Teal:
# everything the environment and the template added between turns (observation). Green or red:
# tokens the policy sampled, shaded by the trajectory's advantage (grey when the advantage is 0).
# Hover or click a token for its id, text, old log-prob, advantage and mask. Look at the boundary
# after each assistant turn: the sampled stop token, then the template's closing newline, then the
# tool turn.

# %%
rows = token_rows(trajectory, tokenizer)
strip = TokenStrip(rows)
print(strip.summary)
strip

# %% [markdown]
# ## Exercises
#
# 1. The closing tokens are `closing` (above). A completion ends with
#    `[…, 1234, closing[0]]`. How many closing tokens overlap with the completion, and which tokens
#    does `build_next_prompt` append before the observation?

# %%
from helpers.checkers.exercises import check_glued, check_overlap

completion = [1234, closing[0]]
my_overlap = None
my_glued = None  # a list of token ids
check_overlap(completion, closing, my_overlap)
check_glued(completion, closing, my_glued)

# %% [markdown]
# 2. Why does the trainer compare tokens and not text to detect a rewritten history?
#
# ---
#
# ### Solution
#
# Try the exercises first; the solution cell is collapsed (click the dots).
#
# <details><summary><b>Answer to 2</b></summary>
#
# The old logprobs belong to tokens, not to characters. The same text can be split into different
# tokens (a merge across the seam between a turn and its observation, a marker written as one token
# or in pieces), and then every logprob after that point sits on the wrong token while the text still
# looks identical. Comparing token ids is exact: any difference that would mis-align the logprobs is
# caught, and nothing else is.
#
# </details>

# %% tags=["solution"] jupyter={"source_hidden": true}
check_overlap(completion, closing, 1)
check_glued(completion, closing, closing[1:])
check_glued(first.completion_tokens, closing,
            with_stop[len(first.prompt_tokens) + len(first.completion_tokens):][: len(closing) - (first.completion_tokens[-1:] == closing[:1])])

# %% [markdown]
# ## Questionnaire
#
# 1. What is token continuity, and why does training need it?
# 2. How is the next prompt built from the previous one?
# 3. Why does the sampler sometimes return the stop token and sometimes not, and how does the next
#    prompt cope?
# 4. What is a template that "rewrites history", and what does the course do when it finds one?
# 5. Why is the chat template used only for the closing tokens and the observation?
#
# <details><summary><b>Answers</b> (open after answering)</summary>
#
# 1. Every turn's prompt must extend the previous prompt plus exactly the tokens sampled in the
#    previous turn. The old logprobs belong to those tokens; if the trainer saw other tokens, the
#    importance ratios would compare different sequences.
# 2. previous prompt + the sampler's own tokens + the closing tokens the sampler did not emit + the
#    observation's tokens (tool turn and next assistant header).
# 3. Samplers differ in whether they include the stop string; the overlap between the completion's
#    tail and the closing tokens is computed, and only the missing closing tokens are appended.
# 4. A template that renders earlier turns differently once later ones are appended (for example it
#    strips reasoning blocks). The rollout raises `TemplateRewroteHistory` instead of training on
#    shifted tokens.
# 5. Everything else is already tokens the policy produced or saw; re-rendering it as text could
#    change its tokenisation. Only the new pieces come from the template.
#
# </details>
