"""The real recipe from inside the notebooks: what the `gpu` profile runs in notebooks 09 and 10.

On a machine with a GPU (`COURSE_PROFILE=gpu`), notebook 09 runs the recorded run's recipe —
`python -m helpers.experiment --preset h200`: the SFT warm start on 800 scripted demonstrations,
then GRPO for `GPU_RUN["grpo_minutes"]` — in-process, so the GRPO steps draw on the notebook's
dashboard; notebook 10 then evaluates that run's SFT and SFT + GRPO policies on the 600 held-out
test questions, with the recorded run's budgets, and sets them beside the recorded base-model rows.
Measured on one H200: notebooks 09 and 10 together 13.4 minutes (SFT 2.4, GRPO 9 with 154 updates,
the two evaluations 1 minute together); benchmarks/RESULTS.md has the figures.

    plan = gpu_plan()                      # the experiment's Plan, under this checkout's runs folder
    commands(plan)                         # the same run as shell commands
    train_stages(plan, on_step=dashboard.on_step)      # notebook 09
    evaluate_stages(plan)                  # notebook 10: {label: rows}

Every stage resumes (helpers.experiment): a kernel restarted mid-run continues where it stopped.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Callable

from helpers import config

GPU_RUN = {
    "preset": "h200",
    "grpo_minutes": 9.0,  # the recorded run's GRPO budget (results/h200_search: 32 steps in 9 minutes)
    "evaluations": ("sft", "sft_grpo"),  # the base model's rows are the recorded run's (same split, budgets)
    "folder": "gpu-recipe",
}


def gpu_folder(runs: Path | None = None) -> Path:
    """Where the gpu profile's run lives: `<COURSE_RUNS>/gpu-recipe` (results/ and work/ inside)."""
    return Path(runs or config.RUNS_DIR) / GPU_RUN["folder"]


def gpu_plan(runs: Path | None = None, overrides: tuple[str, ...] = ()):
    """The experiment's Plan of the gpu profile's run: preset h200, out and work under `gpu_folder`."""
    from helpers.experiment import make_plan

    folder = gpu_folder(runs)
    return make_plan(GPU_RUN["preset"], str(folder / "results"), str(folder / "work"), overrides)


def commands(plan) -> list[str]:
    """The shell commands that make the same run (what a terminal would launch, stage by stage)."""
    base = ["python", "-m", "helpers.experiment", "--preset", GPU_RUN["preset"], "--out", str(plan.out),
            "--work", str(plan.work)]
    return [shlex.join([*base, "--stage", "sft"]),
            shlex.join([*base, "--stage", "grpo", "--max-minutes", f"{GPU_RUN['grpo_minutes']:g}"]),
            shlex.join([*base, "--stage", "eval", "--only", ",".join(GPU_RUN["evaluations"])])]


def require_gpu() -> None:
    """The gpu profile on a machine without one would run the GPU's recipe for days: refuse clearly."""
    if config.device() != "cuda":
        raise RuntimeError(f"COURSE_PROFILE=gpu runs the GPU recipe (preset {GPU_RUN['preset']}) and needs a CUDA "
                           f"GPU; this machine's device is {config.device()!r}. Use COURSE_PROFILE=full on a CPU.")


def train_stages(plan, on_step: Callable[[dict], Any] | None = None) -> dict[str, Any]:
    """SFT warm start, then GRPO for `GPU_RUN["grpo_minutes"]`; GRPO's steps go to `on_step`."""
    from helpers.experiment import stage_grpo, stage_sft

    require_gpu()
    sft = stage_sft(plan)
    grpo = stage_grpo(plan, GPU_RUN["grpo_minutes"], on_step=on_step)
    return {"sft": sft, "grpo": grpo}


def evaluate_stages(plan) -> dict[str, list[dict[str, Any]]]:
    """The run's evaluations on the held-out test split ({label: rows}), each skipped once written."""
    from helpers.experiment import stage_eval
    from helpers.runs import read_jsonl

    require_gpu()
    done = stage_eval(plan, None, only=GPU_RUN["evaluations"])
    return {label: read_jsonl(path) for label, path in done.items()}


class Evaluated:
    """Which policy notebook 10 evaluates on held-out questions, and the policy it started from."""

    def __init__(self, label: str, model_path: str | None, start_label: str, start_path: str | None) -> None:
        self.label, self.model_path = label, model_path
        self.start_label, self.start_path = start_label, start_path

    def __repr__(self) -> str:
        return (f"Evaluated({self.label!r}: {self.model_path or 'the base model'}; "
                f"from {self.start_label!r}: {self.start_path or 'the base model'})")


def _weights(summary: dict | None) -> str | None:
    """The weights a training summary (helpers.train.train's) hands on, or None."""
    summary = summary or {}
    if not summary.get("steps_done", 1):
        return None
    return summary.get("sampler_path") or summary.get("checkpoint")


def policy_to_evaluate(learning: dict | None, training: dict | None) -> Evaluated:
    """Notebook 09's run that learns when it ran, else its one-step run, else the base model.

    `learning` is what notebook 09 keeps of the run that learns ({"summary", "start"}), `training`
    what it keeps of the run from its own warm start ({"summary", "sft"}); a run counts once its
    summary names weights: its final sampler weights, or the checkpoint of a run stopped for time
    (a run stopped before its first step has none).
    """
    learned = _weights((learning or {}).get("summary"))
    if learned:
        return Evaluated("after the run that learns (09)", learned, "its start: the recorded SFT adapter",
                         (learning or {}).get("start"))
    trained = _weights((training or {}).get("summary"))
    if trained:
        return Evaluated("after 09's GRPO step", trained, "its start: 09's SFT warm start", (training or {}).get("sft"))
    return Evaluated("base model (run notebook 09 first)", None, "base model", None)
