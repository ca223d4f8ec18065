"""The rollout state machine against a scripted sampler and a scripted search backend.

The sampler's tokens are the real tokenizer's encodings, ending on or before <|im_end|>, so the
continuity checks here are the real ones.
"""

from __future__ import annotations

import asyncio
import re

import pytest

from helpers.data import SearchExample
from helpers.models import load_tokenizer
from helpers.protocol import build_messages, build_prompt
from helpers.advantages import assign_advantages
from helpers.reward import FORMAT_PENALTY, exact_match_reward, score
from helpers.rollout import (
    RolloutBatch,
    RolloutConfig,
    Trajectory,
    assign_group_advantages,
    check_continuity,
    groups_of,
    rollout_batch,
    rollout_groups,
    token_table,
)
from helpers.widgets.adapters import trajectory_tree
from fixtures.doubles import FakeSearchClient, ScriptedSamplingClient, call

EXAMPLES = [
    SearchExample(id="q0", question="Capital of France? (answer Paris)", answers=["Paris"], data_source="nq"),
    SearchExample(id="q1", question="Birthplace of Saint-Exupery? (answer Lyon)", answers=["Marseille"], data_source="nq"),
]


def plan_script(prompt: str, index: int) -> str:
    """Branch i follows plan i (fixed by its first turn, read back from its own first query)."""
    answer = re.search(r"\(answer (\w+)\)", prompt).group(1)
    plans = re.findall(r'"query": "plan(\d)', prompt)
    plan = int(plans[0]) if plans else index
    searches = len(plans)
    if plan == 0:
        return f"Answer: {answer}"
    if plan == 1:
        return call("plan1 capital") if searches == 0 else f"I found it.\nAnswer: {answer}"
    if plan == 2:
        return call("plan2 oops") + f"\nAnswer: {answer}"  # call and answer in one turn
    return call(f"plan3 try {searches}")  # never answers


@pytest.fixture(scope="module", params=["qwen2.5-0.5b", "smollm2-135m"])
def tokenizer(request):
    return load_tokenizer(request.param)


def run(tokenizer, script=plan_script, search=None, include_stop=lambda n: n % 2 == 0, **overrides):
    config = RolloutConfig(**{"group_size": 4, "max_search_calls": 2, "max_assistant_tokens": 200,
                              "max_trajectory_tokens": 4096, **overrides})
    sampler = ScriptedSamplingClient(tokenizer, script, include_stop=include_stop)
    search = search or FakeSearchClient()
    batch = rollout_batch(sampler, tokenizer, search, EXAMPLES, config, progress=False)
    return batch, sampler, search


def test_groups_branch_from_a_shared_root_and_end_for_the_right_reason(tokenizer):
    batch, sampler, search = run(tokenizer)
    assert isinstance(batch, RolloutBatch) and len(batch) == 8
    assert [(t.question_index, t.group_index) for t in batch] == [(q, g) for q in range(2) for g in range(4)]
    # the first turn is one request per question with num_samples=group_size, later ones one sample
    first = sampler.requests[:2]
    assert [r["num_samples"] for r in first] == [4, 4]
    assert [r["params"].seed for r in first] == [0, 1]
    assert all(r["num_samples"] == 1 for r in sampler.requests[2:])
    assert first[0]["prompt"] == build_prompt(tokenizer, batch[0].messages[:2])
    assert "<|im_end|>" in first[0]["params"].stop
    for q in range(2):
        group = batch[4 * q: 4 * q + 4]
        assert len({tuple(t.turns[0].prompt_tokens) for t in group}) == 1  # shared root
        assert [t.end_reason for t in group] == ["answer", "answer", "invalid", "search_budget"]
        assert [len(t.turns) for t in group] == [1, 2, 1, 3]
        assert [t.search_calls for t in group] == [0, 1, 0, 2]
    assert [t.reward for t in batch] == [1.0, 1.0, -0.1, -0.1, 0.0, 0.0, -0.1, -0.1]
    assert [t.answer for t in batch[:2]] == ["Paris", "Paris"] and batch[2].answer is None
    assert batch[0].advantage == pytest.approx(0.55) and batch[3].advantage == pytest.approx(-0.55)
    assert batch[4].advantage == pytest.approx(0.05)
    # the search of each branch went to that branch (matched back in order)
    assert sorted(search.queries) == sorted(["plan1 capital", "plan3 try 0", "plan3 try 1"] * 2)
    for trajectory in batch:
        for record in trajectory.searches:
            assert record.query in record.content and trajectory.turns[record.turn_index].query == record.query
        check_continuity(trajectory)
    stats = batch.stats
    assert stats.trajectories == 8 and stats.search_calls == 6
    assert not any(group.degenerate for group in groups_of(batch))
    assert stats.end_reasons == {"answer": 4, "invalid": 2, "search_budget": 2}
    assert stats.turns == 3 and stats.sample_requests == 2 + 4 + 2
    assert stats.sampled_tokens == sum(len(t.completion_tokens) for tr in batch for t in tr.turns)
    assert stats.sampling_seconds > 0 and stats.total_seconds >= stats.sampling_seconds


