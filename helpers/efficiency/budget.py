"""Budget-forced evaluation: the tool-efficiency curve (accuracy and cost vs search budget b)."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from helpers.metrics import batch_summary, trajectory_facts
from helpers.presets import SWEEP_BUDGETS as BUDGETS
from helpers.rollout import RolloutConfig, rollout_batch


@dataclass
class BudgetPoint:
    """One point of a tool-efficiency curve: a policy's score at one stated and enforced budget."""

    policy: str
    budget: int
    questions: int
    accuracy: float
    valid_format_rate: float
    search_calls_mean: float
    output_tokens_mean: float  # tokens the policy generated per question
    input_tokens_mean: float  # prompt tokens read per question, summed over turns (no prefix cache)
    tokens_per_question: float  # input + output: the cost proxy
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def trajectory_cost(trajectory: Any) -> tuple[int, int]:
    """(input, output) tokens of one trajectory as an uncached API would bill them."""
    return sum(len(t.prompt_tokens) for t in trajectory.turns), trajectory.sampled_tokens


def budget_point(policy: str, budget: int, trajectories: Sequence[Any], seconds: float = 0.0) -> BudgetPoint:
    batch = batch_summary([trajectory_facts(t) for t in trajectories])
    inputs = sum(trajectory_cost(t)[0] for t in trajectories) / max(len(trajectories), 1)
    return BudgetPoint(
        policy=policy,
        budget=int(budget),
        questions=len(trajectories),
        accuracy=batch["exact_match"],
        valid_format_rate=batch["valid_format_rate"],
        search_calls_mean=batch["search_calls_mean"],
        output_tokens_mean=batch["sampled_tokens_mean"],
        input_tokens_mean=inputs,
        tokens_per_question=inputs + batch["sampled_tokens_mean"],
        seconds=seconds,
    )


def budget_config(budget: int, base: Any = None) -> Any:
    """A rollout config whose system prompt states `budget` and whose rollout enforces it.

    One trajectory per question (group_size 1), temperature 0.6 as in Perplexity's post.
    """
    if budget < 0:
        raise ValueError(f"a search budget is a number of calls >= 0, got {budget}")
    base = base if base is not None else RolloutConfig(temperature=0.6)
    # every allowed call is its own turn, plus the turn that answers
    turns = max(base.max_assistant_turns, int(budget) + 1)
    return dataclasses.replace(base, group_size=1, max_search_calls=int(budget), search_budget=int(budget),
                               max_assistant_turns=turns)


def budget_sweep(
    sampling_client: Any,
    tokenizer: Any,
    search_client: Any,
    examples: Sequence[Any],
    budgets: Sequence[int] = BUDGETS,
    *,
    policy: str = "policy",
    config: Any = None,
    progress: bool = True,
) -> list[BudgetPoint]:
    """Budget-forced evaluation: the same questions at every budget b (stated and enforced).

    The budgets run concurrently (one thread each), so the engine decodes them in shared
    batches; each point's `seconds` is then its wall time within the concurrent sweep.
    """
    if not examples:
        raise ValueError("budget_sweep needs at least one example question")
    budgets = list(budgets)
    bar = tqdm(total=len(budgets), desc=f"budget sweep ({policy})", disable=not progress)

    def one(b: int) -> BudgetPoint:
        started = time.perf_counter()
        trajectories = rollout_batch(
            sampling_client, tokenizer, search_client, list(examples), budget_config(b, config),
            progress=False,
        )
        point = budget_point(policy, b, trajectories, time.perf_counter() - started)
        bar.update(1)
        return point

    with ThreadPoolExecutor(max_workers=max(1, min(len(budgets), 11))) as pool:
        points = list(pool.map(one, budgets))
    bar.close()
    return points


def plot_tool_efficiency(points: Sequence[BudgetPoint], axes=None):
    """Accuracy vs budget (the tool-efficiency curve) and tokens per question vs budget."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from helpers.analyse import COLUMN_INCHES
    from helpers.analyse import policy_colour

    if axes is None:
        _, axes = plt.subplots(1, 3, figsize=(COLUMN_INCHES, 3.2), layout="constrained")
    policies = list(dict.fromkeys(p.policy for p in points))
    for name in policies:
        mine = sorted((p for p in points if p.policy == name), key=lambda p: p.budget)
        xs = [p.budget for p in mine]
        colour = policy_colour(name)
        axes[0].plot(xs, [p.accuracy for p in mine], "o-", label=name, color=colour)
        axes[1].plot(xs, [p.search_calls_mean for p in mine], "o-", label=name, color=colour)
        axes[2].plot(xs, [p.tokens_per_question for p in mine], "o-", label=name, color=colour)
    for ax, title in zip(axes, ("exact match vs budget", "search calls used", "tokens per question")):
        ax.set_xlabel("search budget b")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # budgets are whole searches
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[1].plot([0, max(p.budget for p in points)], [0, max(p.budget for p in points)],
                 ":", color="grey", lw=0.8, label="b")
    axes[0].set_ylim(-0.02, 1.02)
    axes[0].legend(fontsize=8)
    return axes


def load_budget_points(path: str | Path) -> list[BudgetPoint]:
    path = Path(path)
    if not path.exists():
        return []
    return [BudgetPoint(**row) for row in json.loads(path.read_text())]
