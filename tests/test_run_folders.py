"""Run folders that lose no finished row and survive being copied, moved or damaged."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

from helpers.engine.training import DamagedCheckpoint
from helpers.runs import RunDir, append_jsonl, read_jsonl, resume_checkpoint, write_jsonl
from helpers.train import TrainConfig, open_session, save_checkpoint

SURROGATE_ROW = {"query": "\ud83d x", "answer": "Par\udc00is", "step": 1}


def test_a_row_with_a_lone_surrogate_is_written_and_reads_back_the_same(tmp_path):
    path = tmp_path / "eval.jsonl"
    rows = [{"id": "q0", "answer": "Paris"}, SURROGATE_ROW, {"id": "q2", "answer": "Lyon"}]
    write_jsonl(path, rows)
    assert read_jsonl(path) == rows and not list(tmp_path.glob("*.tmp"))
    append_jsonl(tmp_path / "metrics.jsonl", SURROGATE_ROW)
    append_jsonl(tmp_path / "metrics.jsonl", {"step": 2})
    assert read_jsonl(tmp_path / "metrics.jsonl") == [SURROGATE_ROW, {"step": 2}]


def test_unicode_line_separators_inside_a_row_do_not_end_it(tmp_path):
    rows = [{"text": "first\u2028second"}, {"text": "next\x85line", "n": 2}, {"text": "last\u2029"}]
    path = write_jsonl(tmp_path / "rows.jsonl", rows[:2])
    append_jsonl(path, rows[2])
    assert read_jsonl(path) == rows


def test_a_row_after_a_line_cut_by_a_kill_is_not_lost(tmp_path):
    path = tmp_path / "metrics.jsonl"
    append_jsonl(path, {"step": 0})
    with path.open("a") as handle:
        handle.write('{"step": 1, "rew')  # killed mid-write
    append_jsonl(path, {"step": 1})
    append_jsonl(path, {"step": 2})
    assert read_jsonl(path) == [{"step": 0}, {"step": 1}, {"step": 2}]


def test_a_failed_rewrite_keeps_the_old_rows(tmp_path):
    path = tmp_path / "rows.jsonl"
    write_jsonl(path, [{"a": 1}])

    class Unprintable:
        def __str__(self):
            raise RuntimeError("no text")

    with pytest.raises(RuntimeError):
        write_jsonl(path, [{"a": 2}, {"b": Unprintable()}])
    assert read_jsonl(path) == [{"a": 1}] and not list(tmp_path.glob("*.tmp"))


def fake_local_engine(tmp_path, monkeypatch):
    """save_state returns local:// paths that resolve to directories under tmp_path/cache."""
    import helpers.engine.local as local

    cache = tmp_path / "cache"
    monkeypatch.setattr(local, "resolve_path", lambda uri: cache / uri[len("local://"):])

    class Trainer:
        def save_state(self, name):
            (cache / name).mkdir(parents=True)
            (cache / name / "meta.json").write_text(json.dumps({"name": name}))
            return SimpleNamespace(path=f"local://{name}")

    return Trainer()


def test_checkpoints_are_recorded_relative_to_the_run_folder(tmp_path, monkeypatch):
    trainer = fake_local_engine(tmp_path, monkeypatch)
    run = RunDir(tmp_path / "original")
    session = SimpleNamespace(config=SimpleNamespace(out=str(run.path)), training_client=trainer, run=run,
                              optimised=True)
    save_checkpoint(session, 2)
    assert read_jsonl(run.checkpoints)[0]["path"] == "checkpoints/step00002"
    copy = tmp_path / "copy"
    shutil.copytree(run.path, copy)
    assert RunDir(copy).last_checkpoint()["path"] == str(copy / "checkpoints" / "step00002")
    moved = tmp_path / "moved"
    shutil.move(str(run.path), moved)
    last = RunDir(moved).last_checkpoint()
    assert last["path"] == str(moved / "checkpoints" / "step00002") and (moved / "checkpoints" / "step00002").is_dir()


def test_an_older_absolute_record_is_read_as_the_folders_own_copy(tmp_path):
    run = RunDir(tmp_path / "run")
    (run.path / "checkpoints" / "step00004").mkdir(parents=True)
    append_jsonl(run.checkpoints, {"step": 4, "path": "/elsewhere/h200/grpo/checkpoints/step00004"})
    append_jsonl(run.checkpoints, {"step": 6, "path": "trio://run/step6"})
    rows = run.checkpoint_rows()
    assert rows[0]["path"] == str(run.path / "checkpoints" / "step00004") and rows[1]["path"] == "trio://run/step6"


def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(tmp_path):
    run = RunDir(tmp_path / "run")
    for step in (2, 4, 6):
        (run.path / "checkpoints" / f"step{step:05d}").mkdir(parents=True)
        run.record_checkpoint(step, str(run.path / "checkpoints" / f"step{step:05d}"), has_optimizer=True)
    tried = []

    def load(path, row):
        tried.append(row["step"])
        if row["step"] == 6:
            raise DamagedCheckpoint(f"{path}/adapter.safetensors does not match the SHA-256")

    with pytest.warns(RuntimeWarning, match="step 6 cannot be used"):
        row = resume_checkpoint(run, load)
    assert tried == [6, 4] and row["step"] == 4 and row["path"] == str(run.path / "checkpoints" / "step00004")
    assert [r["step"] for r in read_jsonl(run.checkpoints)] == [2, 4]  # the run continues from step 4


