"""The whole experiment in one entry point: SFT warm start -> GRPO -> evaluation table -> report.

    python -m helpers.experiment --preset h200 --out results/h200                 # everything
    python -m helpers.experiment --preset h200 --out results/h200 --stage sft     # ~2-3 min
    python -m helpers.experiment --preset h200 --out results/h200 --stage grpo --max-minutes 8
    python -m helpers.experiment --preset h200 --out results/h200 --stage grpo --max-minutes 8  # resumes
    python -m helpers.experiment --preset h200 --out results/h200 --stage eval --max-minutes 8
    python -m helpers.experiment --preset h200 --out results/h200 --stage report
    python -m helpers.experiment --preset cpu-dry --out runs/cpu-dry             # the short, honest CPU run

Every stage is resumable: SFT is reused once finished, GRPO continues from its last checkpoint
with the same data order, each evaluation is skipped once its JSONL exists, the report is
rebuilt from files. Heavy state (checkpoints with optimiser state) lives in `--work`
(default runs/<out name>, git-ignored); `--out` receives only what is worth committing:
metrics and eval JSONL, markdown tables, PNG plots, the final LoRA adapter (bf16 safetensors),
the configs and every command that ran. The presets are `helpers.presets.PRESETS`;
`--set grpo.learning_rate=1e-4` overrides one field (`helpers.runs.override`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Sequence

import torch
from safetensors.torch import load_file, save_file

from helpers import config as course_config
from helpers.analyse import (ALL, compare, first_last_quarter, first_search_hits, format_comparison,
                             format_search_learned, format_table, plot_eval, plot_training, read_jsonl,
                             save_figure, search_learned_figure, search_learned_table, search_share_figure,
                             second_search_table, summarise)
from helpers.data import load_examples
from helpers.engine.local import resolve_path
from helpers.engine.training import file_sha256
from helpers.eval import EvalConfig, evaluate
from helpers.presets import PRESETS
from helpers.runs import RunDir, override, updated
from helpers.search.local import LocalSearchClient, require_index
from helpers.sft import SFTConfig, run_sft, sft_examples
from helpers.tracking import TRACKERS, open_tracker
from helpers.train import TrainConfig, train

STAGES = ("sft", "grpo", "eval", "report")
ADAPTER_LIMIT_BYTES = 20 * 1024 * 1024

EVALS = (  # label, mode, which checkpoint
    ("base_closed_book", "closed_book", None),
    ("base_rag", "rag", None),
    ("base_agent", "agent", None),
    ("sft", "agent", "sft"),
    ("sft_grpo", "agent", "grpo"),
)


@dataclasses.dataclass
class Plan:
    out: Path
    work: Path
    sft: SFTConfig
    grpo: TrainConfig
    eval: EvalConfig
    grpo_minutes: float
    stages: dict[str, TrainConfig] = dataclasses.field(default_factory=dict)  # the recipe's GRPO stages, in order
    stage_minutes: dict[str, float] = dataclasses.field(default_factory=dict)


def _shared_questions(sft: SFTConfig, grpo: TrainConfig) -> int:
    """How many of GRPO's questions the SFT teacher scripts (0 when the data is not prepared yet)."""
    if grpo.split != sft.split:
        return 0

    try:
        scripted = {e.id for e in sft_examples(sft)}
        trained = load_examples(grpo.split, data_source=grpo.data_source, limit=grpo.limit, skip=grpo.skip)
    except (FileNotFoundError, OSError):
        return 0
    return sum(e.id in scripted for e in trained)


