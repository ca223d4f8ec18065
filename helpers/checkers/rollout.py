"""Checks for `consume_assistant` (notebook 05): one sampled turn through the state machine.

Each case builds a fresh Trajectory on a real chat template, hands the learner's function one
sampled sequence (the tokenizer's own tokens, with a stop token and one logprob per token) and
compares what the trajectory and the returned search request look like afterwards.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Callable

from helpers.checkers._runner import Case, Raises, run_checks
from helpers.data import SearchExample
from helpers.protocol import build_messages, build_prompt, call_text, stop_token_ids, template_family
from helpers.rollout import AssistantTurn, RolloutConfig, Trajectory

QUESTION = SearchExample("check", "What country was the author of The Little Prince born in?", ["France"], "check")
CALL = call_text("Little Prince author")


def _setting(tokenizer: Any, searches_done: int, turns_done: int) -> tuple[Trajectory, list[int]]:
    """A trajectory that already made `searches_done` searches over `turns_done` turns."""
    trajectory = Trajectory(example=QUESTION, group_index=1, question_index=2,
                            messages=build_messages(QUESTION.question, None, template_family(tokenizer)))
    prompt = build_prompt(tokenizer, trajectory.messages)
    trajectory.turns = [AssistantTurn(list(prompt), [1], [-0.5], "earlier turn", kind="tool") for _ in range(turns_done)]
    trajectory.search_calls = searches_done
    return trajectory, prompt


def _sequence(tokenizer: Any, text: str, *, stop: bool = True, logprobs_short: bool = False) -> SimpleNamespace:
    tokens = list(tokenizer.encode(text, add_special_tokens=False)) + (stop_token_ids(tokenizer)[:1] if stop else [])
    logprobs = [-0.01 * (1 + i % 5) for i in range(len(tokens) - int(logprobs_short))]
    return SimpleNamespace(tokens=tokens, logprobs=logprobs, stop_reason="stop" if stop else "length")


def _state(trajectory: Trajectory, returned: Any, messages_before: list[dict]) -> dict[str, Any]:
    turn = trajectory.turns[-1] if trajectory.turns else None
    state: dict[str, Any] = {
        "turns": len(trajectory.turns),
        "last turn kind": getattr(turn, "kind", None),
        "last turn query": getattr(turn, "query", None),
        "last turn text": getattr(turn, "text", None),
        "last turn tokens": list(getattr(turn, "completion_tokens", []) or []),
        "last turn logprobs": list(getattr(turn, "logprobs", []) or []),
        "last turn prompt": list(getattr(turn, "prompt_tokens", []) or []),
        "last message": trajectory.messages[-1] if trajectory.messages else None,
        "done": trajectory.done,
        "end_reason": trajectory.end_reason,
        "final_text": trajectory.final_text,
        "search_calls": trajectory.search_calls,
    }
    if returned is None:
        state["returned"] = None
    else:
        state["returned"] = {
            "query": getattr(returned, "query", None),
            "trajectory is the same object": getattr(returned, "trajectory", None) is trajectory,
            "messages_before_assistant": getattr(returned, "messages_before_assistant", None) == messages_before,
            "assistant_text": getattr(returned, "assistant_text", None),
            "prompt_tokens": list(getattr(returned, "prompt_tokens", []) or []),
            "completion_tokens": list(getattr(returned, "completion_tokens", []) or []),
            "has a call_id": bool(getattr(returned, "call_id", "")),
        }
    return state


def _case(tokenizer: Any, name: str, text: str, kind: str, end_reason: str, *, query: str | None = None,
          searches_done: int = 0, turns_done: int = 0, stop: bool = True) -> Case:
    config = RolloutConfig(max_search_calls=2, max_assistant_turns=4)
    sequence = _sequence(tokenizer, text, stop=stop)
    trajectory, prompt = _setting(tokenizer, searches_done, turns_done)
    searching = end_reason == ""
    expected = {
        "turns": turns_done + 1, "last turn kind": kind, "last turn query": query, "last turn text": text,
        "last turn tokens": sequence.tokens, "last turn logprobs": sequence.logprobs, "last turn prompt": prompt,
        "last message": {"role": "assistant", "content": text},
        "done": not searching, "end_reason": end_reason, "final_text": "" if searching else text,
        "search_calls": searches_done,  # finish_search counts a search once its observation is in
        "returned": None if not searching else {
            "query": query, "trajectory is the same object": True, "messages_before_assistant": True,
            "assistant_text": text, "prompt_tokens": prompt, "completion_tokens": sequence.tokens,
            "has a call_id": True,
        },
    }

    def run(fn: Callable) -> dict[str, Any]:
        fresh, fresh_prompt = _setting(tokenizer, searches_done, turns_done)
        before = [dict(m) for m in fresh.messages]
        returned = fn(fresh, list(fresh_prompt), sequence, tokenizer, config)
        return _state(fresh, returned, before)

    shown = (f"turn text {text!r} ({len(sequence.tokens)} tokens{', stop token last' if stop else ''}); "
             f"{searches_done} searches and {turns_done} turns done; max_search_calls=2, max_assistant_turns=4")
    return Case(name, shown, expected, run)


def _short_logprobs_case(tokenizer: Any) -> Case:
    def run(fn: Callable) -> Any:
        trajectory, prompt = _setting(tokenizer, 0, 0)
        return fn(trajectory, prompt, _sequence(tokenizer, "Answer: France", logprobs_short=True), tokenizer, RolloutConfig())

    return Case("one logprob missing", "a sequence with one logprob fewer than tokens", Raises(ValueError, "logprob"), run)


def consume_cases(tokenizer: Any) -> list[Case]:
    return [
        _case(tokenizer, "a search call asks for a search", "I need the author.\n" + CALL, "tool", "",
              query="Little Prince author"),
        _case(tokenizer, "the sampler stopped without its stop token", CALL, "tool", "", query="Little Prince author",
              stop=False),
        _case(tokenizer, "an answer ends the branch", "Answer: France", "answer", "answer"),
        _case(tokenizer, "an invalid turn ends the branch", CALL + "\nAnswer: France", "invalid", "invalid"),
        _case(tokenizer, "a call beyond the search budget ends it", CALL, "tool", "search_budget",
              query="Little Prince author", searches_done=2, turns_done=2),
        _case(tokenizer, "a call on the last allowed turn ends it", CALL, "tool", "turn_budget",
              query="Little Prince author", searches_done=1, turns_done=3),
        _short_logprobs_case(tokenizer),
    ]


def check_consume_assistant(fn: Any, tokenizer: Any = None):
    """Run one-turn cases against `fn(trajectory, prompt_tokens, sequence, tokenizer, config)`."""
    if tokenizer is None:
        from helpers.course.state import tokenizer as course_tokenizer  # the engine only when a check needs it

        tokenizer = course_tokenizer()
    return run_checks("consume_assistant", fn, consume_cases(tokenizer),
                      hint="record the turn and the assistant message first, then: not a tool call -> end "
                           "with its kind; no search left or no turn left -> end with search_budget / "
                           "turn_budget; otherwise return a PendingSearch")
