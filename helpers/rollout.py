"""The multi-turn rollout state machine: sample -> parse -> search -> append observation -> repeat.

One question gives one *group*: its first turn is a single request with
``num_samples=group_size`` (a shared root), every sequence becomes its own branch, and later turns
sample each live branch with ``num_samples=1``. All sampling requests of one turn run
concurrently, all searches of one turn run in a thread pool. ``rollout_groups`` returns the
finished groups unscored; ``rollout_batch`` scores them with the exact-match reward and assigns the
group advantages once every trajectory of the batch has finished (``helpers.reward``).

Token continuity: every ``AssistantTurn`` keeps the sampler's own tokens and logprobs, and the
next prompt is ``previous prompt + sampled tokens + (end-of-turn tokens the sampler did not emit)
+ observation tokens``, where only the last two come from the chat template. A template that
rewrites earlier turns raises instead of silently shifting token boundaries.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from helpers.data import SearchExample
from helpers.protocol import (
    build_messages,
    build_prompt,
    parse_assistant,
    render_chat,
    render_tokens,
    stop_sequences,
    stop_token_ids,
    template_family,
    tool_message,
)
from helpers.reward import FORMAT_PENALTY, assign_advantages, exact_match_reward, score
from helpers.search.format import format_item, format_results
from helpers.search.types import SearchResult

# --------------------------------------------------------------------------- types


@dataclass
class RolloutConfig:
    """The budgets and sampling of a rollout: the one place their defaults are declared.

    Training and evaluation nest it (`TrainConfig.rollout`, `EvalConfig.rollout`); presets and
    the notebooks' profiles override fields by name (`helpers.runs.updated`), the command line
    as `--rollout.max-search-calls 3`.
    """

    group_size: int = 8
    max_search_calls: int = 4
    max_assistant_turns: int = 6
    max_assistant_tokens: int = 256  # per assistant turn
    max_tool_response_tokens: int = 768  # tokens one tool turn may add
    max_trajectory_tokens: int = 4096  # the whole conversation, prompt included
    search_concurrency: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0
    # Budget stated in the system prompt (budget-forced evaluation); None states no limit.
    # The enforced limit is always max_search_calls.
    search_budget: int | None = None


@dataclass
class AssistantTurn:
    prompt_tokens: list[int]
    completion_tokens: list[int]
    logprobs: list[float]
    text: str
    # What the parser made of the turn, and why the sampler stopped ("stop" / "length").
    kind: str = ""
    query: str | None = None
    stop_reason: str | None = None
    error: str | None = None


@dataclass
class SearchRecord:
    """One search call as the environment saw it (for stats and widgets)."""

    turn_index: int
    call_id: str
    query: str
    ok: bool
    error: str | None
    latency: float
    items_returned: int
    items_kept: int = 0
    observation_tokens: int = 0  # template tokens of the tool turn the model reads next
    content: str = ""
    fitted: bool = False  # False: not even one item fitted, the trajectory ended on its call
    passage_ids: list[str] = field(default_factory=list)  # corpus ids of the items kept (backends that know them)

    @property
    def cut(self) -> bool:
        return self.items_kept < self.items_returned


@dataclass
class Trajectory:
    example: SearchExample
    group_index: int
    messages: list[dict[str, Any]]
    next_prompt_tokens: list[int] | None = None
    question_index: int = 0
    turns: list[AssistantTurn] = field(default_factory=list)
    search_calls: int = 0
    final_text: str = ""
    reward: float = FORMAT_PENALTY
    advantage: float = 0.0
    valid_format: bool = False
    exact_match: bool = False
    done: bool = False
    # Added for stats and widgets.
    answer: str | None = None
    end_reason: str = ""  # answer / invalid / search_budget / turn_budget / observation_budget / context_budget
    searches: list[SearchRecord] = field(default_factory=list)
    failed_searches: int = 0
    truncated_observations: int = 0  # observations that kept fewer items than the search returned

    @property
    def sampled_tokens(self) -> int:
        return sum(len(t.completion_tokens) for t in self.turns)

    @property
    def observation_tokens(self) -> int:
        return sum(s.observation_tokens for s in self.searches if s.fitted)

    @property
    def total_tokens(self) -> int:
        """The whole conversation: the last turn's prompt and what it sampled (0 before any turn)."""
        return len(self.turns[-1].prompt_tokens) + len(self.turns[-1].completion_tokens) if self.turns else 0


