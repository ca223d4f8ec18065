"""Inspection widgets for the course notebooks.

Every view works on plain data (dicts and lists), so it can be tested without a model;
`helpers.widgets.adapters` turns rollout objects (Trajectory, Datum rows, metrics) into
that data. Model and search text is untrusted: the JavaScript views only ever set
`textContent`, and the HTML views pass every string through `html.escape`.
"""

from helpers.widgets.adapters import tree_data, token_rows
from helpers.widgets.bars import AdvantageBars, MicroBatchBlocks, advantage_bars_html, micro_batch_html
from helpers.widgets.budgets import budgets, budget_sliders
from helpers.widgets.dashboard import TrainingDashboard
from helpers.widgets.playground import RolloutPlayground
from helpers.widgets.tokens import TokenStrip, token_strip_html
from helpers.widgets.tree import TrajectoryTree, tree_html

__all__ = [
    "AdvantageBars",
    "MicroBatchBlocks",
    "RolloutPlayground",
    "TokenStrip",
    "TrainingDashboard",
    "TrajectoryTree",
    "advantage_bars_html",
    "budget_sliders",
    "budgets",
    "micro_batch_html",
    "token_rows",
    "token_strip_html",
    "tree_data",
    "tree_html",
]
