"""`python -m helpers.question_filter`: judge a preset's GRPO pool with the policy its runs start from."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Sequence
from pathlib import Path

from helpers.question_filter import __doc__ as PACKAGE_DOC
from helpers.question_filter import judge, write


def main(argv: Sequence[str] | None = None) -> dict:
    from helpers.engine import connect
    from helpers.experiment import PRESETS, make_plan
    from helpers.search import create_search_client
    from helpers.session import question_pool

    parser = argparse.ArgumentParser(prog="python -m helpers.question_filter", description=PACKAGE_DOC.split("\n")[0])
    parser.add_argument("--preset", default="h200", choices=sorted(PRESETS))
    parser.add_argument("--init-from", default=None, help="the policy the runs start from (a checkpoint or an "
                                                          "exported adapter; default: the base model)")
    parser.add_argument("--out", required=True, help="the filter's JSON file")
    parser.add_argument("--stage", default=None, help="a staged recipe's GRPO stage whose reward and mix to use")
    parser.add_argument("--limit", type=int, default=None, help="judge only the first N questions of the split "
                                                                 "(and of the synthetic split, if the run draws it)")
    parser.add_argument("--batch", type=int, default=64, help="questions rolled out at once")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE")
    args = parser.parse_args(argv)
    plan = make_plan(args.preset, str(Path(args.out).parent), None, args.overrides)  # paths only: nothing written
    config = plan.stages[args.stage] if args.stage else plan.grpo
    config = dataclasses.replace(config, question_filter=None)
    service = connect(config.backend)
    if args.init_from:
        start = service.create_training_client_from_state(args.init_from)
    else:  # a fresh LoRA adds zero: the base model's policy
        start = service.create_lora_training_client(base_model=config.resolved_model(), rank=config.lora_rank,
                                                    seed=config.seed)
    sampler = start.save_weights_and_get_sampling_client()
    examples = question_pool(config, args.limit)
    started = time.perf_counter()
    verdicts = judge(sampler, start.get_tokenizer(), create_search_client(config.search_backend), examples, config,
                     batch=args.batch)
    seconds = time.perf_counter() - started
    path = write(args.out, verdicts, config.rollout.group_size, policy=args.init_from or config.resolved_model(), reward=config.reward,
                 reward_options=config.reward_options, seconds=round(seconds, 1))
    by_source: dict[str, list[int]] = {}
    for ex in examples:
        kept_judged = by_source.setdefault(getattr(ex, "data_source", "unknown"), [0, 0])
        kept_judged[0] += verdicts[ex.id]["signal"]
        kept_judged[1] += 1
    summary = {"out": str(path), "judged": len(verdicts), "kept": sum(v["signal"] for v in verdicts.values()),
               "by_source": {name: f"{kept} of {judged}" for name, (kept, judged) in sorted(by_source.items())},
               "seconds": round(seconds, 1)}
    print(json.dumps(summary, indent=1), flush=True)
    return summary


if __name__ == "__main__":
    main()