@dataclass
class Group:
    """One question of a step and its finished trajectories, in branch order: what GRPO compares.

    ``index`` is the question's position in the step (every trajectory's ``question_index``);
    ``step`` is the training step, so a reward with randomness can seed it from (step, index).
    """

    example: SearchExample
    trajectories: list[Trajectory]
    index: int = 0
    step: int = 0

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.trajectories]

    @property
    def advantages(self) -> list[float]:
        return [t.advantage for t in self.trajectories]

    @property
    def degenerate(self) -> bool:
        """All advantages zero: every reward equal, so the group gives no gradient."""
        return all(t.advantage == 0.0 for t in self.trajectories)

    def __len__(self) -> int:
        return len(self.trajectories)

    def __iter__(self):
        return iter(self.trajectories)

    def __getitem__(self, index):
        return self.trajectories[index]


def groups_of(trajectories: Sequence[Trajectory], step: int = 0) -> list[Group]:
    """A flat list of trajectories regrouped by ``question_index``, in first-seen order."""
    groups: dict[int, Group] = {}
    for trajectory in trajectories:
        index = trajectory.question_index
        if index not in groups:
            groups[index] = Group(trajectory.example, [], index, step)
        groups[index].trajectories.append(trajectory)
    return list(groups.values())


@dataclass
class SampleRequest:
    trajectory_index: int  # index into the roots (first turn) or the branches (later turns)
    prompt_tokens: list[int]
    num_samples: int
    seed: int
    max_tokens: int


@dataclass
class PendingSearch:
    trajectory: Trajectory
    messages_before_assistant: list[dict[str, Any]]
    assistant_text: str
    prompt_tokens: list[int]
    completion_tokens: list[int]
    call_id: str
    query: str


@dataclass
class FittedObservation:
    content: str
    next_prompt_tokens: list[int]
    items_kept: int
    observation_tokens: int

    def __iter__(self):  # unpacks like Happy-LLM §8.3.4's (content, next_prompt_tokens)
        return iter((self.content, self.next_prompt_tokens))


@dataclass
class RolloutStats:
    """Counters and timings of one rollout (rewards and their statistics belong to scoring)."""

    questions: int = 0
    trajectories: int = 0
    turns: int = 0
    sample_requests: int = 0
    sampled_tokens: int = 0
    search_calls: int = 0
    failed_searches: int = 0
    truncated_observations: int = 0
    sampling_seconds: float = 0.0  # wall time waiting for the sampler
    search_seconds: float = 0.0  # wall time of the searches plus fitting their observations
    total_seconds: float = 0.0
    end_reasons: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class RolloutBatch(list):
    """The list of trajectories ``rollout_batch`` returns, with the run's ``stats`` attached."""

    stats: RolloutStats


class RolloutGroups(list):
    """The list of groups ``rollout_groups`` returns, with the run's ``stats`` attached."""

    stats: RolloutStats


# --------------------------------------------------------------------------- token continuity


def _suffix_prefix_overlap(tokens: Sequence[int], closing: Sequence[int]) -> int:
    """Longest k with tokens[-k:] == closing[:k]: what the sampler already emitted of the closing."""
    for k in range(min(len(tokens), len(closing)), 0, -1):
        if list(tokens[-k:]) == list(closing[:k]):
            return k
    return 0


class TemplateRewroteHistory(ValueError):
    """The chat template renders an earlier turn differently once later turns are appended."""


def assistant_closing_tokens(tokenizer: Any, messages_before_assistant: list[dict[str, Any]]) -> list[int]:
    """The tokens the template writes to close an assistant turn (e.g. ``<|im_end|>`` ``\\n``)."""
    prompt = build_prompt(tokenizer, messages_before_assistant)
    closed = render_tokens(tokenizer, [*messages_before_assistant, {"role": "assistant", "content": ""}], False)
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
    observation = _observation_after(tokenizer, assistant_end, next_canonical)
    overlap = _suffix_prefix_overlap(completion_tokens, closing)
    return [*previous_prompt_tokens, *completion_tokens, *closing[overlap:], *observation]


