"""One recipe, several seeds: the search-again rule reads a policy's table, the added second searches
are read on the same questions before and after, and the recorded seeds' rows back what notebook 10
says of them."""

from __future__ import annotations

import subprocess
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import pytest

from helpers.course.seeds import (SEARCH_AGAIN_RULE, SEEDS, STAGES, TRIMMED_ON, added_search_gain,
                                  added_search_gain_figure, added_search_table, main, rule_failures, seed_gains,
                                  seed_spread_figure, seed_tables, trimmed_gains, verdict_table)
from helpers.checkers.seeds import policy_table as table
from helpers.search import create_search_client
from helpers.runs import read_jsonl

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
    # EM where it searched again / stopped carries its question counts, which sum to HotpotQA's 100
    cell = next(line for line in printed.splitlines() if line.startswith("| seed2 |")).split(" | ")[3]
    again, stopped = (int(part.split("(")[1].rstrip(")")) for part in cell.split(" / "))
    assert (again, stopped) == (30, 70)
    with pytest.raises(SystemExit):
        main(["no-equals-sign"])


def test_the_command_pairs_each_policy_with_the_named_one_on_the_same_questions(capsys):
    """--paired-with: each other policy's added second searches against the named one, as
    `added_search_gain` counts them, and a name that is not among the runs is an error, not a table."""
    rows = Path(__file__).resolve().parents[1] / "results" / "h200_again" / "seeds" / "eval"
    exact, trim = rows / "seed1_exact.jsonl", rows / "seed1_trim.jsonl"
    main([f"exact={exact}", f"trim={trim}", "--paired-with", "exact"])
    printed = capsys.readouterr().out
    gains = added_search_gain(read_jsonl(exact), read_jsonl(trim))["hotpotqa"]
    assert gains["added"] > 0
    line = next(line for line in printed.splitlines() if line.startswith("| trim | hotpotqa |"))
    assert line.split(" | ")[2:5] == [f"{gains['added']} of {gains['questions']}", str(gains["right_before"]),
                                      str(gains["right_after"])]
    assert "right before (exact)" in printed
    assert not any(line.startswith("| exact | hotpotqa |") for line in printed.splitlines())
    with pytest.raises(SystemExit):
        main([f"exact={exact}", f"trim={trim}", "--paired-with", "sft"])
    with pytest.raises(SystemExit):
        main([f"exact={exact}", "--paired-with", "exact"])


def test_the_command_pairs_a_split_the_rule_cannot_read_by_its_own_source(tmp_path, capsys):
    """Rows of one other source (the fullwiki split's `hotpotqa_fullwiki`): the second-search columns in
    place of the rule's verdicts, and the paired table on that source."""
    import json

    rows = Path(__file__).resolve().parents[1] / "results" / "h200_again" / "seeds" / "eval"
    paths = {}
    for label, name in (("exact", "seed1_exact.jsonl"), ("trim", "seed1_trim.jsonl")):
        wiki = [{**r, "data_source": "hotpotqa_fullwiki"} for r in read_jsonl(rows / name) if r["data_source"] == "hotpotqa"]
        paths[label] = tmp_path / f"{label}.jsonl"
        paths[label].write_text("".join(json.dumps(r) + "\n" for r in wiki))
    main([f"exact={paths['exact']}", f"trim={paths['trim']}", "--paired-with", "exact"])
    printed = capsys.readouterr().out
    assert "rule" not in printed.splitlines()[0] and "EM if searched again" in printed
    gains = added_search_gain(read_jsonl(paths["exact"]), read_jsonl(paths["trim"]))["hotpotqa_fullwiki"]
    paired = printed.split("\n\n")[-1]  # the paired table, printed after the second-search columns
    line = next(line for line in paired.splitlines() if line.startswith("| trim | hotpotqa_fullwiki |"))
    assert gains["added"] > 0 and line.split(" | ")[2:5] == [
        f"{gains['added']} of {gains['questions']}", str(gains["right_before"]), str(gains["right_after"])]


def test_an_evaluation_without_one_source_is_named_not_a_crash():
    hotpot_only = {"hotpotqa": table(0.5, 0.0)["hotpotqa"], "all": {"em_strict": 0.3}}
    assert rule_failures(hotpot_only) == ["no nq questions in the evaluation"]
    (row,) = verdict_table({"validation, two rows": hotpot_only}).rows
    assert row[1:3] == ["50%", "–"] and row[-1] == "no nq questions in the evaluation"


def row(key, source, searches, right):
    return {"id": key, "data_source": source, "search_calls": searches, "exact_match": right}


BEFORE = [row("h1", "hotpotqa", 1, False), row("h2", "hotpotqa", 1, True), row("h3", "hotpotqa", 2, True),
          row("n1", "nq", 1, True), row("n2", "nq", 1, True)]
AFTER = [row("n2", "nq", 1, True), row("h3", "hotpotqa", 1, False), row("n1", "nq", 2, False),
         row("h2", "hotpotqa", 2, True), row("h1", "hotpotqa", 3, True)]


