"""Experiment tracking: what reaches TensorBoard and SwanLab, read back with their own readers."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from helpers import tracking
from helpers.tracking import HEADLINE, open_tracker, scalars

SECRET = "sk-sentinel-7f3a9c1e"

ROWS = [
    {"step": 0, "reward_mean": 0.25, "exact_match": 0.3125, "valid_format_rate": 1.0, "search_calls_mean": 1.5,
     "multi_search_share": 0.125, "degenerate_group_share": 0.5, "kl_sampler_trainer_k3": 6.1e-05,
     "time_step": 12.5, "exact_match/hotpotqa": 0.2, "optim_skipped": False, "time_sampling": float("nan"),
     "multi_search_advantage_mean": None, "reward_kind": "gated", "wall_time": 1_790_000_000.0},
    {"step": 1, "reward_mean": 0.375, "exact_match": 0.4, "valid_format_rate": 0.9375, "search_calls_mean": 1.25,
     "multi_search_share": 0.0625, "degenerate_group_share": 0.25, "kl_sampler_trainer_k3": 4.2e-05,
     "time_step": 11.0, "exact_match/hotpotqa": 0.3, "optim_skipped": True, "time_sampling": 3.5,
     "multi_search_advantage_mean": -0.1, "reward_kind": "gated", "wall_time": 1_790_000_012.0},
]
CONFIG = {"train": {"learning_rate": 5e-05, "max_assistant_tokens": 256, "api_key": SECRET},
          "note": f"started with key {SECRET} in the shell"}
TABLE = {"all": {"n": 10, "em_strict": 0.3}, "<b>nq</b>": {"n": 4, "em_strict": 0.25}}


def expected_scalars() -> dict[int, dict[str, float]]:
    return {row["step"]: scalars(row) for row in ROWS}


@pytest.fixture
def secret_env(monkeypatch):
    for name in ("PYTRIO_API_KEY", "DEEPSEEK_API_KEY", "SWANLAB_API_KEY"):
        monkeypatch.setenv(name, SECRET)
    monkeypatch.setenv("ZHIHU_SEARCH_KEYS", f"{SECRET}-zhihu,another-key-9876")


def all_bytes(folder: Path) -> bytes:
    return b"".join(p.read_bytes() for p in folder.rglob("*") if p.is_file())


# --------------------------------------------------------------------------- pure parts


def test_scalars_keep_numbers_and_add_the_headline_names():
    values = scalars(ROWS[0])
    assert values["reward_mean"] == 0.25 and values["exact_match/hotpotqa"] == 0.2
    assert values["optim_skipped"] == 0.0 and scalars(ROWS[1])["optim_skipped"] == 1.0
    for dropped in ("step", "wall_time", "time_sampling", "multi_search_advantage_mean", "reward_kind"):
        assert dropped not in values
    for tag, key in HEADLINE.items():
        assert values[f"headline/{tag}"] == ROWS[0][key]


def test_redact_masks_secret_settings_and_secret_values_but_not_token_counts():
    masked = tracking.redact(CONFIG, [SECRET])
    assert masked["train"]["api_key"] == tracking.MASK
    assert masked["train"]["max_assistant_tokens"] == 256
    assert SECRET not in json.dumps(masked)
    assert tracking.is_secret_name("ZHIHU_SEARCH_KEYS") and not tracking.is_secret_name("trained_tokens")


def test_secret_values_split_key_lists(secret_env):
    found = tracking.secret_values()
    assert SECRET in found and f"{SECRET}-zhihu" in found and "another-key-9876" in found


def test_markdown_table_escapes_html_and_pipes():
    text = tracking.markdown_table([{"label": "<script>x</script>", "value": "a|b"}])
    assert "<script>" not in text and "&lt;script&gt;" in text and "a\\|b" in text


def test_unknown_tracker_is_a_clear_error():
    with pytest.raises(ValueError, match="tensorboard"):
        open_tracker("tensorbord", "x/y")


def test_none_tracker_does_nothing(tmp_path):
    tracker = open_tracker("none", "x/y", CONFIG, logdir=tmp_path)
    assert not tracker.active
    tracker.log(ROWS[0])
    tracker.close()
    assert not any(tmp_path.iterdir())


# --------------------------------------------------------------------------- failure never stops a run


@pytest.mark.parametrize("kind, modules", [("swanlab", ["swanlab"]),
                                           ("tensorboard", ["tensorboard", "torch.utils.tensorboard"])])
def test_missing_package_gives_a_message_and_the_run_goes_on(tmp_path, monkeypatch, capsys, kind, modules):
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)  # import <module> -> ImportError
    tracker = open_tracker(kind, "x/y", CONFIG, logdir=tmp_path)
    assert not tracker.active
    tracker.log(ROWS[0])
    tracker.close()
    out = capsys.readouterr().out
    assert f"{kind} is not installed" in out and "JSONL only" in out
    assert not any(tmp_path.iterdir())


class Broken:
    """A backend that fails the way a full disk or a dropped connection does."""

    def __init__(self, fail_on: str, message: str = "boom") -> None:
        self.fail_on, self.message, self.calls = fail_on, message, []

    def _maybe(self, name, *args):
        self.calls.append(name)
        if name == self.fail_on:
            raise OSError(self.message)

    def config(self, config):
        self._maybe("config", config)

    def scalars(self, values, step, wall_time):
        self._maybe("scalars", values, step)

    def table(self, name, rows, step):
        self._maybe("table", name)

    def close(self):
        self._maybe("close")


def test_a_tracker_that_cannot_start_leaves_jsonl_only(tmp_path, monkeypatch, capsys, secret_env):
    def refuse(*args, **kwargs):
        raise ConnectionError(f"cannot reach the service with key {SECRET}")

    monkeypatch.setitem(tracking.BACKENDS, "tensorboard", refuse)
    tracker = open_tracker("tensorboard", "x/y", CONFIG, logdir=tmp_path)
    assert not tracker.active
    tracker.log(ROWS[0])
    tracker.close()
    out = capsys.readouterr().out
    assert "could not start" in out and "ConnectionError" in out
    assert SECRET not in out


def test_a_tracker_failing_mid_run_turns_itself_off_once(capsys):
    backend = Broken("scalars", message=f"write failed near {SECRET}")
    tracker = tracking.Tracker("tensorboard", backend, secrets=[SECRET])
    for row in ROWS * 3:
        tracker.log(row)  # never raises
    tracker.close()
    out = capsys.readouterr().out
    assert out.count("tracking:") == 1 and "JSONL only" in out and SECRET not in out
    assert backend.calls.count("scalars") == 1  # nothing more is sent to a broken backend
    assert not tracker.active and SECRET not in tracker.error


class Stalled(Broken):
    """A backend stuck on a slow disk or network until released."""

    def __init__(self) -> None:
        super().__init__(fail_on="")
        self.release = threading.Event()
        self.steps = []

    def scalars(self, values, step, wall_time):
        self.release.wait()
        self.steps.append(step)


def test_log_returns_while_the_backend_is_stuck_and_nothing_is_lost():
    backend = Stalled()
    tracker = tracking.Tracker("tensorboard", backend)
    for step in range(5):
        tracker.log({"step": step, "reward_mean": 0.1})  # would block forever if it wrote inline
    assert backend.steps == []
    backend.release.set()
    tracker.close()
    assert backend.steps == [0, 1, 2, 3, 4]


def test_a_full_queue_drops_tracker_updates_not_steps(capsys):
    backend = Stalled()
    tracker = tracking.Tracker("tensorboard", backend, queue_size=2)
    for step in range(10):
        tracker.log({"step": step, "reward_mean": 0.1})
    assert tracker.dropped >= 7  # one may already be in the backend's hands
    backend.release.set()
    tracker.close()
    assert "skipped" in capsys.readouterr().out
    assert len(backend.steps) + tracker.dropped == 10


# --------------------------------------------------------------------------- TensorBoard, read back


def read_tensorboard(folder: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return events


def tensorboard_text(events, tag: str) -> str:
    return events.Tensors(f"{tag}/text_summary")[-1].tensor_proto.string_val[0].decode()


def table_rows(text: str) -> list[dict[str, str]]:
    """A markdown table (as `markdown_table` writes it) back into rows of cell strings."""
    def cells(line: str) -> list[str]:
        return [cell.strip() for cell in line.strip().strip("|").split("|")]

    header, _, *body = text.splitlines()
    return [dict(zip(cells(header), cells(line))) for line in body]


def test_tensorboard_files_read_back_into_the_same_values(tmp_path, secret_env):
    pytest.importorskip("tensorboard")
    tracker = open_tracker("tensorboard", "exp/grpo", CONFIG, logdir=tmp_path)
    assert tracker.active, tracker.error
    for row in ROWS:
        tracker.log(row)
    tracker.log_table("eval/summary", TABLE)
    tracker.close()

    events = read_tensorboard(tmp_path / "exp" / "grpo")
    expected = expected_scalars()
    tags = set(events.Tags()["scalars"])
    assert tags == set(expected[0]) | set(expected[1])
    for tag in tags:
        points = {event.step: event.value for event in events.Scalars(tag)}
        assert points == {step: pytest.approx(values[tag], rel=1e-6)  # event files store float32
                          for step, values in expected.items() if tag in values}
    assert [e.wall_time for e in events.Scalars("reward_mean")] == [r["wall_time"] for r in ROWS]
    config = tensorboard_text(events, "config")
    assert "train.learning_rate" in config and "5e-05" in config
    table = tensorboard_text(events, "eval/summary")
    assert "em_strict" in table and "&lt;b&gt;nq&lt;/b&gt;" in table
    assert SECRET.encode() not in all_bytes(tmp_path)


# --------------------------------------------------------------------------- SwanLab offline, read back


def read_swanlab(run_dir: Path) -> dict[str, dict[int, float]]:
    """Scalars of a SwanLab offline run, parsed by SwanLab's own record reader."""
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    (path,) = run_dir.glob("*.swanlab")
    reader = DataStoreReader()
    reader.open(path)
    values: dict[str, dict[int, float]] = {}
    try:
        for raw in reader:
            record = Record()
            record.ParseFromString(raw)
            if record.HasField("scalar"):
                values.setdefault(record.scalar.key, {})[record.scalar.step] = record.scalar.value.number
    finally:
        reader.close()
    return values


