"""Budget-forced evaluation: the budget is stated in the prompt and enforced by the rollout."""

from __future__ import annotations

import re

import matplotlib
import pytest
from test_rollout_doubles import FakeSearchClient, ScriptedSamplingClient, call

from helpers import efficiency as eff
from helpers.data import SearchExample
from helpers.models import load_tokenizer
from helpers.rollout import RolloutConfig

matplotlib.use("Agg")

EXAMPLES = [SearchExample(f"q{i}", f"Which city is number {i}?", ["Paris"], "nq") for i in range(3)]


def stated_budget(prompt: str) -> int | None:
    if "switched off" in prompt:
        return 0
    match = re.search(r"at most (\d+) search", prompt)
    return int(match.group(1)) if match else None


def obedient(wanted: int):
    """Searches min(wanted, stated budget) times, then answers; right only after a search."""

    def script(prompt: str, index: int) -> str:
        done = prompt.count("<tool_response>")
        budget = stated_budget(prompt)
        limit = wanted if budget is None else min(wanted, budget)
        if done < limit:
            return call(f"city {done}")
        return "Answer: Paris" if done else "Answer: London"

    return script


def greedy(prompt: str, index: int) -> str:
    """Ignores the budget: always wants 3 searches."""
    done = prompt.count("<tool_response>")
    return call(f"city {done}") if done < 3 else "Answer: Paris"


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("smollm2-135m")


def test_budget_config_states_and_enforces_the_budget():
    cfg = eff.budget_config(3, RolloutConfig(group_size=8, temperature=1.0, max_assistant_tokens=99))
    assert (cfg.group_size, cfg.max_search_calls, cfg.search_budget) == (1, 3, 3)
    assert cfg.max_assistant_tokens == 99
    # enough turns to spend the whole budget and still answer
    assert eff.budget_config(9, RolloutConfig(max_assistant_turns=3)).max_assistant_turns == 10
    assert eff.budget_config(1, RolloutConfig(max_assistant_turns=6)).max_assistant_turns == 6
    with pytest.raises(ValueError):
        eff.budget_config(-1)


def test_sweep_gives_one_point_per_budget_with_the_budget_in_the_prompt(tokenizer):
    sampler = ScriptedSamplingClient(tokenizer, obedient(wanted=2))
    points = eff.budget_sweep(sampler, tokenizer, FakeSearchClient(), EXAMPLES, budgets=[0, 1, 4],
                              policy="scripted", progress=False)
    assert [p.budget for p in points] == [0, 1, 4]
    assert [p.questions for p in points] == [3, 3, 3]
    assert [p.accuracy for p in points] == [0.0, 1.0, 1.0]
    assert [p.search_calls_mean for p in points] == [0.0, 1.0, 2.0]
    first_prompts = [tokenizer.decode(r["prompt"]) for r in sampler.requests if r["num_samples"] == 1]
    assert any("switched off" in p for p in first_prompts)
    assert any("at most 4 search calls" in p for p in first_prompts)
    # the cost proxy grows with the searches made
    assert points[0].tokens_per_question < points[1].tokens_per_question < points[2].tokens_per_question
    for p in points:
        assert p.tokens_per_question == pytest.approx(p.input_tokens_mean + p.output_tokens_mean)


def test_the_rollout_enforces_the_budget_on_a_policy_that_ignores_it(tokenizer):
    points = eff.budget_sweep(ScriptedSamplingClient(tokenizer, greedy), tokenizer, FakeSearchClient(),
                              EXAMPLES[:2], budgets=[0, 1, 2, 5], progress=False)
    assert [p.search_calls_mean for p in points] == [0.0, 1.0, 2.0, 3.0]
    assert [p.accuracy for p in points] == [0.0, 0.0, 0.0, 1.0]  # cut off before answering


def test_plot_draws_one_line_per_policy(tokenizer):
    points = [eff.BudgetPoint("a", b, 2, b / 10, 1.0, b, 10, 100, 110, 0.0) for b in range(3)]
    points += [eff.BudgetPoint("b", b, 2, 0.5, 1.0, 0, 10, 100, 110, 0.0) for b in range(3)]
    axes = eff.plot_tool_efficiency(points)
    assert [len(ax.get_lines()) for ax in axes] == [2, 3, 2]


def test_budget_command_merges_policies_into_one_file(monkeypatch, tmp_path, tokenizer):
    import helpers.data
    import helpers.engine
    import helpers.search

    out = tmp_path / "sweep.json"
    monkeypatch.setattr(helpers.engine, "connect", lambda backend=None: object())
    monkeypatch.setattr(helpers.data, "load_examples", lambda split, limit=None: EXAMPLES[:1])
    monkeypatch.setattr(helpers.search, "create_search_client", lambda backend: FakeSearchClient())
    sampler = ScriptedSamplingClient(tokenizer, obedient(wanted=1))
    sampler.get_tokenizer = lambda: tokenizer
    monkeypatch.setattr(eff, "sampling_client_for", lambda service, model, checkpoint: sampler)
    eff.main(["budget", "--model", "smollm2-135m", "--policy", "base=", "--budgets", "0,1", "--out", str(out)])
    eff.main(["budget", "--model", "smollm2-135m", "--policy", "sft=/x", "--budgets", "0,1", "--out", str(out)])
    eff.main(["budget", "--model", "smollm2-135m", "--policy", "base=", "--budgets", "0,2", "--out", str(out)])
    points = eff.load_budget_points(out)
    assert sorted((p.policy, p.budget) for p in points) == [("base", 0), ("base", 2), ("sft", 0), ("sft", 1)]
    assert {p.policy: p.accuracy for p in points if p.budget == 0} == {"base": 0.0, "sft": 0.0}
