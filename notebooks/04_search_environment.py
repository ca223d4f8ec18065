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
# ## Exercises — the MediaWiki call, offline
#
# The `wikipedia` backend sends **one** GET request to the MediaWiki Action API that searches
# (`generator=search`, top 3 pages) and returns each page's plain-text introduction cut to 1,200
# characters, with its URL. This machine is offline, so instead of calling it:
#
# 1. Build the exact request URL for the query `Antoine de Saint-Exupéry birthplace`
#    (endpoint `https://en.wikipedia.org/w/api.php`; parameters `action=query`, `format=json`,
#    `formatversion=2`, `generator=search`, `gsrsearch=<query>`, `gsrlimit=3`, `prop=extracts|info`,
#    `explaintext=1`, `exintro=1`, `exchars=1200`, `inprop=url`, `redirects=1`, `utf8=1`).

# %%
import urllib.parse

from helpers.checkers.exercises import WIKIPEDIA_QUERY, check_observation_size, check_wikipedia_url

my_url = None  # "https://en.wikipedia.org/w/api.php?..."
check_wikipedia_url(my_url)

# %% [markdown]
# 2. Run the same query on the local index. How many characters is the observation, and how many
#    tokens in this tokenizer? (With the real API you would get up to 3 × 1,200 characters of
#    introductions — compare.)

# %%
local_observation = format_results(client.search(WIKIPEDIA_QUERY))
my_chars, my_tokens = None, None
check_observation_size(local_observation, tokenizer, my_chars, my_tokens)

# %% [markdown]
# ---
#
# ### Solutions
#
# Try the exercises first; the solution cell is collapsed (click the dots). The URL is what the backend itself sends: `request_url(query)` builds it by the same code path as
# `search(query)`, without sending anything (and without headers or keys).

# %% tags=["solution"] jupyter={"source_hidden": true}
from helpers.search.wikipedia import WikipediaSearchClient

backend_url = WikipediaSearchClient().request_url(WIKIPEDIA_QUERY)
print(backend_url)
check_wikipedia_url(backend_url)
check_observation_size(local_observation, tokenizer, len(local_observation),
                       len(tokenizer.encode(local_observation, add_special_tokens=False)))

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
