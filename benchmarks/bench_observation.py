"""Building observations: fitting search results into the tool turn, old algorithm against new.

    nice -n 19 .venv/bin/python benchmarks/bench_observation.py                 # fitting only, seconds
    nice -n 19 .venv/bin/python benchmarks/bench_observation.py --grpo          # + a full-profile GRPO step each way
    nice -n 19 .venv/bin/python benchmarks/bench_observation.py --batch 256     # a search phase: turns alone vs whole text

The fitting part searches the first questions of the test split on the local BM25 index and fits
each result, as a first and as a third search of a trajectory, under several per-call budgets:
with the rollout's `fit_tool_content` (the template rendered once per call, each item counted
once) and with the reference that renders the whole conversation for every count of items
(`tests/test_observation.py`), in the same process, checking they give the same tokens.

`--batch N` times what a search phase spends fitting: N searches (question k of the test split as
search 1, 2 or 3 of its trajectory, in turn) fitted with `fit_tool_content` under the default
budgets, once encoding each new turn alone (the rollout's path) and once through a tokenizer
wrapper that `helpers.rollout.splice.encode_after` does not trust, so every encode is of the whole
conversation (the path taken before turns were encoded alone); outputs checked equal first.

`--grpo` then takes notebook 09's step (2 questions × group 4, the full profile's budgets,
qwen2.5-0.5b from the recorded SFT adapter when there is one, 2 torch threads) once with each
fitting, reloading the same start weights before each, and prints each step's times and the
seconds spent fitting inside it. Wall and CPU seconds are printed side by side with the load
average: on a shared machine CPU seconds are the comparable figure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # this checkout's helpers; the reference lives with its test

from test_observation import reference_fit_tool_content  # noqa: E402

import helpers.rollout as rollout  # noqa: E402
from helpers.protocol import build_messages, build_prompt, stop_token_ids, tool_message  # noqa: E402
from helpers.rollout import RolloutConfig, build_next_prompt, fit_tool_content  # noqa: E402
from helpers.search.format import format_results  # noqa: E402
from cpu_clock import cpu_seconds, load_average  # noqa: E402


def _tool_call(query: str) -> str:
    return f'<tool_call>\n{{"name": "search", "arguments": {{"query": "{query}"}}}}\n</tool_call>'


def turns_for(tokenizer, question: str, result, searches_before: int):
    """One fitting's arguments: ``searches_before`` earlier searches of the same result in the history."""
    encode = lambda text: list(tokenizer.encode(text, add_special_tokens=False))  # noqa: E731
    stop = stop_token_ids(tokenizer)[:1]
    messages = build_messages(question)
    prompt = build_prompt(tokenizer, messages)
    for turn in range(searches_before):
        text = _tool_call(f"{question} {turn}")
        tool = tool_message(f"c{turn}", format_results(result))
        prompt = build_next_prompt(tokenizer, messages, text, prompt, encode(text) + stop, tool)
        messages = [*messages, {"role": "assistant", "content": text}, tool]
    text = _tool_call(question)
    return messages, text, prompt, encode(text) + stop


