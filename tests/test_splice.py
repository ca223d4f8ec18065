"""Encoding only the new turn gives the tokens of encoding the whole conversation.

The oracles here render and encode the whole conversation every time, as the rollout did before
it encoded turns alone; on random conversations (several turns, sampled tokens that are not
canonical, observations with unicode, markers, nothing at all, or cut), on both tokenizers, the
closing tokens, the glue and every observation must be the same ids, and the turn-alone path must
really be the one taken. `encode_after` itself is checked on random seams, including seams inside
a special token's text, where it must refuse.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from helpers.models import load_tokenizer
from helpers.protocol import build_messages, build_prompt, render_chat, stop_token_ids, tool_message
from helpers.rollout import TemplateRewroteHistory, assistant_closing_tokens, suffix_prefix_overlap, tool_turn_frame
from helpers.rollout.splice import encode_after
from helpers.search.format import MAX_CONTENT_CHARS, cut
from fixtures.doubles import call

TOKENIZERS = ["qwen2.5-0.5b", "smollm2-135m"]
_LOADED: dict[str, object] = {}


def tokenizer_named(name):
    if name not in _LOADED:
        _LOADED[name] = load_tokenizer(name)
    return _LOADED[name]


def encode(tokenizer, text):
    return list(tokenizer.encode(text, add_special_tokens=False))


def whole_closing(tokenizer, messages):
    """The closing tokens from the two conversations encoded whole."""
    prompt = build_prompt(tokenizer, messages)
    closed = encode(tokenizer, render_chat(tokenizer, [*messages, {"role": "assistant", "content": ""}], False))
    if closed[: len(prompt)] != prompt:
        raise TemplateRewroteHistory("closing")
    return closed[len(prompt):]


def whole_observation(tokenizer, messages, assistant_text, call_id, content):
    """The tool turn's tokens: the next prompt encoded whole, less the closed assistant turn encoded whole."""
    with_assistant = [*messages, {"role": "assistant", "content": assistant_text}]
    assistant_end = encode(tokenizer, render_chat(tokenizer, with_assistant, False))
    following = build_prompt(tokenizer, [*with_assistant, tool_message(call_id, content)])
    if following[: len(assistant_end)] != assistant_end:
        raise TemplateRewroteHistory("observation")
    return following[len(assistant_end):]


# Planes past the BMP are left out: SmolLM2's vocabulary cannot spell some of them back.
SAFE = st.characters(max_codepoint=0xFFFF, blacklist_categories=("Cs", "Co"))
MARKERS = st.sampled_from(["<|im_end|>", "<|im_start|>", "<|im_", "end|>", "<|", "|>", "<tool_call>",
                           "</tool_response>", "[1] Title:", "\n", "\n\n", " ", "é", "e\u0301", "东京", "\u200b"])
texts = st.lists(st.one_of(st.text(alphabet=SAFE, max_size=20), MARKERS), max_size=8).map("".join)
contents = st.one_of(
    st.just(""),
    texts,
    st.text(alphabet=SAFE, min_size=1100, max_size=1400).map(lambda t: cut(t, MAX_CONTENT_CHARS)),  # a cut item
)


def _assistant_turn(tokenizer, data):
    """(text, sampled tokens) of one assistant turn: canonical or raw ids, the stop token sampled or not."""
    if data.draw(st.booleans(), label="canonical"):
        text = data.draw(st.one_of(st.just(call("Little Prince author")), texts), label="assistant")
        completion = encode(tokenizer, text)
    else:
        completion = data.draw(st.lists(st.integers(0, len(tokenizer) - 1), max_size=10), label="raw ids")
        text = tokenizer.decode(completion, skip_special_tokens=False)
    if data.draw(st.booleans(), label="stop sampled"):
        completion = completion + stop_token_ids(tokenizer)[:1]
    return text, completion


