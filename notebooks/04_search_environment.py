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
# # 04 · Search as the environment
#
# **What you will build.** The agent's environment: a search backend that takes a query and returns
# evidence text (the *observation*), the same `SearchResult` shape for every backend, and the budgets
# that decide how much of that evidence the model actually sees.
#
# **What you need.** The protocol of notebook 02: a `tool` turn carries a `query`; its answer comes back
# as a `tool` message.
#
# The rollout never talks HTTP. It calls `client.search(query)` and gets a `SearchResult(ok, items,
# latency, status, error)`; each `SearchItem` has a title, content, source and URL. Backends:
#
# - `local` — an offline BM25 index over a Wikipedia snapshot (the default, deterministic, no network);
# - `wikipedia` — the MediaWiki API, no key needed;
# - `retriever` — any Search-R1 / FlashRAG retrieval server;
# - `deepseek`, `zhihu` — web search services that need a key in `.env`.

# %%
from helpers.running_example import HOPS, RUNNING_EXAMPLE
from helpers.search import BACKENDS, create_search_client, format_results
from helpers.widgets.course import tokenizer as course_tokenizer

tokenizer = course_tokenizer()  # the tokenizer alone: no model weights needed here
client = create_search_client("local")
print(BACKENDS)
print("running example:", RUNNING_EXAMPLE.question)
result = client.search(HOPS[0].query)  # the first hop: find the film
print(result.ok, f"{result.latency * 1000:.0f} ms", len(result.items), "items")
result.items[0]

# %% [markdown]
# ## From result to observation
#
# `format_results` writes the items as numbered evidence blocks. Titles or links alone would not help:
# the model needs the *content* to reason with in its next turn. Here the content names the actress
# (Shirley Temple) but not the position she held: that needs a second search.

# %%
observation = format_results(result)
print(observation)
print(f"--- {len(observation)} characters, {len(tokenizer.encode(observation, add_special_tokens=False))} tokens")

# %% [markdown]
# ## Search it yourself
#
# Search results are untrusted text (a web page can contain anything, including HTML or prompt
# injections). The box below shows them escaped, exactly as the widgets of later notebooks do. It
# starts on the running example's second hop; try your own queries (the index holds about 22,000
# Wikipedia passages: the answers of the course's questions, not all of Wikipedia).

# %%
import ipywidgets as widgets
from IPython.display import display

from helpers.widgets._html import esc

query = widgets.Text(value=HOPS[1].query, description="query", continuous_update=False,
                     layout=widgets.Layout(width="520px"))
shown = widgets.HTML()


def run_query(_=None):
    found = client.search(query.value)
    text = format_results(found)
    shown.value = (f"<small>{len(found.items)} items · {found.latency * 1000:.0f} ms · {len(text)} chars · "
                   f"{len(tokenizer.encode(text, add_special_tokens=False))} tokens</small>"
                   f'<pre style="white-space:pre-wrap;max-height:18em;overflow:auto">{esc(text)}</pre>')


query.observe(run_query, names="value")
run_query()
display(widgets.VBox([query, shown]))

# %% [markdown]
# ## Failures are observations too
#
# `search()` never raises. A timeout or an HTTP error after retries comes back as
# `SearchResult(ok=False, error=...)`, and the model reads the error text as its observation: it can
# rephrase the query or answer with what it has. One flaky request must not crash a rollout of
# sixty-four trajectories. Every client counts what happened:

# %%
from helpers.search import SearchResult

print(format_results(SearchResult(ok=False, items=[], latency=15.0, error="timed out after 15 s")))
print(format_results(SearchResult(ok=True, items=[], latency=0.01)))
client.stats.as_dict()

# %% [markdown]
# ## Budgets: what the service returned vs what the model sees
#
# Two limits cut the evidence before it enters the trajectory: `max_tool_response_tokens` per
# observation and `max_trajectory_tokens` for the whole context. Evidence blocks are added one at a
# time while they fit; if not even the first one fits, the trajectory ends there (and, ending on a
# tool call, earns the format penalty). Move the slider to see how many blocks of the result above
# would fit in one observation.

# %%
from helpers.search import format_item
from helpers.widgets import budgets
from helpers.widgets.budgets import SLIDER_STYLE, slider_layout

blocks = [format_item(i, item) for i, item in enumerate(result.items, start=1)]
sizes = [len(tokenizer.encode(block, add_special_tokens=False)) for block in blocks]
budget = widgets.IntSlider(value=budgets()["max_tool_response_tokens"], min=16, max=1024, step=16,
                           description="max_tool_response_tokens", style=SLIDER_STYLE, layout=slider_layout())
fits = widgets.HTML()


def show_fit(_=None):
    used, kept = 0, 0
    for size in sizes:
        if used + size > budget.value:
            break
        used, kept = used + size, kept + 1
    fits.value = (f"blocks of {sizes} tokens → <b>{kept}</b> of {len(sizes)} fit ({used} tokens)"
                  + (" — <b>nothing fits: the trajectory would end here</b>" if kept == 0 else ""))


budget.observe(show_fit, names="value")
show_fit()
display(widgets.VBox([budget, fits]))

