"""Token continuity across turns, on the real tokenizers and chat templates (no model needed).

The traps: the sampler stopping on or before <|im_end|>, several tool messages after one
assistant turn (Qwen2.5 groups consecutive tool messages in one user turn), and a template that
rewrites history (strips <think> from earlier turns).
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.models import load_tokenizer
from helpers.protocol import build_messages, build_prompt, render_chat, stop_token_ids, tool_message
from helpers.rollout import (
    AssistantTurn,
    TemplateRewroteHistory,
    Trajectory,
    suffix_prefix_overlap,
    assistant_closing_tokens,
    build_next_prompt,
    check_continuity,
    token_table,
)
from fixtures.doubles import call

TOKENIZERS = ["qwen2.5-0.5b", "smollm2-135m"]


@pytest.fixture(scope="module", params=TOKENIZERS)
def tokenizer(request):
    return load_tokenizer(request.param)


def encode(tokenizer, text):
    return list(tokenizer.encode(text, add_special_tokens=False))


def test_overlap_is_the_longest_suffix_prefix_match():
    assert suffix_prefix_overlap([5, 6, 7], [7, 8]) == 1
    assert suffix_prefix_overlap([5, 7, 8], [7, 8]) == 2
    assert suffix_prefix_overlap([5, 6], [7, 8]) == 0
    assert suffix_prefix_overlap([], [7, 8]) == 0


def test_closing_tokens_are_the_end_of_turn_marker_and_newline(tokenizer):
    closing = assistant_closing_tokens(tokenizer, build_messages("q"))
    assert tokenizer.decode(closing) == "<|im_end|>\n"
    assert closing[0] == stop_token_ids(tokenizer)[0]


@pytest.mark.parametrize("with_stop", [True, False], ids=["stop-on-im_end", "stop-before-im_end"])
def test_next_prompt_equals_the_template_render_whether_or_not_the_stop_token_was_sampled(tokenizer, with_stop):
    messages = build_messages("Where was the author of The Little Prince born?")
    prompt = build_prompt(tokenizer, messages)
    text = "Let me look this up.\n" + call("Little Prince author")
    completion = encode(tokenizer, text) + ([stop_token_ids(tokenizer)[0]] if with_stop else [])
    observation = tool_message("search-0-0-1", "[1] Title: The Little Prince\n    Content: by Saint-Exupery")
    nxt = build_next_prompt(tokenizer, messages, text, prompt, completion, observation)
    full = [*messages, {"role": "assistant", "content": text}, observation]
    assert nxt == build_prompt(tokenizer, full)
    assert nxt[: len(prompt) + len(completion)] == prompt + completion
    # exactly one end-of-turn marker closes the sampled text, and the tool turn follows
    tail = tokenizer.decode(nxt[len(prompt):])
    assert tail.startswith(text + "<|im_end|>\n<|im_start|>user\n<tool_response>")


def test_the_samplers_own_tokens_are_kept_even_when_they_are_not_canonical(tokenizer):
    messages = build_messages("q")
    prompt = build_prompt(tokenizer, messages)
    text = "Answer: Lyon"
    odd = [tid for ch in text for tid in encode(tokenizer, ch)]  # one token per character
    assert odd != encode(tokenizer, text)
    nxt = build_next_prompt(tokenizer, messages, text, prompt, odd, tool_message("c", "obs"))
    assert nxt[len(prompt): len(prompt) + len(odd)] == odd
    canonical = build_prompt(tokenizer, [*messages, {"role": "assistant", "content": text}, tool_message("c", "obs")])
    assert tokenizer.decode(nxt) == tokenizer.decode(canonical)


def test_several_tool_messages_are_rendered_together(tokenizer):
    messages = build_messages("q")
    prompt = build_prompt(tokenizer, messages)
    text = "two calls"
    completion = encode(tokenizer, text)
    first, second = tool_message("c1", "first result"), tool_message("c2", "second result")
    nxt = build_next_prompt(tokenizer, messages, text, prompt, completion, [first, second])
    with_assistant = [*messages, {"role": "assistant", "content": text}]
    assert nxt == build_prompt(tokenizer, [*with_assistant, first, second])
    # The trap: the prompt after one tool message is NOT a prefix of the prompt after two,
    # so appending the second observation to the first one's prompt would be wrong.
    after_one = build_prompt(tokenizer, [*with_assistant, first])
    after_two = build_prompt(tokenizer, [*with_assistant, first, second])
    assert after_two[: len(after_one)] != after_one
    assert render_chat(tokenizer, [*with_assistant, first, second], True).count("<|im_start|>user") == 2
    with pytest.raises(ValueError, match="at least one tool message"):
        build_next_prompt(tokenizer, messages, text, prompt, completion, [])


THINK_STRIPPING_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- set content = m['content'] -%}"
    "{%- if m['role'] == 'assistant' and not loop.last and '</think>' in content -%}"
    "{%- set content = content.split('</think>')[-1].lstrip() -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>' + m['role'] + '\n' + content + '<|im_end|>\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\n' -}}{%- endif -%}"
    "{#- tools are ignored by this toy template -#}"
)


@pytest.mark.parametrize("name", TOKENIZERS)
def test_a_template_that_strips_think_from_earlier_turns_is_refused(name):
    tokenizer = copy.deepcopy(load_tokenizer(name))
    tokenizer.chat_template = THINK_STRIPPING_TEMPLATE
    messages = [{"role": "user", "content": "q"}]
    prompt = build_prompt(tokenizer, messages)
    plain = call("x")
    nxt = build_next_prompt(tokenizer, messages, plain, prompt, encode(tokenizer, plain), tool_message("c", "o"))
    assert nxt[: len(prompt)] == prompt  # without <think> the same template is fine
    thinking = "<think>I should search.</think>\n" + plain
    with pytest.raises(TemplateRewroteHistory, match="rewrote the conversation history"):
        build_next_prompt(tokenizer, messages, thinking, prompt, encode(tokenizer, thinking), tool_message("c", "o"))


# --------------------------------------------------------------------------- property test

# Planes past the BMP are left out: SmolLM2's vocabulary cannot spell some of them back.
SAFE = st.characters(max_codepoint=0xFFFF, blacklist_categories=("Cs", "Co"))
assistant_texts = st.one_of(
    st.sampled_from([call("Lyon"), "Answer: Paris", "I will search.\n" + call("Little Prince author"), "", " "]),
    st.text(alphabet=SAFE, max_size=40),
)
observations = st.text(alphabet=SAFE, max_size=60)


def _random_trajectory(tokenizer, data) -> tuple[Trajectory, bool]:
    """A trajectory built turn by turn as the rollout does; also whether all its tokens are canonical."""
    messages = build_messages(data.draw(st.text(alphabet=SAFE, min_size=1, max_size=30), label="question"))
    trajectory = Trajectory(example=None, group_index=0, messages=list(messages))
    prompt = build_prompt(tokenizer, messages)
    n_turns = data.draw(st.integers(1, 4), label="turns")
    vocab = len(tokenizer)
    all_canonical = True
    for turn in range(n_turns):
        text = data.draw(assistant_texts, label="assistant")
        if data.draw(st.booleans(), label="canonical tokens"):
            completion = encode(tokenizer, text)
        else:  # tokens the sampler might produce, then the text they decode to
            all_canonical = False
            completion = data.draw(st.lists(st.integers(0, vocab - 1), max_size=12), label="raw tokens")
            text = tokenizer.decode(completion, skip_special_tokens=False)
        if data.draw(st.booleans(), label="stop token sampled"):
            completion = completion + [stop_token_ids(tokenizer)[0]]
        trajectory.turns.append(AssistantTurn(prompt, completion, [-0.5] * len(completion), text))
        if turn == n_turns - 1:
            break
        n_obs = data.draw(st.integers(1, 2), label="tool messages")
        tools = [tool_message(f"c{turn}-{k}", data.draw(observations, label="observation")) for k in range(n_obs)]
        prompt = build_next_prompt(tokenizer, trajectory.messages, text, prompt, completion, tools)
        trajectory.messages += [{"role": "assistant", "content": text}, *tools]
    return trajectory, all_canonical


@pytest.mark.parametrize("name", TOKENIZERS)
def test_every_later_prompt_extends_the_earlier_one_token_for_token(name):
    tokenizer = load_tokenizer(name)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.data())
    def check(data):
        try:
            trajectory, canonical = _random_trajectory(tokenizer, data)
        except TemplateRewroteHistory:
            # Random tokens may decode to text the template cannot keep verbatim; that must be the
            # only way to fail, and it fails loudly instead of shifting tokens.
            return
        check_continuity(trajectory)
        turns = trajectory.turns
        for earlier, later in zip(turns, turns[1:]):
            joined = earlier.prompt_tokens + earlier.completion_tokens
            assert later.prompt_tokens[: len(joined)] == joined
        if canonical and len(turns) > 1:
            # the assembled prompt reads exactly like the template's own render of the messages
            # (both through the tokenizer: SmolLM2 cannot spell every control character back)
            assembled = tokenizer.decode(turns[-1].prompt_tokens)
            assert assembled == tokenizer.decode(build_prompt(tokenizer, trajectory.messages))
        rows = token_table(trajectory)
        assert [r["token_id"] for r in rows] == turns[-1].prompt_tokens + turns[-1].completion_tokens
        assert sum(r["trained"] for r in rows) == sum(len(t.completion_tokens) for t in turns)

    check()