def test_added_second_searches_pair_by_id_whatever_the_order():
    gain = added_search_gain(BEFORE, AFTER)
    # h1 (wrong → right) and h2 (right → right) newly searched again; h3 went from 2 searches to 1 and
    # from right to wrong: dropped
    assert gain["hotpotqa"] == {"questions": 3, "added": 2, "right_before": 1, "right_after": 2, "dropped": 1,
                                "dropped_right_before": 1, "dropped_right_after": 0, "em_change": 0.0}
    assert gain["nq"] == {"questions": 2, "added": 1, "right_before": 1, "right_after": 0, "dropped": 0,
                          "dropped_right_before": 0, "dropped_right_after": 0, "em_change": -0.5}
    assert gain["all"] == {"questions": 5, "added": 3, "right_before": 2, "right_after": 2, "dropped": 1,
                           "dropped_right_before": 1, "dropped_right_after": 0, "em_change": -0.2}
    assert added_search_gain(BEFORE[::-1], AFTER[::-1]) == gain


def test_unpaired_rows_are_left_out():
    gain = added_search_gain(BEFORE + [row("h9", "hotpotqa", 1, False)],
                             AFTER + [row("h8", "hotpotqa", 2, True), row("q7", "nq", 2, True)])
    assert gain == added_search_gain(BEFORE, AFTER)


def test_an_added_question_counts_once():
    gain = added_search_gain([row("h1", "hotpotqa", 0, False)], [row("h1", "hotpotqa", 4, True)])
    assert gain["hotpotqa"]["added"] == gain["all"]["added"] == 1
    assert gain["hotpotqa"]["right_after"] == gain["all"]["right_after"] == 1
    with pytest.raises(ValueError, match="appears twice"):  # a repeated row is two evaluations mixed, not a second count
        added_search_gain(BEFORE, AFTER + [row("h1", "hotpotqa", 3, True)])


def test_two_evaluations_of_different_questions_are_refused():
    with pytest.raises(ValueError, match="no question is in both"):
        added_search_gain(BEFORE, [row("other", "nq", 2, True)])


@pytest.fixture(scope="module")
def gains():
    return seed_gains()


def test_the_gain_figure_draws_a_pair_of_bars_per_seed_and_source(gains):
    fig = added_search_gain_figure(gains)
    assert len(fig.axes) == 2
    for ax, source in zip(fig.axes, ("hotpotqa", "nq")):
        before, after = ax.containers
        assert [bar.get_height() for bar in before] == [gains[seed][source]["right_before"] for seed in SEEDS]
        assert [bar.get_height() for bar in after] == [gains[seed][source]["right_after"] for seed in SEEDS]
        assert [t.get_text() for t in ax.get_xticklabels()] == [
            f"seed {seed}\n{gains[seed][source]['added']} added" for seed in SEEDS]


def test_the_gain_table_sums_the_seeds_last_per_source(gains):
    cells = added_search_table(gains)
    assert [r[0] for r in cells.rows] == [*map(str, SEEDS), "seeds summed"] * 2
    summed = {r[1]: r for r in cells.rows if r[0] == "seeds summed"}
    assert set(summed) == {"hotpotqa", "nq"}
    assert summed["hotpotqa"][3:5] == [str(sum(gains[s]["hotpotqa"][k] for s in SEEDS))
                                        for k in ("right_before", "right_after")]
    assert summed["hotpotqa"][5:8] == [str(sum(gains[s]["hotpotqa"][k] for s in SEEDS))
                                        for k in ("dropped", "dropped_right_before", "dropped_right_after")]
    assert cells.header[5] == "second search dropped"


def test_the_recorded_seeds_added_second_searches_did_not_pay(gains):
    """Notebook 10: summed over the seeds, the questions `trim` newly searched again on are right no
    more often after it on HotpotQA, and less often on NQ."""
    assert set(gains) == set(SEEDS)
    summed = {source: [sum(gains[seed][source][k] for seed in SEEDS) for k in ("added", "right_before", "right_after")]
              for source in ("hotpotqa", "nq")}
    assert summed["hotpotqa"][2] <= summed["hotpotqa"][1]
    assert summed["nq"][2] < summed["nq"][1]
    assert summed == {"hotpotqa": [92, 22, 22], "nq": [212, 70, 59]}  # the committed rows, as the notebook reads them
    # the notebook says trim dropped no second search on any seed
    assert all(gains[seed][source]["dropped"] == 0 for seed in SEEDS for source in ("hotpotqa", "nq"))


def test_search_gain_from_a_start_that_searches_again_too_readily_drops_second_searches_that_did_not_pay():
    """Notebook 10: from `exact2_s2`, `search_gain` added no second search on any split, and on the
    fullwiki questions where it dropped one the policy without it is right more often."""
    gains = trimmed_gains()
    assert all(gain["all"]["added"] == 0 for gain in gains.values())
    wiki = gains["fullwiki"]["all"]
    assert wiki["dropped_right_after"] > wiki["dropped_right_before"]
    # the committed rows, as the notebook reads them
    assert (wiki["questions"], wiki["dropped"], wiki["dropped_right_before"], wiki["dropped_right_after"]) == (458, 97, 29, 34)
    assert sum(gain["all"]["dropped"] for gain in gains.values()) == 139


def test_search_gain_trained_on_from_the_trimmed_policy_adds_more_second_searches_than_it_drops():
    """Notebook 10: 26 more updates from the trimmed policy add second searches on fullwiki (right less
    often after) and drop few."""
    wiki = trimmed_gains(pair=TRIMMED_ON)["fullwiki"]["all"]
    assert wiki["added"] > wiki["dropped"] and wiki["right_after"] < wiki["right_before"]
    # the committed rows, as the notebook reads them
    assert (wiki["added"], wiki["right_before"], wiki["right_after"], wiki["dropped"]) == (47, 13, 11, 7)
