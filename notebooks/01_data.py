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
# from. There are no search queries written by people and no demonstration trajectories. Then a
# measure of the data that decides whether an agent can learn to search twice: how often one search
# on the question itself already finds everything, and a split of questions built so that it never does.
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
# ## How often does one search settle a question?
#
# A search agent learns to search again only from questions where searching again earns more reward
# than answering after the first search. Here is a cheap test of how many such questions the data
# holds: search once with the question itself as the query (BM25, top 3, the agent's default) and check
# whether every *gold passage* is already among the results. The data rows carry their gold passages'
# ids in `metadata` for analysis and rewards; they never enter a prompt or an observation.

# %%
from helpers.course.one_search import one_search_figure, one_search_shares
from helpers.data import load_rows
from helpers.search.local import LocalIndex

index = LocalIndex.load()  # the corpus and BM25 index the search tool uses
train_rows = load_rows("train")
by_source = {source: [r for r in train_rows if r["data_source"] == source] for source in ("nq", "hotpotqa")}
by_source["synthetic"] = load_rows("synthetic")
shares = one_search_shares(by_source, index)
one_search_figure(shares);

# %% [markdown]
# On most NQ questions and on many HotpotQA ones, one search on the question returns everything the
# answer needs. On those, a trajectory that answers after one search earns what one that searches
# again earns, so GRPO has no reason to prefer searching again; and on the rest, the second search
# competes with answering from a good guess.
#
# The third bar is a split built to be zero. Perplexity's post makes its training questions in four
# steps: choose a *seed* entity and the atomic facts its passage states; follow a mention from that
# passage to a second (or third) entity; write a question that names only the seed and refers to every
# later entity by its *description* ("the American actor mentioned in the passage about …"), so the
# question's words lead to the first passage and the answer lives in the last; and keep only questions
# that independent solvers answer right with all the chain's passages and wrong with the first one
# alone. `helpers.multihop` does the same by rules on the course's corpus, and one of its checks is the
# measure above: a question whose chain passages all come back from one search on it is dropped.
# The GRPO stages that build the second-search habit (notebook 09's recipe) take part of every batch
# from this split.
#
# Move the slider: each question shows its chain, what one search on it finds, and the passage a
# second search has to find (the one the first passage's mention points to).

# %%
from helpers.widgets.chain import ChainExplorer

display(ChainExplorer(by_source["synthetic"], index))

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
# 3. Write `one_search_enough(question, gold_ids, search)`: search once, with the question itself, and
#    say whether every gold passage id came back. `search(query)` returns the ids of the passages it
#    found, best first. A question without gold passages cannot be judged: raise `ValueError`.

# %% tags=["exercise"]
from helpers.checkers.one_search import check_one_search_enough


def one_search_enough(question: str, gold_ids: list[str], search) -> bool:
    """True when one search with `question` as the query returns every id in `gold_ids` (any order)."""
    raise NotImplementedError("write one_search_enough")  # your code here


check_one_search_enough(one_search_enough)

# %% [markdown]
# Once the checker says "correct", run your function with the real search on the HotpotQA questions:
# its share should be the figure's.

# %%
def search_ids(query: str) -> list[str]:
    return [passage.id for passage in index.search(query, k=3)]


try:
    mine = [one_search_enough(r["question"], r["metadata"]["gold_passage_ids"], search_ids) for r in by_source["hotpotqa"]]
    print(f"yours: {sum(mine) / len(mine):.1%} of {len(mine)} HotpotQA questions; the figure: {shares['hotpotqa']['share']:.1%}")
except NotImplementedError as stub:
    print(f"not yet: {stub}")

# %% [markdown]
# 4. (Think.) Why would adding gold search queries to the data change the kind of learning?
#
# ---
#
# ### Solutions
#
# Try the exercises first; the solution cell is collapsed (click the dots).
#
# <details><summary><b>Answer to 4</b></summary>
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


def one_search_enough(question, gold_ids, search):
    if not gold_ids:
        raise ValueError("a question without gold passages cannot be judged")
    return set(gold_ids) <= set(search(question))


check_one_search_enough(one_search_enough)

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
# 6. Why does a question that one search on its own words settles teach an agent nothing about
#    searching again, and how does a question built from a chain of entities avoid it?
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
# 5. The agent must discover its queries from the outcome reward (see exercise 4).
# 6. After one search every gold passage is in the context, so answering right then earns the full
#    reward and a second search cannot earn more: GRPO's advantages never favour it. A chain question
#    names only its first entity and describes the later ones, so one search on its words finds the
#    first passage, and the answer sits in a passage that only a second search, for the entity the
#    first one mentions, brings in.
#
# </details>
