"""The experiment entry point: presets, overrides, the report stage and the adapter export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.experiment import EVALS, PRESETS, main, make_plan, stage_report


def test_presets_share_budgets_between_grpo_and_eval():
    for name in PRESETS:
        plan = make_plan(name, f"/tmp/x-{name}")
        for field in ("max_search_calls", "max_assistant_turns", "max_assistant_tokens",
                      "max_tool_response_tokens", "max_trajectory_tokens"):
            assert getattr(plan.grpo.rollout, field) == getattr(plan.eval.rollout, field), (name, field)
        assert plan.grpo.model == plan.sft.model == plan.eval.model
        assert plan.sft.split == "train" and plan.grpo.split == "train" and plan.eval.split == "test"
        assert plan.grpo.rollout.max_trajectory_tokens <= 8192
    h200 = make_plan("h200", "results/h200")
    assert h200.grpo.model == "qwen2.5-0.5b" and h200.work == Path("runs/h200")
    assert h200.grpo.questions_per_batch * h200.grpo.rollout.group_size == 128
    assert h200.grpo.skip >= h200.sft.limit  # GRPO never trains on questions SFT scripted


def test_the_search_preset_is_h200_with_the_search_levers():
    h200, search = make_plan("h200", "o"), make_plan("h200_search", "o")
    # both start from the search teacher (the recorded run's); the search preset changes GRPO only
    assert (h200.sft.decompose, h200.sft.rewrite_first_query) == (search.sft.decompose, search.sft.rewrite_first_query) == (1.0, "gain")
    assert (h200.grpo.reward, h200.grpo.dynamic_sampling, h200.grpo.synthetic_share) == ("exact_match", False, 0.0)
    assert (search.grpo.reward, search.grpo.dynamic_sampling, search.grpo.synthetic_share) == ("evidence", True, 0.25)
    levers = {"out", "reward", "dynamic_sampling", "dynamic_sampling_rounds", "synthetic_share"}
    for a, b in ((h200.sft, search.sft), (h200.grpo, search.grpo), (h200.eval, search.eval)):
        assert {k: v for k, v in vars(a).items() if k not in levers} == {k: v for k, v in vars(b).items() if k not in levers}
    one = make_plan("h200", "o", overrides=["sft.decompose=1.0", "sft.rewrite_first_query=gain", "grpo.reward=evidence",
                                             'grpo.reward_options={"gain": 0.2}'])
    assert (one.sft.decompose, one.sft.rewrite_first_query, one.grpo.reward_fn() is not None) == (1.0, "gain", True)
    assert one.grpo.reward_options == {"gain": 0.2}


def test_overlapping_sft_and_grpo_questions_are_flagged(capsys):
    make_plan("h200", "o", overrides=["grpo.skip=0"])
    assert "800 GRPO questions are SFT questions too" in capsys.readouterr().out
    make_plan("h200", "o")
    assert "SFT questions too" not in capsys.readouterr().out
    # within one source, skip counts that source's questions: the first 800 rows hold 100 HotpotQA ones
    make_plan("h200", "o", overrides=["grpo.data_source=hotpotqa", "grpo.skip=100"])
    assert "SFT questions too" not in capsys.readouterr().out
    make_plan("h200", "o", overrides=["grpo.data_source=hotpotqa", "grpo.skip=60"])
    assert "40 GRPO questions are SFT questions too" in capsys.readouterr().out


def test_eval_stage_runs_only_the_named_evaluations(tmp_path, monkeypatch):
    import helpers.experiment as experiment

    plan = make_plan("cpu-dry", str(tmp_path / "results"), str(tmp_path / "work"))
    ran = []
    monkeypatch.setattr(experiment, "evaluate", lambda config: ran.append(config.label) or [])
    experiment.stage_eval(plan, None, only=["base_rag", "base_closed_book"])
    assert ran == ["base_closed_book", "base_rag"]  # table order, nothing else
    with pytest.raises(SystemExit, match="unknown"):
        experiment.stage_eval(plan, None, only=["sft_rl"])


def test_the_eval_stage_judges_a_policy_trained_elsewhere(tmp_path, monkeypatch):
    import helpers.experiment as experiment

    plan = make_plan("cpu-dry", str(tmp_path / "results"), str(tmp_path / "work"))
    ran = []
    monkeypatch.setattr(experiment, "evaluate", lambda config: ran.append((config.label, config.model_path)) or [])
    experiment.stage_eval(plan, None, only=["sft_grpo"])
    assert ran == []  # no GRPO in this run and no policy given: skipped, not run on the base model
    experiment.stage_eval(plan, None, only=["sft_grpo"], policy="elsewhere/adapter")
    assert ran == [("sft_grpo", "elsewhere/adapter")]
    monkeypatch.setattr(experiment, "check_setup", lambda plan, stages: None)
    experiment.main(["--preset", "cpu-dry", "--out", str(tmp_path / "cli"), "--work", str(tmp_path / "w"),
                     "--stage", "eval", "--only", "sft_grpo", "--policy", "cli/adapter"])
    assert ran[-1] == ("sft_grpo", "cli/adapter")


def test_a_staged_recipe_evaluates_each_stage_from_that_stages_own_policy(tmp_path, monkeypatch):
    import helpers.experiment as experiment

    plan = make_plan("cpu-dry-agent", str(tmp_path / "results"), str(tmp_path / "work"))
    labels = [label for label, _, _ in experiment.evaluations(plan)]
    assert labels[:len(EVALS)] == [label for label, _, _ in EVALS]
    assert labels[len(EVALS):] == ["stage_habit", "stage_trim"]
    policies = {"habit": "habit-weights"}  # trim has no checkpoint yet
    monkeypatch.setattr(experiment, "_policy_of", lambda config: policies.get(Path(config.out).name[5:]))
    ran = []
    monkeypatch.setattr(experiment, "evaluate", lambda config: ran.append((config.label, config.model_path)) or [])
    experiment.stage_eval(plan, None, only=["stage_habit", "stage_trim"])
    assert ran == [("stage_habit", "habit-weights")]  # a stage without a policy is skipped, not run on the base
    assert [label for label, _, _ in experiment.evaluations(make_plan("cpu-dry", "o"))] == [l for l, _, _ in EVALS]


def test_overrides_are_typed_and_checked():
    plan = make_plan("h200", "o", overrides=["grpo.learning_rate=3e-5", "eval.limit=100", "sft.epochs=3",
                                               "grpo.resume=false", "eval.limit=none"])
    assert plan.grpo.learning_rate == 3e-5 and plan.sft.epochs == 3 and plan.grpo.resume is False
    assert plan.eval.limit is None
    nested = make_plan("h200", "o", overrides=["grpo.rollout.max_search_calls=2", "grpo.reward=gated",
                                                 'grpo.reward_options={"lambda_tool": 0.3}'])
    assert nested.grpo.rollout.max_search_calls == 2 and nested.eval.rollout.max_search_calls == 3
    assert nested.grpo.reward_fn().config.lambda_tool == 0.3
    with pytest.raises(SystemExit, match="no field"):
        make_plan("h200", "o", overrides=["grpo.rollout.max_serach_calls=2"])
    with pytest.raises(SystemExit, match="no field"):
        make_plan("h200", "o", overrides=["grpo.lr=1"])
    with pytest.raises(SystemExit, match="lora_rank"):
        make_plan("h200", "o", overrides=["grpo.lora_rank=8"])


def _jsonl(path: Path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _eval_rows(em_pattern):
    return [{"id": str(i), "data_source": "nq" if i % 2 else "hotpotqa", "exact_match": em,
             "lenient_match": em, "valid_format": True, "search_calls": 1 + (i % 2), "reward": float(em),
             "sampled_tokens": 20, "trajectory_tokens": 900, "failed_searches": 0, "truncated_observations": 0,
             "queries": [f"question {i}"] * (1 + i % 2), "answers": ["qqzzyyx"]}
            for i, em in enumerate(em_pattern)]


def test_report_collects_metrics_tables_plots_and_a_small_adapter(tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    plan = make_plan("cpu-dry", str(tmp_path / "results"), str(tmp_path / "work"))
    sft, grpo = Path(plan.sft.out), Path(plan.grpo.out)
    _jsonl(sft / "metrics.jsonl", [{"step": 1, "nll": 1.5}, {"step": 2, "nll": 0.5}])
    (sft / "result.json").write_text(json.dumps({"demonstrations": 5, "skipped": 1, "seconds": 3.0,
                                                  "sampler_path": "x", "state_path": "y", "call_marker_prob": 0.973}))
    metrics = [{"step": s, "reward_mean": 0.1 * s, "exact_match": 0.1 * s, "valid_format_rate": 1.0,
                "search_calls_mean": 1.0, "multi_search_share": 0.0, "degenerate_group_share": 0.5,
                "time_step": 2.0, "kl_sampler_trainer_k3": 0.0} for s in range(4)]
    _jsonl(grpo / "metrics.jsonl", metrics)
    final = grpo / "final"
    final.mkdir(parents=True)
    save_file({"layer.lora_A": torch.randn(4, 16), "layer.lora_B": torch.randn(16, 4)}, str(final / "adapter.safetensors"))
    (final / "meta.json").write_text(json.dumps({"base_model": "smollm2-135m", "rank": 4, "has_optimizer": True}))
    (grpo / "summary.json").write_text(json.dumps({"finished": True, "sampler_path": str(final)}))
    _jsonl(grpo / "checkpoints.jsonl", [{"step": 4, "path": str(final)}])
    _jsonl(plan.out / "eval" / "sft.jsonl", _eval_rows([True, False, False, True]))
    _jsonl(plan.out / "eval" / "sft_grpo.jsonl", _eval_rows([True, True, False, True]))

    readme = stage_report(plan).read_text()
    out = plan.out
    for name in ("grpo/metrics.jsonl", "sft/metrics.jsonl", "sft/result.json", "grpo_training.png",
                 "eval_em_strict.png", "summary_eval.json", "tables.md", "search_learned.png"):
        assert (out / name).is_file(), name
    assert "| sft_grpo | all | 4 | 0.750 |" in readme and "SFT vs SFT + GRPO" in readme
    assert "+0.250" in readme  # the paired comparison
    assert "where a demonstration calls search: 0.97" in readme
    # no first search can hold a made-up answer: all four rows are "missed", two searched again
    assert "| sft | first search missed | 4 | 0.500 | 0.500 | 0.500 |" in readme
    assert "| sft_grpo | first search missed | 4 | 0.500 | 0.750 | 1.000 |" in readme
    # a made-up answer is in no evidence: recall 0 for the agent and for the question alike
    assert "### Was search learned?" in readme and "| sft | all | 4 | 0.000 | 0.000 |" in readme
    exported = load_file(str(out / "adapter" / "adapter.safetensors"))
    assert {t.dtype for t in exported.values()} == {torch.bfloat16}
    original = load_file(str(final / "adapter.safetensors"))
    assert torch.allclose(exported["layer.lora_A"].float(), original["layer.lora_A"], rtol=1e-2, atol=1e-2)
    assert json.loads((out / "adapter" / "meta.json").read_text())["has_optimizer"] is False


def test_cli_records_the_command_and_config(tmp_path):
    out = tmp_path / "r"
    assert main(["--preset", "cpu-dry", "--out", str(out), "--work", str(tmp_path / "w"), "--stage", "report",
                 "--set", "eval.limit=1"]) == 0
    assert "--set eval.limit=1" in (out / "commands.txt").read_text()
    config = json.loads((out / "config.json").read_text())
    assert config["eval"]["limit"] == 1 and config["preset"] == "cpu-dry"
    assert {label for label, _, _ in EVALS} == {"base_closed_book", "base_rag", "base_agent", "sft", "sft_grpo"}


def test_the_agent_recipe_runs_its_stages_in_order_each_from_the_previous(tmp_path, monkeypatch):
    import helpers.experiment as experiment

    # the CPU dry run has the GPU recipe's stages; the three-stage variant checks the hand-over between them
    assert list(make_plan("cpu-dry-agent", "o").stages) == list(make_plan("h200_agent", "o").stages) == ["habit", "trim"]
    # the three-stage recipe: a rewriting teacher, and a habit stage that pays for gold beyond plain RAG
    staged, dry = make_plan("h200_staged", "o"), make_plan("cpu-dry-staged", "o")
    assert list(staged.stages) == list(dry.stages) == ["habit", "answers", "trim"]
    assert staged.sft.rewrite_first_query == "no_loss" and make_plan("h200_agent", "o").sft.rewrite_first_query == "gain"
    assert staged.stages["habit"].reward_options == {"gain": 0.3, "beyond_rag": 0.3} == dry.stages["habit"].reward_options
    assert make_plan("h200_agent", "o").stages["habit"].reward_options == {"gain": 0.3}
    # the multi-search agent's recipe: plain exact match, then trim, each counted in steps on the GPU
    again, dry_again = make_plan("h200_again", "o"), make_plan("cpu-dry-again", "o")
    assert list(again.stages) == list(dry_again.stages) == ["exact", "trim"]
    assert [c.reward for c in again.stages.values()] == ["exact_match", "gated"] == [c.reward for c in dry_again.stages.values()]
    assert [c.max_steps for c in again.stages.values()] == [64, 15] and again.stages["exact"].synthetic_share == again.grpo.synthetic_share
    assert again.stages["trim"].synthetic_share == 0.5 and again.stages["trim"].reward_options["lambda_tool"] == 0.2
    assert all(c.max_steps == dry_again.grpo.max_steps for c in dry_again.stages.values())
    plan = make_plan("h200_agent_answers", str(tmp_path / "r"), str(tmp_path / "w"),
                     overrides=["habit.learning_rate=3e-5"])
    assert list(plan.stages) == ["habit", "answers", "trim"]
    assert [c.reward for c in plan.stages.values()] == ["evidence", "exact_match", "gated"]
    assert all(c.synthetic_share == 0.5 for c in plan.stages.values())
    assert plan.stages["habit"].learning_rate == 3e-5 and plan.stages["answers"].learning_rate == plan.grpo.learning_rate
    ran = []

    def fake_train(config, on_step=None):
        ran.append((Path(config.out).name, config.init_from, config.max_minutes))
        folder = Path(config.out)
        folder.mkdir(parents=True, exist_ok=True)
        summary = {"finished": True, "checkpoint": f"ckpt-{folder.name}"}
        (folder / "summary.json").write_text(json.dumps(summary))
        return summary

    monkeypatch.setattr(experiment, "train", fake_train)
    experiment.stage_grpo(plan, 2.0, init_from="exported-sft")
    assert ran == [("grpo_habit", "exported-sft", 2.0), ("grpo_answers", "ckpt-grpo_habit", 2.0),
                   ("grpo_trim", "ckpt-grpo_answers", 2.0)]
    ran.clear()
    experiment.stage_grpo(plan, None)  # every stage finished: nothing runs again
    assert ran == []
    (tmp_path / "w" / "grpo_trim" / "summary.json").unlink()
    experiment.stage_grpo(plan, None, only=["trim"])  # one stage, from the stage before it
    assert ran == [("grpo_trim", "ckpt-grpo_answers", plan.stage_minutes["trim"])]
    with pytest.raises(SystemExit, match="unknown stage"):
        experiment.stage_grpo(plan, None, only=["polish"])


def test_a_stage_command_exits_zero_with_its_engine_thread_stopped(tmp_path):
    """A command that did its work exits 0, and no engine worker thread is left inside torch when
    the interpreter tears down (on a GPU such a thread made C++ abort the exit)."""
    import os
    import subprocess
    import sys

    check = (
        "import atexit, threading, sys\n"
        "def left():\n"
        "    alive = [t.name for t in threading.enumerate() if t.name.startswith('engine-') and t.is_alive()]\n"
        "    print('engine threads alive at exit:', alive, flush=True)\n"
        "atexit.register(left)\n"  # registered first, so it runs after the engine's own exit handler
        "import runpy\n"
        "sys.argv = ['helpers.experiment'] + sys.argv[1:]\n"
        "runpy.run_module('helpers.experiment', run_name='__main__')\n"
    )
    args = ["--preset", "cpu-dry", "--out", str(tmp_path / "r"), "--work", str(tmp_path / "w"), "--stage", "eval",
            "--only", "base_agent", "--set", "eval.limit=1"]
    env = {**os.environ, "COURSE_RUNS": str(tmp_path / "runs")}
    done = subprocess.run([sys.executable, "-c", check, *args], capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "r" / "eval" / "base_agent.jsonl").exists()
    assert "engine threads alive at exit: []" in done.stdout


def test_the_step_line_says_when_a_step_made_no_update_and_why(capsys):
    from helpers.experiment import _print_step

    base = {"step": 3, "reward_mean": 0.4, "exact_match": 0.4, "valid_format_rate": 1.0, "search_calls_mean": 1.5,
            "multi_search_share": 0.5, "degenerate_group_share": 0.5, "time_step": 6.6}
    _print_step({**base, "micro_batches": 2, "kl_sampler_trainer_k3": 0.0004, "optim_skipped": 0.0})
    _print_step({**base, "degenerate_group_share": 1.0, "micro_batches": 0})  # every group agreed
    _print_step({**base, "micro_batches": 1, "kl_sampler_trainer_k3": float("nan"), "optim_skipped": 1.0})
    trained, agreed, skipped = capsys.readouterr().out.splitlines()
    assert "KL 0.0004" in trained and "no update" not in trained
    assert "no update (every group agreed)" in agreed and "KL" not in agreed and "nan" not in agreed
    assert "no update (non-finite gradient)" in skipped and "nan" not in skipped
