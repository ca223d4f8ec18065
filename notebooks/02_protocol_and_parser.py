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
# # 02 · The protocol: one tool, and a strict parser
#
# **What you will build.** The contract between the model and its environment: how a question becomes
# a prompt, how the model asks for a search, and how each assistant turn is read as exactly one of
# three actions — *search*, *answer* or *invalid*.
#
# **What you need.** A question from notebook 01 and the tokenizer from notebook 00.
#
# The model gets a single function, `search(query)`. It is described as a JSON schema and rendered by
# the model's **own** chat template, so the model writes calls in the format it was instruction-tuned
# on (`<tool_call>{"name": "search", "arguments": {...}}</tool_call>` for Qwen2.5 and the course's
# SmolLM2 template). The Search-R1 paper used home-made tags such as `<search>…</search>`; both carry
# the same meaning for RL: the assistant emits an action we train, the environment answers with an
# observation we do not train.

# %%
import json

from helpers.protocol import SEARCH_TOOL, build_messages, build_prompt, parse_assistant, render_chat, stop_sequences
from helpers.running_example import ANSWER, HOPS, RUNNING_EXAMPLE
from helpers.widgets.course import tokenizer as course_tokenizer

tokenizer = course_tokenizer()  # the tokenizer alone: no model weights needed here
print(json.dumps(SEARCH_TOOL, indent=2))

# %% [markdown]
# ## The prompt
#
# `build_messages` writes the rules (search when you need evidence, one call per turn, finish with one
# line `Answer: <short answer>`, never call and answer in the same turn) plus a worked example, then
# the question. `build_prompt` renders it with the tool schema and ends with the assistant header, so
# the next token the model writes is the start of its turn.
#
# The worked example in the rules is Happy-LLM's story (where was the author of *The Little Prince*
# born?), kept as an illustration only: the offline index has no passage about Saint-Exupéry. The
# question the course follows from here to notebook 10 is a HotpotQA *bridge* question from the data
# pack, `RUNNING_EXAMPLE`: the first search finds the film and the actress's name, a second search on
# that name finds the answer.

# %%
print("running example:", RUNNING_EXAMPLE.question, "→", ANSWER)
messages = build_messages(RUNNING_EXAMPLE.question)
text = render_chat(tokenizer, messages, add_generation_prompt=True)
prompt_tokens = build_prompt(tokenizer, messages)
print(text)
print(f"--- {len(text)} characters, {len(prompt_tokens)} tokens; the sampler stops on {stop_sequences(tokenizer)}")

# %% [markdown]
# ## Three actions, no "stop" action
#
# `parse_assistant(text)` returns a `ParsedAssistant(kind, content, query)`:
#
# - **tool** — exactly one complete call, a non-empty query without `<` or `>`, and nothing after the
#   call (thinking *before* the call is fine);
# - **answer** — no call at all: the turn is final and the trajectory ends; the reward checks later
#   whether it really is `Answer: …`;
# - **invalid** — anything in between: two calls, a call followed by an answer, a cut-off
#   `<tool_call>`, an empty or odd query. It ends the trajectory and earns the format penalty.
#
# Being strict here is what makes the reward honest: a turn that both searches and answers would let
# the model hedge.

# %%
first_call = '<tool_call>\n' + json.dumps({"name": "search", "arguments": {"query": HOPS[0].query}}) + '\n</tool_call>'
for sample in [
    "I need the actress first." + first_call,
    f"Answer: {ANSWER}",
    first_call + f"\nAnswer: {ANSWER}",
    '<tool_call>\n{"name": "search"',
]:
    print(parse_assistant(sample))

# %% [markdown]
# ## Try it
#
# Type an assistant turn; the parser's verdict updates as you type.

# %%
import ipywidgets as widgets
from IPython.display import display

from helpers.widgets._html import esc

box = widgets.Textarea(value='<tool_call>\n' + json.dumps({"name": "search", "arguments": {"query": HOPS[1].query}}) + '\n</tool_call>',
                       layout=widgets.Layout(width="640px", height="90px"))
verdict = widgets.HTML()


def judge(_=None):
    parsed = parse_assistant(box.value)
    colour = {"tool": "#2a7f8f", "answer": "#2ea043", "invalid": "#da3633"}[parsed.kind]
    # show only the fields this kind of turn has: a query for a search, the text for an answer
    parts = [f'<b style="color:{colour}">{parsed.kind}</b>']
    if parsed.query:
        parts.append(f"query: <code>{esc(parsed.query)}</code>")
    if parsed.content.strip():
        parts.append(f"text: <code>{esc(parsed.content[:120])}</code>")
    if parsed.error:
        parts.append(f"why: {esc(parsed.error)}")
    verdict.value = " · ".join(parts)