def _observation_after(tokenizer: Any, assistant_end: list[int], next_canonical: list[int]) -> list[int]:
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


# --------------------------------------------------------------------------- one turn


def read_sequence(sequence: Any, tokenizer: Any) -> tuple[list[int], list[float], str]:
    """The sampler's tokens and logprobs as they are, and the turn's text without its stop token."""
    tokens = [int(t) for t in sequence.tokens]
    logprobs = [float(x) for x in (sequence.logprobs or [])]
    if len(logprobs) != len(tokens):
        raise ValueError(
            f"the sampler returned {len(tokens)} tokens but {len(logprobs)} logprobs; the rollout "
            "needs one old logprob per sampled token (sample with logprobs on)"
        )
    stops = set(stop_token_ids(tokenizer))
    end = len(tokens)
    while end and tokens[end - 1] in stops:
        end -= 1
    text = tokenizer.decode(tokens[:end], skip_special_tokens=False)
    return tokens, logprobs, text


def _finish(trajectory: Trajectory, text: str, reason: str) -> None:
    trajectory.final_text = text
    trajectory.done = True
    trajectory.end_reason = reason


def consume_assistant(
    trajectory: Trajectory,
    prompt_tokens: list[int],
    sequence: Any,
    tokenizer: Any,
    config: RolloutConfig,
) -> PendingSearch | None:
    """Record one sampled turn; return the search it asks for, or None when the branch ends."""
    tokens, logprobs, text = read_sequence(sequence, tokenizer)
    parsed = parse_assistant(text)
    trajectory.turns.append(
        AssistantTurn(
            list(prompt_tokens), tokens, logprobs, text,
            kind=parsed.kind, query=parsed.query,
            stop_reason=getattr(sequence, "stop_reason", None), error=parsed.error,
        )
    )
    messages_before_assistant = list(trajectory.messages)
    trajectory.messages.append({"role": "assistant", "content": text})
    if parsed.kind != "tool":
        _finish(trajectory, text, parsed.kind)
        return None
    if trajectory.search_calls >= config.max_search_calls:
        _finish(trajectory, text, "search_budget")
        return None
    if len(trajectory.turns) >= config.max_assistant_turns:
        _finish(trajectory, text, "turn_budget")
        return None
    call_id = f"search-{trajectory.question_index}-{trajectory.group_index}-{trajectory.search_calls + 1}"
    return PendingSearch(
        trajectory=trajectory,
        messages_before_assistant=messages_before_assistant,
        assistant_text=text,
        prompt_tokens=list(prompt_tokens),
        completion_tokens=tokens,
        call_id=call_id,
        query=parsed.query or "",
    )


# --------------------------------------------------------------------------- fitting an observation

# Written as the tool content once per turn to learn where the template puts the content. Its edge
# whitespace, quotes, backslash, newline and non-ASCII letters come back changed from a template
# that trims or escapes tool content, which fitting by splicing text around the probe cannot follow.
_CONTENT_PROBE = ' \n«observation» "q" \\ <b> & é\n '


class TemplateAltersToolContent(ValueError):
    """The chat template trims, escapes or otherwise rewrites the content of a tool message."""


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


@dataclass
class ToolTurnFrame:
    """A tool turn rendered once, with the content left open: the text that stays the same whatever
    the search shows, and the tokens before the observation.

    ``head + content + tail`` is the rendered conversation ending with the next assistant header;
    ``opening`` is the part of ``head`` after the closed assistant turn (the tool turn's header);
    ``glue`` is the previous prompt + the sampled tokens + the closing tokens the sampler did not emit.
    """

    tokenizer: Any
    head: str
    tail: str
    opening: str
    assistant_end: list[int]
    glue: list[int]

    def observation(self, content: str) -> list[int]:
        """The observation tokens of ``content``: exactly what rendering the whole chat would give."""
        return _observation_after(self.tokenizer, self.assistant_end, _encode(self.tokenizer, self.head + content + self.tail))