def make_plan(preset: str, out: str, work: str | None = None, overrides: Sequence[str] = (),
              tracker: str | None = None) -> Plan:
    """The three stages' configs: the preset, then `tracker` for every stage, then `overrides`."""
    if preset not in PRESETS:
        raise SystemExit(f"unknown preset {preset!r}; choose one of {sorted(PRESETS)}")
    spec = PRESETS[preset]
    out_path = Path(out)
    work_path = Path(work) if work else Path("runs") / out_path.name
    common = dict(spec["common"])
    sft = updated(SFTConfig(), {**common, **spec["sft"], "out": str(work_path / "sft")})
    grpo = updated(TrainConfig(), {**common, **spec["grpo"], "out": str(work_path / "grpo")})
    eval_common = {k: v for k, v in common.items() if k != "lora_rank"}
    evaluation = updated(EvalConfig(), {**eval_common, **spec["eval"]})
    grpo_minutes = float(spec["run"]["grpo_minutes"])
    configs = {"sft": sft, "grpo": grpo, "eval": evaluation}
    tracked = [f"{stage}.tracker={tracker}" for stage in ("sft", "grpo", "eval")] if tracker else []
    for item in [*tracked, *overrides]:
        key, _, value = item.partition("=")
        section, _, name = key.partition(".")
        if section in spec.get("stages", {}):
            continue  # a stage's own field: applied below
        if section not in configs or not name:
            raise SystemExit(f"--set takes sft.<field>=v, grpo.<field>=v or eval.<field>=v "
                             f"(grpo.rollout.<field>=v for a budget), got {item!r}")
        try:
            configs[section] = override(configs[section], name, value)
        except ValueError as error:
            raise SystemExit(f"--set: {error}") from None
    sft, grpo, evaluation = configs["sft"], configs["grpo"], configs["eval"]
    if grpo.lora_rank != sft.lora_rank or grpo.model != sft.model:
        raise SystemExit("GRPO starts from the SFT checkpoint: model and lora_rank must match")
    shared = _shared_questions(sft, grpo)
    if shared:
        print(f"warning: {shared} GRPO questions are SFT questions too (grpo.skip={grpo.skip}); "
              "set grpo.skip >= sft.limit (counted within grpo.data_source, if set) to keep them apart", flush=True)
    stages = {name: updated(grpo, {**fields, "out": str(work_path / f"grpo_{name}")})
              for name, fields in spec.get("stages", {}).items()}
    for item in overrides:  # --set grpo.<field> applies to every stage; --set <stage>.<field> to one
        key, _, value = item.partition("=")
        section, _, name = key.partition(".")
        if section in stages and name:
            try:
                stages[section] = override(stages[section], name, value)
            except ValueError as error:
                raise SystemExit(f"--set: {error}") from None
    return Plan(out_path, work_path, sft, grpo, evaluation, grpo_minutes, stages,
                dict(spec["run"].get("stage_minutes", {})))


def check_setup(plan: Plan, stages: Sequence[str]) -> None:
    """Stop before the first stage that searches when the set-up has not built the local index
    (every search would fail, and the run would read as a policy that never finds anything)."""
    backends = {"sft": plan.sft.search_backend, "grpo": plan.grpo.search_backend, "eval": plan.eval.search_backend}
    if any(backends[stage] == "local" for stage in stages if stage in backends):
        try:
            require_index()
        except course_config.SetupRequired as error:
            raise SystemExit(f"error: {error}") from None


# --------------------------------------------------------------------------- stages


def stage_sft(plan: Plan) -> dict:
    return dataclasses.asdict(run_sft(plan.sft))


def _sft_result(plan: Plan) -> dict:
    path = Path(plan.sft.out) / "result.json"
    if not path.exists():
        raise SystemExit(f"no finished SFT in {plan.sft.out}: run --stage sft first")
    return json.loads(path.read_text())