def test_rollout_groups_returns_finished_unscored_groups(tokenizer):
    config = RolloutConfig(group_size=4, max_search_calls=2, max_assistant_tokens=200, max_trajectory_tokens=4096)
    sampler = ScriptedSamplingClient(tokenizer, plan_script, include_stop=lambda n: n % 2 == 0)
    groups = rollout_groups(sampler, tokenizer, FakeSearchClient(), EXAMPLES, config, progress=False)
    assert [(g.index, g.example.id, len(g)) for g in groups] == [(0, EXAMPLES[0].id, 4), (1, EXAMPLES[1].id, 4)]
    assert all(t.done and t.question_index == g.index for g in groups for t in g.trajectories)
    assert all(t.reward == FORMAT_PENALTY and t.advantage == 0.0 and not t.exact_match
               for g in groups for t in g.trajectories)  # nothing scored yet
    assert groups.stats.trajectories == 8 and groups.stats.end_reasons["answer"] == 4
    # scoring is a separate stage: the same numbers rollout_batch gives
    score(groups, exact_match_reward)
    assert assign_advantages(groups) == 0
    assert [t.reward for t in groups[0].trajectories] == [1.0, 1.0, -0.1, -0.1]
    assert groups[0].advantages[0] == pytest.approx(0.55) and not groups[0].degenerate
    assert groups_of([t for g in groups for t in g.trajectories])[1].trajectories == groups[1].trajectories


def test_the_final_answer_is_scored_only_when_the_branch_ended_on_an_answer(tokenizer):
    batch, _, _ = run(tokenizer)
    invalid = batch[2]
    assert "Answer: Paris" in invalid.final_text  # the answer line is there, the format is not
    assert invalid.reward == -0.1 and not invalid.valid_format
    budget = batch[3]
    assert budget.final_text.startswith("<tool_call>") and budget.reward == -0.1


def test_the_turn_budget_ends_a_branch_that_keeps_searching(tokenizer):
    batch, _, _ = run(tokenizer, max_search_calls=10, max_assistant_turns=3)
    assert batch[3].end_reason == "turn_budget" and len(batch[3].turns) == 3 and batch[3].search_calls == 2


def test_a_failed_or_crashing_search_reaches_the_model_as_an_observation(tokenizer):
    search = FakeSearchClient(fail={"plan1 capital"}, explode={"plan3 try 0"})
    batch, _, _ = run(tokenizer, search=search)
    failed = batch[1].searches[0]
    assert not failed.ok and failed.fitted and batch[1].failed_searches == 1
    assert "Search failed" in batch[1].messages[-2]["content"]
    assert batch[1].end_reason == "answer"  # the model carried on after the error
    crashed = batch[3].searches[0]
    assert not crashed.ok and "ConnectionError" in crashed.error
    assert all("SECRET" not in str(m["content"]) for t in batch for m in t.messages)
    assert batch.stats.failed_searches == 4


def test_observations_keep_whole_items_within_the_per_call_budget(tokenizer):
    full, _, _ = run(tokenizer, search=FakeSearchClient(items_per_query=3, content_words=40))
    all_three = full[1].searches[0]
    assert all_three.items_kept == 3 and not all_three.cut and full[1].truncated_observations == 0
    budget = all_three.observation_tokens - 5  # a little less than three items need
    batch, _, _ = run(tokenizer, search=FakeSearchClient(items_per_query=3, content_words=40),
                      max_tool_response_tokens=budget)
    record = batch[1].searches[0]
    assert record.items_returned == 3 and record.items_kept == 2 and record.cut
    assert record.observation_tokens <= budget
    assert "[2] Title" in record.content and "[3] Title" not in record.content  # ranked prefix
    assert batch[1].truncated_observations == 1 and batch.stats.truncated_observations >= 2


def test_a_search_record_keeps_the_passage_ids_of_the_items_the_model_read(tokenizer):
    search = FakeSearchClient(items_per_query=3, content_words=40, passage_ids=True)
    full, _, _ = run(tokenizer, search=search)
    record = full[1].searches[0]
    assert record.passage_ids == [f"{record.query}#{k}" for k in range(3)]
    budget = record.observation_tokens - 5
    batch, _, _ = run(tokenizer, search=FakeSearchClient(items_per_query=3, content_words=40, passage_ids=True),
                      max_tool_response_tokens=budget)
    cut = batch[1].searches[0]
    assert cut.items_kept == 2 and cut.passage_ids == [f"{cut.query}#0", f"{cut.query}#1"]
    assert all("#" not in str(m["content"]) for m in batch[1].messages if m["role"] == "tool")  # never shown
    unnamed, _, _ = run(tokenizer, search=FakeSearchClient(items_per_query=3))
    assert all(s.passage_ids == [] for t in unnamed for s in t.searches)


def test_when_not_even_one_item_fits_the_branch_ends_on_its_call(tokenizer):
    batch, _, _ = run(tokenizer, search=FakeSearchClient(content_words=200), max_tool_response_tokens=60)
    branch = batch[1]
    assert branch.end_reason == "observation_budget" and len(branch.turns) == 1
    assert branch.searches[0].items_kept == 0 and not branch.searches[0].fitted
    assert branch.final_text.startswith("<tool_call>") and branch.reward == -0.1
    assert branch.messages[-1]["role"] == "assistant"  # no observation was appended