def tool_turn_frame(
    tokenizer: Any,
    messages_before_assistant: list[dict[str, Any]],
    assistant_text: str,
    prompt_tokens: list[int],
    completion_tokens: list[int],
    call_id: str,
) -> ToolTurnFrame:
    """Render the tool turn once, with a probe where its content goes (see ``fit_tool_content``)."""
    closing = assistant_closing_tokens(tokenizer, messages_before_assistant)
    with_assistant = [*messages_before_assistant, {"role": "assistant", "content": assistant_text}]
    assistant_end_text = render_chat(tokenizer, with_assistant, add_generation_prompt=False)
    assistant_end = _encode(tokenizer, assistant_end_text)
    probed = render_chat(tokenizer, [*with_assistant, tool_message(call_id, _CONTENT_PROBE)], add_generation_prompt=True)
    if probed.count(_CONTENT_PROBE) != 1:
        raise TemplateAltersToolContent(
            "this chat template does not write a tool message's content verbatim (it trims, "
            "escapes or repeats it), so observations cannot be fitted by their tokens. Fix: use a "
            "template that renders tool content as it is, like Qwen2.5's or helpers/templates/chatml_tools.jinja."
        )
    head, tail = probed.split(_CONTENT_PROBE)
    if not head.startswith(assistant_end_text):
        _observation_after(tokenizer, assistant_end, _encode(tokenizer, head))  # names the first differing token
        raise TemplateRewroteHistory("the chat template rewrote the conversation history when a tool message was appended")
    overlap = _suffix_prefix_overlap(completion_tokens, closing)
    return ToolTurnFrame(tokenizer, head, tail, head[len(assistant_end_text):], assistant_end,
                         [*prompt_tokens, *completion_tokens, *closing[overlap:]])