@pytest.mark.parametrize("name", TOKENIZERS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_turns_encoded_alone_give_the_ids_of_the_whole_conversation(name, data):
    tokenizer = tokenizer_named(name)
    messages = build_messages(data.draw(texts, label="question"))
    prompt = build_prompt(tokenizer, messages)
    turns = data.draw(st.integers(1, 4), label="turns")
    event(f"{turns} turns")
    for turn in range(turns):
        text, completion = _assistant_turn(tokenizer, data)
        content = data.draw(contents, label="observation")
        call_id = f"search-0-0-{turn + 1}"
        try:
            expected_closing = whole_closing(tokenizer, messages)
            expected = whole_observation(tokenizer, messages, text, call_id, content)
        except TemplateRewroteHistory:  # raw ids the template cannot keep verbatim: the new path must refuse too
            event("history rewritten")
            with pytest.raises(TemplateRewroteHistory):
                tool_turn_frame(tokenizer, messages, text, prompt, completion, call_id).observation(content)
            return
        assert assistant_closing_tokens(tokenizer, messages) == expected_closing
        frame = tool_turn_frame(tokenizer, messages, text, prompt, completion, call_id)
        overlap = suffix_prefix_overlap(completion, expected_closing)
        assert frame.glue == [*prompt, *completion, *expected_closing[overlap:]]
        assert frame.observation(content) == expected
        # the ids above came from the turn alone, not from the whole-text fallback
        assert encode_after(tokenizer, frame.assistant_end_text, frame.opening + content + frame.tail) is not None
        prompt = [*frame.glue, *expected]
        messages = [*messages, {"role": "assistant", "content": text}, tool_message(call_id, content)]


@pytest.mark.parametrize("name", TOKENIZERS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_encode_after_is_the_tail_of_the_whole_encoding_or_none(name, data):
    tokenizer = tokenizer_named(name)
    before, after = data.draw(texts, label="before"), data.draw(texts, label="after")
    if data.draw(st.booleans(), label="after opens a turn"):
        after = "<|im_start|>" + after
    spliced = encode_after(tokenizer, before, after)
    event("refused" if spliced is None else "spliced")
    if spliced is not None:
        whole, head = encode(tokenizer, before + after), encode(tokenizer, before)
        assert whole == head + spliced


@pytest.mark.parametrize("name", TOKENIZERS)
def test_encode_after_refuses_seams_the_tokenizer_does_not_cut_at(name):
    tokenizer = tokenizer_named(name)
    # a special token's text split by the seam: encoded whole it is one token, not two pieces
    before, after = "answer <|im_", "end|>\n<|im_start|>user"
    assert encode(tokenizer, before + after) != encode(tokenizer, before) + encode(tokenizer, after)
    assert encode_after(tokenizer, before, after) is None
    assert encode_after(tokenizer, "answer", " text") is None  # no added token opens the new text
    assert encode_after(tokenizer, "answer<|im_end|>\n", "<|im_start|>user") == encode(tokenizer, "<|im_start|>user")

    class Proxy:  # a tokenizer whose encoding may be anything: only the stock classes are trusted
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, attribute):
            return getattr(self.inner, attribute)

    assert encode_after(Proxy(tokenizer), "answer<|im_end|>\n", "<|im_start|>user") is None
    splitting = copy.deepcopy(tokenizer)
    splitting.split_special_tokens = True  # special tokens encoded as their text: no cut at them
    assert encode_after(splitting, "answer<|im_end|>\n", "<|im_start|>user") is None


@pytest.mark.parametrize("name", TOKENIZERS)
def test_encode_after_refuses_an_added_token_that_spans_the_seam(name):
    from tokenizers import AddedToken

    tokenizer = copy.deepcopy(tokenizer_named(name))
    tokenizer.add_tokens([AddedToken("\n<|im_start|>", normalized=False, special=True)], special_tokens=True)
    before, after = "answer<|im_end|>\n", "<|im_start|>user"
    # the longer token starts before the seam, so the whole text has no cut there
    assert encode(tokenizer, before + after) != encode(tokenizer, before) + encode(tokenizer, after)
    assert encode_after(tokenizer, before, after) is None
    assert encode_after(tokenizer, "answer<|im_end|>", after) == encode(tokenizer, after)
