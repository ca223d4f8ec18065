"""Token continuity: the next prompt extends the tokens the sampler saw, it is never re-rendered.

The next prompt is ``previous prompt + sampled tokens + (end-of-turn tokens the sampler did not
emit) + observation tokens``, where only the last two come from the chat template. A template that
rewrites earlier turns raises `TemplateRewroteHistory` instead of silently shifting token
boundaries. `stitch` reads a finished trajectory back as one token sequence: the one stitching
behind datums, token views and the mismatch measurements.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from helpers.protocol import build_prompt, encode_rendered, render_chat, render_tokens
from helpers.rollout.splice import encode_after
from helpers.trajectory import Trajectory


def suffix_prefix_overlap(tokens: Sequence[int], closing: Sequence[int]) -> int:
    """Longest k with tokens[-k:] == closing[:k]: what the sampler already emitted of the closing."""
    for k in range(min(len(tokens), len(closing)), 0, -1):
        if list(tokens[-k:]) == list(closing[:k]):
            return k
    return 0


class TemplateRewroteHistory(ValueError):
    """The chat template renders an earlier turn differently once later turns are appended."""


def assistant_closing_tokens(tokenizer: Any, messages_before_assistant: list[dict[str, Any]]) -> list[int]:
    """The tokens the template writes to close an assistant turn (e.g. ``<|im_end|>`` ``\\n``).

    They are what rendering an empty assistant turn adds to the generation prompt. Where that text
    extends the prompt's text and the tokenizer cuts at the seam (`encode_after`), only the added
    text is encoded; otherwise both conversations are encoded whole and compared token by token.
    """
    prompt_text = render_chat(tokenizer, messages_before_assistant, add_generation_prompt=True)
    closed_text = render_chat(tokenizer, [*messages_before_assistant, {"role": "assistant", "content": ""}], False)
    if closed_text.startswith(prompt_text):
        closing = encode_after(tokenizer, prompt_text, closed_text[len(prompt_text):])
        if closing is not None:
            return closing
    prompt = encode_rendered(tokenizer, prompt_text)
    closed = encode_rendered(tokenizer, closed_text)
    if closed[: len(prompt)] != prompt:
        raise TemplateRewroteHistory(
            "cannot find where an assistant turn ends in this chat template: rendering an empty "
            "assistant message does not extend the generation prompt. Use a template whose "
            "generation prompt is the start of the assistant turn."
        )
    return closed[len(prompt) :]


def build_next_prompt(
    tokenizer: Any,
    messages_before_assistant: list[dict[str, Any]],
    assistant_text: str,
    previous_prompt_tokens: list[int],
    completion_tokens: list[int],
    next_tool_message: dict[str, Any] | Sequence[dict[str, Any]],
) -> list[int]:
    """previous prompt + the sampler's tokens + missing end-of-turn tokens + new observation tokens.

    ``next_tool_message`` may be several tool messages: they are rendered together, because a
    template may group consecutive tool messages in one turn (Qwen2.5 does), so the tokens of
    two messages are not the tokens of each message rendered on its own.
    """
    new_messages = [next_tool_message] if isinstance(next_tool_message, dict) else list(next_tool_message)
    if not new_messages:
        raise ValueError("build_next_prompt needs at least one tool message to append")
    closing = assistant_closing_tokens(tokenizer, messages_before_assistant)
    with_assistant = [*messages_before_assistant, {"role": "assistant", "content": assistant_text}]
    assistant_end = render_tokens(tokenizer, with_assistant, add_generation_prompt=False)
    next_canonical = build_prompt(tokenizer, [*with_assistant, *new_messages])
    observation = observation_after(tokenizer, assistant_end, next_canonical)
    overlap = suffix_prefix_overlap(completion_tokens, closing)
    return [*previous_prompt_tokens, *completion_tokens, *closing[overlap:], *observation]


def observation_after(tokenizer: Any, assistant_end: list[int], next_canonical: list[int]) -> list[int]:
    """The tokens ``next_canonical`` adds after the closed assistant turn, if it really extends it."""
    if next_canonical[: len(assistant_end)] != assistant_end:
        first = next(
            (i for i, (a, b) in enumerate(zip(assistant_end, next_canonical)) if a != b),
            min(len(assistant_end), len(next_canonical)),
        )
        raise TemplateRewroteHistory(
            "the chat template rewrote the conversation history when the tool observation was "
            f"appended (first differing token at position {first}: "
            f"{tokenizer.decode(assistant_end[first:first + 8])!r} became "
            f"{tokenizer.decode(next_canonical[first:first + 8])!r}). Typical cause: the template "
            "strips <think> blocks or normalises earlier assistant turns. Fix: use a template that "
            "renders past turns verbatim, or keep such text out of assistant turns."
        )
    return next_canonical[len(assistant_end) :]


@dataclass
class Stitched:
    """A whole trajectory as one token sequence, as the trainer sees it.

    ``sources[k]`` is ``prompt`` (the first prompt), ``assistant`` (sampled: ``logprobs[k]`` is the
    sampler's) or ``observation`` (template glue and search text between turns: logprob 0);
    ``turns[k]`` is the assistant turn the token belongs to or precedes.
    """

    tokens: list[int]
    logprobs: list[float]
    sources: list[str]
    turns: list[int]

    @property
    def sampled(self) -> list[bool]:
        return [source == "assistant" for source in self.sources]


def stitch(trajectory: Trajectory) -> Stitched:
    """First prompt, then per turn its sampled tokens and the next observation delta.

    Every turn's prompt must extend the tokens gathered so far (the previous prompt plus the
    previous turn's sampled tokens); otherwise the sampler's logprobs cannot be aligned.
    """
    tokens: list[int] = []
    logprobs: list[float] = []
    sources: list[str] = []
    turns: list[int] = []
    for index, turn in enumerate(trajectory.turns):
        number = index + 1
        if len(turn.completion_tokens) != len(turn.logprobs):
            raise ValueError(
                f"assistant turn {number}: {len(turn.completion_tokens)} completion tokens but "
                f"{len(turn.logprobs)} logprobs; the sampler must return one logprob per token"
            )
        if list(turn.prompt_tokens[: len(tokens)]) != tokens:
            raise TemplateRewroteHistory(
                f"assistant turn {number} (question {trajectory.question_index}, branch "
                f"{trajectory.group_index}): its prompt does not continue the tokens gathered so far (token "
                "continuity broken), "
                "so the sampler logprobs cannot be aligned; build the next prompt by appending "
                "tokens (helpers.rollout.build_next_prompt), never by re-rendering the chat"
            )
        delta = [int(t) for t in turn.prompt_tokens[len(tokens):]]
        tokens.extend(delta)
        logprobs.extend([0.0] * len(delta))
        sources.extend(["prompt" if index == 0 else "observation"] * len(delta))
        turns.extend([index] * len(delta))
        tokens.extend(int(t) for t in turn.completion_tokens)
        logprobs.extend(float(x) for x in turn.logprobs)
        sources.extend(["assistant"] * len(turn.completion_tokens))
        turns.extend([index] * len(turn.completion_tokens))
    return Stitched(tokens, logprobs, sources, turns)


def check_continuity(trajectory: Trajectory) -> None:
    """Every turn's prompt extends the previous prompt plus the previous turn's sampled tokens."""
    stitch(trajectory)

