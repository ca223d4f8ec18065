"""Sweep of notebook 09's CPU run, made on a GPU in fp32 (how a CPU computes): which learning rate
and questions per step make a 6-step GRPO run from the recorded SFT adapter visibly learn.

    COURSE_DTYPE=float32 COURSE_ENGINE_COMPILE=0 python results/h200_search/cpu_run/sweep.py rates SEED OUT.jsonl
    COURSE_DTYPE=float32 COURSE_ENGINE_COMPILE=0 python results/h200_search/cpu_run/sweep.py run LR Q SEED 'RATES*.jsonl' OUT STEPS

`rates`: the SFT adapter's answers to train questions 801-896 (the GRPO part), one sample each at
temperature 1 with seed SEED (8 seeds in parallel give `helpers.course.learnable.ANSWER_RATES`).
`run`: GRPO on the 4 most learnable questions (`CPU_RUN`'s sizes, learning rate LR, Q questions
per step, STEPS steps), then 8 fresh samples per question from the trained policy. One JSON line
per run: the answer rate of each question before (from the rates) and after, and the step rewards.
"""

from __future__ import annotations

import glob
import json
import sys
import time

from helpers.data import load_examples
from helpers.eval import EvalConfig, evaluate
from helpers.course.learnable import CPU_RUN, SFT_START, answer_rates, cpu_run_config, learnable_ids
from helpers.rollout import RolloutConfig
from helpers.runs import read_jsonl, write_jsonl
from helpers.train import open_session, train
from helpers.presets import PROFILES

ROLLOUT = RolloutConfig(**{k: v for k, v in PROFILES["full"].items() if k in RolloutConfig.__dataclass_fields__})


def rates(seed: str, out: str) -> None:
    examples = load_examples("train", limit=96, skip=800)
    config = EvalConfig(model_path=str(SFT_START), split="train", rollout={"temperature": 1.0, "seed": int(seed)},
                        label=f"answer-rate-{seed}")
    write_jsonl(out, evaluate(config, examples=examples))


def run(lr: str, q: str, seed: str, rates_glob: str, out: str, steps: str) -> None:
    recorded = [row for path in sorted(glob.glob(rates_glob)) for row in read_jsonl(path)]
    before = answer_rates(recorded)
    ids = learnable_ids(before, limit=CPU_RUN["questions"])
    by_id = {example.id: example for example in load_examples("train")}
    examples = [by_id[qid] for qid in ids]
    config = cpu_run_config(ROLLOUT, out, learning_rate=float(lr), questions_per_batch=int(q), seed=int(seed),
                            max_steps=int(steps), max_minutes=None)
    session = open_session(config, examples=examples)
    started = time.time()
    train(config, session=session)
    sampler = session.training_client.save_weights_and_get_sampling_client()
    after_rows = []
    for k in range(8):
        check = EvalConfig(split="train", rollout={"temperature": 1.0, "seed": 100 + k}, label="after")
        after_rows += evaluate(check, examples=examples, sampling_client=sampler)
    after = answer_rates(after_rows)
    print(json.dumps({"learning_rate": float(lr), "questions_per_step": int(q), "steps": int(steps), "seed": int(seed),
                      "questions": ids, "answer_rate_before": [before[i][0] for i in ids],
                      "answer_rate_after": [after[i][0] for i in ids],
                      "step_rewards": [h.get("reward_mean") for h in session.history],
                      "seconds": round(time.time() - started, 1)}))


if __name__ == "__main__":
    {"rates": rates, "run": run}[sys.argv[1]](*sys.argv[2:])
