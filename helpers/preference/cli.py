"""The command line: python -m helpers.preference train | evaluate | rubrics.

    python -m helpers.preference train --out runs/h200/preference            # symmetrised, the profile's backbone
    python -m helpers.preference train --no-symmetrise --out runs/pref-one-order
    python -m helpers.preference evaluate --from runs/h200/preference
    python -m helpers.preference rubrics --policy runs/h200/sft/final --out runs/h200/rubrics.json

`train` fits a model on rule-labelled pairs (`pairs.make_pairs` on the train split, the preferred
reply shown first in `--shown-first` of them), saves it in `--out` (safetensors + json: the folder
`make_reward("gated", preference=<folder>)` and `--reward-options preference=<folder>` read, best
kept beside the run's adapters) and evaluates it; `evaluate` reads a saved one again. Both print
accuracy and position bias on the held-out pairs and on ties, and write `evaluation.json` in the
folder. The pairs are rebuilt from the numbers `train` saved there, so `evaluate` reads the same
held-out pairs. `rubrics` runs the pass@k filter on the rubric set with a policy's samples (each
prompt asked as the agent's question, k rollouts), prints what it keeps and drops, and writes the
kept prompts where `TrainConfig.rubric_prompts` (`--rubric-prompts`) reads them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

from helpers import config as course_config
from helpers.preference.pairs import make_pairs, make_ties, split_pairs
from helpers.preference.train import Preference, PreferenceConfig
from helpers.rollout import RolloutConfig
from helpers.rubrics import RUBRIC_SET_SIZE, pass_at_k_filter, policy_replies, rubric_set, write_filter
from helpers.runs import add_config_arguments, config_from_args, write_json

EVALUATION_FILE = "evaluation.json"


@dataclasses.dataclass(frozen=True)
class PairData:
    """Which pairs a model trains and is evaluated on (the sizes of benchmarks/bench_preference.py)."""

    examples: int = 60  # questions of the train split: 2/3 train, 1/3 held out
    ties: int = 12  # questions of the validation split, two plain replies each
    shown_first: float = 0.8  # share of training pairs with the preferred reply first (> 0.5: a slot to learn)
    held_out: float = 1 / 3
    data_seed: int = 0  # the pairs' draw and split (the model's own seed is PreferenceConfig.seed)


def pair_sets(data: PairData) -> dict[str, list]:
    """The training pairs, the held-out pairs (other questions) and the ties of `data`."""
    from helpers.data import load_examples

    pairs = make_pairs(load_examples("train", limit=data.examples), seed=data.data_seed, shown_first=data.shown_first)
    train, held_out = split_pairs(pairs, held_out=data.held_out, seed=data.data_seed)
    ties = make_ties(load_examples("validation", limit=data.ties), seed=data.data_seed + 1)
    return {"train": train, "held_out": held_out, "ties": ties}


def report(preference: Preference, sets: dict[str, list], data: PairData) -> dict:
    """Accuracy and both biases on the held-out pairs and the ties, as `evaluation.json` keeps them."""
    return {"model": preference.config.resolved_model(), "symmetrise": preference.config.symmetrise,
            "data": dataclasses.asdict(data), "train_pairs": len(sets["train"]),
            "held_out": preference.evaluate(sets["held_out"]), "ties": preference.evaluate(sets["ties"])}


def summary_line(result: dict) -> str:
    held, ties = result["held_out"], result["ties"]
    kind = "symmetrised" if result["symmetrise"] else "one order"
    return (f"{kind} ({result['model']}): held-out accuracy {held['accuracy']:.3f} on {held['pairs']} pairs "
            f"(one order read {held['accuracy_one_order']:.3f}) | |P̄(a,b) + P̄(b,a) - 1| max {held['p_bar_bias']:.1e} "
            f"| one-order reading's bias: held-out {held['position_bias']:+.3f}, ties {ties['position_bias']:+.3f}")


def filter_rubrics(args: argparse.Namespace) -> dict:
    """`rubrics`: k rollouts of the policy per prompt, the pass@k filter, its counts and kept prompts."""
    from helpers.efficiency.cli import sampling_client_for
    from helpers.engine import connect
    from helpers.search import create_search_client

    model = args.model or course_config.default_model()
    sampler = sampling_client_for(connect(), model, args.policy or None)
    rollout = dataclasses.replace(config_from_args(RolloutConfig, args, prefix="rollout."), group_size=args.k)
    prompts = rubric_set(args.limit, split=args.split)
    replies = policy_replies(sampler, sampler.get_tokenizer(), create_search_client("local"), prompts, rollout)
    report = pass_at_k_filter(prompts, lambda prompt, k: replies[prompt.id], k=args.k)
    out = write_filter(args.out or course_config.RUNS_DIR / "rubrics" / "pass_at_k.json", report, args.limit,
                       args.split, seed=0)
    counts = report.counts()
    print(f"pass@{args.k} on {counts['prompts']} rubric prompts ({args.policy or model}): kept {counts['kept']}, "
          f"dropped {counts['dropped: no sample passes']} that no sample passes and "
          f"{counts['dropped: every sample passes']} that every sample passes")
    print(f"kept prompts in {out}")
    return {"counts": counts, "out": str(out), "passes": report.passes}


def main(argv: Sequence[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m helpers.preference", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train on rule-labelled pairs, save, evaluate")
    add_config_arguments(train, PreferenceConfig)
    add_config_arguments(train, PairData)
    train.add_argument("--out", default=None, help="folder to save in (default: <runs>/preference/<model>)")
    evaluate = sub.add_parser("evaluate", help="evaluate a saved model on the pairs it was trained beside")
    evaluate.add_argument("--from", dest="folder", required=True)
    rubrics = sub.add_parser("rubrics", help="the pass@k filter on the rubric set, with a policy's samples")
    rubrics.add_argument("--model", default=None, help="base model (default: the profile's)")
    rubrics.add_argument("--policy", default="", help="checkpoint (sampler weights or save_state path); none: the base")
    rubrics.add_argument("--k", type=int, default=4)
    rubrics.add_argument("--limit", type=int, default=RUBRIC_SET_SIZE, help="prompts of the rubric set")
    rubrics.add_argument("--split", default="validation")
    add_config_arguments(rubrics, RolloutConfig, prefix="rollout.")
    rubrics.add_argument("--out", default=None, help="(default: <runs>/rubrics/pass_at_k.json)")
    args = parser.parse_args(argv)

    if args.command == "rubrics":
        return filter_rubrics(args)
    if args.command == "train":
        config = config_from_args(PreferenceConfig, args)
        data = config_from_args(PairData, args)
        folder = Path(args.out or course_config.RUNS_DIR / "preference" / config.resolved_model())
        sets = pair_sets(data)
        preference = Preference(config)
        preference.fit(sets["train"])
        preference.save(folder)
    else:
        folder = Path(args.folder)
        preference = Preference.load(folder)
        saved = folder / EVALUATION_FILE
        data = PairData(**json.loads(saved.read_text())["data"]) if saved.exists() else PairData()
        sets = pair_sets(data)
    result = report(preference, sets, data)
    write_json(folder / EVALUATION_FILE, result)
    print(summary_line(result))
    print(f"saved in {folder}")
    return result