def test_the_trajectory_budget_bounds_prompt_plus_sampling(tokenizer):
    prompt_len = len(build_prompt(tokenizer, build_messages(EXAMPLES[0].question)))
    batch, sampler, _ = run(tokenizer, max_trajectory_tokens=prompt_len + 60, search=FakeSearchClient(content_words=5))
    assert all(r["params"].max_tokens <= prompt_len + 60 - len(r["prompt"]) for r in sampler.requests)
    for trajectory in batch:
        last = trajectory.turns[-1]
        assert len(last.prompt_tokens) + len(last.completion_tokens) <= prompt_len + 60 + 1
    assert {t.end_reason for t in batch} <= {"answer", "invalid", "search_budget", "observation_budget", "context_budget"}
    assert any(t.end_reason in {"observation_budget", "context_budget"} for t in batch)


def test_sampling_requests_and_searches_of_a_turn_run_concurrently(tokenizer):
    sampler = ScriptedSamplingClient(tokenizer, plan_script, delay=0.05)
    search = FakeSearchClient(delay=0.05)
    rollout_batch(sampler, tokenizer, search, EXAMPLES, RolloutConfig(group_size=4, max_search_calls=2),
                  progress=False)
    assert sampler.max_concurrent >= 2 and search.max_concurrent >= 2
    serial = FakeSearchClient(delay=0.05)
    rollout_batch(ScriptedSamplingClient(tokenizer, plan_script), tokenizer, serial, EXAMPLES,
                  RolloutConfig(group_size=4, max_search_calls=2, search_concurrency=1), progress=False)
    assert serial.max_concurrent == 1


def test_it_runs_inside_a_running_event_loop(tokenizer):
    async def notebook_cell():
        return run(tokenizer)[0]

    batch = asyncio.run(notebook_cell())
    assert len(batch) == 8 and all(t.done for t in batch)


def test_group_advantages_and_degenerate_groups():
    def traj(q, reward):
        t = Trajectory(example=EXAMPLES[0], group_index=0, messages=[], question_index=q)
        t.reward = reward
        return t

    batch = [traj(0, 1.0), traj(0, 0.0), traj(0, -0.1), traj(1, -0.1), traj(1, -0.1), traj(1, -0.1), traj(2, 1.0)]
    assert assign_group_advantages(batch) == 2
    assert [round(t.advantage, 6) for t in batch[:3]] == [0.7, -0.3, -0.4]
    assert [t.advantage for t in batch[3:]] == [0.0, 0.0, 0.0, 0.0]  # exactly zero, no float residue
    assert sum(t.advantage for t in batch[:3]) == pytest.approx(0.0)


def test_views_for_the_widgets(tokenizer):
    batch, _, _ = run(tokenizer)
    tree = trajectory_tree(batch[:4])
    assert tree["question"] == EXAMPLES[0].question and tree["group_size"] == 4 and not tree["degenerate"]
    assert [b["reward"] for b in tree["branches"]] == [1.0, 1.0, -0.1, -0.1]
    searched = tree["branches"][1]["turns"][0]
    assert searched["kind"] == "tool" and searched["query"] == "plan1 capital"
    assert searched["observation"]["items_kept"] == 3 and searched["observation"]["tokens"] > 0
    assert tree["branches"][1]["turns"][1]["is_answer"] and tree["branches"][1]["turns"][1]["answer"] == "Paris"
    assert tree["root"]["branches"] == [0, 1, 2, 3] and len(tree["root"]["children"]) == 4
    leaves = [leaf for node in _walk(tree["root"]) for leaf in node.get("leaves", [])]
    assert sorted(leaf["group_index"] for leaf in leaves) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="one question"):
        trajectory_tree(batch[3:5])

    rows = token_table(batch[1], tokenizer)
    sources = [r["source"] for r in rows]
    assert sources[0] == "prompt" and "observation" in sources and sources[-1] == "assistant"
    assert all(r["advantage"] == batch[1].advantage and r["logprob"] < 0 for r in rows if r["trained"])
    assert all(r["advantage"] == 0.0 and r["logprob"] == 0.0 for r in rows if not r["trained"])
    observed = "".join(r["text"] for r in rows if r["source"] == "observation")
    assert "<tool_response>" in observed and "plan1 capital page 0" in observed
    assembled = "".join(r["text"] for r in rows)
    assert assembled == tokenizer.decode([r["token_id"] for r in rows]) or "\ufffd" in assembled


def test_identical_first_turns_share_a_node_in_the_tree(tokenizer):
    batch, _, _ = run(tokenizer, script=lambda prompt, index: "Answer: Paris")
    tree = trajectory_tree(batch[:4])
    assert len(tree["root"]["children"]) == 1 and tree["root"]["children"][0]["branches"] == [0, 1, 2, 3]
    assert tree["degenerate"] and sum(group.degenerate for group in groups_of(batch)) == 2


def _walk(node):
    yield node
    for child in node["children"]:
        yield from _walk(child)
