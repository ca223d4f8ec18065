"""Glue the notebooks share: a small rollout from budget values, teacher-forced trajectories, and
the search trajectory the later notebooks show (kernel state itself is `helpers.course.state`)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, Sequence

import pytrio as trio

from helpers.course.state import engine, recall, remember, search_client, tokenizer
from helpers.data import load_examples
from helpers.protocol import build_messages, build_prompt, call_text, stop_token_ids, template_family
from helpers.reward import score
from helpers.rollout import RolloutConfig, Trajectory, consume_assistant, finish_search, groups_of, rollout_batch
from helpers.running_example import ANSWER, QUERIES, RUNNING_EXAMPLE
from helpers.runs import updated
from helpers.widgets.budgets import budgets, rollout_kwargs


def rollout_config(values: dict[str, Any], seed: int = 0, **overrides: Any):
    """The RolloutConfig of a profile's budgets (or the sliders' values), then `overrides` by name."""

    return updated(RolloutConfig(), {**rollout_kwargs(values), "seed": seed, **overrides})


def rollout_examples(questions: int) -> list[Any]:
    """The questions of the notebooks' small rollouts: the running example, then training questions."""
    more = load_examples("train", limit=questions - 1) if questions > 1 else []
    return [RUNNING_EXAMPLE] + more


def run_rollout(examples: Sequence[Any], values: dict[str, Any], *, sampler: Any = None, tokenizer: Any = None,
                search: Any = None, seed: int = 0, progress: bool = True, **overrides: Any) -> list[Any]:
    """rollout_batch on `examples` with the budgets in `values` (the sliders' current values)."""

    if sampler is None or tokenizer is None:
        current = engine()
        sampler, tokenizer = sampler or current.sampler, tokenizer or current.tokenizer
    return rollout_batch(sampler, tokenizer, search or search_client(), list(examples),
                         rollout_config(values, seed, **overrides), progress=progress)


def forced_sequence(sampler: Any, tokenizer: Any, prompt_tokens: Sequence[int], text: str) -> Any:
    """A given turn shaped like a sampled one: its tokens, a stop token, and the logprobs the
    policy assigns to them (what the sampler would have reported had it sampled this text)."""
    prompt = list(prompt_tokens)
    completion = list(tokenizer.encode(text, add_special_tokens=False)) + stop_token_ids(tokenizer)[:1]
    scored = sampler.compute_logprobs(trio.ModelInput.from_ints(prompt + completion)).result()
    return SimpleNamespace(tokens=completion, logprobs=[float(x) for x in scored[len(prompt):]], stop_reason="stop")


def forced_trajectory(example: Any, queries: Sequence[str], answer: str, *, sampler: Any = None, tokenizer: Any = None,
                      search: Any = None, values: dict[str, Any] | None = None, group_index: int = 0) -> Any:
    """A multi-turn Trajectory whose assistant turns are *given* (teacher-forced) instead of sampled.

    Each turn is fed through the rollout's own state machine (consume_assistant, finish_search,
    build_next_prompt), and its "old logprobs" are what the model assigns to those tokens
    (compute_logprobs), i.e. what the sampler would have reported had it sampled them. Used when
    the untrained model does not search on its own but a notebook needs a search trajectory.

    With `values` (a playground's sliders) every budget binds as in a sampled rollout: a turn
    longer than max_assistant_tokens is cut there (and so becomes invalid), a call beyond
    max_search_calls ends the branch, observations are fitted to max_tool_response_tokens.
    Without them the budgets are widened so that every given turn runs.
    """
    if sampler is None or tokenizer is None:
        current = engine()
        sampler, tokenizer = sampler or current.sampler, tokenizer or current.tokenizer
    search = search or search_client()
    if values is None:
        config = rollout_config({}, max_search_calls=len(queries) + 1, max_assistant_turns=len(queries) + 2,
                                max_tool_response_tokens=512, max_trajectory_tokens=4096)
    else:
        config = rollout_config(values)
    trajectory = Trajectory(example=example, group_index=group_index,
                            messages=build_messages(example.question, None, template_family(tokenizer)))
    prompt = build_prompt(tokenizer, trajectory.messages)
    for text in [*(call_text(q) for q in queries), f"Answer: {answer}"]:
        sequence = forced_sequence(sampler, tokenizer, prompt, text)
        if len(sequence.tokens) > config.max_assistant_tokens:  # the sampler would have stopped here
            keep = config.max_assistant_tokens
            sequence.tokens, sequence.logprobs, sequence.stop_reason = sequence.tokens[:keep], sequence.logprobs[:keep], "length"
        pending = consume_assistant(trajectory, prompt, sequence, tokenizer, config)
        if pending is None:
            break
        if finish_search(pending, search.search(pending.query), tokenizer, config):
            break
        prompt = trajectory.next_prompt_tokens
    score(groups_of([trajectory]))
    return trajectory


def search_trajectory(values: dict[str, Any] | None = None, policy: Any = None) -> tuple[Any, str]:
    """A trajectory with at least one search turn, and where it came from.

    Prefers a sampled one from notebook 05's rollout, which rolls out with the trained policy
    (recomputed when missing: with `policy` — a `helpers.course.policies.Policy` — or else the base
    model), on the running example when it searched there; when the policy never searched, falls
    back to a teacher-forced trajectory of the running example's two hops.
    """
    values = values or budgets()
    kept = recall("search_trajectory")
    if kept is not None:
        return kept
    sampled = recall("rollout_05")
    if sampled is None:
        sampler, tokenizer = (None, None) if policy is None else (policy.sampler, policy.tokenizer)
        sampled = list(run_rollout(rollout_examples(values["questions"]), values, sampler=sampler, tokenizer=tokenizer))
        remember("rollout_05", sampled)
        remember("rollout_05_policy", "base" if policy is None else policy.name)
    searched = [t for t in sampled if len(t.turns) >= 2 and t.searches]
    searched.sort(key=lambda t: t.example.id != RUNNING_EXAMPLE.id)  # the running example first
    if searched:
        found = (searched[0], "sampled")
    else:
        found = (forced_trajectory(RUNNING_EXAMPLE, QUERIES, ANSWER), "teacher-forced")
    remember("search_trajectory", found)
    return found
