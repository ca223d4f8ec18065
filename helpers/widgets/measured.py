"""What the recorded policies do on a CPU, measured once, so that the live widgets offer questions
where their lesson shows on a laptop.

A budget on searches only teaches something where the policy makes the searches it refuses. The
recorded GPU evaluation says which questions those were on a GPU, at its budgets; a learner's CPU
runs another numeric path and the playground's smaller budgets, so the candidates are run on a CPU
and what each policy did is kept in `measured_path()` (rows of `measure`, under `results/`):

    python -m helpers.widgets.measured record          # about an hour per setting on 2 shared cores
    python -m helpers.widgets.measured show

The settings (`plan`):

- "playground": the playground's budgets (the full profile's), one greedy trajectory per question:
  where the policy that searches again (`SEARCHES_AGAIN`) makes a second search,
  the question is one of the playground's "twice" prompts (`helpers.widgets.live.budget_questions`);
- "sweep b=<b>": notebook 12's budget-forced protocol (`helpers.efficiency.budget_config`, its
  temperature and turn length) at b = 1 and 3: `helpers.widgets.live.sweep_questions` picks the
  questions where the learner's own sweep shows the shape of the recorded curve.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any, Sequence

from helpers.presets import MEASURED_PLAYGROUND, MEASURED_SWEEP
from helpers import config
from helpers.data import SearchExample, load_examples
from helpers.course.policies import SEARCHES_AGAIN, TRAINED_POLICY, load_policy
from helpers.runs import append_jsonl, read_jsonl
from helpers.widgets.budgets import budgets


def measured_path() -> Path:
    """Where the measured rows are kept (under the results folder, so a learner's machine only reads them)."""
    return config.RESULTS_DIR / "cpu_measured" / "rows.jsonl"


# HotpotQA test questions where the policy that searches again (`SEARCHES_AGAIN`) searched twice and
# answered right in its recorded GPU evaluation (results/h200_again/eval): bridge questions, whose second
# query is the entity that links the two hops, and comparisons, whose second query is one of the two.
CANDIDATES = (
    "5a80b3a9554299485f5986cc",  # Tysons Galleria is located in what county?
    "5a8c5569554299240d9c2126",  # Are Daryl Hall and Gerry Marsden both musicians?
    "5a866c04554299211dda2b25",  # Are Pterostyrax and Dregea both native to Asia?
    "5a7e5ec25542991319bc947a",  # Which tennis player is younger, John Newcombe or Květa Peschke?
    "5adeffa85542992d7e9f926f",  # What genre of music was played by both Tappi Tíkarrass and INXS?
    "5a7625e8554299109176e66a",  # In which year was the King who made the 1925 Birthday Honours born?
    "5a80ae105542992bc0c4a7a2",  # What occupation is shared by both Marge Piercy and Richard Aldington?
    "5a83880e554299123d8c214e",  # Suicide's 1977 released album features a song based on what brand's comic …
    "5ab9374b554299131ca422c6",  # Which man who presented the Australia 2022 FIFA World Cup bid was born on …
    "5a8739a05542994775f607ab",  # What is the birthplace of the Senator who represents the first of 62 districts …
    "5ae63dad55429929b0807afe",  # When was the British author who wrote the novel on which "Here We Go Round …
    "5ae7a8175542993210983ed8",  # Which other Mexican Formula One race car driver has held the podium besides …
)
SWEEP_BUDGETS = MEASURED_SWEEP["budgets"]


def playground_config(values: dict[str, Any] | None = None) -> Any:
    """The playground's budgets, one greedy trajectory (what the "twice" prompts are measured with)."""
    from helpers.widgets.course import rollout_config

    return rollout_config(values or budgets("full"), **MEASURED_PLAYGROUND)


def sweep_config(budget: int, values: dict[str, Any] | None = None) -> Any:
    """Notebook 12's sweep at budget b: its turn length and temperature, the budget stated and enforced."""
    from helpers.efficiency import budget_config
    from helpers.widgets.course import rollout_config

    values = values or budgets("full")
    return budget_config(budget, rollout_config(values, temperature=MEASURED_SWEEP["temperature"],
                                                max_assistant_tokens=values["sweep_assistant_tokens"]))


def row_of(trajectory: Any, policy: str, setting: str, seconds: float) -> dict[str, Any]:
    example = trajectory.example
    return {"id": example.id, "question": example.question, "answers": list(example.answers),
            "data_source": example.data_source, "policy": policy, "setting": setting,
            "search_calls": trajectory.search_calls, "queries": [s.query for s in trajectory.searches],
            "answer": trajectory.answer or "", "exact_match": bool(trajectory.exact_match),
            "reward": float(trajectory.reward), "end_reason": trajectory.end_reason,
            "model": config.default_model(), "device": str(config.device()), "seconds": round(seconds, 1)}


def measure(policy: str, examples: Sequence[SearchExample], rollout: Any, setting: str) -> list[dict[str, Any]]:
    """One rollout of every example with `policy` under `rollout`, as rows."""
    from helpers.rollout import rollout_batch
    from helpers.widgets.course import search_client

    loaded = load_policy(policy)
    search = search_client("local")
    wanted = budgets("full")["search_topk"]
    if search.topk != wanted:
        raise ValueError(f"the local search client returns {search.topk} passages a search, the playground {wanted}")
    started = time.perf_counter()
    batch = rollout_batch(loaded.sampler, loaded.tokenizer, search, list(examples), rollout, progress=True)
    seconds = time.perf_counter() - started
    return [row_of(t, policy, setting, seconds) for t in batch]


def candidates(ids: Sequence[str] = CANDIDATES) -> list[SearchExample]:
    by_id = {example.id: example for example in load_examples("test")}
    missing = [qid for qid in ids if qid not in by_id]
    if missing:
        raise ValueError(f"{len(missing)} candidate ids are not in the test split (e.g. {missing[0]!r})")
    return [by_id[qid] for qid in ids]


def plan() -> list[tuple[str, str, Any]]:
    """(policy, setting, rollout config) of every measurement, in the order they run."""
    steps = [(SEARCHES_AGAIN, "playground", playground_config())]
    steps += [(policy, f"sweep b={b}", sweep_config(b)) for b in SWEEP_BUDGETS for policy in (SEARCHES_AGAIN, TRAINED_POLICY)]
    return steps


def record(path: Path | None = None, ids: Sequence[str] = CANDIDATES, settings: Sequence[str] | None = None) -> None:
    """Measure the candidates `ids` in `settings` (all by default); each finished setting is
    appended at once, and a (policy, setting) already measured is not measured again."""
    path = path or measured_path()
    examples = candidates(ids)
    done = {(row["policy"], row["setting"]) for row in read_jsonl(path)} if path.is_file() else set()
    path.parent.mkdir(parents=True, exist_ok=True)
    for policy, setting, rollout in plan():
        if (policy, setting) in done or (settings is not None and setting not in settings):
            continue
        rows = measure(policy, examples, rollout, setting)
        for row in rows:
            append_jsonl(path, row)
        print(f"{policy} {setting}: {sum(r['exact_match'] for r in rows)}/{len(rows)} right, "
              f"searches {[r['search_calls'] for r in rows]}, {rows[0]['seconds']} s", flush=True)


def measured_rows(path: Path | None = None) -> list[dict[str, Any]]:
    path = path or measured_path()
    return read_jsonl(path) if path.is_file() else []


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m helpers.widgets.measured", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["record", "show"])
    parser.add_argument("--ids", nargs="*", default=None, help="question ids (default: CANDIDATES)")
    parser.add_argument("--settings", nargs="*", default=None, help='e.g. playground "sweep b=1" (default: all)')
    args = parser.parse_args(argv)
    if args.command == "record":
        record(ids=args.ids or CANDIDATES, settings=args.settings)
    for row in measured_rows():
        print(f"{row['policy']:9} {row['setting']:11} {row['search_calls']} {row['exact_match']!s:5} "
              f"{row['end_reason']:14} {row['answer'][:30]!r:32} {row['question'][:60]}")


if __name__ == "__main__":
    main()