def stage_grpo(plan: Plan, max_minutes: float | None, on_step=None, only: Sequence[str] | None = None,
               init_from: str | None = None) -> dict:
    """GRPO from the SFT checkpoint, or the recipe's stages in order (each from the previous one's).

    `init_from` replaces the start of the first stage run (an exported adapter from an earlier run);
    a finished stage is skipped, an unfinished one resumes from its last checkpoint.
    """
    if not plan.stages:
        start = init_from or _sft_result(plan)["state_path"]
        config = dataclasses.replace(plan.grpo, init_from=start, max_minutes=max_minutes)
        return train(config, on_step=on_step or _print_step)
    unknown = sorted(set(only or ()) - set(plan.stages))
    if unknown:
        raise SystemExit(f"--grpo-stage: unknown stage(s) {unknown}; the recipe's stages are {list(plan.stages)}")
    summaries: dict[str, dict] = {}
    start = init_from
    for name, config in plan.stages.items():
        summary_path = Path(config.out) / "summary.json"
        if only and name not in only:
            if summary_path.exists():
                start = json.loads(summary_path.read_text()).get("checkpoint") or start
            continue
        if summary_path.exists() and json.loads(summary_path.read_text()).get("finished"):
            start = json.loads(summary_path.read_text()).get("checkpoint")
            continue
        start = start or _sft_result(plan)["state_path"]
        minutes = max_minutes if max_minutes is not None else plan.stage_minutes.get(name, plan.grpo_minutes)
        print(f"stage {name}: {config.reward} reward, synthetic share {config.synthetic_share}, from {start}, "
              f"{minutes} min", flush=True)
        summaries[name] = train(dataclasses.replace(config, init_from=start, max_minutes=minutes),
                                on_step=on_step or _print_step)
        start = summaries[name].get("checkpoint") or start
    return summaries


def _signed(value) -> str:
    return "  –  " if value is None else f"{value:+.2f}"


def _multi_search(metrics: dict, suffix: str = "") -> str:
    return f"≥2 {metrics['multi_search_share' + suffix]:.2f} (adv {_signed(metrics.get('multi_search_advantage_mean' + suffix))})"


def _update(metrics: dict) -> str:
    """What the step did to the weights: the sampler-trainer KL of an update, or why there was none."""
    if not metrics.get("micro_batches"):  # every group agreed: zero advantage everywhere, nothing to train
        return "no update (every group agreed)"
    if metrics.get("optim_skipped"):
        return "no update (non-finite gradient)"
    return f"KL {metrics.get('kl_sampler_trainer_k3', float('nan')):.4f}"


def _print_step(metrics: dict) -> None:
    sources = [key.split("/", 1)[1] for key in sorted(metrics) if key.startswith("multi_search_share/")]
    per_source = "".join(f"[{name} {_multi_search(metrics, '/' + name)}]  " for name in sources)
    print(
        f"step {metrics['step']:>3}  reward {metrics['reward_mean']:+.3f}  EM {metrics['exact_match']:.3f}  "
        f"format {metrics['valid_format_rate']:.2f}  searches {metrics['search_calls_mean']:.2f}  "
        f"{_multi_search(metrics)}  {per_source}degenerate {metrics['degenerate_group_share']:.2f}  "
        f"{_update(metrics)}  {metrics['time_step']:.1f}s",
        flush=True,
    )


def grpo_policy_path(plan: Plan) -> str | None:
    """The final sampler weights if GRPO finished, else its latest checkpoint (None: no GRPO yet).

    With a staged recipe: the last stage that has a checkpoint."""
    for config in reversed(list(plan.stages.values())):
        if RunDir(config.out).last_checkpoint():
            return _policy_of(config)
    return _policy_of(plan.grpo)


def _policy_of(config: TrainConfig) -> str | None:
    run = RunDir(config.out)
    summary_path = run.path / "summary.json"
    if summary_path.exists():
        summary = json.loads(summary_path.read_text())
        if summary.get("sampler_path"):
            return summary["sampler_path"]
    last = run.last_checkpoint()
    return last["path"] if last else None


def evaluations(plan: Plan) -> tuple[tuple[str, str, str | None], ...]:
    """`EVALS`, and for a staged recipe one `stage_<name>` evaluation per stage (that stage's policy),
    so the report can say which stage moved what; `sft_grpo` stays the last stage that has a checkpoint."""
    return EVALS + tuple((f"stage_{name}", "agent", name) for name in plan.stages)


def grpo_evaluations(plan: Plan) -> list[str]:
    """The evaluations of what GRPO trained: `sft_grpo`, and with a staged recipe each earlier stage's
    (the last stage's policy is `sft_grpo`'s)."""
    earlier = [label for label, _, source in evaluations(plan) if source in plan.stages][:-1]
    return ["sft_grpo", *earlier]


