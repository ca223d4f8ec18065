"""Which questions each GRPO step sees: the split's order, balanced sources, the synthetic share.

Every order here is a pure function of (step, seed), so a resumed run replays the same batches:
`batch_for_step` (a fresh seeded permutation per pass, optionally an equal share per data
source), `step_batch` (that order with the synthetic share, and the rubric prompts' share, mixed in) and `extra_questions` (the
questions dynamic sampling may add to a step).

The synthetic share: Perplexity's post reweights its data components (90/10) so that one does not dominate the
updates; here the knob is ``share``, the fraction of each batch drawn from the synthetic split.
Each pool cycles through its own seeded permutation, one per pass, and a batch is a pure
function of (step, seed): a resumed run replays the same batches.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from typing import Any

SHARE = 0.0  # off unless a recipe asks for it


def synthetic_count(size: int, share: float) -> int:
    """How many of `size` questions are synthetic (rounded; at least 1 when share > 0)."""
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"synthetic share must be within [0, 1], got {share}")
    if share == 0.0:
        return 0
    return min(size, max(1, round(size * share)))


def cycle(pool: Sequence, step: int, count: int, seed: int) -> list:
    """`count` items of `pool` for one step; each pass over the pool is a fresh seeded permutation."""
    if count and not pool:
        raise ValueError("no questions to draw from: is the split prepared?")
    orders: dict[int, list[int]] = {}
    out = []
    for position in range(step * count, step * count + count):
        epoch, offset = divmod(position, len(pool))
        if epoch not in orders:
            orders[epoch] = list(range(len(pool)))
            random.Random(seed * 1_000_003 + epoch).shuffle(orders[epoch])
        out.append(pool[orders[epoch][offset]])
    return out


def batch_with_share(examples: Sequence, synthetic: Sequence, step: int, size: int, seed: int,
                     share: float = SHARE, order: Callable[..., list] | None = None) -> list:
    """One step's questions: `size - k` from `examples` (through `order`, e.g.
    ``batch_for_step(examples, step, n, seed)``), then `k = synthetic_count(size, share)` synthetic."""
    k = synthetic_count(size, share)
    rest = size - k
    base = (order or cycle)(examples, step, rest, seed) if rest else []
    return list(base) + cycle(synthetic, step, k, seed + 104_729)


def batch_for_step(examples: Sequence, step: int, size: int, seed: int, balance_sources: bool = False) -> list:
    """The questions of one step, a pure function of (step, seed): resuming replays the same order.

    Each pass over the data is a fresh seeded permutation, so a long run sees every question
    once per epoch. With `balance_sources` every data_source gets an equal share of each batch
    (the first sources in name order take the remainder), each cycling through its own questions.
    """
    if not examples:
        raise ValueError("no training examples: run helpers.data.prepare_data() or check the split name")
    if balance_sources:
        by_source: dict[str, list] = {}
        for example in examples:
            by_source.setdefault(getattr(example, "data_source", "unknown"), []).append(example)
        names = sorted(by_source)
        if len(names) > 1:
            if size < len(names):
                raise ValueError(f"balance_sources needs questions_per_batch >= {len(names)} (one per source {names})")
            share, extra = divmod(size, len(names))
            batch = []
            for i, name in enumerate(names):
                batch += batch_for_step(by_source[name], step, share + (i < extra), seed + 7919 * (i + 1))
            return batch
    return cycle(examples, step, size, seed)


def step_batch(examples: Sequence, synthetic: Sequence, step: int, config: Any, rubric: Sequence = ()) -> list:
    """The questions of `step` under a training config: the split's order, the synthetic share mixed
    in, and the rubric share (`config.rubric_share`, the post's 90/10 verifiable : rubric) on top:
    the same mixing, once more, with the verifiable batch as the base."""
    order = functools.partial(batch_for_step, balance_sources=config.balance_sources)

    def verifiable(pool: Sequence, step: int, size: int, seed: int) -> list:
        return batch_with_share(pool, synthetic, step, size, seed, config.synthetic_share, order=order)

    return batch_with_share(examples, rubric, step, config.questions_per_batch, config.seed, config.rubric_share,
                            order=verifiable)


def extra_questions(examples: Sequence, step: int, config: Any, synthetic: Sequence = ()) -> list:
    """The questions dynamic sampling may add to `step`, in the order it draws them.

    Chunks of `questions_per_batch`, one per extra batch the step may roll out (the first round's
    `dynamic_sampling_draw - 1`, then one per further round), each mixed like a step's own batch
    (the synthetic share included), so the groups a step keeps come from the recipe's mix whichever
    round drew them. A second seeded order over the same examples, a pure function of (seed, step)
    like `batch_for_step`, so a resumed run draws the same extra questions.
    """
    if not config.dynamic_sampling:
        return []
    chunks = (config.dynamic_sampling_draw - 1) + (config.dynamic_sampling_rounds - 1)
    order = functools.partial(batch_for_step, balance_sources=config.balance_sources)
    out: list = []
    for chunk in range(chunks):  # chunk c of step s is slice s * chunks + c of one seeded order
        out += batch_with_share(examples, synthetic, step * chunks + chunk, config.questions_per_batch,
                                config.seed + 1_000_033, config.synthetic_share if synthetic else 0.0, order=order)
    return out