def fit_tool_content(
    tokenizer: Any,
    messages_before_assistant: list[dict[str, Any]],
    assistant_text: str,
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
    they ever differ every count is encoded whole instead.
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
    starts = [0] + [len(content) - len(format_item(k, item))
                    for k, (content, item) in enumerate(zip(contents[1:], result.items[1:]), start=2)]
    whole = contents[-1]
    pieces: list[list[int]] = []  # item k's tokens with the next item's start after it
    predicted: list[int] = []  # items kept so far + the next item closing the observation
    kept = 0
    while kept < len(contents):
        lead = frame.opening if kept == 0 else ""
        closing_piece = _encode(tokenizer, lead + whole[starts[kept]:len(contents[kept])] + frame.tail)
        predicted = [token for piece in pieces for token in piece] + closing_piece
        if len(predicted) > room:
            break
        if kept + 1 < len(contents):
            pieces.append(_encode(tokenizer, lead + whole[starts[kept]:starts[kept + 1]]))
        kept, chosen = kept + 1, predicted

    observation = frame.observation(contents[kept - 1]) if kept else None
    # The tokens chosen are checked whole (the seams inside them and the one to the conversation);
    # of the first count left out, the seam it adds (last item kept | item left out | ending).
    exact = not kept or observation == chosen
    if exact and kept < len(contents):
        if kept:
            seam = _encode(tokenizer, ("" if kept > 1 else frame.opening) + whole[starts[kept - 1]:len(contents[kept])] + frame.tail)
            exact = seam == pieces[kept - 1] + closing_piece
        else:
            exact = len(frame.observation(contents[0])) == len(predicted)
    if not exact:  # a tokenizer that merges across items: count every observation whole
        kept, observation = 0, None
        for count, content in enumerate(contents, start=1):
            candidate = frame.observation(content)
            if len(candidate) > room:
                break
            kept, observation = count, candidate
    return fitted(contents[kept - 1], observation, kept) if kept else None


def _safe_search(search_client: Any, query: str) -> SearchResult:
    started = time.perf_counter()
    try:
        result = search_client.search(query)
        if not isinstance(result, SearchResult):
            raise TypeError(f"search returned {type(result).__name__}, not SearchResult")
        return result
    except Exception as exc:  # the environment failing is an observation, not a crash
        # Only the type: exception messages of HTTP clients can carry URLs with keys.
        return SearchResult(ok=False, items=[], latency=time.perf_counter() - started,
                            error=f"search backend error ({type(exc).__name__})")


def finish_search(pending: PendingSearch, result: SearchResult, tokenizer: Any, config: RolloutConfig) -> bool:
    """Append the observation to its branch; True when the branch ended (nothing fitted)."""
    trajectory = pending.trajectory
    record = SearchRecord(
        turn_index=len(trajectory.turns) - 1, call_id=pending.call_id, query=pending.query,
        ok=result.ok, error=result.error, latency=result.latency,
        items_returned=len(result.items) if result.ok else 0,
    )
    trajectory.searches.append(record)
    if not result.ok:
        trajectory.failed_searches += 1
    fitted = fit_tool_content(
        tokenizer, pending.messages_before_assistant, pending.assistant_text, pending.prompt_tokens,
        pending.completion_tokens, pending.call_id, result, config,
    )
    if fitted is None:
        _finish(trajectory, pending.assistant_text, "observation_budget")
        return True
    record.fitted = True
    record.items_kept = fitted.items_kept
    record.observation_tokens = fitted.observation_tokens
    record.content = fitted.content
    record.passage_ids = [item.passage_id for item in result.items[: fitted.items_kept] if item.passage_id]
    if record.cut:
        trajectory.truncated_observations += 1
    trajectory.messages.append(tool_message(pending.call_id, fitted.content))
    trajectory.next_prompt_tokens = fitted.next_prompt_tokens
    trajectory.search_calls += 1
    return False


def resolve_searches(
    pending_searches: list[PendingSearch], search_client: Any, tokenizer: Any, config: RolloutConfig, on_done=None
) -> int:
    """Run all searches of a turn in a pool, match results back in order; return branches ended."""
    if not pending_searches:
        return 0

    def one(pending: PendingSearch) -> SearchResult:
        result = _safe_search(search_client, pending.query)
        if on_done is not None:
            on_done()
        return result

    workers = max(1, min(config.search_concurrency, len(pending_searches)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(one, pending_searches))
    return sum(
        finish_search(pending, result, tokenizer, config)
        for pending, result in zip(pending_searches, results, strict=True)
    )


# --------------------------------------------------------------------------- sampling


def make_request(
    tokenizer: Any, trajectory: Trajectory, index: int, num_samples: int, seed: int, config: RolloutConfig
) -> SampleRequest | None:
    """The next sampling request of a branch, or None (and the branch ends) when no room is left."""
    prompt = trajectory.next_prompt_tokens
    if prompt is None:
        prompt = build_prompt(tokenizer, trajectory.messages)
        trajectory.next_prompt_tokens = prompt
    room = config.max_trajectory_tokens - len(prompt)
    max_tokens = min(config.max_assistant_tokens, room)
    if max_tokens <= 0:
        last = trajectory.turns[-1].text if trajectory.turns else ""
        _finish(trajectory, last, "context_budget")
        return None
    return SampleRequest(index, list(prompt), num_samples, seed, max_tokens)


async def sample_requests_async(
    sampling_client: Any, requests: list[SampleRequest], config: RolloutConfig, tokenizer: Any, on_done=None
) -> list[Any]:
    """All requests of a turn at once; results in request order."""
    import pytrio as trio

    stops = stop_sequences(tokenizer)

    async def one(request: SampleRequest):
        params = trio.SamplingParams(max_tokens=request.max_tokens, seed=request.seed, stop=stops,
                                     temperature=config.temperature, top_p=config.top_p)
        prompt = trio.ModelInput.from_ints(request.prompt_tokens)
        if hasattr(sampling_client, "sample_async"):
            response = await sampling_client.sample_async(
                prompt=prompt, num_samples=request.num_samples, sampling_params=params, return_text=True
            )
        else:  # a synchronous client: keep the loop free while it works
            response = await asyncio.to_thread(
                sampling_client.sample, prompt=prompt, num_samples=request.num_samples, sampling_params=params
            )
            if hasattr(response, "result"):
                response = await asyncio.to_thread(response.result)
        if on_done is not None:
            on_done()
        return response

    return list(await asyncio.gather(*(one(r) for r in requests)))


class _LoopThread:
    """A private event loop on a helper thread, so the rollout also runs inside Jupyter's loop."""

    def __enter__(self):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="rollout-loop", daemon=True)
        self.thread.start()
        return self

    def run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def __exit__(self, *exc):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


# --------------------------------------------------------------------------- scoring


def assign_group_advantages(trajectories: Sequence[Trajectory]) -> int:
    """Happy-LLM §8.3's name: ``helpers.reward.assign_advantages`` on a flat list, grouped by question.

    advantage = reward - mean reward of its question's group, exactly 0 when all rewards are
    equal; returns the number of such degenerate groups.
    """
    return assign_advantages(groups_of(trajectories))


# --------------------------------------------------------------------------- the batch


def _as_example(row: Any) -> SearchExample:
    if isinstance(row, SearchExample):
        return row
    if isinstance(row, dict) and "question" in row and "answers" in row:  # a data row
        return SearchExample(id=str(row.get("id", "")), question=str(row["question"]),
                             answers=[str(a) for a in row["answers"]], data_source=str(row.get("data_source", "unknown")),
                             metadata=dict(row.get("metadata") or {}))
    raise TypeError(f"examples must be SearchExample or rows with 'question' and 'answers', got {type(row).__name__}")


def _progress(total: int, desc: str, enabled: bool, leave: bool = False):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, leave=leave, disable=not enabled)