def stage_eval(plan: Plan, max_minutes: float | None, only: Sequence[str] | None = None,
               policy: str | None = None) -> dict[str, str]:
    """Each evaluation of `evaluations(plan)` not yet written (`only`: these labels). `policy` (an exported
    adapter or a checkpoint) is what `sft_grpo` evaluates in place of this run's GRPO result: a policy
    trained elsewhere, e.g. in an earlier GPU window, judged with this preset's budgets."""
    started = time.perf_counter()
    evals = evaluations(plan)
    labels = [label for label, _, _ in evals]
    unknown = sorted(set(only or ()) - set(labels))
    if unknown:
        raise SystemExit(f"--only: unknown evaluation(s) {unknown}; choose from {labels}")
    folder = plan.out / "eval"
    folder.mkdir(parents=True, exist_ok=True)
    done: dict[str, str] = {}
    durations: list[float] = []
    for label, mode, source in evals:
        if only and label not in only:
            continue
        path = folder / f"{label}.jsonl"
        if path.exists():
            done[label] = str(path)
            continue
        model_path = None
        if source == "sft":
            model_path = _sft_result(plan)["sampler_path"]
        elif source is not None:
            if source == "grpo":
                model_path = policy or grpo_policy_path(plan)
            else:
                model_path = _policy_of(plan.stages[source])
            if model_path is None:
                print(f"skipping {label}: no GRPO checkpoint yet", flush=True)
                continue
        if max_minutes is not None and durations:
            if (time.perf_counter() - started) + max(durations) > max_minutes * 60:
                print(f"time budget reached before {label}: run --stage eval again to continue", flush=True)
                break
        t0 = time.perf_counter()
        config = dataclasses.replace(plan.eval, mode=mode, label=label, model_path=model_path, output=str(path))
        rows = evaluate(config)
        durations.append(time.perf_counter() - t0)
        print(format_table({label: summarise(rows)}), flush=True)
        done[label] = str(path)
    return done


def export_adapter(policy_path: str, target: Path) -> Path:
    """The final LoRA as bf16 safetensors + meta.json: loads on any CPU with the local engine."""
    source = Path(policy_path)
    if str(policy_path).startswith("local://"):
        source = resolve_path(policy_path)
    target.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.to(torch.bfloat16).contiguous() for k, v in load_file(str(source / "adapter.safetensors")).items()}
    save_file(tensors, str(target / "adapter.safetensors"))
    meta = json.loads((source / "meta.json").read_text())
    meta["has_optimizer"] = False
    meta["exported_dtype"] = "bfloat16"
    meta["sha256"] = {"adapter.safetensors": file_sha256(target / "adapter.safetensors")}
    (target / "meta.json").write_text(json.dumps(meta, indent=1))
    size = (target / "adapter.safetensors").stat().st_size
    if size > ADAPTER_LIMIT_BYTES:
        print(f"warning: adapter is {size / 2**20:.1f} MiB, over the 20 MiB goal; lower lora_rank", flush=True)
    return target


def _agents(evals: dict[str, list[dict]], backend: str) -> dict[str, list[dict]]:
    """The evaluations whose searches were the policy's choice (RAG's one forced search is not),
    when their backend is the local index (deterministic, so a query can be re-run)."""
    if backend != "local":
        return {}
    return {label: rows for label, rows in evals.items()
            if any(r.get("queries") for r in rows) and all(r.get("mode", "agent") == "agent" for r in rows)}


def second_search_section(evals: dict[str, list[dict]], backend: str) -> list[str]:
    """Markdown: how often each agent searched again, split by whether its first search already
    held a gold answer."""
    agents = _agents(evals, backend)
    if not agents:
        return []
    client = LocalSearchClient()
    lines = ["### A second search where one is not enough?", "",
             "First query re-run on the local index: did its results hold a gold answer?", "",
             "| run | first search | n | searched again | EM strict | EM strict when searched again | when not |",
             "|---|---|---|---|---|---|---|"]

    def cell(value) -> str:
        return "–" if value is None else f"{value:.3f}"

    for label, rows in agents.items():
        for group, row in second_search_table(first_search_hits(rows, client)).items():
            lines.append(f"| {label} | {group} | {row['n']} | {row['searched_again']:.3f} | {row['em_strict']:.3f} | "
                         f"{cell(row['em_strict_if_again'])} | {cell(row['em_strict_if_once'])} |")
    return lines + [""]


