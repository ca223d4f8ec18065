"""The "search_gain" reward: a second search is paid only where the policy, made to answer after its
first search, would have been wrong (and charged where it would have been right)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from fixtures.doubles import FakeSearchClient, ScriptedSamplingClient, call
from helpers.data import SearchExample
from helpers.models import load_tokenizer
from helpers.reward import FORMAT_PENALTY, score
from helpers.reward_functions import make_reward
from helpers.rollout import RolloutConfig, rollout_groups
from helpers.search_gain import ANSWER_PREFIX, first_search_answers, first_search_prompt, search_gain_reward

EXAMPLES = [SearchExample(id="q0", question="Who wrote it? (answer Paris)", answers=["Paris"], data_source="hotpotqa")]


def _trajectory(searches: int, right: bool, first_right=None, valid: bool = True):
    return SimpleNamespace(search_calls=searches, turns=[None] * (searches + 1), exact_match=right,
                           valid_format=valid, first_search_right=first_right)


def test_a_second_search_earns_only_what_it_changed():
    reward = search_gain_reward(gain=0.5)
    group = SimpleNamespace(trajectories=[
        _trajectory(1, True),                      # stopped, right: the outcome
        _trajectory(2, True, first_right=False),   # the second search made it right
        _trajectory(2, False, first_right=True),   # the second search lost a right answer
        _trajectory(2, True, first_right=True),    # right either way: worth what stopping was
        _trajectory(2, False, first_right=None),   # no counterfactual: the outcome alone
        _trajectory(3, False, first_right=True, valid=False),  # searched on and never answered
    ])
    result = reward(group)
    assert result.rewards == [1.0, 1.5, -0.5, 1.0, 0.0, FORMAT_PENALTY - 0.5]
    assert result.components["second_search_gain"] == [0.0, 1.0, -1.0, 0.0, 0.0, -1.0]
    assert result.components["counterfactuals"] == [0.0, 1.0, 1.0, 1.0, 0.0, 1.0]


def test_charging_only_never_pays_above_the_outcome_and_still_charges_a_lost_answer():
    reward = make_reward("search_gain", gain=0.5, pay=False)
    group = SimpleNamespace(trajectories=[
        _trajectory(1, True),                      # stopped, right
        _trajectory(2, True, first_right=False),   # the second search made it right: no bonus
        _trajectory(2, False, first_right=True),   # the second search lost a right answer: charged
        _trajectory(2, True, first_right=True),
    ])
    result = reward(group)
    assert result.rewards == [1.0, 1.0, -0.5, 1.0]
    assert result.components["second_search_gain"] == [0.0, 1.0, -1.0, 0.0]  # the paired term, as measured


def test_the_step_reads_each_component_per_source_when_a_batch_mixes_them():
    def group(source, searches_right_first):
        trajectories = [SimpleNamespace(search_calls=s, turns=[None] * (s + 1), first_search_right=first,
                                        answer=None, end_reason="answer",
                                        final_text="Answer: Paris" if right else "Answer: Rome",
                                        example=SearchExample(id=source, question="q", answers=["Paris"],
                                                              data_source=source))
                        for s, right, first in searches_right_first]
        return SimpleNamespace(index=0, trajectories=trajectories)

    groups = [group("hotpotqa", [(2, True, False), (1, True, None)]),   # a second search that paid
              group("nq", [(2, False, True), (1, True, None)])]        # one that lost the answer
    reward = search_gain_reward(gain=0.5)
    reward.sample_counterfactuals = lambda *args: None  # the counterfactuals are set above
    means = score(groups, reward, sampling=(None, None))
    assert means["second_search_gain/hotpotqa"] == 0.5 and means["second_search_gain/nq"] == -0.5
    assert means["second_search_gain"] == 0.0  # the mixed mean hides both
    one_source = score([groups[0]], reward, sampling=(None, None))
    assert not any("/" in key for key in one_source)


def test_it_is_registered_and_refuses_a_gain_outside_zero_to_one():
    assert make_reward("search_gain", gain=0.2)(SimpleNamespace(trajectories=[_trajectory(2, True, False)])).rewards == [1.2]
    with pytest.raises(ValueError, match="gain"):
        make_reward("search_gain", gain=1.5)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("smollm2-135m")


def script(first_search_answer: str):
    """Branch 0 answers after one search, the others search twice; made to answer after the first
    search (the prompt ends on "Answer:"), the policy says `first_search_answer`."""

    def write(prompt: str, index: int) -> str:
        if prompt.endswith(ANSWER_PREFIX):
            return f" {first_search_answer}\nignored"
        made = re.findall(r'"query": "b(\d)', prompt)  # this branch's calls so far (its queries start b<branch>)
        searches, branch = len(made), int(made[0]) if made else index
        if searches == 0:
            return call(f"b{branch} first")
        if searches == 1 and branch != 0:
            return call(f"b{branch} second")
        return "Answer: Paris"

    return write


@pytest.mark.parametrize("first_search_answer, right", [("Paris", True), ("London", False)])
def test_the_counterfactual_answers_from_where_the_first_search_was_read(tokenizer, first_search_answer, right):
    config = RolloutConfig(group_size=3, max_search_calls=3, max_assistant_turns=4, max_assistant_tokens=120)
    groups = rollout_groups(ScriptedSamplingClient(tokenizer, script("unused")), tokenizer, FakeSearchClient(),
                            EXAMPLES, config, progress=False)
    trajectories = groups[0].trajectories
    assert [t.search_calls for t in trajectories] == [1, 2, 2]
    sampler = ScriptedSamplingClient(tokenizer, script(first_search_answer))
    assert first_search_answers(sampler, tokenizer, trajectories) == 2
    # one greedy request per trajectory that searched again, from the prompt of its second turn
    assert len(sampler.requests) == 2
    expected = [first_search_prompt(t, tokenizer) for t in trajectories[1:]]
    assert sorted(r["prompt"] for r in sampler.requests) == sorted(expected)
    assert all(p[: len(t.turns[1].prompt_tokens)] == t.turns[1].prompt_tokens for p, t in zip(expected, trajectories[1:]))
    assert all(r["params"].temperature == 0.0 for r in sampler.requests)
    assert [t.first_search_right for t in trajectories] == [None, right, right]
    # scored with the step's sampler: both that searched again were right in the end, so the term is 0
    # or +1 by the counterfactual, which score samples itself
    reward = search_gain_reward(gain=0.5)
    with pytest.raises(ValueError, match="sampling="):
        score(groups, reward)
    fresh = ScriptedSamplingClient(tokenizer, script(first_search_answer))
    score(groups, reward, sampling=(fresh, tokenizer))
    assert len(fresh.requests) == 2
    assert [t.reward for t in trajectories] == [1.0] + [1.0 if right else 1.5] * 2


def test_a_failed_counterfactual_request_leaves_the_outcome_alone(tokenizer):
    config = RolloutConfig(group_size=3, max_search_calls=3, max_assistant_turns=4, max_assistant_tokens=120)
    groups = rollout_groups(ScriptedSamplingClient(tokenizer, script("unused")), tokenizer, FakeSearchClient(),
                            EXAMPLES, config, progress=False)

    class Failing:
        async def sample_async(self, **_):
            raise ConnectionError("the sampler went away")

    assert first_search_answers(Failing(), tokenizer, groups[0].trajectories) == 0
    assert all(t.first_search_right is None for t in groups[0].trajectories)