def bench_fitting(args) -> None:
    from helpers.data import load_examples
    from helpers.models import load_tokenizer
    from helpers.search import create_search_client

    tokenizer = load_tokenizer(args.model)
    search = create_search_client("local", topk=args.topk)
    search.search("warm up the index")
    examples = load_examples("test", limit=args.questions)
    cases = []
    for example in examples:
        result = search.search(example.question)
        for before in (0, 2):
            turn = turns_for(tokenizer, example.question, result, before)
            for budget in args.budgets:
                cases.append((turn, result, RolloutConfig(max_tool_response_tokens=budget)))
    kept = []
    for fast_case in cases:  # same tokens, or the figures mean nothing
        new = fit_tool_content(tokenizer, *fast_case[0], "c", fast_case[1], fast_case[2])
        old = reference_fit_tool_content(tokenizer, *fast_case[0], "c", fast_case[1], fast_case[2])
        if new != old:
            raise SystemExit("the two fittings disagree: fix that before timing them")
        kept.append(0 if new is None else new.items_kept)
    prompt_sizes = [len(c[0][2]) for c in cases]
    print(f"{len(cases)} fittings: {args.questions} test questions searched on the local index (top {args.topk}), "
          f"each fitted as a first and a third search under budgets {args.budgets}; "
          f"prompt {min(prompt_sizes)}-{max(prompt_sizes)} tokens, items kept {dict(sorted(_count(kept).items()))}")
    print(f"tokenizer {args.model}; load average {load_average()}")

    figures = {}
    for name, fit in (("old", reference_fit_tool_content), ("new", fit_tool_content)):
        walls, cpus = [], []
        for _ in range(args.repeats):
            wall, cpu = time.perf_counter(), cpu_seconds()
            for turn, result, config in cases:
                fit(tokenizer, *turn, "c", result, config)
            walls.append(time.perf_counter() - wall)
            cpus.append(cpu_seconds() - cpu)
        figures[name] = (statistics.median(walls), statistics.median(cpus))
        per_call = 1000 * figures[name][0] / len(cases)
        print(f"{name}: median of {args.repeats} passes {figures[name][0]:.3f} s wall, {figures[name][1]:.3f} s CPU "
              f"({per_call:.2f} ms wall per fitting)")
    print(f"old / new: {figures['old'][0] / figures['new'][0]:.1f}x wall, "
          f"{figures['old'][1] / figures['new'][1]:.1f}x CPU; load average {load_average()}")


