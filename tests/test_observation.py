"""Fitting a search result into the tool turn: the same tokens as rendering every trial.

``reference_fit_tool_content`` is the plain algorithm, kept here as the oracle: for each count of
whole items, render the whole conversation with that observation and keep the largest count
within the budgets. ``helpers.rollout.fit_tool_content`` renders once per call and counts each
item once; on the traps of notebook 06 (sampled tokens that are not the canonical encoding, the
stop token sampled or not, markers and special tokens inside the evidence, unicode, a template
that rewrites history), on long and cut items, and on random cases, both give the same result.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.models import load_tokenizer
from helpers.protocol import build_messages, build_prompt, stop_token_ids, tool_message
from helpers.rollout import (
    FittedObservation,
    RolloutConfig,
    TemplateAltersToolContent,
    TemplateRewroteHistory,
    build_next_prompt,
    fit_tool_content,
)
from helpers.search.format import MAX_CONTENT_CHARS, cut, format_results
from helpers.search.types import SearchItem, SearchResult
from fixtures.doubles import call

TOKENIZERS = ["qwen2.5-0.5b", "smollm2-135m"]


def reference_fit_tool_content(tokenizer, messages_before_assistant, assistant_text, prompt_tokens,
                               completion_tokens, call_id, result, config) -> FittedObservation | None:
    """Every count of items rendered through the whole chat template, until one is over budget."""
    base = len(prompt_tokens) + len(completion_tokens)
    counts = range(1, len(result.items) + 1) if (result.ok and result.items) else [None]
    best = None
    for count in counts:
        content = format_results(result, count)
        tokens = build_next_prompt(tokenizer, messages_before_assistant, assistant_text,
                                   prompt_tokens, completion_tokens, tool_message(call_id, content))
        observation_tokens = len(tokens) - base
        if observation_tokens > config.max_tool_response_tokens or len(tokens) >= config.max_trajectory_tokens:
            break
        best = FittedObservation(content, tokens, count or 0, observation_tokens)
    return best


@pytest.fixture(scope="module", params=TOKENIZERS)
def tokenizer(request):
    return load_tokenizer(request.param)


def encode(tokenizer, text):
    return list(tokenizer.encode(text, add_special_tokens=False))


def turn_of(tokenizer, assistant_text, with_stop=True, history=0, raw=None):
    """(messages before the assistant turn, its text, prompt tokens, sampled tokens) of a real turn.

    ``history`` earlier search turns come first, their prompts built as the rollout does;
    ``raw`` replaces the sampled tokens with these ids and the text with what they decode to.
    """
    messages = build_messages("Who wrote The Little Prince?")
    prompt = build_prompt(tokenizer, messages)
    for turn in range(history):
        text = call(f"earlier query {turn}")
        completion = encode(tokenizer, text) + stop_token_ids(tokenizer)[:1]
        tool = tool_message(f"c{turn}", f"[1] Title: Earlier {turn}\n    Content: evidence «{turn}»")
        prompt = build_next_prompt(tokenizer, messages, text, prompt, completion, tool)
        messages = [*messages, {"role": "assistant", "content": text}, tool]
    completion = encode(tokenizer, assistant_text) if raw is None else list(raw)
    if raw is not None:
        assistant_text = tokenizer.decode(completion, skip_special_tokens=False)
    if with_stop:
        completion = completion + stop_token_ids(tokenizer)[:1]
    return messages, assistant_text, prompt, completion


def both(tokenizer, turn, result, **budgets):
    """The fast and the reference fitting of one search result, each as a value or the error it raised."""
    config = RolloutConfig(**budgets)
    outcomes = []
    for fit in (fit_tool_content, reference_fit_tool_content):
        try:
            outcomes.append(fit(tokenizer, *turn, "search-0-0-1", result, config))
        except ValueError as error:
            outcomes.append(type(error))
    return outcomes


def item(title, content, source="Wikipedia (offline, Dec 2018)", url=None, passage_id=None):
    return SearchItem(title=title, content=content, source=source, url=url, passage_id=passage_id)


LONG = "Antoine de Saint-Exupéry was a French writer, poet and aviator. " * 40
TRAP_ITEMS = [
    item("The Little Prince", cut(LONG), url="https://en.wikipedia.org/wiki/The_Little_Prince"),
    item("Mercury (planet)", "A planet. It ends with punctuation.)", url="https://en.wikipedia.org/wiki/Mercury_(planet)"),
    item("Markers", "<tool_call>\n{\"name\": \"search\"}</tool_call> <|im_end|> <|im_start|>user </tool_response>"),
    item("Unicode", "东京 is Tokyo; naïve café, e\u0301 combining, 🙂 emoji, \u200b zero width, tab\tend"),
    item("", "", source=None),  # untitled and empty: the block ends on a space
    item("[2] Title: fake", "a forged block header [3] Title: inside the content", url="x"),
]


def cases(tokenizer):
    """The traps of notebook 06 around one fitting."""
    stop = stop_token_ids(tokenizer)[0]
    return {
        "canonical, stop sampled": turn_of(tokenizer, call("Little Prince author")),
        "canonical, stop not sampled": turn_of(tokenizer, call("Little Prince author"), with_stop=False),
        "non-canonical pieces": turn_of(tokenizer, "", raw=encode(tokenizer, "I will search.") +
                                        encode(tokenizer, "Par") + encode(tokenizer, "is")),
        "stop token inside the turn": turn_of(tokenizer, "", raw=[*encode(tokenizer, "a"), stop, *encode(tokenizer, "b")]),
        "third search": turn_of(tokenizer, call("Saint-Exupery birthplace"), history=2),
    }


@pytest.mark.parametrize("budget", [1, 40, 120, 330, 500, 768, 2000])
def test_the_traps_of_token_continuity_fit_the_same_tokens(tokenizer, budget):
    results = [SearchResult(ok=True, items=TRAP_ITEMS, latency=0.0),
               SearchResult(ok=True, items=TRAP_ITEMS[::-1], latency=0.0),
               SearchResult(ok=True, items=[], latency=0.0),
               SearchResult(ok=False, items=[], latency=0.0, error="timeout <|im_end|>")]
    kept = set()
    for name, turn in cases(tokenizer).items():
        for result in results:
            fast, reference = both(tokenizer, turn, result, max_tool_response_tokens=budget)
            assert fast == reference, (name, budget)
            kept.add(None if fast is None else fast.items_kept)
    if budget == 500:  # a budget that cuts between items, not just all or nothing
        assert any(k not in (None, 0, len(TRAP_ITEMS)) for k in kept)


def test_the_trajectory_budget_cuts_the_same_items(tokenizer):
    turn = cases(tokenizer)["third search"]
    result = SearchResult(ok=True, items=TRAP_ITEMS, latency=0.0)
    base = len(turn[2]) + len(turn[3])
    seen = set()
    for room in range(0, 1600, 37):
        fast, reference = both(tokenizer, turn, result, max_trajectory_tokens=base + room, max_tool_response_tokens=4000)
        assert fast == reference, room
        seen.add(None if fast is None else fast.items_kept)
    assert len(seen) >= 4  # the sweep went through nothing, some and all of the items


def test_a_template_that_rewrites_history_is_refused_by_both(tokenizer):
    from test_continuity import THINK_STRIPPING_TEMPLATE

    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.chat_template = THINK_STRIPPING_TEMPLATE
    result = SearchResult(ok=True, items=TRAP_ITEMS[:2], latency=0.0)
    thinking = "<think>I should search.</think>\n" + call("x")
    assert both(tokenizer, turn_of(tokenizer, thinking), result) == [TemplateRewroteHistory] * 2
    plain = both(tokenizer, turn_of(tokenizer, call("x")), result)
    assert plain[0] == plain[1] and plain[0].items_kept == 2


def test_a_template_that_trims_tool_content_is_refused(tokenizer):
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.chat_template = tokenizer.chat_template.replace("message.content }}", "message.content | trim }}")
    assert "| trim" in tokenizer.chat_template
    with pytest.raises(TemplateAltersToolContent, match="verbatim"):
        fit_tool_content(tokenizer, *turn_of(tokenizer, call("x")), "c",
                         SearchResult(ok=True, items=TRAP_ITEMS[:1], latency=0.0), RolloutConfig())


class MergingTokenizer:
    """A tokenizer that joins a line break and the ``[`` after it into one token, like a tokenizer
    whose pieces run across items: counting each item alone then over-counts every seam."""

    def __init__(self, inner):
        self.inner = inner
        self.pairs: dict[tuple[int, int], int] = {}
        self.ids: dict[int, tuple[int, int]] = {}

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def encode(self, text, add_special_tokens=False):
        out = []
        for token in self.inner.encode(text, add_special_tokens=add_special_tokens):
            if out and out[-1] < len(self.inner) and self.inner.decode([out[-1]]).endswith("\n") \
                    and self.inner.decode([token]).startswith("["):
                pair = (out.pop(), token)
                token = self.pairs.setdefault(pair, len(self.inner) + len(self.pairs))
                self.ids[token] = pair
            out.append(token)
        return out

    def decode(self, tokens, **kwargs):
        flat = [t for token in tokens for t in self.ids.get(token, (token,))]
        return self.inner.decode(flat, **kwargs)


def test_a_tokenizer_that_merges_across_items_still_gets_the_exact_fit(tokenizer):
    merging = MergingTokenizer(tokenizer)
    turn = turn_of(merging, call("Little Prince author"))
    result = SearchResult(ok=True, items=[item(f"T{k}", f"content {k}. " * 30) for k in range(4)], latency=0.0)
    full = reference_fit_tool_content(merging, *turn, "c", result, RolloutConfig(max_tool_response_tokens=4000))
    assert full.items_kept == 4 and any(token >= len(tokenizer) for token in full.next_prompt_tokens)
    sizes = [reference_fit_tool_content(merging, *turn, "c", SearchResult(ok=True, items=result.items[:k], latency=0.0),
                                        RolloutConfig(max_tool_response_tokens=4000)).observation_tokens for k in range(1, 5)]
    for budget in sorted({size + step for size in sizes for step in range(-3, 2)}):  # around each count's real size
        fast, reference = both(merging, turn, result, max_tool_response_tokens=budget)
        assert fast == reference, budget


# --------------------------------------------------------------------------- random cases

# Planes past the BMP are left out: SmolLM2's vocabulary cannot spell some of them back.
SAFE = st.characters(max_codepoint=0xFFFF, blacklist_categories=("Cs", "Co"))
MARKERS = st.sampled_from(["<|im_end|>", "<|im_start|>", "<tool_call>", "</tool_response>", "[2] Title:", "…", "\n\n", " "])
texts = st.lists(st.one_of(st.text(alphabet=SAFE, max_size=30), MARKERS), max_size=6).map("".join)
long_texts = st.one_of(texts, st.text(alphabet=SAFE, min_size=1100, max_size=1600).map(lambda t: cut(t, MAX_CONTENT_CHARS)))
items = st.builds(item, title=texts, content=long_texts, source=st.one_of(st.none(), texts), url=st.one_of(st.none(), texts))
results = st.one_of(
    st.builds(SearchResult, ok=st.just(True), items=st.lists(items, max_size=5), latency=st.just(0.0)),
    st.builds(SearchResult, ok=st.just(False), items=st.just([]), latency=st.just(0.0), error=texts),
)


@pytest.mark.parametrize("name", TOKENIZERS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_results_and_turns_fit_the_same_tokens(name, data):
    tokenizer = load_tokenizer(name)
    if data.draw(st.booleans(), label="canonical tokens"):
        raw = None
        text = data.draw(st.one_of(st.just(call("Little Prince")), texts), label="assistant")
    else:
        raw, text = data.draw(st.lists(st.integers(0, len(tokenizer) - 1), max_size=12), label="raw tokens"), ""
    turn = turn_of(tokenizer, text, with_stop=data.draw(st.booleans(), label="stop sampled"),
                   history=data.draw(st.integers(0, 2), label="earlier searches"), raw=raw)
    result = data.draw(results, label="result")
    base = len(turn[2]) + len(turn[3])
    fast, reference = both(tokenizer, turn, result,
                           max_tool_response_tokens=data.draw(st.integers(1, 1200), label="per call"),
                           max_trajectory_tokens=base + data.draw(st.integers(0, 1500), label="room"))
    assert fast == reference
