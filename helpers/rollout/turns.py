"""One turn of a branch: read what the sampler wrote, run the search it asks for, append the observation.

The environment's side of the rollout, one branch at a time; `helpers.rollout.loop` runs these
steps for every live branch of every group, turn after turn.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from helpers.protocol import build_prompt, parse_assistant, stop_token_ids, tool_message
from helpers.rollout.observation import fit_tool_content
from helpers.search.types import SearchResult
from helpers.trajectory import AssistantTurn, RolloutConfig, SearchRecord, Trajectory


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


def read_sequence(
    sequence: Any, tokenizer: Any, stop_ids: Collection[int] | None = None
) -> tuple[list[int], list[float], str]:
    """The sampler's tokens and logprobs as they are, and the turn's text without its stop token.

    `stop_ids`: the tokenizer's end-of-turn ids (`stop_token_ids`), when the caller read them once
    (the rollout loop does, for all its turns); None reads them from the tokenizer here.
    """
    tokens = [int(t) for t in sequence.tokens]
    logprobs = [float(x) for x in (sequence.logprobs or [])]
    if len(logprobs) != len(tokens):
        raise ValueError(
            f"the sampler returned {len(tokens)} tokens but {len(logprobs)} logprobs; the rollout "
            "needs one old logprob per sampled token (sample with logprobs on)"
        )
    stops = set(stop_token_ids(tokenizer) if stop_ids is None else stop_ids)
    end = len(tokens)
    while end and tokens[end - 1] in stops:
        end -= 1
    text = tokenizer.decode(tokens[:end], skip_special_tokens=False)
    return tokens, logprobs, text


def finish(trajectory: Trajectory, text: str, reason: str) -> None:
    trajectory.final_text = text
    trajectory.done = True
    trajectory.end_reason = reason


def consume_assistant(
    trajectory: Trajectory,
    prompt_tokens: list[int],
    sequence: Any,
    tokenizer: Any,
    config: RolloutConfig,
    stop_ids: Collection[int] | None = None,
) -> PendingSearch | None:
    """Record one sampled turn; return the search it asks for, or None when the branch ends.

    `stop_ids` as in `read_sequence` (the loop passes the ids it read once per rollout).
    """
    tokens, logprobs, text = read_sequence(sequence, tokenizer, stop_ids)
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
        finish(trajectory, text, parsed.kind)
        return None
    if trajectory.search_calls >= config.max_search_calls:
        finish(trajectory, text, "search_budget")
        return None
    if len(trajectory.turns) >= config.max_assistant_turns:
        finish(trajectory, text, "turn_budget")
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
        finish(trajectory, pending.assistant_text, "observation_budget")
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
        finish(trajectory, last, "context_budget")
        return None
    return SampleRequest(index, list(prompt), num_samples, seed, max_tokens)