def test_no_loadable_checkpoint_names_every_one_tried(tmp_path):
    run = RunDir(tmp_path / "run")
    for step in (2, 4):
        run.record_checkpoint(step, str(run.path / "checkpoints" / f"step{step:05d}"))

    def load(path, row):
        raise FileNotFoundError(f"no LoRA checkpoint at {path} (missing meta.json)")

    with pytest.warns(RuntimeWarning), pytest.raises(DamagedCheckpoint, match="step 4: .*step00004.*step 2: .*step00002"):
        resume_checkpoint(run, load)
    assert resume_checkpoint(RunDir(tmp_path / "empty"), load) is None


def test_open_session_resumes_from_the_newest_checkpoint_that_loads(tmp_path):
    run = RunDir(tmp_path / "run")
    for step in (2, 4):
        run.record_checkpoint(step, str(run.path / "checkpoints" / f"step{step:05d}"), has_optimizer=True)
    append_jsonl(run.metrics, {"step": 2})
    append_jsonl(run.metrics, {"step": 3})
    loads = []

    class Trainer:
        def load_state_with_optimizer(self, path):
            loads.append(path)
            if path.endswith("step00004"):
                raise DamagedCheckpoint(f"{path}/adapter.safetensors: tensor x holds NaN or infinite values")
            return SimpleNamespace(result=lambda: {})

        def get_tokenizer(self):
            return None

    service = SimpleNamespace(create_lora_training_client=lambda **kwargs: Trainer())
    config = TrainConfig(out=str(run.path), resume=True)
    with pytest.warns(RuntimeWarning, match="NaN"):
        session = open_session(config, service=service, search_client=object(), examples=[])
    assert session.start_step == 2 and loads[-1] == str(run.path / "checkpoints" / "step00002")
    assert [r["step"] for r in read_jsonl(run.metrics)] == []  # steps 2 and 3 will be redone


def test_a_training_run_searches_with_its_configured_number_of_passages(tmp_path, monkeypatch):
    import helpers.session as session_module
    from helpers.experiment import make_plan

    asked = {}

    def fake_client(backend, **options):
        asked.update(options, backend=backend)
        return object()

    class Trainer:
        def get_tokenizer(self):
            return None

    monkeypatch.setattr(session_module, "create_search_client", fake_client)
    service = SimpleNamespace(create_lora_training_client=lambda **kwargs: Trainer())
    open_session(TrainConfig(out=str(tmp_path / "run"), search_topk=5), service=service, examples=[])
    assert asked == {"backend": "local", "topk": 5}
    with pytest.raises(ValueError, match="search_topk"):
        TrainConfig(search_topk=0)
    # a recipe's stages take it from --set, as every other field (its evaluation is set on its own)
    plan = make_plan("h200_again", str(tmp_path / "x"), overrides=["grpo.search_topk=5", "eval.search_topk=5"])
    assert {stage.search_topk for stage in plan.stages.values()} == {5} and plan.eval.search_topk == 5
    assert make_plan("h200_again", str(tmp_path / "y")).stages["trim"].search_topk == TrainConfig().search_topk
    # a client handed in must return what the config records, refused before the trainer is made
    made = []
    service = SimpleNamespace(create_lora_training_client=lambda **kwargs: made.append(kwargs) or Trainer())
    with pytest.raises(ValueError, match="returns 3 passages a search but the config says search_topk=2"):
        open_session(TrainConfig(out=str(tmp_path / "z"), search_topk=2), service=service,
                     search_client=SimpleNamespace(topk=3), examples=[])
    assert made == [] and not (tmp_path / "z").exists()


def test_an_out_folders_config_keeps_each_stages_settings_from_the_command_that_ran_it(tmp_path):
    import json

    from helpers.experiment import make_plan, record_config

    out, work = str(tmp_path / "out"), str(tmp_path / "work")
    trained = ["trim.search_topk=5", "trim.seed=2"]
    (tmp_path / "out").mkdir()
    record_config(make_plan("h200_again", out, work, trained), "h200_again", trained, ("grpo",))
    evaluated = ["eval.search_topk=5"]
    record_config(make_plan("h200_again", out, work, evaluated), "h200_again", evaluated, ("eval",))
    record = json.loads((tmp_path / "out" / "config.json").read_text())
    assert record["stages"]["trim"]["search_topk"] == 5 and record["stages"]["trim"]["seed"] == 2  # not lost
    assert record["eval"]["search_topk"] == 5
    assert record["overrides"] == {"grpo": trained, "eval": evaluated}
    # another preset's record is not mixed in
    record_config(make_plan("h200", out, work, []), "h200", [], ("eval",))
    assert json.loads((tmp_path / "out" / "config.json").read_text())["overrides"] == {"eval": []}
