"""Budget-forced evaluation: the budget is stated in the prompt and enforced by the rollout."""

from __future__ import annotations

import re

import matplotlib
import pytest
from fixtures.doubles import FakeSearchClient, ScriptedSamplingClient, call

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
    import helpers.efficiency.cli as cli

    out = tmp_path / "sweep.json"
    monkeypatch.setattr(cli, "connect", lambda backend=None: object())
    monkeypatch.setattr(cli, "load_examples", lambda split, limit=None: EXAMPLES[:1])
    monkeypatch.setattr(cli, "create_search_client", lambda backend: FakeSearchClient())
    sampler = ScriptedSamplingClient(tokenizer, obedient(wanted=1))
    sampler.get_tokenizer = lambda: tokenizer
    monkeypatch.setattr(eff, "sampling_client_for", lambda service, model, checkpoint: sampler)
    eff.main(["budget", "--model", "smollm2-135m", "--policy", "base=", "--budgets", "0,1", "--out", str(out)])
    eff.main(["budget", "--model", "smollm2-135m", "--policy", "sft=/x", "--budgets", "0,1", "--out", str(out)])
    eff.main(["budget", "--model", "smollm2-135m", "--policy", "base=", "--budgets", "0,2", "--out", str(out)])
    points = eff.load_budget_points(out)
    assert sorted((p.policy, p.budget) for p in points) == [("base", 0), ("base", 2), ("sft", 0), ("sft", 1)]
    assert {p.policy: p.accuracy for p in points if p.budget == 0} == {"base": 0.0, "sft": 0.0}


def test_report_turns_a_recorded_folder_into_plots_and_tables(tmp_path):
    import json

    from helpers.efficiency.report import write_report

    with pytest.raises(FileNotFoundError, match="compare"):
        write_report(tmp_path)
    for reward, calls in (("exact_match", [1.0, 1.5, 2.0, 2.0]), ("gated", [1.0, 1.0, 0.5, 0.5])):
        (tmp_path / reward).mkdir()
        rows = [{"step": s, "search_calls_mean": c, "assistant_tokens_mean": 40.0, "exact_match": 0.5,
                 "eff/pen_eff_mean": 0.01, "mismatch/kl_k3": 1e-4 * (s + 1), "mismatch/kl_k1": 1e-4,
                 "mismatch/mean_abs_log_ratio": 0.01, "mismatch/max_abs_log_ratio": 0.1,
                 "mismatch/ratio_p1": 0.97, "mismatch/ratio_p5": 0.98, "mismatch/ratio_p50": 1.0,
                 "mismatch/ratio_p95": 1.02, "mismatch/ratio_p99": 1.03} for s, c in enumerate(calls)]
        (tmp_path / reward / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    points = [eff.BudgetPoint(policy=p, budget=b, questions=10, accuracy=acc, valid_format_rate=1.0,
                              search_calls_mean=min(b, 1), output_tokens_mean=40, input_tokens_mean=400 * b,
                              tokens_per_question=40 + 400 * b, seconds=1.0).as_dict()
              for p, acc in (("base", 0.1), ("sft", 0.4)) for b in (0, 1, 2)]
    (tmp_path / "budget_sweep.json").write_text(json.dumps(points))
    (tmp_path / "NOTES.md").write_text("The gated run searched less.")
    readme = write_report(tmp_path).read_text()
    for name in ("reward_comparison.png", "mismatch.png", "budget_curve.png"):
        assert (tmp_path / name).stat().st_size > 1000, name
    assert "| search_calls_mean | 1 -> 2 | 1 -> 0.5 |" in readme  # first vs last quarter of each run
    assert "| 1 | 0.10 / 1.00 / 440 | 0.40 / 1.00 / 440 |" in readme
    assert "KL (k3) per step 1.00e-04 to 4.00e-04" in readme
    assert readme.rstrip().endswith("The gated run searched less.")