class WholeText:
    """The tokenizer behind a wrapper: `encode_after` refuses it, so every observation is found by
    encoding the whole conversation, as before turns were encoded alone."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def __len__(self):
        return len(self.inner)


def bench_batch(args) -> None:
    from helpers.data import load_examples
    from helpers.models import load_tokenizer
    from helpers.search import create_search_client

    tokenizer = load_tokenizer(args.model)
    search = create_search_client("local", topk=args.topk)
    search.search("warm up the index")
    examples = load_examples("test", limit=args.batch)
    config = RolloutConfig()
    cases = []
    for index, example in enumerate(examples):
        result = search.search(example.question)
        cases.append((turns_for(tokenizer, example.question, result, index % 3), result))
    for turn, result in cases:  # same tokens, or the figures mean nothing
        if fit_tool_content(tokenizer, *turn, "c", result, config) != fit_tool_content(WholeText(tokenizer), *turn, "c", result, config):
            raise SystemExit("encoding turns alone changed a fitting: fix that before timing it")
    prompt_sizes = [len(turn[2]) for turn, _ in cases]
    print(f"{len(cases)} fittings (searches 1-3 of {len(cases)} test questions, top {args.topk}, "
          f"budgets {config.max_tool_response_tokens}/{config.max_trajectory_tokens}); prompts {min(prompt_sizes)}-"
          f"{max(prompt_sizes)} tokens, mean {statistics.mean(prompt_sizes):.0f}; tokenizer {args.model}; "
          f"load average {load_average()}")
    figures, by_search = {}, {}
    for _ in range(args.repeats):  # interleaved, so that load on the shared cores falls on both alike
        for name, used in (("whole text", WholeText(tokenizer)), ("turn alone", tokenizer)):
            wall, cpu, per_search = time.perf_counter(), cpu_seconds(), [0.0, 0.0, 0.0]
            for index, (turn, result) in enumerate(cases):
                started = cpu_seconds()
                fit_tool_content(used, *turn, "c", result, config)
                per_search[index % 3] += cpu_seconds() - started
            figures.setdefault(name, []).append((time.perf_counter() - wall, cpu_seconds() - cpu))
            by_search.setdefault(name, []).append(per_search)
    for name, runs in figures.items():
        wall, cpu = statistics.median(w for w, _ in runs), statistics.median(c for _, c in runs)
        figures[name] = (wall, cpu)
        counts = [len(cases[k::3]) for k in range(3)]
        searches = ", ".join(f"search {k + 1} {1000 * statistics.median(run[k] for run in by_search[name]) / counts[k]:.2f}"
                             for k in range(3) if counts[k])
        print(f"{name}: median of {args.repeats} passes {wall:.3f} s wall, {cpu:.3f} s CPU "
              f"({1000 * cpu / len(cases):.2f} CPU-ms per fitting; {searches} CPU-ms)")
    old, new = figures["whole text"], figures["turn alone"]
    print(f"whole text / turn alone: {old[0] / new[0]:.1f}x wall, {old[1] / new[1]:.1f}x CPU; "
          f"load average {load_average()}")


def _count(values):
    out = {}
    for value in values:
        out[value] = out.get(value, 0) + 1
    return out


def bench_grpo(args) -> None:
    import os

    os.environ.setdefault("COURSE_PROFILE", "full")
    import torch

    torch.set_num_threads(args.threads)
    from helpers.course.learnable import SFT_START
    from helpers.train import TrainConfig, open_session, step_questions, train_step
    from helpers.widgets.budgets import budgets
    from helpers.widgets.course import rollout_config

    values = budgets("full")
    start = str(SFT_START) if Path(SFT_START).exists() else None
    out = tempfile.mkdtemp(prefix="bench-observation-")
    config = TrainConfig(model=args.model, init_from=start, max_steps=1, questions_per_batch=values["questions"],
                         rollout=rollout_config(values, group_size=values["group_size"]),
                         save_every=0, out=out, resume=False)
    print(f"GRPO step of notebook 09: {values['questions']} questions x group {values['group_size']}, {config.resolved_model()} "
          f"from {start or 'the base weights'}, {args.threads} torch threads")
    fitted = {"seconds": 0.0, "calls": 0}

    def timed(fit):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fit(*a, **k)
            finally:
                fitted["seconds"] += time.perf_counter() - t0
                fitted["calls"] += 1
        return wrapper

    tokens = {}
    for name in args.order:
        wall, cpu = time.perf_counter(), cpu_seconds()
        session = open_session(config)  # a new trainer each time: every step from the same weights
        batch = step_questions(session, 0)
        print(f"set-up {time.perf_counter() - wall:.1f} s wall, {cpu_seconds() - cpu:.1f} s CPU")
        rollout.turns.fit_tool_content = timed(reference_fit_tool_content if name == "old" else fit_tool_content)
        fitted.update(seconds=0.0, calls=0)
        wall, cpu = time.perf_counter(), cpu_seconds()
        metrics, groups = train_step(session.training_client, session.tokenizer, session.search_client, batch, config, 0)
        wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
        tokens.setdefault(name, []).append([t.turns[-1].prompt_tokens for g in groups for t in g.trajectories])
        del session, groups
        print(f"{name} fitting: step {wall:.1f} s wall, {cpu:.1f} s CPU (~{cpu / args.threads:.1f} s on {args.threads} "
              f"free cores); rollout {metrics['time_rollout']:.1f} s (sampling {metrics['time_sampling']:.1f}, "
              f"search phase {metrics['time_search']:.2f}), training {metrics['time_training']:.1f} s; "
              f"{fitted['calls']} fittings took {fitted['seconds']:.3f} s; search calls {metrics.get('search_calls_mean')}, "
              f"load average {load_average()}", flush=True)
    rollout.turns.fit_tool_content = fit_tool_content
    runs = [run for name in tokens for run in tokens[name]]
    print("every step sampled the same trajectories:", all(run == runs[0] for run in runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-0.5b")
    parser.add_argument("--questions", type=int, default=20)
    parser.add_argument("--topk", type=int, default=3)
    parser.add_argument("--budgets", type=int, nargs="+", default=[384, 768])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=0, help="time a search phase of this many fittings instead")
    parser.add_argument("--grpo", action="store_true", help="also a full-profile GRPO step with each fitting")
    parser.add_argument("--order", nargs="+", default=["old", "new"], choices=["old", "new"])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    sys.stdout.reconfigure(line_buffering=True)
    if args.batch:
        bench_batch(args)
        return
    bench_fitting(args)
    if args.grpo:
        bench_grpo(args)


if __name__ == "__main__":
    main()
