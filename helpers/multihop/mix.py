"""The synthetic share of a GRPO batch: a fixed number of synthetic questions in every batch.

Perplexity's post reweights its data components (90/10) so that one does not dominate the
updates; here the knob is ``share``, the fraction of each batch drawn from the synthetic split.
Each pool cycles through its own seeded permutation, one per pass, and a batch is a pure
function of (step, seed): a resumed run replays the same batches.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

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
    """One step's questions: `size - k` from `examples` (through `order`, e.g. the trainer's own
    ``batch_for_step(examples, step, n, seed)``), then `k = synthetic_count(size, share)` synthetic."""
    k = synthetic_count(size, share)
    rest = size - k
    base = (order or cycle)(examples, step, rest, seed) if rest else []
    return list(base) + cycle(synthetic, step, k, seed + 104_729)
