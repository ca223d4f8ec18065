"""The multi-turn rollout loop: sample -> parse -> search -> append observation -> repeat.

One question gives one *group*: its first turn is a single request with
``num_samples=group_size`` (a shared root), every sequence becomes its own branch, and later turns
sample each live branch with ``num_samples=1``. All sampling requests of one turn run
concurrently, all searches of one turn run in a thread pool. ``rollout_groups`` returns the
finished groups unscored; ``rollout_batch`` scores them with the exact-match reward and assigns the
group advantages once every trajectory of the batch has finished.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from helpers.advantages import assign_advantages
from helpers.data import SearchExample
from helpers.protocol import build_messages, build_prompt, stop_sequences, stop_token_ids, template_family
from helpers.reward import exact_match_reward, score
from helpers.rollout.turns import PendingSearch, SampleRequest, consume_assistant, finish, make_request, resolve_searches
from helpers.trajectory import (RolloutBatch, RolloutConfig, RolloutGroups, RolloutStats, Trajectory,
                                groups_of)


async def sample_requests_async(
    sampling_client: Any, requests: list[SampleRequest], config: RolloutConfig, tokenizer: Any, on_done=None,
    stops: list[str] | None = None,
) -> list[Any]:
    """All requests of a turn at once; results in request order.

    `stops`: the tokenizer's end-of-turn strings (`stop_sequences`), when the caller read them once
    (`_Turns` does, for the whole rollout); None reads them from the tokenizer here.
    """
    import pytrio as trio

    stops = stop_sequences(tokenizer) if stops is None else stops

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


def assign_group_advantages(trajectories: Sequence[Trajectory]) -> int:
    """Happy-LLM §8.3.5's name: ``helpers.advantages.assign_advantages`` on a flat list, grouped by question.

    advantage = reward - mean reward of its question's group, exactly 0 when all rewards are
    equal; returns the number of such degenerate groups.
    """
    return assign_advantages(groups_of(trajectories))


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
    ``helpers.reward.score(groups, reward_fn)``, then ``helpers.advantages.assign_advantages(groups)``.
    """
    config = config or RolloutConfig()
    if config.group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {config.group_size}")
    started = time.perf_counter()
    examples = [_as_example(ex) for ex in examples]
    turns = _Turns(sampling_client, tokenizer, search_client, config, RolloutStats(questions=len(examples)), progress)
    # A root's first prompt is rendered with its messages, as an observation renders the next one
    # with the messages it appends; every branch copies both (`make_request` renders only a
    # trajectory that has no prompt yet, one made by hand).
    roots = []
    for qi, ex in enumerate(examples):
        messages = build_messages(ex.question, config.search_budget, turns.family)
        roots.append(Trajectory(example=ex, group_index=0, question_index=qi, messages=messages,
                                next_prompt_tokens=build_prompt(tokenizer, messages)))
    overall = _progress(len(roots) * config.group_size, "rollout (finished trajectories)", progress, leave=True)
    with _LoopThread() as runner:
        trajectories = turns.first(runner, roots)
        overall.update(sum(t.done for t in trajectories))
        turn = 1
        while any(not t.done for t in trajectories):
            before = sum(t.done for t in trajectories)
            turns.later(runner, trajectories, turn)
            overall.update(sum(t.done for t in trajectories) - before)
            turn += 1
    overall.close()

    for trajectory in trajectories:
        if not trajectory.end_reason:  # never sampled: the prompt alone was over budget
            finish(trajectory, "", "context_budget")
    _fill_stats(turns.stats, trajectories)
    turns.stats.total_seconds = time.perf_counter() - started
    groups = RolloutGroups(groups_of(trajectories))
    groups.stats = turns.stats
    return groups


class _Turns:
    """The turns of one rollout: every live branch sampled together, then every search together."""

    def __init__(self, sampling_client, tokenizer, search_client, config: RolloutConfig, stats: RolloutStats,
                 progress: bool):
        self.sampling_client, self.tokenizer, self.search_client = sampling_client, tokenizer, search_client
        self.config, self.stats, self.progress = config, stats, progress
        # One tokenizer for the whole rollout: what the protocol says of it (the chat template's call
        # format, the end-of-turn markers) is read here once, not again for every turn of every branch.
        self.family = template_family(tokenizer)
        self.stops = stop_sequences(tokenizer)
        self.stop_ids = stop_token_ids(tokenizer)

    def sample(self, runner: _LoopThread, requests: list[SampleRequest], turn: int) -> list[Any]:
        if not requests:
            return []
        bar = _progress(len(requests), f"turn {turn + 1}: sampling", self.progress)
        t0 = time.perf_counter()
        responses = runner.run(sample_requests_async(self.sampling_client, requests, self.config, self.tokenizer,
                                                     on_done=lambda: bar.update(1), stops=self.stops))
        self.stats.sampling_seconds += time.perf_counter() - t0
        self.stats.sample_requests += len(requests)
        self.stats.turns += 1
        bar.close()
        return responses

    def search(self, pending: list[PendingSearch], turn: int) -> None:
        if not pending:
            return
        bar = _progress(len(pending), f"turn {turn + 1}: searching", self.progress)
        t0 = time.perf_counter()
        resolve_searches(pending, self.search_client, self.tokenizer, self.config, on_done=lambda: bar.update(1))
        self.stats.search_seconds += time.perf_counter() - t0
        bar.close()

    def first(self, runner: _LoopThread, roots: list[Trajectory]) -> list[Trajectory]:
        """One request of ``group_size`` samples per question: the shared root splits into branches."""
        config, tokenizer = self.config, self.tokenizer
        requests = [
            r for qi, root in enumerate(roots)
            if (r := make_request(tokenizer, root, qi, config.group_size, config.seed + qi, config))
        ]
        responses = self.sample(runner, requests, 0)
        by_root = {r.trajectory_index: (r, resp) for r, resp in zip(requests, responses, strict=True)}
        trajectories: list[Trajectory] = []
        pending: list[PendingSearch] = []
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
                    found = consume_assistant(branch, request.prompt_tokens, response.sequences[g], tokenizer, config,
                                              self.stop_ids)
                    if found is not None:
                        pending.append(found)
        self.search(pending, 0)
        return trajectories

    def later(self, runner: _LoopThread, trajectories: list[Trajectory], turn: int) -> None:
        """One sample for every live branch, then the searches they ask for."""
        config, tokenizer = self.config, self.tokenizer
        requests = [
            r for index, trajectory in enumerate(trajectories) if not trajectory.done
            and (r := make_request(tokenizer, trajectory, index, 1,
                                   config.seed + index + len(trajectory.turns) * 10_000, config))
        ]
        pending = []
        for request, response in zip(requests, self.sample(runner, requests, turn), strict=True):
            if len(response.sequences) != 1:
                raise ValueError(f"a later turn asked for 1 sample and got {len(response.sequences)}")
            trajectory = trajectories[request.trajectory_index]
            found = consume_assistant(trajectory, request.prompt_tokens, response.sequences[0], tokenizer, config,
                                      self.stop_ids)
            if found is not None:
                pending.append(found)
        self.search(pending, turn)


def _fill_stats(stats: RolloutStats, trajectories: list[Trajectory]) -> None:
    stats.trajectories = len(trajectories)
    stats.sampled_tokens = sum(t.sampled_tokens for t in trajectories)
    stats.search_calls = sum(len(t.searches) for t in trajectories)
    stats.failed_searches = sum(t.failed_searches for t in trajectories)
    stats.truncated_observations = sum(t.truncated_observations for t in trajectories)
    stats.end_reasons = dict(Counter(t.end_reason for t in trajectories))