def test_swanlab_offline_files_read_back_into_the_same_values(tmp_path, monkeypatch, secret_env):
    pytest.importorskip("swanlab")
    import yaml  # a dependency of swanlab

    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # SwanLab keeps settings there
    tracker = open_tracker("swanlab", "exp/grpo", CONFIG, logdir=tmp_path / "swanlog", mode="offline")
    assert tracker.active, tracker.error
    for row in ROWS:
        tracker.log(row)
    tracker.log_table("eval/summary", TABLE)
    tracker.close()
    assert tracker.error is None

    run_dir = tracker.path
    values = read_swanlab(run_dir)
    expected = expected_scalars()
    for tag in set(expected[0]) | set(expected[1]):
        assert values[tag] == {step: v[tag] for step, v in expected.items() if tag in v}
    config = yaml.safe_load((run_dir / "files" / "config.yaml").read_text())
    assert config["train"]["value"]["learning_rate"] == 5e-05
    assert config["train"]["value"]["api_key"] == tracking.MASK
    (text,) = (run_dir / "media").rglob("*.txt")
    assert "em_strict" in text.read_text() and "&lt;b&gt;nq" in text.read_text()
    assert SECRET.encode() not in all_bytes(tmp_path)


# --------------------------------------------------------------------------- recorded runs


