"""The rollout on the real local engine (smollm2-135m) and the real BM25 index of a tiny corpus.

The decisive check: the trajectory the rollout assembles, scored again by the same model, gives
back the sampler's own logprobs at every sampled token. That only holds if no token moved.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import pytrio as trio
import torch

from helpers.data import SearchExample
from helpers.models import load_tokenizer
from helpers.protocol import stop_token_ids
from helpers.rollout import RolloutConfig, check_continuity, rollout_batch, token_table
from helpers.widgets.adapters import trajectory_tree
from fixtures.doubles import call, fake_logprob

pytestmark = pytest.mark.slow
MODEL = "smollm2-135m"
FIXTURES = Path(__file__).parent / "fixtures" / "search"
EXAMPLES = [SearchExample(id="e", question="Where is the Eiffel Tower?", answers=["Paris"], data_source="nq")]


@pytest.fixture(scope="module")
def engine():
    from helpers.engine import connect

    torch.set_num_threads(2)
    return connect("local").create_sampling_client(base_model=MODEL)


@pytest.fixture(scope="module")
def search(tmp_path_factory):
    from helpers.search import local

    index_dir = local.build_index(FIXTURES / "corpus.jsonl", tmp_path_factory.mktemp("index"), show_progress=False)
    return local.LocalSearchClient(index_dir=index_dir)


class FirstBranchSearches:
    """The real sampler, except that branch 0's first turn is a scripted call to search.

    SmolLM2-135M rarely calls the tool on its own; this way one rollout has a real first turn
    (branch 1) and a real second turn on a prompt holding a real observation (branch 0).
    """

    def __init__(self, engine, tokenizer):
        self.engine, self.tokenizer, self.first = engine, tokenizer, True

    async def sample_async(self, prompt, num_samples=1, sampling_params=None, return_text=True):
        response = await self.engine.sample_async(prompt=prompt, num_samples=num_samples,
                                                  sampling_params=sampling_params, return_text=return_text)
        if self.first:
            self.first = False
            tokens = self.tokenizer.encode(call("Eiffel Tower"), add_special_tokens=False)
            tokens = [*tokens, stop_token_ids(self.tokenizer)[0]]
            scripted = trio.types.SampleSequence(stop_reason="stop", tokens=tokens,
                                                 logprobs=[fake_logprob(i) for i in range(len(tokens))])
            response = trio.types.SampleResponse(sequences=[scripted, *response.sequences[1:]])
        return response


def test_a_real_rollout_is_continuous_down_to_the_samplers_logprobs(engine, search):
    tokenizer = load_tokenizer(MODEL)
    config = RolloutConfig(group_size=2, max_assistant_tokens=10, max_search_calls=1, max_assistant_turns=2,
                           max_tool_response_tokens=400, seed=5)
    batch = rollout_batch(FirstBranchSearches(engine, tokenizer), tokenizer, search, EXAMPLES, config, progress=False)
    assert len(batch) == 2 and all(t.done and t.end_reason for t in batch)
    assert batch.stats.sampling_seconds > 0 and batch.stats.search_calls >= 1
    searched = batch[0]
    assert len(searched.turns) == 2 and searched.search_calls == 1
    record = searched.searches[0]
    assert record.ok and record.items_kept >= 1 and "Eiffel Tower" in record.content
    real_turns = [(batch[0], 1), (batch[1], 0)]  # (trajectory, turn) pairs the model sampled
    for trajectory in batch:
        check_continuity(trajectory)
        assert trajectory.reward in {1.0, 0.0, -0.1}
        for turn in trajectory.turns:
            assert len(turn.completion_tokens) == len(turn.logprobs)
            assert turn.stop_reason in {"stop", "length"}
    for trajectory, turn_index in real_turns:
        assert len(trajectory.turns[turn_index].completion_tokens) <= 10
        rows = token_table(trajectory)
        rescored = engine.compute_logprobs(trio.ModelInput.from_ints([r["token_id"] for r in rows])).result()
        sampled = [r for r in rows if r["trained"] and r["turn"] == turn_index]
        assert len(sampled) == len(trajectory.turns[turn_index].completion_tokens) > 0
        for row in sampled:
            assert rescored[row["position"]] == pytest.approx(row["logprob"], abs=2e-3)
    tree = trajectory_tree(batch)
    assert tree["branches"][0]["turns"][0]["observation"]["tokens"] == record.observation_tokens > 0
