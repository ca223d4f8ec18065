"""One recipe, several seeds: the search-again rule reads a policy's table, and the recorded seeds'
rows back what notebook 10 says of them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest

from helpers.course.seeds import (SEARCH_AGAIN_RULE, SEEDS, STAGES, main, rule_failures, seed_spread_figure, seed_tables,
                                  verdict_table)
from helpers.checkers.seeds import policy_table as table
from helpers.search import create_search_client

GPU = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"


def test_a_policy_inside_every_bound_meets_the_rule():
    assert rule_failures(table(SEARCH_AGAIN_RULE["hotpotqa_min"], SEARCH_AGAIN_RULE["nq_max"])) == []


@pytest.mark.parametrize("policy, word", [
    (table(0.29, 0.05), "HotpotQA: a second search"),
    (table(0.8, 0.16), "NQ: a second search"),
    (table(0.8, 0.05, em_again=0.27, em_stopped=0.40), "where it searched again"),
])
def test_each_bound_is_read_on_its_own(policy, word):
    (failure,) = rule_failures(policy)
    assert word in failure


def test_a_policy_that_never_searches_again_fails_on_the_share_alone():
    assert rule_failures(table(0.0, 0.0, em_again=None, em_stopped=0.3)) == [
        "HotpotQA: a second search on 0%, under 30%"]


@pytest.fixture(scope="module")
def recorded():
    return seed_tables(create_search_client("local"))


def test_the_recorded_seeds_back_the_notebooks_reading(recorded):
    assert set(recorded) == set(SEEDS) and all(set(stages) == set(STAGES) for stages in recorded.values())
    met = [seed for seed, stages in recorded.items() if not rule_failures(stages["trim"])]
    assert len(met) == 1  # "one seed of three lands in the region"
    for stages in recorded.values():  # exact match: steady, few NQ second searches; trim raises HotpotQA's
        assert stages["exact"]["nq"]["second_search_share"] <= 0.05
        assert stages["trim"]["hotpotqa"]["second_search_share"] >= stages["exact"]["hotpotqa"]["second_search_share"]
    spread = [seed for seed, stages in recorded.items() if stages["trim"]["nq"]["second_search_share"] > 0.15]
    assert len(spread) == 2  # "two of the three also point far to the right"


def test_the_figure_draws_an_arrow_and_a_verdict_per_seed(recorded):
    fig = seed_spread_figure(recorded, reference=recorded[SEEDS[0]]["exact"], reference_label="reference")
    ax = fig.axes[0]
    labels = ax.get_legend_handles_labels()[1]
    assert labels[-1] == "reference"
    verdicts = labels[:-1]
    assert len(verdicts) == len(SEEDS)
    assert sum("meets the rule" in label for label in verdicts) == 1
    assert len([t for t in ax.texts if getattr(t, "arrow_patch", None) is not None]) == len(SEEDS)


def test_trim_variants_refuses_an_unknown_variant_before_any_setup(tmp_path):
    done = subprocess.run(["bash", str(GPU / "trim_variants.sh")], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "VARIANTS": "base bogus", "RESULTS": str(tmp_path / "r"),
                               "BUNDLE": str(tmp_path / "b"), "WORK": str(tmp_path / "w")})
    assert done.returncode == 2
    assert "unknown variant bogus" in done.stdout
    assert not (tmp_path / "r" / "setup.log").exists()


def test_the_verdict_table_names_what_keeps_each_policy_from_the_rule():
    cells = verdict_table({"inside": table(0.5, 0.1), "spread": table(0.8, 0.22)})
    by_label = {row[0]: row for row in cells.rows}
    assert by_label["inside"][-1] == "meets the rule"
    assert by_label["spread"][-1] == "NQ: a second search on 22%, over 15%"
    assert by_label["spread"][1:3] == ["80%", "22%"]
    assert "<td>" in cells._repr_html_()


def test_the_command_reads_evaluation_rows_and_prints_the_verdicts(capsys):
    rows = Path(__file__).resolve().parents[1] / "results" / "h200_again" / "seeds" / "eval"
    main([f"seed1={rows / 'seed1_trim.jsonl'}", f"seed2={rows / 'seed2_trim.jsonl'}"])
    printed = capsys.readouterr().out
    assert "| seed1 | 56% | 22% |" in printed and "over 15%" in printed
    assert "| seed2 | 30% | 2% |" in printed and "meets the rule" in printed
    with pytest.raises(SystemExit):
        main(["no-equals-sign"])


def test_an_evaluation_without_one_source_is_named_not_a_crash():
    hotpot_only = {"hotpotqa": table(0.5, 0.0)["hotpotqa"], "all": {"em_strict": 0.3}}
    assert rule_failures(hotpot_only) == ["no nq questions in the evaluation"]
    (row,) = verdict_table({"validation, two rows": hotpot_only}).rows
    assert row[1:3] == ["50%", "–"] and row[-1] == "no nq questions in the evaluation"
