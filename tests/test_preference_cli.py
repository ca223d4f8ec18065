"""Perplexity's reward from the command line, on the small model: the preference model trained,
saved and evaluated (`python -m helpers.preference train | evaluate`), the rubric set's pass@4
filter on a policy's samples (`... rubrics`), and the gated reward's preference score and
reference lengths chosen by text in a training config (`--reward-options`, `--set`)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from helpers.efficiency import GatedReward, ReferenceLengths
from helpers.preference.cli import main as preference_main
from helpers.reward_functions import make_reward
from helpers.runs import override
from helpers.train import TrainConfig

pytestmark = pytest.mark.slow
TINY = ["--model", "smollm2-135m", "--lora-layers", "1", "--rank", "2", "--epochs", "1",
        "--examples", "9", "--ties", "3"]
TINY_ROLLOUT = ["--rollout.max-assistant-turns", "1", "--rollout.max-assistant-tokens", "8",
                "--rollout.max-search-calls", "1"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("preference")
    result = preference_main(["train", *TINY, "--out", str(folder)])
    return folder, result


def test_train_saves_beside_its_evaluation_and_evaluate_reads_the_same_pairs(saved, capsys):
    folder, trained = saved
    assert {f.name for f in folder.iterdir()} == {"preference.safetensors", "preference.json", "evaluation.json"}
    assert trained["symmetrise"] and trained["train_pairs"] == 6 and trained["held_out"]["pairs"] == 3
    assert trained["held_out"]["p_bar_bias"] <= 0.01 and trained["ties"]["pairs"] == 3
    again = preference_main(["evaluate", "--from", str(folder)])
    out = capsys.readouterr().out
    assert "held-out accuracy" in out and "P̄(a,b) + P̄(b,a) - 1" in out
    assert again["held_out"]["accuracy"] == trained["held_out"]["accuracy"]
    assert again["held_out"]["position_bias"] == pytest.approx(trained["held_out"]["position_bias"], abs=1e-5)
    assert json.loads((folder / "evaluation.json").read_text())["data"]["examples"] == 9


def test_the_rubric_filter_counts_what_pass_at_4_keeps_and_drops(tmp_path, capsys):
    out = tmp_path / "rubrics.json"
    result = preference_main(["rubrics", "--model", "smollm2-135m", "--limit", "3", "--k", "4", *TINY_ROLLOUT,
                              "--out", str(out)])
    counts = result["counts"]
    assert counts["prompts"] == 3
    assert counts["kept"] + counts["dropped: no sample passes"] + counts["dropped: every sample passes"] == 3
    saved = json.loads(out.read_text())
    assert saved["counts"] == counts and len(saved["passes"]) == 3 and "pass@4 on 3 rubric prompts" in capsys.readouterr().out


def test_the_gated_reward_takes_its_preference_and_reference_by_name_from_a_config(monkeypatch):
    config = override(TrainConfig(reward="gated"), "reward_options", '{"preference": "some/folder", "reference": "initial"}')
    reward = config.reward_fn()
    assert isinstance(reward, GatedReward) and reward.unbound() == ["preference", "reference"]
    with pytest.raises(ValueError, match="session"):
        reward.prepare([])
    with pytest.raises(ValueError, match="reference is one of"):
        make_reward("gated", reference="sft")
    assert make_reward("gated", reference="group").reference is None  # the group's own lengths, as before
    loaded = []
    monkeypatch.setattr("helpers.preference.score.PreferenceScore.load",
                        lambda folder, reference: loaded.append((folder, reference)) or SimpleNamespace(scores=None))
    session = SimpleNamespace(start_step=0, training_client=SimpleNamespace(save_weights_and_get_sampling_client=lambda: "frozen"),
                              tokenizer="tok", search_client="search", config=config)
    reward.bind(session)
    assert isinstance(reward.reference, ReferenceLengths) and reward.reference.sampling_client == "frozen"
    assert loaded == [("some/folder", reward.reference)]  # s against the same frozen policy's replies


def test_a_resumed_run_keeps_the_policy_it_started_from_as_the_reference():
    """reference="initial" is the run's starting policy: on a resumed run the adapter it started from
    (init_from) or the base model, never the trainer's current (resumed) weights."""
    opened = []
    trainer = SimpleNamespace(save_weights_and_get_sampling_client=lambda: "current weights")
    service = SimpleNamespace(
        create_training_client_from_state=lambda path: opened.append(path) or SimpleNamespace(
            save_weights_and_get_sampling_client=lambda: f"weights of {path}"),
        create_sampling_client=lambda base_model: f"base {base_model}")

    def session(start_step, init_from):
        config = TrainConfig(reward="gated", init_from=init_from)
        return SimpleNamespace(start_step=start_step, training_client=trainer, service=service, tokenizer="tok",
                               search_client="search", config=config)

    assert ReferenceLengths.of_session(session(0, "sft/state")).sampling_client == "current weights"
    assert ReferenceLengths.of_session(session(7, "sft/state")).sampling_client == "weights of sft/state"
    assert opened == ["sft/state"]
    resumed_from_base = ReferenceLengths.of_session(session(7, None)).sampling_client
    assert resumed_from_base == f"base {TrainConfig().resolved_model()}"


def test_helpers_train_runs_the_gated_reward_with_s_from_the_saved_model_and_reference_lengths(saved, tmp_path,
                                                                                               monkeypatch):
    from helpers.train import main as train_main

    folder, _ = saved
    run = tmp_path / "run"
    sampled = []
    for_groups = ReferenceLengths.for_groups
    monkeypatch.setattr(ReferenceLengths, "for_groups",
                        lambda self, groups: sampled.append(self) or for_groups(self, groups))
    train_main(["--model", "smollm2-135m", "--backend", "local", "--max-steps", "1", "--questions-per-batch", "1",
                "--limit", "2", "--rollout.group-size", "2", *TINY_ROLLOUT, "--lora-rank", "4", "--save-every", "0",
                "--tracker", "none", "--out", str(run), "--reward", "gated",
                "--reward-options", f"preference={folder},reference=initial,lambda_len=0.1"])
    row = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert 0.0 < row["eff/preference_mean"] < 1.0  # s = P-bar from the model (s = 1 without one)
    assert row["eff/reference_length_mean"] >= 1
    reference = sampled[0]  # one frozen policy gives both the lengths and the replies s compares against
    assert {id(r) for r in sampled} == {id(reference)} and len(reference.cache) == 1 and len(reference.replies) == 1
    saved_config = json.loads((run / "config.json").read_text())["train"]
    assert saved_config["reward_options"]["preference"] == str(folder)


def test_helpers_train_mixes_rubric_prompts_in_by_share_and_scores_them_by_their_rubrics(tmp_path):
    from helpers.train import main as train_main

    run = tmp_path / "run"
    train_main(["--model", "smollm2-135m", "--backend", "local", "--max-steps", "1", "--questions-per-batch", "2",
                "--limit", "2", "--rollout.group-size", "2", *TINY_ROLLOUT, "--lora-rank", "4", "--save-every", "0",
                "--tracker", "none", "--out", str(run), "--rubric-share", "0.5"])
    row = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert row["rubric/prompt"] == 0.5 and 0.0 <= row["rubric/met_all"] <= 0.5
