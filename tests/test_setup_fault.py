"""A set-up fault is not a search fault: with no search index a run stops before its first rollout
and says which command builds it; a fault of one search stays that search's observation."""

from __future__ import annotations

import pytest

from helpers import config
from helpers.data import SearchExample
from helpers.search import create_search_client, format_results
from helpers.search import local

EXAMPLE = SearchExample(id="q", question="Who wrote Hamlet?", answers=["Shakespeare"], data_source="nq")
SAYS_WHAT_TO_RUN = r"make setup.*python -m helpers setup"


@pytest.fixture
def no_index(tmp_path, monkeypatch):
    """A data folder without the index that `make setup` builds, and no index loaded yet."""
    monkeypatch.setattr(config, "DATA_DIR", tmp_path / "data")
    monkeypatch.setattr(local, "_INDEX", None)
    return tmp_path


class NeverSample:
    """A sampler that fails the test if anything is sampled: the run must stop before that."""

    def __init__(self):
        self.samples = 0

    def get_tokenizer(self):
        return object()

    def sample(self, *args, **kwargs):
        self.samples += 1
        raise AssertionError("a rollout started although the search index is missing")

    sample_async = sample


class NeverTrain:
    def __init__(self):
        self.sampler = NeverSample()

    def get_tokenizer(self):
        return object()

    def save_weights_and_get_sampling_client(self, *args, **kwargs):
        return self.sampler


class Service:
    def __init__(self):
        self.trainer = NeverTrain()

    def create_lora_training_client(self, **kwargs):
        return self.trainer

    def create_sampling_client(self, **kwargs):
        return self.trainer.sampler


def test_the_local_search_client_needs_the_index_and_names_the_setup_command(no_index):
    with pytest.raises(config.SetupRequired, match=SAYS_WHAT_TO_RUN):
        create_search_client("local")
    assert isinstance(config.SetupRequired("x"), FileNotFoundError)  # callers that handle a missing file still do


def test_evaluate_stops_before_its_first_rollout(no_index):
    from helpers.eval import EvalConfig, evaluate

    sampler = NeverSample()
    with pytest.raises(config.SetupRequired, match=SAYS_WHAT_TO_RUN):
        evaluate(EvalConfig(), sampling_client=sampler, examples=[EXAMPLE], progress=False)
    assert sampler.samples == 0


def test_training_stops_before_its_first_rollout(no_index, monkeypatch):
    import helpers.session as session_module
    from helpers.train import TrainConfig, train

    service = Service()
    monkeypatch.setattr(session_module, "connect", lambda backend=None: service)
    with pytest.raises(config.SetupRequired, match=SAYS_WHAT_TO_RUN):
        train(TrainConfig(out=str(no_index / "grpo"), max_steps=1, resume=False), progress=False)
    assert service.trainer.sampler.samples == 0


def test_the_experiment_stops_before_its_first_stage(no_index, monkeypatch):
    import helpers.experiment as experiment

    started = []
    for stage in ("stage_sft", "stage_grpo", "stage_eval"):
        monkeypatch.setattr(experiment, stage, lambda *args, stage=stage, **kwargs: started.append(stage))
    for stage in ("sft", "grpo", "eval", "all"):
        with pytest.raises(SystemExit, match=SAYS_WHAT_TO_RUN):
            experiment.main(["--preset", "cpu-dry", "--out", str(no_index / "out"), "--work", str(no_index / "work"),
                             "--stage", stage])
    assert started == []


def test_a_fault_of_one_search_stays_an_observation(no_index):
    class Failing:
        def search(self, query, k):
            raise OSError("disk read failed")

    client = local.LocalSearchClient(Failing())  # an index in hand: nothing to set up
    result = client.search("hamlet author")
    assert not result.ok and "disk read failed" in result.error
    assert "disk read failed" in format_results(result)  # what the model reads as the tool's answer
