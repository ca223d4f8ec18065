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
# # 01 · The data: a question and its answers, nothing more
#
# **What you will build.** The training set of a search agent, and an understanding of why it is so
# bare: each example is an id, a question, a list of acceptable short answers and the dataset it came
# from. There are no search queries written by people and no demonstration trajectories.
#
# **What you need.** The set-up of notebook 00 (`make setup` prepared the splits under `data/`).
#
# Why so little? If the data told the model *what* to search, training would become imitation of
# those searches. Search-R1 wants the opposite: the policy must discover, during rollouts, which
# queries help, how many searches are worth it and when to stop. The only supervision left is the
# reference answer, used by the reward at the end of a trajectory (notebook 03).

# %%
from collections import Counter

import pandas as pd

from helpers.data import SearchExample, load_examples
from helpers.widgets import budgets

train = load_examples("train")
validation = load_examples("validation")
test = load_examples("test")
print({name: len(rows) for name, rows in [("train", train), ("validation", validation), ("test", test)]})
train[0]

# %% [markdown]
# Two datasets are mixed: **NQ** (Natural Questions: real search-engine questions, usually one hop)
# and **HotpotQA** (questions that need two facts chained together, the kind where a second search
# depends on the first result). The splits were made with a fixed seed, per dataset, from the offline
# data pack, so everybody's notebook shows the same rows.

# %%
pd.DataFrame(
    [{"id": e.id, "source": e.data_source, "question": e.question, "answers": " | ".join(e.answers)} for e in train[:12]]
)

# %%
print("train by source:", Counter(e.data_source for e in train))
lengths = pd.Series([len(e.question.split()) for e in train])
print("question length in words: median", lengths.median(), "| max", lengths.max())
print("examples with several acceptable answers:", sum(len(e.answers) > 1 for e in train))

# %% [markdown]
# ## An interactive look
#
# Pick a source and scroll through questions. Notice how many HotpotQA questions name one thing in
# order to ask about another ("the director of the film that…"): those are the ones where a good
# agent searches twice.

# %%
import ipywidgets as widgets
from IPython.display import display

from helpers.widgets._html import esc

source = widgets.ToggleButtons(options=sorted({e.data_source for e in train}), description="source")
position = widgets.IntSlider(min=0, max=20, description="example", continuous_update=False)
view = widgets.HTML()


def show(_=None):
    rows = [e for e in train if e.data_source == source.value]
    position.max = len(rows) - 1
    example = rows[position.value]
    view.value = (f"<b>{esc(example.question)}</b><br>answers: {esc(' | '.join(example.answers))}"
                  f"<br><small>{esc(example.id)}</small>")


source.observe(show, names="value")
position.observe(show, names="value")
show()
display(widgets.VBox([source, position, view]))

# %% [markdown]
# ## The boundary: what makes a row usable
#
# `helpers.data.normalize_row` keeps a raw row only if it has a non-empty question and at least one
# non-empty answer; duplicate answers are dropped and every answer is stripped. Anything else would
# give a trajectory that can never be rewarded. `SearchExample` is frozen: the rollout reads it and
# never changes it.

# %%
from helpers.data import normalize_row

normalize_row(id="x", question="  who wrote hamlet ", answers=["William Shakespeare", " William Shakespeare", ""], data_source="demo")

# %% [markdown]
# In the course, small runs take the first questions of a split: `load_examples("train", limit=n)`.
# The current profile uses this many per rollout:

# %%
budgets()["questions"], [e.question for e in load_examples("train", limit=budgets()["questions"])]

# %% [markdown]
# ## Exercises
#
# 1. Which of the rows in `RAW_ROWS` survive normalisation? Give their ids.

# %%
from helpers.checkers.exercises import RAW_ROWS, check_kept_rows, check_source_counts

for row in RAW_ROWS:
    print(row)
my_ids = None  # e.g. ["a", "b"]
check_kept_rows(my_ids)

# %% [markdown]
# 2. How many validation examples come from each source? Give a dict `{source: count}`.

# %%
my_counts = None
check_source_counts(validation, my_counts)

# %% [markdown]
# 3. (Think.) Why would adding gold search queries to the data change the kind of learning?
#
# ---
#
# ### Solutions
#
# Try the exercises first; the solution cell is collapsed (click the dots).
#
# <details><summary><b>Answer to 3</b></summary>
#
# With gold queries every search action has a target, so the search turns could be learned by
# imitation (supervised fine-tuning on someone else's queries), and the policy could only get as good
# as whoever wrote them. Without them the only signal is whether the final answer was right: the
# policy has to discover for itself which queries, and how many, lead to right answers — that is
# reinforcement learning, and it can find strategies nobody wrote down.
#
# </details>

# %% tags=["solution"] jupyter={"source_hidden": true}
kept = [row["id"] for row in RAW_ROWS
        if normalize_row(id=row["id"], question=row["question"], answers=row["answers"], data_source="demo")]
check_kept_rows(kept)
check_source_counts(validation, Counter(e.data_source for e in validation))

# %% [markdown]
# ## Questionnaire
#
# 1. Which fields does every example keep after normalisation?
# 2. Why is a row without a non-empty answer dropped rather than kept with an empty reference?
# 3. Why does the course keep the train, validation and test splits apart, and SFT and GRPO questions
#    apart within train?
# 4. What is the difference between the NQ and the HotpotQA questions, and why does it matter for a
#    search agent?
# 5. Why are there no gold search queries in the data?
#
# <details><summary><b>Answers</b> (open after answering)</summary>
#
# 1. An id, the question, its reference answers and its `data_source`.
# 2. The reward compares the answer with the references: with none there is nothing to match, so every
#    attempt would score 0 and the group would teach nothing (or worse, an empty answer could match).
# 3. Evaluating on questions the policy trained on measures memory, not skill; and GRPO on the very
#    questions SFT demonstrated would reward recalling the demonstrations.
# 4. NQ questions usually need one fact, HotpotQA questions are multi-hop (two facts, often two
#    searches): they test whether the agent learns to search again.
# 5. The agent must discover its queries from the outcome reward (see exercise 3).
#
# </details>
