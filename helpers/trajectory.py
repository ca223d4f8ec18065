"""The data of a rollout: its budgets, its turns, its trajectories and the groups GRPO compares.

Plain records and nothing else, so every stage above (the rollout, the reward, the advantages,
training, evaluation, the widgets) can read them without pulling in the loop that fills them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from helpers.data import SearchExample
from helpers.reward import FORMAT_PENALTY


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
        """All advantages zero: the group has no signal (`helpers.advantages.no_signal`), so no gradient."""
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