def search_learned_section(evals: dict[str, list[dict]], backend: str, out: Path) -> list[str]:
    """Markdown + `search_learned.png`: each agent's evidence against searching the question itself."""
    agents = _agents(evals, backend)
    if not agents:
        return []
    client = LocalSearchClient()
    tables = {label: search_learned_table(rows, client) for label, rows in agents.items()}
    save_figure(search_learned_figure(tables), out / "search_learned.png")
    return ["### Was search learned?", "",
            "Evidence recall: a gold answer in the union of the observations read; question as query: the same "
            "test on the raw question's top 3 (local index). Rewritten: first query is not the question; their "
            "recall is the first search's against the question's, on the same questions.", "",
            format_search_learned(tables), "", "![was search learned](search_learned.png)", ""]


def _training_section(out: Path, folder: str, config: TrainConfig) -> list[str]:
    """Markdown + plot of one GRPO run (a stage of the recipe, or the one GRPO run)."""
    path = out / folder / "metrics.jsonl"
    metrics = read_jsonl(path) if path.exists() else []
    if not metrics:
        return []
    title = f"GRPO on {config.model}" if folder == "grpo" else f"GRPO stage {folder[5:]} ({config.reward}) on {config.model}"
    plot_training(metrics, out / f"{folder}_training.png", title=title)
    quarters = {key: first_last_quarter(metrics, key) for key in
                ("reward_mean", "exact_match", "valid_format_rate", "search_calls_mean", "multi_search_share",
                 "degenerate_group_share", "time_step")}
    heading = "## GRPO training" if folder == "grpo" else f"## GRPO stage `{folder[5:]}`: {config.reward} reward"
    return [
        heading, "",
        f"{len(metrics)} steps, {config.questions_per_batch} questions x group {config.rollout.group_size}, "
        f"synthetic share {config.synthetic_share}; first quarter vs last quarter of steps:", "",
        "| metric | first | last |", "|---|---|---|",
        *(f"| {key} | {first:.3f} | {last:.3f} |" for key, (first, last) in quarters.items()),
        "", f"![GRPO training]({folder}_training.png)", "",
    ]


