"""helpers.course.policies: which policies run here, clear refusals, and the engine's tokenizer check."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import pytest

from helpers import config
from helpers.course import policies
from helpers.course.policies import (
    PolicyNotAvailable,
    adapter_dir,
    default_policy,
    learner_checkpoints,
    load_policy,
    policy_options,
    recorded_or_learner,
    unavailable_reason,
)


@pytest.fixture
def results(tmp_path, monkeypatch):
    """An empty results folder with a recorded run whose SFT + GRPO adapter was trained on `qwen2.5-0.5b`."""
    monkeypatch.setattr(config, "RESULTS_DIR", tmp_path)
    monkeypatch.setattr(policies, "_LOADED", {})
    monkeypatch.setattr(policies, "recall", lambda name: None)  # notebook 09 has not run
    adapter = tmp_path / policies.RECORDED_RUN / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "meta.json").write_text(json.dumps({"base_model": "qwen2.5-0.5b"}))
    return tmp_path


class FakeService:
    def __init__(self, error=None):
        self.calls, self.error = [], error

    def create_sampling_client(self, base_model, model_path=None):
        self.calls.append((base_model, model_path))
        if self.error:
            raise self.error
        return SimpleNamespace(get_tokenizer=lambda: "tokenizer", model_path=model_path)


def test_a_missing_adapter_is_named_with_what_to_do(results):
    reason = unavailable_reason("sft", "qwen2.5-0.5b")
    assert "no SFT adapter committed" in reason and "sft_adapter/meta.json" in reason
    with pytest.raises(PolicyNotAvailable, match="no SFT adapter committed"):
        load_policy("sft", model="qwen2.5-0.5b", service=FakeService())
    assert unavailable_reason("base", "qwen2.5-0.5b") is None


def test_an_adapter_of_another_base_model_is_refused_before_loading(results):
    service = FakeService()
    with pytest.raises(PolicyNotAvailable, match="trained on 'qwen2.5-0.5b'.*COURSE_MODEL=qwen2.5-0.5b"):
        load_policy("sft_grpo", model="smollm2-135m", service=service)
    assert service.calls == []


def test_recorded_policies_load_their_adapter_once_per_model(results):
    service = FakeService()
    policy = load_policy("sft_grpo", model="qwen2.5-0.5b", service=service)
    assert policy.path == str(results / policies.RECORDED_RUN / "adapter") and policy.tokenizer == "tokenizer"
    assert policy.label == "SFT + GRPO"
    assert load_policy("sft_grpo", model="qwen2.5-0.5b", service=service) is policy
    base = load_policy("base", model="qwen2.5-0.5b", service=service)
    assert base.path is None and service.calls == [("qwen2.5-0.5b", policy.path), ("qwen2.5-0.5b", None)]


@pytest.mark.parametrize("name, run, label", [
    ("agent", "h200_agent", "search agent (SFT → habit → trim)"),
    ("again", "h200_again", "multi-search agent (SFT → exact match → trim)"),
])
def test_a_policy_of_another_run_loads_by_name_from_its_own_run_folder(results, name, run, label):
    """The search agents' adapters live in the runs of their recipes, not in the recorded run of SFT and SFT + GRPO."""
    reason = unavailable_reason(name, "qwen2.5-0.5b")
    assert f"recorded run {run} has no {label} adapter" in reason and f"{run}/adapter/meta.json" in reason
    adapter = results / run / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "meta.json").write_text(json.dumps({"base_model": "qwen2.5-0.5b"}))
    assert unavailable_reason(name, "qwen2.5-0.5b") is None and adapter_dir(name) == adapter
    service = FakeService()
    agent = load_policy(name, model="qwen2.5-0.5b", service=service)
    trained = load_policy("sft_grpo", model="qwen2.5-0.5b", service=service)
    assert agent.path == str(adapter) and trained.path == str(results / policies.RECORDED_RUN / "adapter")
    assert agent.label == label and agent is not trained
    labels = dict((value, label) for label, value in policy_options("qwen2.5-0.5b"))
    assert labels[name] == f"{label} (recorded run {run})"
    # a test's one run folder stands in for every policy's own run
    assert adapter_dir(name, run="toy") == results / "toy" / "adapter"


def test_the_picker_offers_every_recorded_policy_the_two_trained_ones_first(results):
    options = [value for _, value in policy_options("qwen2.5-0.5b")]
    assert options[:2] == [policies.TRAINED_POLICY, policies.SEARCHES_AGAIN] and options[-1] == "base"
    assert sorted(options) == sorted(policies.RECORDED_POLICIES)
    assert "not available here" in policy_options("smollm2-135m")[1][0]
    # the policy that searches again is one the course has recorded, not the trained one
    assert policies.SEARCHES_AGAIN in policies.RECORDED_POLICIES and policies.SEARCHES_AGAIN != policies.TRAINED_POLICY