# %% [markdown]
# ## Evidence: did a search bring the passages the answer rests on?
#
# Every training question names its **gold passages**: the passages that support its answer (one for
# NQ, two for a HotpotQA bridge question such as the running example). They are training-time
# information — never in a prompt — used to ask of a search whether it brought the evidence, not only
# whether the answer came out right (`helpers.evidence`; notebook 10 measures it, notebook 11 turns it
# into a reward). The running example's two hops on the local index:

# %%
from helpers.evidence import gold_passage_ids

gold = gold_passage_ids(RUNNING_EXAMPLE)
hop_passages = [[item.passage_id for item in client.search(hop.query).items] for hop in HOPS]
for hop, ids in zip(HOPS, hop_passages):
    print(f"{hop.query!r:45} → {ids}  gold among them: {[i for i in ids if i in gold]}")
print("gold passages of the question:", gold)

# %% [markdown]
# ## Exercises — budgets and evidence
#
# 1. **How many blocks fit?** Write `blocks_that_fit`: the token sizes of a result's evidence blocks
#    (in rank order) and a budget (`max_tool_response_tokens`), and it returns how many blocks the
#    observation keeps. Blocks go in whole, in rank order, while they fit; the first that does not fit
#    ends the observation. The checker runs worked cases and a property test on random sizes.
# 2. **Which search brought new evidence?** Write `new_gold_per_search`: the passage ids each search
#    of a trajectory showed, in order, and the question's gold ids; it returns, per search, how many
#    gold passages it showed *for the first time* (a passage read once is not news the second time —
#    the rule of the evidence reward).

# %% tags=["exercise"]
from helpers.checkers import check_blocks_that_fit, check_new_gold_per_search


def blocks_that_fit(block_tokens: list[int], budget: int) -> int:
    """The number of evidence blocks an observation keeps: the longest run of blocks from the first,
    in rank order, whose token sizes add up to at most `budget`. 0 when not even the first fits (the
    rollout then ends the trajectory). Raise ValueError for a negative budget.
    """
    raise NotImplementedError("write blocks_that_fit")  # your code here


def new_gold_per_search(passages_per_search: list[list[str]], gold_ids: list[str]) -> list[int]:
    """Per search, in order: how many gold passages it showed that no earlier search had shown.

    A passage counts once, for the first search that showed it (also when one result lists it twice).
    """
    raise NotImplementedError("write new_gold_per_search")  # your code here


check_blocks_that_fit(blocks_that_fit)
check_new_gold_per_search(new_gold_per_search)

# %% [markdown]
# Then use them on the running example: how many blocks of the first hop's result fit the profile's
# budget, and what does each hop bring?

# %%
print("first hop's blocks:", sizes, "tokens; budget", budgets()["max_tool_response_tokens"])
try:
    print("blocks kept:", blocks_that_fit(sizes, budgets()["max_tool_response_tokens"]))
    print("new gold passages per hop:", new_gold_per_search(hop_passages, gold))
except NotImplementedError as missing:
    print("write the functions above first:", missing)

# %% [markdown]
# ---
#
# ### Solutions
#
# Try the exercises first; the solution cell is collapsed (click the dots). The rollout applies the
# first rule to the tokens of the rendered tool turn (`helpers.rollout.fit_tool_content`), the
# evidence reward the second (`helpers.evidence.build_report`).

# %% tags=["solution"] jupyter={"source_hidden": true}
def blocks_that_fit(block_tokens, budget):
    if budget < 0:
        raise ValueError(f"a budget is a number of tokens >= 0, got {budget}")
    used = kept = 0
    for size in block_tokens:
        if used + size > budget:
            break
        used, kept = used + size, kept + 1
    return kept


def new_gold_per_search(passages_per_search, gold_ids):
    seen, counts = set(), []
    for passages in passages_per_search:
        fresh = set(passages) - seen
        counts.append(len(fresh & set(gold_ids)))
        seen |= fresh
    return counts


check_blocks_that_fit(blocks_that_fit)
check_new_gold_per_search(new_gold_per_search)
print("blocks kept:", blocks_that_fit(sizes, budgets()["max_tool_response_tokens"]),
      "| new gold passages per hop:", new_gold_per_search(hop_passages, gold))

# %% [markdown]
# ## Questionnaire
#
# 1. What does the search tool return to the model, and in which form?
# 2. Why is a search result untrusted text, and what follows for the widgets?
# 3. What happens inside a rollout when the search backend fails?
# 4. Why does the local index make rewards reproducible, and what does it cost in realism?
# 5. Why must a backend never put an API key into an observation, a log or an exception?
#
# <details><summary><b>Answers</b> (open after answering)</summary>
#
# 1. The top results as numbered items (title and content), formatted as one text observation in a tool
#    message, cut to whole items that fit the observation budget.
# 2. It comes from the web (or a snapshot of it) and can contain HTML or script: every view escapes it.
# 3. The failure becomes the observation (an error message the model reads), the trajectory goes on,
#    and the failed call is counted apart (the efficiency reward of notebook 11 does not charge it).
# 4. The same query always returns the same passages, so two runs differ only by the policy. The cost:
#    a fixed, smaller corpus than the live web, and no news.
# 5. Observations go into the model's context, into datums, logs and widgets; a key there is a key
#    leaked to everyone who sees them.
#
# </details>