def stage_report(plan: Plan) -> Path:
    out = plan.out
    out.mkdir(parents=True, exist_ok=True)
    sft_dir = Path(plan.sft.out)
    runs = {f"grpo_{name}": config for name, config in plan.stages.items()} or {"grpo": plan.grpo}
    # Same layout as the run folders, so notebooks find <x>/metrics.jsonl (sft/ and grpo/) and eval/*.jsonl.
    copies = [("sft", sft_dir, ("metrics.jsonl", "result.json", "config.json"))]
    copies += [(folder, Path(config.out), ("metrics.jsonl", "summary.json", "config.json")) for folder, config in runs.items()]
    for folder, source_dir, names in copies:
        for name in names:
            if (source_dir / name).exists():
                (out / folder).mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source_dir / name, out / folder / name)
    lines = [f"# Experiment `{out.name}`", ""]
    for folder, config in runs.items():
        lines += _training_section(out, folder, config)
    staged = {folder[5:]: read_jsonl(out / folder / "metrics.jsonl") for folder in runs
              if plan.stages and (out / folder / "metrics.jsonl").exists()}
    if staged:
        save_figure(search_share_figure(staged), out / "search_share.png")
        lines += ["## The second search over the stages", "", "![search share over updates](search_share.png)", ""]
    if (out / "sft" / "metrics.jsonl").exists():
        sft_rows = read_jsonl(out / "sft" / "metrics.jsonl")
        sft_result = json.loads((out / "sft" / "result.json").read_text()) if (out / "sft" / "result.json").exists() else {}
        lines += ["## SFT warm start", "",
                  f"{sft_result.get('demonstrations', '?')} scripted demonstrations "
                  f"({sft_result.get('skipped', '?')} questions skipped: answer not in the evidence), "
                  f"{len(sft_rows)} optimiser steps, {sft_result.get('seconds', 0):.0f} s; "
                  f"NLL {sft_rows[0]['nll']:.3f} -> {sft_rows[-1]['nll']:.3f}"
                  + (f"; probability of `<tool_call>` where a demonstration calls search: "
                     f"{sft_result['call_marker_prob']:.2f}" if sft_result.get("call_marker_prob") is not None else "")
                  + ".", ""]
    evals = {label: read_jsonl(out / "eval" / f"{label}.jsonl") for label, _, _ in evaluations(plan)
             if (out / "eval" / f"{label}.jsonl").exists()}
    if evals:
        summaries = {label: summarise(rows) for label, rows in evals.items()}
        plot_eval(summaries, out / "eval_em_strict.png")
        plot_eval(summaries, out / "eval_em_lenient.png", key="em_lenient", title="Lenient exact match on the test split")
        tables = ["## Evaluation", "", f"Split `{plan.eval.split}`, greedy, same budgets for every run.", "",
                  format_table(summaries), ""]
        if "sft" in evals and "sft_grpo" in evals:
            tables += ["### SFT vs SFT + GRPO", "",
                       format_comparison(compare(evals["sft"], evals["sft_grpo"], ("sft", "sft_grpo")), ("sft", "sft_grpo")), ""]
        tables += second_search_section(evals, plan.eval.search_backend)
        tables += search_learned_section(evals, plan.eval.search_backend, out)
        (out / "tables.md").write_text("\n".join(tables) + "\n")
        with open_tracker(plan.eval.tracker, f"{out.name}/report", {"eval": dataclasses.asdict(plan.eval)}) as tracker:
            tracker.log_table("eval/all", {label: summary[ALL] for label, summary in summaries.items()})
        lines += tables + ["![strict EM](eval_em_strict.png)", ""]
        (out / "summary_eval.json").write_text(json.dumps(summaries, indent=2))
    policy = grpo_policy_path(plan) if any((Path(c.out) / "checkpoints.jsonl").exists() for c in runs.values()) else None
    if policy:
        adapter = export_adapter(policy, out / "adapter")
        size = (adapter / "adapter.safetensors").stat().st_size
        lines += ["## Final adapter", "",
                  f"`adapter/` ({size / 2**20:.1f} MiB, bf16): load it on any CPU with "
                  f"`helpers.engine.connect().create_sampling_client('{plan.grpo.model}', '{out / 'adapter'}')` "
                  f"or evaluate it: `python -m helpers.eval --model {plan.grpo.model} --model-path {out / 'adapter'}`.", ""]
    lines += ["## Configuration", "", "```json",
              json.dumps({"sft": dataclasses.asdict(plan.sft), "grpo": dataclasses.asdict(plan.grpo),
                          "eval": dataclasses.asdict(plan.eval)}, indent=1), "```", "",
              "Commands that produced this folder: `commands.txt`."]
    (out / "README.md").write_text("\n".join(lines) + "\n")
    return out / "README.md"


# --------------------------------------------------------------------------- entry point