def rollout_batch(
    sampling_client: Any,
    tokenizer: Any,
    search_client: Any,
    examples: Sequence[SearchExample],
    config: RolloutConfig | None = None,
    progress: bool = True,
) -> RolloutBatch:
    """Complete trajectories for every example, scored with exact match, with group advantages.

    ``len(examples) * group_size`` of them, ordered by question, then branch; ``.stats`` holds
    the run's counters and timings. This is ``rollout_groups`` + ``score`` + ``assign_advantages``
    flattened; a GRPO step with another reward calls those three itself (``helpers.train``).
    """
    groups = rollout_groups(sampling_client, tokenizer, search_client, examples, config, progress)
    score(groups, exact_match_reward)
    assign_advantages(groups)
    batch = RolloutBatch(t for group in groups for t in group.trajectories)
    batch.stats = groups.stats
    return batch


def rollout_groups(
    sampling_client: Any,
    tokenizer: Any,
    search_client: Any,
    examples: Sequence[SearchExample],
    config: RolloutConfig | None = None,
    progress: bool = True,
) -> RolloutGroups:
    """One finished, unscored group of ``group_size`` trajectories per example, in example order.

    ``.stats`` holds the run's counters and timings. Score the groups with
    ``helpers.reward.score(groups, reward_fn)``, then ``assign_advantages(groups)``.
    """
    config = config or RolloutConfig()
    if config.group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {config.group_size}")
    started = time.perf_counter()
    examples = [_as_example(ex) for ex in examples]
    stats = RolloutStats(questions=len(examples))
    family = template_family(tokenizer)
    roots = [
        Trajectory(example=ex, group_index=0, question_index=qi,
                   messages=build_messages(ex.question, config.search_budget, family))
        for qi, ex in enumerate(examples)
    ]
    trajectories: list[Trajectory] = []
    overall = _progress(len(roots) * config.group_size, "rollout (finished trajectories)", progress, leave=True)

    def run_turn(runner: _LoopThread, requests: list[SampleRequest], turn: int) -> list[Any]:
        bar = _progress(len(requests), f"turn {turn + 1}: sampling", progress)
        t0 = time.perf_counter()
        responses = runner.run(
            sample_requests_async(sampling_client, requests, config, tokenizer, on_done=lambda: bar.update(1))
        )
        stats.sampling_seconds += time.perf_counter() - t0
        stats.sample_requests += len(requests)
        stats.turns += 1
        bar.close()
        return responses

    def run_searches(pending: list[PendingSearch], turn: int) -> None:
        if not pending:
            return
        bar = _progress(len(pending), f"turn {turn + 1}: searching", progress)
        t0 = time.perf_counter()
        resolve_searches(pending, search_client, tokenizer, config, on_done=lambda: bar.update(1))
        stats.search_seconds += time.perf_counter() - t0
        bar.close()

    with _LoopThread() as runner:
        requests = [
            r for qi, root in enumerate(roots)
            if (r := make_request(tokenizer, root, qi, config.group_size, config.seed + qi, config))
        ]
        responses = run_turn(runner, requests, 0) if requests else []
        pending: list[PendingSearch] = []
        by_root = {r.trajectory_index: (r, resp) for r, resp in zip(requests, responses, strict=True)}
        for qi, root in enumerate(roots):
            # not in by_root: the question alone overflows the context, a group of empty branches
            request, response = by_root.get(qi, (None, None))
            if response is not None and len(response.sequences) != config.group_size:
                raise ValueError(
                    f"the first turn asked for {config.group_size} samples and got "
                    f"{len(response.sequences)}; the sampler must honour num_samples"
                )
            for g in range(config.group_size):
                branch = copy.deepcopy(root)
                branch.group_index = g
                trajectories.append(branch)
                if response is not None:
                    found = consume_assistant(branch, request.prompt_tokens, response.sequences[g], tokenizer, config)
                    if found is not None:
                        pending.append(found)
        run_searches(pending, 0)
        overall.update(sum(t.done for t in trajectories))

        turn = 1
        while any(not t.done for t in trajectories):
            before = sum(t.done for t in trajectories)
            requests = [
                r for index, trajectory in enumerate(trajectories) if not trajectory.done
                and (r := make_request(tokenizer, trajectory, index, 1,
                                       config.seed + index + len(trajectory.turns) * 10_000, config))
            ]
            responses = run_turn(runner, requests, turn) if requests else []
            pending = []
            for request, response in zip(requests, responses, strict=True):
                if len(response.sequences) != 1:
                    raise ValueError(f"a later turn asked for 1 sample and got {len(response.sequences)}")
                trajectory = trajectories[request.trajectory_index]
                found = consume_assistant(trajectory, request.prompt_tokens, response.sequences[0], tokenizer, config)
                if found is not None:
                    pending.append(found)
            run_searches(pending, turn)
            overall.update(sum(t.done for t in trajectories) - before)
            turn += 1
    overall.close()

    for trajectory in trajectories:
        if not trajectory.end_reason:  # never sampled: the prompt alone was over budget
            _finish(trajectory, "", "context_budget")
    _fill_stats(stats, trajectories)
    stats.total_seconds = time.perf_counter() - started
    groups = RolloutGroups(groups_of(trajectories))
    groups.stats = stats
    return groups


