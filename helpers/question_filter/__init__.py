"""The pass@k filter on the training questions: keep the ones the starting policy gets right sometimes.

A GRPO group whose k rollouts all earn the same reward has zero advantage: its sampling, searching
and scoring buy no gradient. From the recorded SFT policy that is most groups (the step logs the
share as `degenerate_group_share`): NQ questions it always answers or never can, HotpotQA questions
beyond its reach. Perplexity's post filters its rubric prompts by pass@4 for this reason
(`helpers.rubrics.pass_at_k_filter`); the same filter on the verifiable questions, run once with the
policy a run starts from and the run's own reward, leaves a pool where most groups carry signal.

    python -m helpers.question_filter --preset h200 --init-from results/h200_search/sft_adapter \\
        --out runs/question_filter.json            # then: --set grpo.question_filter=runs/question_filter.json

The pool is the run's own (`helpers.session.question_pool`): its split's questions and, when it
mixes in the synthetic multi-hop split, that split's too. The file holds, per judged question id,
whether its group had signal and how many rollouts were exact matches. A run with `TrainConfig.question_filter` drops the
judged questions without signal and keeps every question the filter did not judge. The policy
improves during the run, so a question it never solved may become solvable: the filter is for the
run's first minutes, and a run longer than a pass over the pool should be filtered again from a
later checkpoint (measured on a GPU: a run on the 107 of 1,105 questions with signal had learned
them after about ten updates, and its groups agreed again).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm


def judge(sampling_client: Any, tokenizer: Any, search_client: Any, examples: Sequence[Any], config: Any,
          batch: int = 64, progress: bool = True) -> dict[str, dict]:
    """{question id: {"signal": the group's rewards differ, "passes": exact matches}} for every example,
    from `config.rollout.group_size` rollouts each, rewarded by the run's reward (`config`: a TrainConfig)."""
    from helpers.advantages import no_signal
    from helpers.reward import score
    from helpers.rollout import rollout_groups

    reward_fn = config.reward_fn()
    unbound = getattr(reward_fn, "unbound", lambda: [])()
    if unbound:
        raise ValueError(f"the {config.reward} reward's {', '.join(unbound)} need a training run's session; "
                         "filter with a reward that does not (e.g. --set grpo.reward=exact_match)")
    verdicts: dict[str, dict] = {}
    bar = tqdm(total=len(examples), desc="pass@k filter (questions)", disable=not progress)
    for start in range(0, len(examples), batch):
        chunk = list(examples[start:start + batch])
        groups = rollout_groups(sampling_client, tokenizer, search_client, chunk,
                                config.rollout_config(step=start // batch), progress=False)
        score(groups, reward_fn, sampling=(sampling_client, tokenizer))
        for example, group in zip(chunk, groups, strict=True):
            verdicts[example.id] = {"signal": not no_signal([t.reward for t in group.trajectories]),
                                    "passes": sum(bool(t.exact_match) for t in group.trajectories)}
        bar.update(len(chunk))
    bar.close()
    return verdicts


def write(path: str | Path, verdicts: dict[str, dict], k: int, **meta: Any) -> Path:
    """The filter's file: its verdicts, the kept ids and what made them (policy, reward, k)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    kept = [qid for qid, v in verdicts.items() if v["signal"]]
    path.write_text(json.dumps({"k": k, **meta, "judged": len(verdicts), "kept": len(kept),
                                "verdicts": verdicts}, indent=1))
    return path


def load(path: str | Path) -> dict[str, dict]:
    """The verdicts of a filter file, with a clear error for a missing or foreign file."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no question filter at {path}: make one with python -m helpers.question_filter")
    data = json.loads(path.read_text())
    if not isinstance(data, dict) or not isinstance(data.get("verdicts"), dict):
        raise ValueError(f"{path} is not a question filter (no 'verdicts'): make one with python -m helpers.question_filter")
    return data["verdicts"]


def apply(examples: Sequence[Any], verdicts: dict[str, dict]) -> list:
    """`examples` without the judged questions whose group had no signal (unjudged ones stay)."""
    return [ex for ex in examples if verdicts.get(ex.id, {}).get("signal", True)]