def test_the_default_is_the_trained_policy_where_it_runs(results, monkeypatch):
    assert default_policy("qwen2.5-0.5b") == "sft_grpo"
    assert default_policy("smollm2-135m") == "base"
    notebook_09 = {"summary": {"sampler_path": "local://run/w/s"}, "sft": "local://sft/w/s"}
    monkeypatch.setattr(policies, "recall", lambda name: notebook_09 if name == "training_09" else None)
    assert default_policy("smollm2-135m") == "local://run/w/s"
    labels = dict((value, label) for label, value in policy_options("smollm2-135m"))
    assert "not available here" in labels["sft_grpo"] and "not available here" in labels["sft"]
    assert "local://run/w/s" in labels and list(labels)[0] == "sft_grpo"


def test_a_recorded_policy_that_cannot_run_here_is_replaced_by_notebook_09s_checkpoint(results, monkeypatch):
    # only the SFT + GRPO adapter is committed in the fixture, trained on qwen2.5-0.5b
    assert recorded_or_learner("sft_grpo", "qwen2.5-0.5b") == "sft_grpo"
    assert recorded_or_learner("sft", "qwen2.5-0.5b") is None
    assert recorded_or_learner("sft_grpo", "smollm2-135m") is None
    notebook_09 = {"summary": {"sampler_path": "local://run/w/s"}, "sft": "local://sft/w/s"}
    monkeypatch.setattr(policies, "recall", lambda name: notebook_09 if name == "training_09" else None)
    assert recorded_or_learner("sft_grpo", "qwen2.5-0.5b") == "sft_grpo"  # the recorded adapter first
    assert recorded_or_learner("sft", "qwen2.5-0.5b") == "local://sft/w/s"
    assert recorded_or_learner("sft_grpo", "smollm2-135m") == "local://run/w/s"


def test_a_checkpoint_notebook_09_saved_and_that_is_gone_is_not_offered(results, monkeypatch, tmp_path):
    kept, gone = tmp_path / "grpo" / "final", tmp_path / "elsewhere" / "grpo" / "final"
    kept.mkdir(parents=True)
    (kept / "meta.json").write_text('{"base_model": "smollm2-135m"}')
    notebook_09 = {"summary": {"sampler_path": str(gone)}, "sft": str(kept)}
    monkeypatch.setattr(policies, "recall", lambda name: notebook_09 if name == "training_09" else None)
    assert default_policy("smollm2-135m") == "base"
    assert recorded_or_learner("sft", "smollm2-135m") == str(kept)
    assert list(learner_checkpoints().values()) == [str(kept)]


def test_paths_must_be_checkpoints_of_this_model(results, tmp_path):
    with pytest.raises(PolicyNotAvailable, match="unknown policy 'sft-grpo'"):
        load_policy("sft-grpo", model="qwen2.5-0.5b", service=FakeService())
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(PolicyNotAvailable, match="meta.json is missing"):
        load_policy(str(empty), model="qwen2.5-0.5b", service=FakeService())
    other = results / policies.RECORDED_RUN / "adapter"
    with pytest.raises(PolicyNotAvailable, match="trained on 'qwen2.5-0.5b'"):
        load_policy(str(other), model="smollm2-135m", service=FakeService())


def test_engine_refusals_become_policy_errors(results):
    from pytrio.errors.base import ValidationError

    error = ValidationError("x was trained with a tokenizer that splits the chat-template markers differently",
                            code="validation.checkpoint_config_mismatch")
    with pytest.raises(PolicyNotAvailable, match="cannot load SFT \\+ GRPO: .*splits the chat-template markers"):
        load_policy("sft_grpo", model="qwen2.5-0.5b", service=FakeService(error))


def test_the_real_engine_checks_the_tokenizer_of_an_adapter(results, small_model_name):
    """A checkpoint saved by the engine loads; the same weights with another marker split do not."""
    from helpers.engine import connect
    from helpers.engine.local import resolve_path

    service = connect("local")
    trainer = service.create_lora_training_client(small_model_name, rank=4, seed=1, train_mlp=False,
                                                  train_unembed=False)
    saved = resolve_path(trainer.save_weights_for_sampler("policies-test", ttl_seconds=None).result().path)
    adapter = results / policies.RECORDED_RUN / "adapter"
    shutil.rmtree(adapter)
    shutil.copytree(saved, adapter)
    policy = load_policy("sft_grpo", model=small_model_name, service=service)
    assert policy.sampler.get_tokenizer() is not None and policy.path == str(adapter)

    meta = json.loads((adapter / "meta.json").read_text())
    meta["tokenizer"]["<|im_end|>"] = [27, 91, 318, 6213, 91, 29]
    mine = results / "mine"
    shutil.copytree(adapter, mine)
    (mine / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(PolicyNotAvailable, match="splits the chat-template markers differently"):
        load_policy(str(mine), model=small_model_name, service=service)