def record_config(plan: Plan, preset: str, overrides: list[str], ran) -> None:
    """`config.json` of the out folder: per stage, the settings of the command that last ran it. A run
    made by one command per stage (train, then evaluate with its own --set) keeps each stage's own."""
    path = plan.out / "config.json"
    previous = json.loads(path.read_text()) if path.is_file() else {}
    if previous.get("preset") != preset or not isinstance(previous.get("overrides"), dict):
        previous = {}  # another preset's, or written before the record was kept per stage
    sections = {"sft": {"sft": dataclasses.asdict(plan.sft)},
                "grpo": {"grpo": dataclasses.asdict(plan.grpo),
                         "stages": {name: dataclasses.asdict(config) for name, config in plan.stages.items()}},
                "eval": {"eval": dataclasses.asdict(plan.eval)}}
    record = {"preset": preset, "overrides": {}, **{k: v for part in sections.values() for k, v in part.items()}}
    kept = {"overrides", *(key for part in sections.values() for key in part)}
    record.update({k: v for k, v in previous.items() if k in kept})
    for stage in ran:  # what this command runs is recorded as it runs it
        record.update(sections.get(stage, {}))  # the report has no settings of its own
        record["overrides"][stage] = list(overrides)
    record["env"] = {k: os.environ.get(k) for k in ("COURSE_PROFILE", "COURSE_BACKEND", "COURSE_MODEL")}
    path.write_text(json.dumps(record, indent=2))


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m helpers.experiment", description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="h200", choices=sorted(PRESETS))
    parser.add_argument("--out", default=None, help="publishable results (default results/<preset>)")
    parser.add_argument("--work", default=None, help="checkpoints and heavy state (default runs/<out name>)")
    parser.add_argument("--stage", default="all", choices=("all", *STAGES))
    parser.add_argument("--max-minutes", type=float, default=None,
                        help="wall-clock limit of this command's GRPO / eval stage (stops cleanly, resumable)")
    parser.add_argument("--time-budget-min", type=float, default=None,
                        help="budget of the whole command; GRPO gets what is left after SFT minus the eval reserve")
    parser.add_argument("--eval-reserve-min", type=float, default=6.0)
    parser.add_argument("--only", default=None, help="eval stage: comma list of evaluations to run (default all)")
    parser.add_argument("--grpo-stage", default=None, help="grpo stage of a staged recipe: comma list of its stages "
                        "to run (default: every stage not yet finished, in order)")
    parser.add_argument("--init-from", default=None, help="grpo stage: start from this checkpoint or exported "
                        "adapter instead of the SFT result (or the previous stage's)")
    parser.add_argument("--policy", default=None, help="eval stage: the exported adapter or checkpoint that "
                        "`sft_grpo` evaluates, in place of this run's GRPO result")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.FIELD=VALUE")
    parser.add_argument("--tracker", default=None, choices=TRACKERS,
                        help="mirror SFT, GRPO and evaluation metrics to a tracker (= --set <stage>.tracker=...)")
    args = parser.parse_args(argv)
    out = args.out or f"results/{args.preset}"
    plan = make_plan(args.preset, out, args.work, args.overrides, tracker=args.tracker)
    check_setup(plan, STAGES if args.stage == "all" else (args.stage,))
    plan.out.mkdir(parents=True, exist_ok=True)
    with (plan.out / "commands.txt").open("a") as handle:
        handle.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')}  python -m helpers.experiment {' '.join(argv)}\n")
    record_config(plan, args.preset, args.overrides, STAGES if args.stage == "all" else (args.stage,))
    started = time.perf_counter()

    if course_config.device() == "cpu":
        torch.set_num_threads(min(2, os.cpu_count() or 1))  # shared CPU machines

    def remaining() -> float | None:
        if args.time_budget_min is None:
            return None
        return args.time_budget_min - (time.perf_counter() - started) / 60

    stages = STAGES if args.stage == "all" else (args.stage,)
    if "sft" in stages:
        print(json.dumps({k: v for k, v in stage_sft(plan).items() if k != "losses"}, indent=1), flush=True)
    if "grpo" in stages:
        # a staged recipe gives each stage its own minutes unless --max-minutes caps every stage
        limit = args.max_minutes if args.max_minutes is not None else (None if plan.stages else plan.grpo_minutes)
        left = remaining()
        if left is not None:
            reserve = left - (args.eval_reserve_min if "eval" in stages else 0.5)
            limit = reserve if limit is None else min(limit, reserve)
        if limit is not None and limit <= 0:
            print("no time left for GRPO in this command's budget", flush=True)
        else:
            only = args.grpo_stage.split(",") if args.grpo_stage else None
            print(json.dumps(stage_grpo(plan, limit, only=only, init_from=args.init_from), indent=1), flush=True)
    if "eval" in stages:
        limit = args.max_minutes
        left = remaining()
        if left is not None:
            limit = left - 0.5 if limit is None else min(limit, left - 0.5)
        stage_eval(plan, limit, only=args.only.split(",") if args.only else None, policy=args.policy)
    if "report" in stages:
        print(f"report: {stage_report(plan)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
