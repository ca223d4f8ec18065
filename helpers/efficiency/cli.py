"""The command line: python -m helpers.efficiency compare | budget | report."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from helpers import config as course_config
from helpers import presets
from helpers.data import load_examples
from helpers.efficiency.report import write_report
from helpers.efficiency.rewards import WEIGHTS, EfficiencyConfig
from helpers.efficiency.training import COMPARISON
from helpers.engine import connect
from helpers.rollout import RolloutConfig
from helpers.runs import add_config_arguments, config_from_args, updated, write_json
from helpers.search import create_search_client
from helpers.tracking import DEFAULT_TRACKER, TRACKERS, open_tracker
from helpers.train import TrainConfig

SWEEP_ROLLOUT = updated(RolloutConfig(), presets.SWEEP_ROLLOUT)  # the sweep's own rollout


def sampling_client_for(service: Any, model: str, checkpoint: str | None) -> Any:
    """A sampler for the base model (checkpoint None), a sampler export, or a save_state path."""
    if not checkpoint:
        return service.create_sampling_client(base_model=model)
    try:
        return service.create_sampling_client(base_model=model, model_path=checkpoint)
    except Exception:  # a training state the service will not sample from directly
        return service.create_training_client_from_state(checkpoint).save_weights_and_get_sampling_client()


def main(argv: Sequence[str] | None = None) -> Any:
    """python -m helpers.efficiency compare | budget | report  (see --help of each)."""
    # `package.<name>`: looked up on helpers.efficiency, so tests can patch eff.<name> as before
    from helpers import efficiency as package

    parser = argparse.ArgumentParser(prog="python -m helpers.efficiency")
    sub = parser.add_subparsers(dest="command", required=True)
    compare = sub.add_parser("compare", help="GRPO with the plain and with the gated reward")
    add_config_arguments(compare, TrainConfig, updated(TrainConfig(), presets.EFFICIENCY_COMPARE))
    compare.add_argument("--rewards", default="exact_match,gated")
    compare.add_argument("--length-reference", default="group", choices=("group", "initial"))
    for f in WEIGHTS:
        compare.add_argument("--" + f.replace("_", "-"), dest=f, type=float, default=getattr(COMPARISON, f))
    budget = sub.add_parser("budget", help="budget-forced evaluation, b = 0 .. 10")
    budget.add_argument("--model", default=None)
    budget.add_argument("--policy", action="append", default=[],
                        help="NAME=CHECKPOINT (sampler weights or save_state path); NAME= for the base")
    budget.add_argument("--budgets", default=",".join(map(str, presets.SWEEP_BUDGETS)))
    budget.add_argument("--split", default="test")
    budget.add_argument("--limit", type=int, default=50)
    add_config_arguments(budget, RolloutConfig, SWEEP_ROLLOUT, prefix="rollout.")
    budget.add_argument("--out", default="results/efficiency/budget_sweep.json")
    budget.add_argument("--tracker", default=DEFAULT_TRACKER, choices=TRACKERS,
                        help="also send each policy's curve (x axis: the budget) to a tracker")
    report = sub.add_parser("report", help="plots and README.md of a recorded compare/budget folder")
    report.add_argument("--dir", default="results/efficiency")
    args = parser.parse_args(argv)

    if args.command == "report":
        path = write_report(args.dir)
        print(f"report: {path}")
        return path

    if args.command == "compare":
        train_config = config_from_args(TrainConfig, args)
        eff_config = EfficiencyConfig(**{f: getattr(args, f) for f in WEIGHTS})
        summaries = {}
        for reward in args.rewards.split(","):
            cfg = dataclasses.replace(train_config, out=str(Path(train_config.out) / reward))
            summaries[reward] = package.train_with_reward(cfg, reward, efficiency=eff_config,
                                                  length_reference=args.length_reference)
        print(json.dumps(summaries, indent=2, default=str))
        return summaries

    model = args.model or course_config.default_model()
    service = connect()
    examples = load_examples(args.split, limit=args.limit)
    search_client = create_search_client("local")
    base = config_from_args(RolloutConfig, args, SWEEP_ROLLOUT, prefix="rollout.")
    budgets = [int(b) for b in args.budgets.split(",")]
    # one command per policy is fine: points already in --out for other policies are kept
    points = package.load_budget_points(args.out)
    for spec in args.policy or ["base="]:
        name, _, checkpoint = spec.partition("=")
        sampler = package.sampling_client_for(service, model, checkpoint or None)
        tokenizer = sampler.get_tokenizer()
        mine = package.budget_sweep(sampler, tokenizer, search_client, examples, budgets, policy=name, config=base)
        points = [p for p in points if p.policy != name] + mine
        with open_tracker(args.tracker, f"budget/{name or 'base'}", vars(args)) as tracker:
            for point in mine:
                tracker.log({"step": point.budget, **{f"budget/{key}": value for key, value in point.as_dict().items()
                                                      if key not in ("policy", "budget")}})
        write_json(args.out, [p.as_dict() for p in points])
    print(json.dumps([p.as_dict() for p in points], indent=1))
    return points
