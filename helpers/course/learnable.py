"""Questions a policy answers sometimes but not always: where a short GRPO run can learn.

A group whose rewards are all equal gives no gradient (notebook 08). A run on a CPU has few
steps, so it should spend them on questions where the starting policy's rate of right answers is
neither 0 nor 1. That rate is measured, not guessed: `record_answer_rates` evaluates the starting
policy several times per question (sampling at temperature 1, one seed per pass) on the *train*
split, and `learnable_examples` keeps the questions whose rate lies inside a band.

    python -m helpers.course.learnable record --samples 8 --limit 96 --skip 800   # once, where the policy runs fast
    python -m helpers.course.learnable show                              # the questions a CPU run would use

The run starts from the SFT adapter of the recorded GPU run (`SFT_START`); the selection is read
from `ANSWER_RATES`. Both are paths under `results/`, so a learner's machine only reads them.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from helpers.data import load_examples
from helpers.eval import EvalConfig, evaluate
from helpers.course.policies import adapter_dir, run_dir
from helpers.presets import CPU_RUN
from helpers.runs import read_jsonl, write_jsonl
from helpers.train import TrainConfig

SFT_START = adapter_dir("sft")  # the SFT adapter a CPU GRPO run starts from (the recorded run's)
ANSWER_RATES = run_dir() / "answer_rates" / "train.jsonl"  # sampled answers of that policy, train split
BAND = (0.25, 0.75)  # answer rates that leave room to rise and to fall


def answer_rates(rows: Iterable[dict[str, Any]]) -> dict[str, tuple[float, int]]:
    """Per question id: (share of rows with exact_match, number of rows)."""
    hits: dict[str, list[bool]] = defaultdict(list)
    for row in rows:
        hits[str(row["id"])].append(bool(row.get("exact_match")))
    return {qid: (sum(seen) / len(seen), len(seen)) for qid, seen in hits.items()}


def learnable_ids(rates: dict[str, tuple[float, int]], band: tuple[float, float] = BAND, limit: int = 8,
                  min_samples: int = 2) -> list[str]:
    """Ids whose rate lies in `band` (inclusive), measured at least `min_samples` times; closest to
    one half first (the largest reward variance in a group), then by id for a fixed order."""
    low, high = band
    if not 0.0 <= low <= high <= 1.0:
        raise ValueError(f"band must satisfy 0 <= low <= high <= 1, got {band}")
    kept = [(abs(rate - 0.5), qid) for qid, (rate, n) in rates.items() if n >= min_samples and low <= rate <= high]
    return [qid for _, qid in sorted(kept)][:limit]


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no recorded answers at {path}: record them with `python -m helpers.course.learnable record`")
    return read_jsonl(path)


def learnable_examples(path: str | Path = ANSWER_RATES, split: str = "train", limit: int = 8,
                       band: tuple[float, float] = BAND) -> list[Any]:
    """The SearchExamples of the selected questions, in selection order."""
    ids = learnable_ids(answer_rates(read_rows(path)), band, limit)
    by_id = {example.id: example for example in load_examples(split)}
    missing = [qid for qid in ids if qid not in by_id]
    if missing:
        raise ValueError(f"{len(missing)} recorded question ids are not in the {split} split (e.g. {missing[0]!r}); "
                         "the recording was made on another data pack")
    return [by_id[qid] for qid in ids]


def cpu_run_config(rollout: Any, out: str | Path, **overrides: Any) -> TrainConfig:
    """The TrainConfig of notebook 09's run that learns on a CPU: `helpers.presets.CPU_RUN`'s sizes
    from the recorded SFT adapter, under the rollout budgets `rollout` (a RolloutConfig),
    stopping cleanly after `CPU_RUN["minutes"]`."""
    rollout = dataclasses.replace(rollout, group_size=CPU_RUN["group_size"])
    settings = dict(init_from=str(SFT_START), max_steps=CPU_RUN["steps"], max_minutes=CPU_RUN["minutes"],
                    questions_per_batch=CPU_RUN["questions_per_step"], learning_rate=CPU_RUN["learning_rate"],
                    rollout=rollout, save_every=0, out=str(out), resume=False)
    return TrainConfig(**{**settings, **overrides})


def record_answer_rates(model_path: str | Path = SFT_START, out: str | Path = ANSWER_RATES, samples: int = 4,
                        limit: int = 64, split: str = "train", skip: int = 0, **overrides: Any) -> Path:
    """Evaluate the policy `samples` times per question (temperature 1, seeds 0..samples-1) and
    write every row to `out` (JSONL)."""
    if samples < 2:
        raise ValueError("an answer rate needs at least 2 samples per question")
    examples = load_examples(split, limit=limit, skip=skip)
    rows: list[dict[str, Any]] = []
    for seed in range(samples):
        config = EvalConfig(model_path=str(model_path), split=split, rollout={"temperature": 1.0, "seed": seed},
                            label=f"answer-rate-{seed}", **overrides)
        rows += evaluate(config, examples=examples)
    return write_jsonl(out, rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m helpers.course.learnable", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    record = commands.add_parser("record", help="sample the starting policy's answers on the train split")
    record.add_argument("--model-path", default=str(SFT_START))
    record.add_argument("--out", default=str(ANSWER_RATES))
    record.add_argument("--samples", type=int, default=4)
    record.add_argument("--limit", type=int, default=64)
    record.add_argument("--skip", type=int, default=0)
    show = commands.add_parser("show", help="the questions a CPU run would learn on")
    show.add_argument("--path", default=str(ANSWER_RATES))
    show.add_argument("--limit", type=int, default=8)
    args = parser.parse_args(argv)
    if args.command == "record":
        path = record_answer_rates(args.model_path, args.out, args.samples, args.limit, skip=args.skip)
        print(f"wrote {path}")
        return
    rates = answer_rates(read_rows(args.path))
    for qid in learnable_ids(rates, limit=args.limit):
        rate, n = rates[qid]
        print(f"{qid}\t{rate:.2f} of {n}")


if __name__ == "__main__":
    main()
