"""The rollout: a policy, a search tool and a question become a group of finished trajectories.

The stages, each in its module:

- `helpers.trajectory`: the records a rollout fills (`RolloutConfig`, `Trajectory`, `Group`, ...);
- `continuity`: the next prompt extends the sampled tokens (`build_next_prompt`, `stitch`);
- `observation`: a search result fitted into the tool turn (`fit_tool_content`, the only fitter);
- `splice`: a new turn's tokens found by encoding the turn alone where the tokenizer cuts there;
- `turns`: one turn of one branch (`consume_assistant`, `finish_search`, `make_request`);
- `loop`: every branch of every group, turn after turn (`rollout_groups`, `rollout_batch`);
- `tokens`: the trajectory token by token, as the trainer sees it (`token_table`).

Every public name is importable from here: ``from helpers.rollout import rollout_batch``.
"""

from helpers.rollout.continuity import (Stitched, TemplateRewroteHistory, assistant_closing_tokens, build_next_prompt,
                                        check_continuity, stitch, suffix_prefix_overlap)
from helpers.rollout.loop import assign_group_advantages, rollout_batch, rollout_groups, sample_requests_async
from helpers.rollout.observation import (FittedObservation, TemplateAltersToolContent, ToolTurnFrame, fit_observation,
                                         fit_tool_content, observe_search, search_call_message, tool_turn_frame)
from helpers.rollout.tokens import token_table, trajectory_tokens
from helpers.rollout.turns import (PendingSearch, SampleRequest, consume_assistant, finish_search, make_request,
                                   read_sequence, resolve_searches)
from helpers.trajectory import (AssistantTurn, Group, RolloutBatch, RolloutConfig, RolloutGroups, RolloutStats,
                                SearchRecord, Trajectory, groups_of)

__all__ = [
    "AssistantTurn", "FittedObservation", "Group", "PendingSearch", "RolloutBatch", "RolloutConfig", "RolloutGroups",
    "RolloutStats", "SampleRequest", "SearchRecord", "Stitched", "TemplateAltersToolContent", "TemplateRewroteHistory",
    "ToolTurnFrame", "Trajectory", "assign_group_advantages", "assistant_closing_tokens", "build_next_prompt",
    "check_continuity", "consume_assistant", "finish_search", "fit_observation", "fit_tool_content", "groups_of",
    "make_request", "observe_search", "read_sequence", "resolve_searches", "rollout_batch", "rollout_groups", "sample_requests_async",
    "search_call_message", "stitch", "suffix_prefix_overlap", "token_table", "tool_turn_frame", "trajectory_tokens",
]
