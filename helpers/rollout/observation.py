"""Fitting a search result into the tool turn: whole items, in rank order, within the token budgets.

The one observation fitter of the course: the rollout fits every search with it, and the
scripted teacher and the RAG baseline (`fit_observation`, `observe_search`) show observations
fitted the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from helpers.protocol import build_prompt, encode_rendered, render_chat, render_tokens, tool_message
from helpers.rollout.continuity import (TemplateRewroteHistory, assistant_closing_tokens, observation_after,
                                        suffix_prefix_overlap)
from helpers.rollout.splice import encode_after
from helpers.search.format import format_item, format_results
from helpers.search.types import SearchResult
from helpers.trajectory import RolloutConfig


@dataclass
class FittedObservation:
    content: str
    next_prompt_tokens: list[int]
    items_kept: int
    observation_tokens: int

    def __iter__(self):  # unpacks like Happy-LLM §8.3.4's (content, next_prompt_tokens)
        return iter((self.content, self.next_prompt_tokens))


# Written as the tool content once per turn to learn where the template puts the content. Its edge
# whitespace, quotes, backslash, newline and non-ASCII letters come back changed from a template
# that trims or escapes tool content, which fitting by splicing text around the probe cannot follow.
_CONTENT_PROBE = ' \n«observation» "q" \\ <b> & é\n '


class TemplateAltersToolContent(ValueError):
    """The chat template trims, escapes or otherwise rewrites the content of a tool message."""


@dataclass
class ToolTurnFrame:
    """A tool turn rendered once, with the content left open: the text that stays the same whatever
    the search shows, and the tokens before the observation.

    ``head + content + tail`` is the rendered conversation ending with the next assistant header;
    ``head`` is ``assistant_end_text`` (the conversation up to the closed assistant turn) followed by
    ``opening`` (the tool turn's header); ``glue`` is the previous prompt + the sampled tokens + the
    closing tokens the sampler did not emit.
    """

    tokenizer: Any
    head: str
    tail: str
    opening: str
    assistant_end_text: str
    glue: list[int]

    def observation(self, content: str) -> list[int]:
        """The observation tokens of ``content``: exactly what rendering the whole chat would give.

        The tool turn alone is encoded where the tokenizer cuts the text where the turn starts
        (`encode_after`), so the cost follows the observation, not the conversation; otherwise the
        whole conversation is encoded and the closed assistant turn's tokens are taken off it.
        """
        turn = self.opening + content + self.tail
        spliced = encode_after(self.tokenizer, self.assistant_end_text, turn)
        if spliced is not None:
            return spliced
        return observation_after(self.tokenizer, self.assistant_end, encode_rendered(self.tokenizer, self.head + content + self.tail))

    @cached_property
    def assistant_end(self) -> list[int]:
        """The tokens of the conversation up to the closed assistant turn (the whole-text path only)."""
        return encode_rendered(self.tokenizer, self.assistant_end_text)


def _assistant_message(assistant: str | dict[str, Any]) -> dict[str, Any]:
    return dict(assistant) if isinstance(assistant, dict) else {"role": "assistant", "content": assistant}


def tool_turn_frame(
    tokenizer: Any,
    messages_before_assistant: list[dict[str, Any]],
    assistant_text: str | dict[str, Any],
    prompt_tokens: list[int],
    completion_tokens: list[int],
    call_id: str,
) -> ToolTurnFrame:
    """Render the tool turn once, with a probe where its content goes (see ``fit_tool_content``).

    ``assistant_text`` is the text the policy sampled, or a whole assistant message (a written
    conversation's structured tool call).
    """
    closing = assistant_closing_tokens(tokenizer, messages_before_assistant)
    with_assistant = [*messages_before_assistant, _assistant_message(assistant_text)]
    assistant_end_text = render_chat(tokenizer, with_assistant, add_generation_prompt=False)
    probed = render_chat(tokenizer, [*with_assistant, tool_message(call_id, _CONTENT_PROBE)], add_generation_prompt=True)
    if probed.count(_CONTENT_PROBE) != 1:
        raise TemplateAltersToolContent(
            "this chat template does not write a tool message's content verbatim (it trims, "
            "escapes or repeats it), so observations cannot be fitted by their tokens. Fix: use a "
            "template that renders tool content as it is, like Qwen2.5's or helpers/templates/chatml_tools.jinja."
        )
    head, tail = probed.split(_CONTENT_PROBE)
    if not head.startswith(assistant_end_text):
        # names the first differing token
        observation_after(tokenizer, encode_rendered(tokenizer, assistant_end_text), encode_rendered(tokenizer, head))
        raise TemplateRewroteHistory("the chat template rewrote the conversation history when a tool message was appended")
    overlap = suffix_prefix_overlap(completion_tokens, closing)
    return ToolTurnFrame(tokenizer, head, tail, head[len(assistant_end_text):], assistant_end_text,
                         [*prompt_tokens, *completion_tokens, *closing[overlap:]])


def fit_tool_content(
    tokenizer: Any,
    messages_before_assistant: list[dict[str, Any]],
    assistant_text: str | dict[str, Any],
    prompt_tokens: list[int],
    completion_tokens: list[int],
    call_id: str,
    result: SearchResult,
    config: RolloutConfig,
) -> FittedObservation | None:
    """The largest observation (whole items, in rank order) within both token budgets.

    The per-call budget counts the tokens the tool turn adds (``max_tool_response_tokens``); the
    trajectory budget counts the whole next prompt, leaving room for at least one sampled token.
    An error or empty result is one indivisible message. None: not even the first item fits.

    The tokens are those of rendering the whole conversation with the observation appended, but
    the template is rendered once per call and each item's tokens are counted once: item k is
    the text from its ``[k]`` to the next item's (the first item with the tool turn's opening),
    and the observation of k items is items 1..k-1 so counted plus item k with the turn's ending.
    Byte-level tokenizers start a new piece at ``[`` after a line break, so the sum is exact; it
    is checked against the real tokens of the count chosen and of the one after it, and should
    they ever differ every count is encoded whole instead. Those real tokens come from encoding
    the tool turn alone where the tokenizer cuts the text where the turn starts
    (`ToolTurnFrame.observation`), so a fitting's encoding does not grow with the conversation.
    """
    frame = tool_turn_frame(tokenizer, messages_before_assistant, assistant_text, prompt_tokens,
                            completion_tokens, call_id)
    base = len(prompt_tokens) + len(completion_tokens)
    missing = len(frame.glue) - base  # closing tokens appended: they count as the tool turn's
    room = min(config.max_tool_response_tokens - missing, config.max_trajectory_tokens - 1 - len(frame.glue))

    def fitted(content: str, observation: list[int], kept: int) -> FittedObservation:
        return FittedObservation(content, [*frame.glue, *observation], kept, missing + len(observation))

    if not (result.ok and result.items):
        content = format_results(result)
        observation = frame.observation(content)
        return fitted(content, observation, 0) if len(observation) <= room else None
    contents = [format_results(result, k) for k in range(1, len(result.items) + 1)]
    kept, observation = _count_items(frame, result, contents, room)
    return fitted(contents[kept - 1], observation, kept) if kept else None


def _count_items(frame: ToolTurnFrame, result: SearchResult, contents: list[str], room: int) -> tuple[int, list[int] | None]:
    """(items kept, their observation tokens): item pieces summed, checked whole at the seams."""
    tokenizer = frame.tokenizer
    starts = [0] + [len(content) - len(format_item(k, item))
                    for k, (content, item) in enumerate(zip(contents[1:], result.items[1:]), start=2)]
    whole = contents[-1]
    pieces: list[list[int]] = []  # item k's tokens with the next item's start after it
    predicted: list[int] = []  # items kept so far + the next item closing the observation
    kept = 0
    while kept < len(contents):
        lead = frame.opening if kept == 0 else ""
        closing_piece = encode_rendered(tokenizer, lead + whole[starts[kept]:len(contents[kept])] + frame.tail)
        predicted = [token for piece in pieces for token in piece] + closing_piece
        if len(predicted) > room:
            break
        if kept + 1 < len(contents):
            pieces.append(encode_rendered(tokenizer, lead + whole[starts[kept]:starts[kept + 1]]))
        kept, chosen = kept + 1, predicted

    observation = frame.observation(contents[kept - 1]) if kept else None
    # The tokens chosen are checked whole (the seams inside them and the one to the conversation);
    # of the first count left out, the seam it adds (last item kept | item left out | ending).
    exact = not kept or observation == chosen
    if exact and kept < len(contents):
        if kept:
            seam = encode_rendered(tokenizer, ("" if kept > 1 else frame.opening) + whole[starts[kept - 1]:len(contents[kept])] + frame.tail)
            exact = seam == pieces[kept - 1] + closing_piece
        else:
            exact = len(frame.observation(contents[0])) == len(predicted)
    if exact:
        return kept, observation
    # a tokenizer that merges across items: count every observation whole
    kept, observation = 0, None
    for count, content in enumerate(contents, start=1):
        candidate = frame.observation(content)
        if len(candidate) > room:
            break
        kept, observation = count, candidate
    return kept, observation


def fit_observation(
    tokenizer: Any,
    messages_before_assistant: list[dict[str, Any]],
    assistant: dict[str, Any],
    call_id: str,
    result: SearchResult,
    max_tool_response_tokens: int,
    max_trajectory_tokens: int | None = None,
) -> FittedObservation | None:
    """``fit_tool_content`` for a conversation that was written, not sampled.

    The scripted teacher and the RAG baseline show a search's result as the rollout would: the
    same items kept under the same ``max_tool_response_tokens``. Here the assistant turn is the
    template's own rendering of ``assistant`` (its end-of-turn tokens included), and with no
    ``max_trajectory_tokens`` only the tool turn's budget applies. None: not even one item fits.
    """
    prompt = build_prompt(tokenizer, messages_before_assistant)
    closed = render_tokens(tokenizer, [*messages_before_assistant, _assistant_message(assistant)], False)
    if closed[: len(prompt)] != prompt:
        raise TemplateRewroteHistory("the chat template renders the conversation differently once the "
                                     "assistant's search call is appended")
    budgets = RolloutConfig(max_tool_response_tokens=max_tool_response_tokens,
                            max_trajectory_tokens=max_trajectory_tokens or _UNLIMITED)
    return fit_tool_content(tokenizer, messages_before_assistant, assistant, prompt, closed[len(prompt):],
                            call_id, result, budgets)


_UNLIMITED = 1 << 40  # a trajectory budget no conversation reaches


def search_call_message(query: str, call_id: str) -> dict[str, Any]:
    """A written search call: a structured tool call that the chat template renders in its own format."""
    call = {"type": "function", "id": call_id, "function": {"name": "search", "arguments": {"query": query}}}
    return {"role": "assistant", "content": "", "tool_calls": [call]}


def observe_search(tokenizer: Any, messages: list[dict[str, Any]], query: str, call_id: str, result: SearchResult,
                   max_tool_response_tokens: int | None) -> str | None:
    """What the policy would read after searching `query` at the end of `messages`: `result` fitted
    as the rollout fits it. None when not even one item fits; without a tokenizer or a budget, the
    whole result."""
    if tokenizer is None or max_tool_response_tokens is None:
        return format_results(result)
    fitted = fit_observation(tokenizer, messages, search_call_message(query, call_id), call_id, result,
                             max_tool_response_tokens)
    return fitted.content if fitted is not None else None
