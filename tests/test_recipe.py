"""The `gpu` profile's plumbing, on a CPU: the profile resolves, notebook 09 would launch the
recorded run's recipe sized to its minutes, notebook 10 would evaluate that run, and a machine
without a GPU is refused with a clear error. (The run itself needs a GPU; its time is a benchmark.)"""

from __future__ import annotations

import json

import pytest

from helpers import config, experiment
from helpers.course import recipe
from helpers.course.recipe import GPU_RUN, policy_to_evaluate
from helpers.widgets import budgets


@pytest.fixture
def gpu_profile(monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "gpu")
    monkeypatch.delenv("COURSE_MODEL", raising=False)


def test_the_gpu_profile_resolves(gpu_profile):
    assert config.profile() == "gpu" and config.is_gpu() and not config.is_fast()
    assert config.default_model() == "qwen2.5-0.5b"
    assert budgets() == budgets("full")  # the live widgets keep the full budgets


def test_an_unknown_profile_names_the_three(monkeypatch):
    monkeypatch.setenv("COURSE_PROFILE", "tpu")
    with pytest.raises(ValueError, match="full, fast, gpu"):
        config.profile()


def test_the_plan_is_the_recorded_runs_recipe_under_the_runs_folder(tmp_path):
    plan = recipe.gpu_plan(tmp_path)
    assert plan.out == tmp_path / "gpu-recipe" / "results" and plan.work == tmp_path / "gpu-recipe" / "work"
    assert plan.grpo.out.startswith(str(plan.work)) and plan.sft.out.startswith(str(plan.work))
    recorded = json.loads((config.RESULTS_DIR / "h200_search" / "grpo" / "config.json").read_text())["train"]
    ours = {**{k: getattr(plan.grpo, k) for k in ("learning_rate", "questions_per_batch", "skip", "reward",
                                                   "dynamic_sampling", "lora_rank", "model")},
            **{k: getattr(plan.grpo.rollout, k) for k in ("group_size", "max_search_calls", "max_assistant_turns",
                                                          "max_assistant_tokens", "max_tool_response_tokens")}}
    assert ours == {key: recorded[key] for key in ours}
    assert plan.sft.limit == 800 and plan.eval.split == "test" and plan.eval.limit is None


def test_the_commands_are_the_experiments_stages(tmp_path):
    lines = recipe.commands(recipe.gpu_plan(tmp_path))
    assert [line.split("--stage ")[1].split()[0] for line in lines] == ["sft", "grpo", "eval"]
    assert all(line.startswith("python -m helpers.experiment --preset h200 ") for line in lines)
    assert f"--max-minutes {GPU_RUN['grpo_minutes']:g}" in lines[1] and "--only sft,sft_grpo" in lines[2]
    # what the CLI would parse from them is the same plan
    args = lines[1].split()[3:]
    parsed = experiment.make_plan(args[args.index("--preset") + 1], args[args.index("--out") + 1],
                                  args[args.index("--work") + 1])
    assert parsed.grpo == recipe.gpu_plan(tmp_path).grpo


def test_notebook_09_launches_sft_then_grpo_for_the_recipes_minutes(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(config, "device", lambda: "cuda")
    monkeypatch.setattr(experiment, "stage_sft", lambda plan: calls.append(("sft", plan)) or {"demonstrations": 1})
    monkeypatch.setattr(experiment, "stage_grpo", lambda plan, minutes, on_step=None:
                        calls.append(("grpo", plan, minutes, on_step)) or {"steps": 3})
    plan, on_step = recipe.gpu_plan(tmp_path), print
    run = recipe.train_stages(plan, on_step=on_step)
    assert [c[0] for c in calls] == ["sft", "grpo"] and calls[1][2] == GPU_RUN["grpo_minutes"]
    assert calls[1][3] is on_step and run == {"sft": {"demonstrations": 1}, "grpo": {"steps": 3}}


def test_notebook_10_evaluates_that_runs_policies(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(config, "device", lambda: "cuda")

    def stage_eval(plan, max_minutes, only=None):
        seen.update(plan=plan, only=only)
        path = tmp_path / "rows.jsonl"
        path.write_text(json.dumps({"id": "q", "exact_match": True}) + "\n")
        return {label: str(path) for label in only}

    monkeypatch.setattr(experiment, "stage_eval", stage_eval)
    rows = recipe.evaluate_stages(recipe.gpu_plan(tmp_path))
    assert seen["only"] == ("sft", "sft_grpo") and set(rows) == {"sft", "sft_grpo"}
    assert rows["sft"] == [{"id": "q", "exact_match": True}]


def test_a_machine_without_a_gpu_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(config, "device", lambda: "cpu")
    with pytest.raises(RuntimeError, match="COURSE_PROFILE=full"):
        recipe.train_stages(recipe.gpu_plan(tmp_path))


def test_notebook_10_evaluates_the_run_that_learns_when_it_ran():
    learning = {"summary": {"sampler_path": "/runs/learned"}, "start": "/results/sft_adapter"}
    one_step = {"summary": {"sampler_path": "/runs/one-step"}, "sft": "/runs/sft"}
    chosen = policy_to_evaluate(learning, one_step)
    assert (chosen.model_path, chosen.start_path) == ("/runs/learned", "/results/sft_adapter")
    stopped = {"summary": {"steps_done": 4, "finished": False, "checkpoint": "/runs/learned/step-4"}, "start": "/x"}
    assert policy_to_evaluate(stopped, one_step).model_path == "/runs/learned/step-4"  # stopped for time
    chosen = policy_to_evaluate({"summary": {"steps_done": 0, "finished": False}, "start": "/x"}, one_step)
    assert (chosen.model_path, chosen.start_path) == ("/runs/one-step", "/runs/sft")
    chosen = policy_to_evaluate(None, None)
    assert chosen.model_path is None and chosen.start_path is None
