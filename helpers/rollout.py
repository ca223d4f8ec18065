"""The multi-turn rollout state machine (owner: rollout issue #4).

Types first so train/eval/widgets can build on them while the state machine is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from helpers.data import SearchExample


@dataclass
class RolloutConfig:
    group_size: int = 8
    max_search_calls: int = 4
    max_assistant_turns: int = 6
    max_assistant_tokens: int = 1024
    max_tool_response_tokens: int = 1024
    max_trajectory_tokens: int = 8192
    search_concurrency: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0


@dataclass
class AssistantTurn:
    prompt_tokens: list[int]
    completion_tokens: list[int]
    logprobs: list[float]
    text: str


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
    reward: float = -0.1
    advantage: float = 0.0
    valid_format: bool = False
    exact_match: bool = False
    done: bool = False