def _fill_stats(stats: RolloutStats, trajectories: list[Trajectory]) -> None:
    stats.trajectories = len(trajectories)
    stats.sampled_tokens = sum(t.sampled_tokens for t in trajectories)
    stats.search_calls = sum(len(t.searches) for t in trajectories)
    stats.failed_searches = sum(t.failed_searches for t in trajectories)
    stats.truncated_observations = sum(t.truncated_observations for t in trajectories)
    stats.end_reasons = dict(Counter(t.end_reason for t in trajectories))


# --------------------------------------------------------------------------- the trajectory as the trainer sees it


def trajectory_tokens(trajectory: Trajectory) -> list[dict[str, Any]]:
    """The trajectory as the trainer sees it: one row per token, source and mask included.

    Sources: ``prompt`` (the first prompt), ``assistant`` (sampled: old logprob and the
    trajectory's advantage), ``observation`` (template + search text between turns: logprob
    and advantage 0, not trained).
    """
    stitched = stitch(trajectory)
    return [
        {"position": k, "token_id": token, "source": source, "turn": turn, "logprob": logprob,
         "advantage": float(trajectory.advantage) if source == "assistant" else 0.0,
         "trained": source == "assistant"}
        for k, (token, logprob, source, turn) in enumerate(
            zip(stitched.tokens, stitched.logprobs, stitched.sources, stitched.turns))
    ]


def token_table(trajectory: Trajectory, tokenizer: Any | None = None) -> list[dict[str, Any]]:
    """``trajectory_tokens`` with each token's text (decoded one by one) when a tokenizer is given."""
    rows = trajectory_tokens(trajectory)
    if tokenizer is not None:
        for row in rows:
            row["text"] = tokenizer.decode([row["token_id"]], skip_special_tokens=False)
    return rows
