"""Efficiency-aware rewards from Perplexity's post on post-training search agents.

The plain Search-R1 reward only asks "was the answer right?". A policy trained on it has no reason
to stop searching or to stop talking. This module adds the gated reward

    R(tau) = r_base(tau) * s(tau) - pen_eff(tau),      pen_eff = lam_tool * pen_tool + lam_len * pen_len

- r_base in {0, 1}: exact match (the gate: no preference credit without a correct answer);
- s in [0, 1]: a pluggable preference score (default 1, i.e. no preference model; `helpers.preference`
  trains one, and `GatedReward(preference=...)` takes it);
- pen_tool: a group-anchored tool-call penalty (calls beyond what the group's winners needed);
- pen_len: a length penalty against reference lengths (verbose winners, terse losers).

Design decisions Perplexity's post leaves open (each one is tested in tests/test_efficiency.py):

1. The tool-call baseline b_g ~ Unif(min, ceil(mean)) over the winners' effective calls is an
   *integer* uniform, both ends included. Calls are counts, so an integer baseline keeps
   Delta = max(0, c - b_g) a whole number of surplus calls.
2. A group with no winner has no efficient solution to anchor on, so no surplus is measured:
   Delta = 0 for everyone and pen_tool = beta_lose for every member. The penalty is then the same
   constant for the whole group and cancels in the group-mean advantage: a group where nobody
   found the answer is never pushed towards searching less (that would suppress exploration).
3. The hard length cap compares against the group's reference lengths: a trajectory longer than
   every reference generation of its group gets pen_len = 1.
4. When no reference lengths are given, the group's own lengths are the reference (a cheap
   self-anchored fallback; the hard cap then never fires).
5. Effective calls are clipped at 0 (c - failed >= 0 even if a count was recorded oddly).

Also here: budget-forced evaluation (`budget_sweep`, the tool-efficiency curve), the gated reward as
a reward function of the training step (`GatedReward`, registered as "gated": `TrainConfig(reward=
"gated")`), a comparison of both rewards through that one step (`train_with_reward`), views of the
penalties and of the budget curve, and a command line:

    python -m helpers.efficiency compare ...   # GRPO with exact match and with the gated reward
    python -m helpers.efficiency budget ...    # accuracy and tokens vs search budget b = 0..10

Modules: rewards (the gated reward and its penalties), budget (budget-forced evaluation),
training (GRPO runs with either reward), widgets (the views), report, cli; the exercises on them are
`helpers.checkers.efficiency`.
Every name is reachable here: use `from helpers import efficiency as eff; eff.<name>`.
"""

from __future__ import annotations

from helpers.efficiency.budget import (BUDGETS, BudgetPoint, budget_config, budget_point, budget_sweep,
                                       load_budget_points, plot_tool_efficiency, trajectory_cost)
from helpers.efficiency.rewards import (COMPONENTS, WEIGHTS, EfficiencyBreakdown, EfficiencyConfig, GatedReward,
                                        PreferenceFn, baseline_range, effective_calls, failed_calls_of,
                                        gated_reward, gated_reward_fn, generated_length, group_numbers,
                                        group_rng, length_baselines, length_penalties, sample_tool_baseline,
                                        score_group, tool_penalties)
from helpers.efficiency.widgets import breakdown_html, budget_curve_widget, penalty_explorer

# The comparison runs and the command line train through `helpers.train`, which names its reward
# through `helpers.reward_functions`, which imports the gated reward from this package: so they
# load on first use, and importing the reward never imports training.
_TRAINING = ("COMPARISON", "REWARDS", "ReferenceLengths", "comparison_reward", "load_metrics",
             "plot_reward_comparison", "train_with_reward")
_CLI = ("main", "sampling_client_for")


def __getattr__(name: str):
    if name in _TRAINING:
        from helpers.efficiency import training

        return getattr(training, name)
    if name in _CLI:
        from helpers.efficiency import cli

        return getattr(cli, name)
    raise AttributeError(f"module 'helpers.efficiency' has no attribute {name!r}")
