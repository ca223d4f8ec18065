"""Write-it-yourself checkers: run a learner's version of a course function against the
project's own cases (unit-test examples, property tests, worked numbers) and print what passes.

    from helpers.checkers import check_parse_assistant
    check_parse_assistant(my_parse_assistant)   # ✓/✗ per case, the first failure, then a verdict

Each checker returns a Verdict (True when every case holds) and never raises on a wrong answer.
"""

from helpers.checkers.efficiency import check_tool_penalty
from helpers.checkers.preference import check_gate, check_symmetrised_loss
from helpers.checkers.loss import check_importance_sampling_loss
from helpers.checkers.one_search import check_one_search_enough
from helpers.checkers.own_reward import check_rewrite_bonus
from helpers.checkers.protocol import check_parse_assistant
from helpers.checkers.reading import check_constant_reading, check_finding_and_reading
from helpers.checkers.search import check_blocks_that_fit, check_new_gold_per_search
from helpers.checkers.seeds import check_added_second_searches, check_search_again_rule
from helpers.checkers.reward import check_normalize_answer, check_score_answer
from helpers.checkers.rollout import check_consume_assistant
from helpers.checkers.train import check_assign_group_advantages, check_build_datum, check_weight_micro_batch

__all__ = [
    "check_added_second_searches",
    "check_assign_group_advantages",
    "check_blocks_that_fit",
    "check_build_datum",
    "check_consume_assistant",
    "check_constant_reading",
    "check_finding_and_reading",
    "check_gate",
    "check_importance_sampling_loss",
    "check_new_gold_per_search",
    "check_normalize_answer",
    "check_one_search_enough",
    "check_parse_assistant",
    "check_rewrite_bonus",
    "check_score_answer",
    "check_search_again_rule",
    "check_symmetrised_loss",
    "check_tool_penalty",
    "check_weight_micro_batch",
]