def write_recorded(root: Path) -> None:
    run = root / "exp" / "grpo"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    (run / "config.json").write_text(json.dumps(CONFIG))
    (root / "exp" / "sft").mkdir()
    (root / "exp" / "sft" / "metrics.jsonl").write_text('{"step": 1, "nll": 0.9}\n{"step": 2, "nll": 0.5}\n')
    (root / "exp" / "eval").mkdir()
    rows = [{"id": str(i), "data_source": "nq", "exact_match": i % 2 == 0, "lenient_match": True,
             "valid_format": True, "reward": float(i % 2 == 0), "search_calls": 1} for i in range(4)]
    (root / "exp" / "eval" / "sft_grpo.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "exp" / "runs" / "scratch").mkdir(parents=True)
    (root / "exp" / "runs" / "scratch" / "metrics.jsonl").write_text('{"step": 0}\n')


def test_recorded_runs_export_from_jsonl_and_twice_gives_the_same(tmp_path, secret_env):
    pytest.importorskip("tensorboard")
    write_recorded(tmp_path / "results")
    logdir = tmp_path / "board"
    for _ in range(2):
        assert tracking.main(["tensorboard", "--no-launch", "--results", str(tmp_path / "results"),
                              "--logdir", str(logdir)]) == 0
    assert sorted(p.relative_to(logdir).as_posix() for p in logdir.glob("*/*")) == ["exp/eval", "exp/grpo", "exp/sft"]
    grpo = read_tensorboard(logdir / "exp" / "grpo")
    for tag, key in HEADLINE.items():
        assert [e.value for e in grpo.Scalars(f"headline/{tag}")] == [pytest.approx(r[key], rel=1e-6) for r in ROWS]
    assert [e.value for e in read_tensorboard(logdir / "exp" / "sft").Scalars("nll")] == [pytest.approx(0.9), 0.5]
    table = tensorboard_text(read_tensorboard(logdir / "exp" / "eval"), "eval/sft_grpo")
    assert "| nq | 4 | 0.5 |" in table
    assert SECRET.encode() not in all_bytes(logdir)


def test_the_committed_gpu_runs_export_with_every_headline_curve(tmp_path):
    pytest.importorskip("tensorboard")
    from helpers.config import RESULTS_DIR

    runs = {name: rows for name, folder in tracking.recorded_runs(RESULTS_DIR).items()
            if "reward_mean" in (rows := tracking.read_jsonl(folder / "metrics.jsonl"))[0]}  # GRPO, not SFT
    assert {"h200/grpo", "h200_balanced/grpo", "h200_search/grpo"} <= set(runs)
    written = tracking.export_recorded(RESULTS_DIR, tmp_path, only=list(runs), progress=False)
    assert set(runs) <= set(written)
    for name, rows in runs.items():
        events = read_tensorboard(written[name])
        for tag, key in HEADLINE.items():  # a step without a number (no update: no KL) leaves a gap
            recorded = [(r["step"], r[key]) for r in rows
                        if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
            points = [(e.step, e.value) for e in events.Scalars(f"headline/{tag}")]
            assert recorded and [s for s, _ in points] == [s for s, _ in recorded], (name, tag)
            assert all(math.isclose(p, r, rel_tol=1e-6, abs_tol=1e-12) for (_, p), (_, r) in zip(points, recorded))


def test_an_odd_metrics_row_is_skipped_and_the_tracker_goes_on(capsys):
    backend = Stalled()
    backend.release.set()
    tracker = tracking.Tracker("tensorboard", backend)
    tracker.log({"step": "not a number", "reward_mean": 0.1})  # falls back to a counter: step 0
    tracker.log({"reward_mean": 0.2}, step=object())  # int(object()) fails: skipped
    tracker(ROWS[1], config=None)  # the observer call of a training step
    tracker.close()
    assert backend.steps == [0, 1] and tracker.active
    out = capsys.readouterr().out
    assert out.count("could not be read") == 1


def test_run_names_are_the_last_two_folders(tmp_path):
    assert tracking.run_name(tmp_path / "h200" / "grpo") == "h200/grpo"
    assert tracking.run_name("runs/efficiency/gated") == "efficiency/gated"


def test_a_run_that_exits_without_closing_still_leaves_its_curves(tmp_path):
    pytest.importorskip("tensorboard")

    script = (
        "import sys; from helpers.tracking import open_tracker\n"
        f"tracker = open_tracker('tensorboard', 'exp/grpo', logdir={str(tmp_path)!r})\n"
        "for step in range(3):\n"
        "    tracker.log({'step': step, 'reward_mean': step / 4})\n"
        "sys.exit(0)  # no close()\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, cwd=Path(tracking.__file__).parent.parent)
    events = read_tensorboard(tmp_path / "exp" / "grpo")
    assert [(e.step, e.value) for e in events.Scalars("reward_mean")] == [(0, 0.0), (1, 0.25), (2, 0.5)]


# --------------------------------------------------------------------------- the switch in each entry point


def test_every_entry_point_refuses_an_unknown_tracker_before_any_work(tmp_path):
    from helpers.eval import EvalConfig, evaluate
    from helpers.sft import SFTConfig, run_sft

    with pytest.raises(ValueError, match="unknown tracker"):
        run_sft(SFTConfig(tracker="tensorbord", resume=False, out=str(tmp_path / "sft")), service=object())
    with pytest.raises(ValueError, match="unknown tracker"):
        evaluate(EvalConfig(tracker="wandb"), sampling_client=object(), examples=[])


def test_an_evaluation_sends_its_summary_table(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")

    from helpers.eval import EvalConfig, evaluate

    monkeypatch.setenv("COURSE_TRACKING_DIR", str(tmp_path / "board"))
    rows = [{"id": "1", "data_source": "nq", "exact_match": True, "lenient_match": True, "valid_format": True,
             "reward": 1.0, "search_calls": 2},
            {"id": "2", "data_source": "nq", "exact_match": False, "lenient_match": False, "valid_format": True,
             "reward": 0.0, "search_calls": 1}]
    monkeypatch.setattr("helpers.eval._single_turn_batch", lambda *args: [dict(r) for r in rows])
    output = tmp_path / "exp" / "eval" / "rag.jsonl"
    evaluate(EvalConfig(mode="rag", tracker="tensorboard", output=str(output)),
             sampling_client=SimpleNamespace(get_tokenizer=lambda: None), search_client=object(),
             examples=[SimpleNamespace(id=r["id"]) for r in rows])
    events = read_tensorboard(tmp_path / "board" / "exp" / "eval" / "rag")
    assert [e.value for e in events.Scalars("eval/em_strict")] == [0.5]
    assert [e.value for e in events.Scalars("eval/multi_search_share")] == [0.5]
    assert "| nq | 2 | 0.5 |" in tensorboard_text(events, "eval/summary")


def test_a_grpo_run_mirrors_every_jsonl_number_to_the_tracker(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    import helpers.train as train_module
    from helpers.rollout import RolloutConfig
    from helpers.train import TrainConfig, train
    from test_train_loop import fake_rollout, session_for

    monkeypatch.setenv("COURSE_TRACKING_DIR", str(tmp_path / "board"))
    monkeypatch.setattr(train_module, "rollout_groups", fake_rollout([]))
    config = TrainConfig(max_steps=3, questions_per_batch=2, rollout=RolloutConfig(group_size=2), save_every=0,
                         out=str(tmp_path / "exp" / "grpo"), tracker="tensorboard")
    train(config, session=session_for(tmp_path, [], config), progress=False)

    rows = [json.loads(line) for line in (tmp_path / "exp" / "grpo" / "metrics.jsonl").read_text().splitlines()]
    events = read_tensorboard(tmp_path / "board" / "exp" / "grpo")
    expected = {row["step"]: scalars(row) for row in rows}
    assert set(events.Tags()["scalars"]) == set().union(*expected.values())
    for tag in events.Tags()["scalars"]:
        assert {e.step: e.value for e in events.Scalars(tag)} == {
            step: pytest.approx(values[tag], rel=1e-6, abs=1e-30) for step, values in expected.items() if tag in values}
    assert "train.tracker" in tensorboard_text(events, "config")


def test_the_switch_is_a_flag_of_every_command_line():
    import argparse

    from helpers.eval import EvalConfig
    from helpers.experiment import main as experiment_main
    from helpers.experiment import make_plan
    from helpers.runs import add_config_arguments, config_from_args
    from helpers.sft import SFTConfig
    from helpers.train import TrainConfig

    for cls in (TrainConfig, SFTConfig, EvalConfig):  # helpers.train / sft / eval / efficiency compare
        parser = argparse.ArgumentParser()
        add_config_arguments(parser, cls)
        assert cls().tracker == "none"
        assert config_from_args(cls, parser.parse_args(["--tracker", "swanlab"])).tracker == "swanlab"
    with pytest.raises(SystemExit):
        experiment_main(["--preset", "cpu-dry", "--tracker", "wandb"])
    plan = make_plan("cpu-dry", "results/x", tracker="tensorboard", overrides=["eval.tracker=swanlab"])
    assert (plan.sft.tracker, plan.grpo.tracker, plan.eval.tracker) == ("tensorboard", "tensorboard", "swanlab")


def test_a_budget_sweep_sends_one_curve_per_policy_over_the_budget(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")

    import helpers.data
    import helpers.engine
    import helpers.search
    from helpers import efficiency
    from helpers.efficiency.budget import BudgetPoint
    from helpers.efficiency.cli import main

    def sweep(sampler, tokenizer, search_client, examples, budgets, policy, config):
        return [BudgetPoint(policy, b, 4, accuracy=0.1 * b, valid_format_rate=1.0, search_calls_mean=b / 2,
                            output_tokens_mean=10.0, input_tokens_mean=100.0, tokens_per_question=110.0,
                            seconds=1.0) for b in budgets]

    monkeypatch.setenv("COURSE_TRACKING_DIR", str(tmp_path / "board"))
    monkeypatch.setattr(helpers.engine, "connect", lambda *a, **k: None)
    monkeypatch.setattr(helpers.data, "load_examples", lambda *a, **k: [])
    monkeypatch.setattr(helpers.search, "create_search_client", lambda *a, **k: None)
    monkeypatch.setattr(efficiency, "sampling_client_for",
                        lambda *a: SimpleNamespace(get_tokenizer=lambda: None))
    monkeypatch.setattr(efficiency, "budget_sweep", sweep)
    main(["budget", "--budgets", "0,1,3", "--policy", "base=", "--out", str(tmp_path / "sweep.json"),
          "--tracker", "tensorboard"])
    events = read_tensorboard(tmp_path / "board" / "budget" / "base")
    assert [(e.step, e.value) for e in events.Scalars("budget/accuracy")] == [
        (0, 0.0), (1, pytest.approx(0.1)), (3, pytest.approx(0.3))]


def test_a_key_on_the_command_line_stays_out_of_swanlab_files(tmp_path):
    pytest.importorskip("swanlab")

    script = (
        "from helpers.tracking import open_tracker\n"
        f"tracker = open_tracker('swanlab', 'exp/grpo', logdir={str(tmp_path / 'swanlog')!r}, mode='offline')\n"
        "tracker.log({'step': 0, 'reward_mean': 0.5})\n"
        "tracker.close()\n"
        "assert tracker.error is None, tracker.error\n"
    )
    env = {**os.environ, "HOME": str(tmp_path / "home")}
    # SwanLab reads the command from /proc/self/cmdline: the secret rides on it as an argument
    subprocess.run([sys.executable, "-c", script, "--note", SECRET], check=True, env=env,
                   cwd=Path(tracking.__file__).parent.parent, capture_output=True)
    assert list((tmp_path / "swanlog").rglob("*.swanlab"))
    assert SECRET.encode() not in all_bytes(tmp_path / "swanlog")


def test_the_efficiency_comparison_passes_the_switch_to_each_grpo_run(monkeypatch):
    from helpers import efficiency
    from helpers.efficiency.cli import main

    seen = []
    monkeypatch.setattr(efficiency, "train_with_reward",
                        lambda cfg, reward, **kw: seen.append((reward, cfg.tracker, cfg.out)) or {})
    main(["compare", "--tracker", "swanlab", "--out", "results/x"])
    assert seen == [("exact_match", "swanlab", "results/x/exact_match"), ("gated", "swanlab", "results/x/gated")]


def test_the_experiment_report_sends_the_table_of_every_evaluation(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from helpers.experiment import make_plan, stage_report

    monkeypatch.setenv("COURSE_TRACKING_DIR", str(tmp_path / "board"))
    plan = make_plan("cpu-dry", str(tmp_path / "exp"), str(tmp_path / "work"), tracker="tensorboard")
    for label, pattern in (("sft", [True, False, False, False]), ("sft_grpo", [True, True, True, False])):
        rows = [{"id": str(i), "data_source": "nq", "exact_match": em, "lenient_match": em, "valid_format": True,
                 "search_calls": 1, "reward": float(em), "queries": ["q"], "answers": ["qqzzyyx"]}
                for i, em in enumerate(pattern)]
        path = plan.out / "eval" / f"{label}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    stage_report(plan)
    table = tensorboard_text(read_tensorboard(tmp_path / "board" / "exp" / "report"), "eval/all")
    rows = {row[""]: row for row in table_rows(table)}
    assert (rows["sft"]["em_strict"], rows["sft_grpo"]["em_strict"]) == ("0.25", "0.75")
    assert rows["sft"]["n"] == rows["sft_grpo"]["n"] == "4"


class FakeSwanLab:
    """Stands in for swanlab's login and init: records what a cloud start would send."""

    def __init__(self, run_dir: Path) -> None:
        self.logins, self.inits, self.run_dir = [], [], run_dir

    def login(self, **kwargs):
        self.logins.append(kwargs)

    def init(self, **kwargs):
        self.inits.append(kwargs)
        return SimpleNamespace(dir=str(self.run_dir), config={})


@pytest.mark.parametrize("key, mode, expected", [(SECRET, None, "online"), (None, None, "offline"),
                                                 (SECRET, "offline", "offline"), (None, "cloud", None)])
def test_swanlab_goes_to_the_cloud_only_with_a_key(tmp_path, monkeypatch, capsys, key, mode, expected):
    swanlab = pytest.importorskip("swanlab")
    fake = FakeSwanLab(tmp_path)
    monkeypatch.setattr(swanlab, "login", fake.login)
    monkeypatch.setattr(swanlab, "init", fake.init)
    monkeypatch.setattr(tracking, "env_value", lambda name: key if name == "SWANLAB_API_KEY" else None)  # .env
    tracker = open_tracker("swanlab", "exp/grpo", logdir=tmp_path, mode=mode)
    if expected is None:
        assert not tracker.active and "SWANLAB_API_KEY" in capsys.readouterr().out
        assert fake.inits == []
        return
    assert tracker.active and tracker.backend.mode == expected and fake.inits[0]["mode"] == expected
    assert fake.logins == ([{"api_key": SECRET, "save": False}] if expected == "online" else [])
    assert SECRET not in repr(fake.inits)  # the key goes to login only, never into the run's settings
    tracker.backend.close = lambda: None  # nothing was started to finish
    tracker.close()


@pytest.mark.slow
def test_an_sft_run_mirrors_its_jsonl_config_and_result_to_the_tracker(tmp_path, monkeypatch, small_model_name):
    pytest.importorskip("tensorboard")
    from helpers.data import SearchExample
    from helpers.sft import SFTConfig, run_sft
    from test_sft import ScriptedSearch

    monkeypatch.setenv("COURSE_TRACKING_DIR", str(tmp_path / "board"))
    facts = {"who wrote hamlet": ("Hamlet", "A tragedy by William Shakespeare.", "William Shakespeare"),
             "where is the eiffel tower": ("Eiffel Tower", "A tower in Paris, France.", "Paris")}
    examples = [SearchExample(id=f"n{i}", question=q, answers=[answer], data_source="nq")
                for i, (q, (_, _, answer)) in enumerate(facts.items())]
    search = ScriptedSearch({q: [(title, text)] for q, (title, text, _) in facts.items()})
    config = SFTConfig(model=small_model_name, epochs=1, batch_size=1, resume=False, tracker="tensorboard",
                       out=str(tmp_path / "exp" / "sft"))
    result = run_sft(config, search_client=search, examples=examples, progress=False)

    rows = [json.loads(line) for line in (tmp_path / "exp" / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == result.steps == 2
    events = read_tensorboard(tmp_path / "board" / "exp" / "sft")
    assert [(e.step, e.value) for e in events.Scalars("nll")] == [(r["step"], pytest.approx(r["nll"], rel=1e-6))
                                                                    for r in rows]
    assert "sft.tracker" in tensorboard_text(events, "config")
    (summary,) = table_rows(tensorboard_text(events, "sft/result"))
    assert (summary["demonstrations"], summary["steps"]) == ("2", "2")


@pytest.mark.parametrize("while_starting", [False, True], ids=["once-started", "while-starting"])
def test_stopping_the_tensorboard_command_stops_tensorboard(tmp_path, while_starting):
    # while_starting: the kill arrives as TensorBoard starts, before launch_tensorboard has returned
    script = (
        "import os, signal, subprocess, sys\n"
        "from helpers import tracking\n"
        "def launch(logdir, port, host):  # a stand-in server that would outlive its parent\n"
        "    server = subprocess.Popen(['sleep', '300'])\n"
        "    print(server.pid, flush=True)\n"
        f"    if {while_starting}:\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "    return server\n"
        "tracking.launch_tensorboard = launch\n"
        "tracking.export_recorded = lambda *args, **kwargs: {}\n"
        f"sys.exit(tracking.main(['tensorboard', '--logdir', {str(tmp_path)!r}]))\n"
    )
    command = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                               cwd=Path(tracking.__file__).parent.parent)
    server = None
    try:
        lines = iter(command.stdout.readline, "")
        server = int(next(line for line in lines if line.strip().isdigit()))  # after the export's summary
        if not while_starting:
            command.terminate()
        assert command.wait(timeout=60) == 0
        with pytest.raises(ProcessLookupError):
            os.kill(server, 0)  # terminated and reaped, not left running on its own
    finally:
        if command.poll() is None:
            command.kill()
        if server is not None:
            try:
                os.kill(server, signal.SIGTERM)
            except ProcessLookupError:
                pass


def test_an_sft_run_that_fails_half_way_still_closes_its_tracker(tmp_path, monkeypatch):
    import helpers.sft as sft
    from helpers.sft import SFTConfig, run_sft

    closed = []

    class Recorder:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.close()

        def log(self, row):
            pass

        def close(self):
            closed.append(True)

    class Client:
        def get_tokenizer(self):
            return None

    class Service:
        def create_lora_training_client(self, **kwargs):
            return Client()

    monkeypatch.setattr(sft, "open_tracker", lambda *args, **kwargs: Recorder())
    monkeypatch.setattr(sft, "build_demonstrations", lambda *args, **kwargs: ([], 3))
    with pytest.raises(RuntimeError, match="found no answer"):
        run_sft(SFTConfig(out=str(tmp_path / "sft"), tracker="tensorboard"), service=Service(), search_client=object(),
                examples=[], progress=False)
    assert closed == [True]