box.observe(judge, names="value")
judge()
display(widgets.VBox([box, verdict]))

# %% [markdown]
# ## Exercises
#
# ### 1. The parser on ten strings
#
# Label each of the ten turns in `PARSER_CASES` as `"tool"`, `"answer"` or `"invalid"` **by hand**,
# from the rules above, before running the parser.

# %%
from helpers.checkers.exercises import PARSER_CASES, check_parser_labels

for number, (turn, _) in enumerate(PARSER_CASES):
    print(f"[{number}] {turn!r}")
my_labels = None  # ten strings
check_parser_labels(my_labels)

# %% [markdown]
# Then: which of the `answer` turns will the reward of notebook 03 accept as a *valid* final answer?
#
# ### 2. Write the parser yourself
#
# Replace the body of `parse_assistant` below with your own code and run the cell. The checker runs
# the course's own cases on it — the parser's unit-test examples and two property tests that
# [hypothesis](https://hypothesis.readthedocs.io) feeds with thousands of generated strings — and
# prints which hold and the first failing input, with what was expected and what your function
# returned. `json.loads` and `str.find` (or `re`) are all you need. Only the JSON call format is
# asked for here (the course's version also reads Qwen3.5's XML format).

# %% tags=["exercise"]
import json

from helpers.checkers import check_parse_assistant
from helpers.protocol import ParsedAssistant


def parse_assistant(text: str) -> ParsedAssistant:
    """One assistant turn -> ParsedAssistant(kind, content, query, error). Never raises.

    - "tool": exactly one complete <tool_call> ... </tool_call> block, whose body is the JSON
      {"name": "search", "arguments": {"query": ...}} with a query that is non-empty after
      stripping and holds no "<" or ">", and nothing but whitespace after the block.
      content = the text before the call, stripped; query = the query, stripped.
    - "answer": no "<tool_call>" and no "</tool_call>" anywhere. content = the text, stripped.
    - "invalid": anything else (two calls, text after the call, a cut-off call, broken JSON,
      another tool's name, no query, an empty query...). content = the text, stripped;
      error = a few words saying why.
    """
    raise NotImplementedError("write parse_assistant")  # your code here


check_parse_assistant(parse_assistant)

# %% [markdown]
# ---
#
# ### Solutions
#
# Try the exercises first. The solution cells are collapsed: click the dots to open them. For
# exercise 2 the solution is the course's own parser, `helpers/protocol.py` (read it there); the
# cell runs the same checker on it.

# %% tags=["solution"] jupyter={"source_hidden": true}
from helpers.protocol import parse_assistant

check_parser_labels([parse_assistant(turn).kind for turn, _ in PARSER_CASES])
check_parse_assistant(parse_assistant)

# %% [markdown]
# ## Questionnaire
#
# 1. Why is the search tool described as a JSON schema and rendered by the model's own chat template,
#    rather than taught as new tags?
# 2. Which three actions can one assistant turn be, and which of them end the trajectory?
# 3. Why is a turn that calls the tool *and* writes `Answer:` invalid instead of a search?
# 4. Thinking before a call is allowed, text after it is not. Why the difference?
# 5. Why must the parser never raise, whatever the model writes?
# 6. A query containing `<` or `>` is refused. What could go wrong if it were accepted?
#
# <details><summary><b>Answers</b> (open after answering)</summary>
#
# 1. The model was instruction-tuned on its template's call format, so it already writes valid calls
#    before any RL; new tags would have to be learned from the reward alone. Both carry the same
#    meaning: an action we train, then an observation we do not.
# 2. `tool` (one complete call: the environment searches and the trajectory goes on), `answer` (no
#    call: the trajectory ends and the reward reads it) and `invalid` (anything in between: it ends the
#    trajectory and earns the format penalty).
# 3. A turn that both searches and answers lets the model hedge: it could answer first and search
#    anyway. A strict parser makes each turn one decision, so the reward judges one clear action.
# 4. Text before the call is the model's reasoning and changes nothing the environment does. Text
#    after the call is either an answer (the hedge of question 3) or words the observation would
#    silently cut off, so it is refused.
# 5. The parser reads free text sampled from a policy that is being changed by training: every odd
#    string will appear sooner or later. A crash would stop a whole batch; an `invalid` verdict is a
#    learning signal.
# 6. Markup in a query is a sign of a broken call (tags leaking into the argument), and the query is
#    shown in widgets and sent to a search backend: refusing it keeps the tool input plain text.
#
# </details>
