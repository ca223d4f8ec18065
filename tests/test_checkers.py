"""The write-it-yourself checkers: the course's own functions pass them, the notebooks' stubs
and near-miss versions fail them, and a failure names its input, the expected and the got."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
import torch

from helpers import checkers
from helpers.checkers.loss import engine_loss
from helpers.efficiency import gated_reward, tool_penalties
from helpers.course.one_search import settled_by_one_search
from helpers.course.reading import constant_reading_em
from helpers.course.seeds import SEARCH_AGAIN_RULE, added_search_gain, rule_failures
from helpers.evidence import build_report, gold_passage_ids, query_differs
from helpers.preference import bt_loss, symmetrised_loss
from helpers.protocol import parse_assistant
from helpers.reward import GroupRewards, exact_match_reward, normalize_answer, outcome_reward, score_answer
from helpers.rollout import assign_group_advantages, consume_assistant
from helpers.train import build_datum, weight_micro_batch_for_global_mean

jupytext = pytest.importorskip("jupytext")


def blocks_that_fit(block_tokens, budget):  # the rollout's rule on block sizes (fit_tool_content works on tokens)
    if budget < 0:
        raise ValueError("negative budget")
    kept = 0
    while kept < len(block_tokens) and sum(block_tokens[: kept + 1]) <= budget:
        kept += 1
    return kept


def new_gold_per_search(passages_per_search, gold_ids):  # the evidence reward's own bookkeeping
    searches = [(f"query {i}", ids, False) for i, ids in enumerate(passages_per_search)]
    return [len(search.new_gold) for search in build_report("a question", [], gold_ids, searches).searches]


def rewrite_bonus(group):  # notebook 11's solution: exact match + 0.1 for a rewritten first query that found gold
    gold = set(gold_passage_ids(group.example))
    rewards = []
    for t in group.trajectories:
        first = t.searches[0] if t.searches else None
        earned = bool(t.valid_format and first and query_differs(first.query, group.example.question)
                      and gold & set(first.passage_ids))
        rewards.append(outcome_reward(t.valid_format, t.exact_match) + (0.1 if earned else 0.0))
    return GroupRewards(rewards)


def found_and_right(rows, source):  # the course's finding-or-reading split, as counts for one source
    from helpers.checkers.reading import expected_counts

    return expected_counts(rows, source)


def added_second_searches(before_rows, after_rows, source):  # the course's paired reading, for one source
    gain = added_search_gain(before_rows, after_rows).get(source)
    return (gain["added"], gain["right_before"], gain["right_after"]) if gain else (0, 0, 0)


class _SearchAsIndex:
    """A learner's `search(query) -> ids` seen as the index the course's rule searches (`.search(q, k)`)."""

    def __init__(self, search):
        self.search_ids = search

    def search(self, query, k=3):
        return [type("Passage", (), {"id": pid})() for pid in self.search_ids(query)[:k]]


def one_search_enough(question, gold_ids, search):
    """The course's rule (`helpers.course.one_search`, the multi-hop split's check) in the exercise's shape."""
    return settled_by_one_search({"id": "q", "question": question, "metadata": {"gold_passage_ids": gold_ids}},
                                 _SearchAsIndex(search))


NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
REFERENCES = [
    (checkers.check_parse_assistant, parse_assistant),
    (checkers.check_normalize_answer, normalize_answer),
    (checkers.check_score_answer, score_answer),
    (checkers.check_consume_assistant, consume_assistant),
    (checkers.check_build_datum, build_datum),
    (checkers.check_assign_group_advantages, assign_group_advantages),
    (checkers.check_weight_micro_batch, weight_micro_batch_for_global_mean),
    (checkers.check_tool_penalty, tool_penalties),
    (checkers.check_symmetrised_loss, symmetrised_loss),
    (checkers.check_gate, lambda r_base, s, pen: [gated_reward(*member) for member in zip(r_base, s, pen)]),
    (checkers.check_importance_sampling_loss, engine_loss),
    (checkers.check_blocks_that_fit, blocks_that_fit),
    (checkers.check_new_gold_per_search, new_gold_per_search),
    (checkers.check_rewrite_bonus, rewrite_bonus),
    (checkers.check_search_again_rule, lambda table: not rule_failures(table)),
    (checkers.check_added_second_searches, added_second_searches),
    (checkers.check_finding_and_reading, found_and_right),
    (checkers.check_constant_reading, constant_reading_em),
    (checkers.check_one_search_enough, one_search_enough),
]
# The exercise each notebook holds: the function the learner writes there.
EXERCISES = {
    "01": {"one_search_enough"},
    "02": {"parse_assistant"},
    "03": {"normalize_answer", "score_answer"},
    "04": {"blocks_that_fit", "new_gold_per_search"},
    "05": {"consume_assistant"},
    "07": {"build_datum"},
    "08": {"assign_group_advantages", "weight_micro_batch_for_global_mean", "importance_sampling_loss"},
    "10": {"meets_search_again_rule", "added_second_searches", "found_and_right", "constant_reading_em"},
    "11": {"tool_penalties", "rewrite_bonus"},
    "14": {"symmetrised_loss", "gate"},
}


def _run(check, fn) -> tuple[bool, list[str]]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        verdict = check(fn)
    return bool(verdict), out.getvalue().splitlines()


@pytest.mark.parametrize("check, reference", REFERENCES, ids=lambda x: getattr(x, "__name__", ""))
def test_the_course_functions_pass_their_checkers(check, reference):
    ok, lines = _run(check, reference)
    assert ok, "\n".join(lines)
    assert lines[-1] == "correct" and not any(line.lstrip().startswith("✗") for line in lines)


def _exercise_cells(number: str):
    path = next(NOTEBOOKS.glob(f"{number}_*.py"))
    notebook = jupytext.read(path)
    return [cell for cell in notebook.cells if "exercise" in cell.metadata.get("tags", [])]


@pytest.mark.parametrize("number", sorted(EXERCISES))
def test_every_stub_in_the_notebooks_fails_its_checker(number):
    cells = _exercise_cells(number)
    assert cells, f"notebook {number} has no cell tagged 'exercise'"
    defined: set[str] = set()
    for cell in cells:
        namespace: dict = {}
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(cell.source, f"notebook {number} exercise", "exec"), namespace)
        lines = out.getvalue().splitlines()
        assert any(line.startswith("not yet") for line in lines), f"notebook {number}: the stub passed:\n{out.getvalue()}"
        assert "correct" not in lines
        stubs = {name for name, value in namespace.items()
                 if getattr(getattr(value, "__code__", None), "co_filename", "") == f"notebook {number} exercise"}
        for name in stubs:
            assert namespace[name].__doc__, f"notebook {number}: the stub {name} has no docstring"
        defined |= stubs
    assert EXERCISES[number] <= defined, f"notebook {number} defines {sorted(defined)}, expected {sorted(EXERCISES[number])}"


def _near_misses():
    def answer_everything(text):
        return parse_assistant("Answer: " + text if "<tool_call>" in text else text)

    def unstripped_normalise(text):
        return normalize_answer(text) + " "

    def articles_kept(text, references):
        import re

        kept = lambda s: " ".join(re.sub(r"[^\w\s]", "", s.lower()).split())  # noqa: E731
        result = score_answer(text, references)
        return result if not result.valid_format else type(result)(
            float(any(kept(result.answer) == kept(r) for r in references)), True,
            any(kept(result.answer) == kept(r) for r in references), result.answer)

    def budget_ignored(trajectory, prompt_tokens, sequence, tokenizer, config):
        import dataclasses

        return consume_assistant(trajectory, prompt_tokens, sequence, tokenizer,
                                 dataclasses.replace(config, max_search_calls=99, max_assistant_turns=99))

    def unshifted(trajectory):
        item = build_datum(trajectory)
        inputs = item.datum.loss_fn_inputs
        import numpy as np
        import pytrio

        advantages = np.roll(inputs["advantages"].to_numpy(), 1)
        return type(item)(pytrio.Datum(model_input=item.datum.model_input, loss_fn_inputs={
            "target_tokens": inputs["target_tokens"].to_numpy(), "logprobs": inputs["logprobs"].to_numpy(),
            "advantages": advantages}), item.length)

    def one_batch_mean(trajectories):
        mean = sum(t.reward for t in trajectories) / len(trajectories)
        for t in trajectories:
            t.advantage = t.reward - mean
        return 0

    def one_over_n(micro_batch, total_samples):  # right for an engine that sums over datums, wrong here
        return weight_micro_batch_for_global_mean(micro_batch, len(micro_batch) * total_samples)

    def flat_price(calls, winners, baseline, alpha_win=1.0, alpha_lose=0.5, beta_lose=0.1):
        return [0.1 * c for c in calls]

    def one_order(delta_ab, delta_ba, r):  # the plain BT loss: the swapped order never seen
        return bt_loss(delta_ab, r)

    def linear_sum(r_base, s, pen):  # the hackable combination the gate replaces
        return [r + p - q for r, p, q in zip(r_base, s, pen)]

    def per_output_mean(logprobs, old_logprobs, advantages, mask):  # DeepSeekMath's 1/|o_i|: not this engine
        per_token = -(torch.exp(logprobs - old_logprobs) * advantages) * mask
        return (per_token.sum(dim=1) / mask.sum(dim=1)).mean()

    def without_ratio(logprobs, old_logprobs, advantages, mask):  # REINFORCE: same gradient at ratio 1 only
        return (-(logprobs * advantages) * mask).sum(dim=1).mean()

    def unmasked(logprobs, old_logprobs, advantages, mask):
        return (-(torch.exp(logprobs - old_logprobs) * advantages)).sum(dim=1).mean()

    def clipped(logprobs, old_logprobs, advantages, mask):  # PPO's clip: the course's loss has none
        ratio = torch.exp(logprobs - old_logprobs)
        per_token = -torch.minimum(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages) * mask
        return per_token.sum(dim=1).mean()

    def knapsack(block_tokens, budget):  # slips a later, smaller block in: not the backend's ranking
        used = kept = 0
        for size in block_tokens:
            if used + size <= budget:
                used, kept = used + size, kept + 1
        return kept

    def every_gold_seen(passages_per_search, gold_ids):  # counts a gold passage again on every search
        return [len(set(passages) & set(gold_ids)) for passages in passages_per_search]

    def any_search_bonus(group):  # pays a rewrite by any search, not only the first
        gold, question = set(gold_passage_ids(group.example)), group.example.question
        return GroupRewards([outcome_reward(t.valid_format, t.exact_match) + 0.1 * (t.valid_format and any(
            query_differs(s.query, question) and gold & set(s.passage_ids) for s in t.searches)) for t in group.trajectories])

    def bonus_without_answer(group):  # pays the bonus to a trajectory that never answered
        plain = rewrite_bonus(group).rewards
        return GroupRewards([r + (0.1 if not t.valid_format and t.searches and query_differs(
            t.searches[0].query, group.example.question) and set(gold_passage_ids(group.example)) & set(
            t.searches[0].passage_ids) else 0.0) for r, t in zip(plain, group.trajectories)])

    def strict_bounds(table):  # reads "at least 30 %" as "more than 30 %"
        hotpot, nq = table["hotpotqa"], table["nq"]
        return (hotpot["second_search_share"] > SEARCH_AGAIN_RULE["hotpotqa_min"]
                and nq["second_search_share"] < SEARCH_AGAIN_RULE["nq_max"])

    def shares_only(table):  # forgets whether the second search pays
        return (table["hotpotqa"]["second_search_share"] >= SEARCH_AGAIN_RULE["hotpotqa_min"]
                and table["nq"]["second_search_share"] <= SEARCH_AGAIN_RULE["nq_max"])

    def every_second_search(before_rows, after_rows, source):  # forgets that the policy before may have searched twice too
        before = {row["id"]: row for row in before_rows}
        again = [(before[row["id"]], row) for row in after_rows
                 if row["id"] in before and row["data_source"] == source and row["search_calls"] >= 2]
        return len(again), sum(b["exact_match"] for b, _ in again), sum(a["exact_match"] for _, a in again)

    # the rule's reading, confounded: right answers where after searched again vs where before stopped
    def different_questions(before_rows, after_rows, source):
        stopped = [r for r in before_rows if r["data_source"] == source and r["search_calls"] < 2]
        again = [r for r in after_rows if r["data_source"] == source and r["search_calls"] >= 2]
        return len(again), sum(r["exact_match"] for r in stopped), sum(r["exact_match"] for r in again)

    def paired_by_position(before_rows, after_rows, source):  # the nth row before taken for the nth after
        added = [(b, a) for b, a in zip(before_rows, after_rows)
                 if a["data_source"] == source and a["search_calls"] >= 2 > b["search_calls"]]
        return len(added), sum(b["exact_match"] for b, _ in added), sum(a["exact_match"] for _, a in added)

    def any_gold(rows, source):  # one gold passage of two counted as found
        kept = [r for r in rows if r["data_source"] == source and r["gold_passage_ids"]
                and r["evidence_ids"] is not None and None not in r["evidence_ids"]]
        hit = [r for r in kept if set(r["gold_passage_ids"]) & {p for ids in r["evidence_ids"] for p in ids}]
        miss = [r for r in kept if r not in hit]
        return len(hit), sum(r["exact_match"] for r in hit), len(miss), sum(r["exact_match"] for r in miss)

    def last_search_only(rows, source):  # the gold passages of the last search alone
        kept = [r for r in rows if r["data_source"] == source and r["gold_passage_ids"]
                and r["evidence_ids"] is not None and None not in r["evidence_ids"]]
        hit = [r for r in kept if r["evidence_ids"] and set(r["gold_passage_ids"]) <= set(r["evidence_ids"][-1])]
        miss = [r for r in kept if r not in hit]
        return len(hit), sum(r["exact_match"] for r in hit), len(miss), sum(r["exact_match"] for r in miss)

    def keeps_unknown(rows, source):  # questions without gold or without ids counted as missed
        rows = [r for r in rows if r["data_source"] == source]
        hit = [r for r in rows if r["gold_passage_ids"] and r["evidence_ids"] and None not in r["evidence_ids"]
               and set(r["gold_passage_ids"]) <= {p for ids in r["evidence_ids"] for p in ids}]
        miss = [r for r in rows if r not in hit]
        return len(hit), sum(r["exact_match"] for r in hit), len(miss), sum(r["exact_match"] for r in miss)

    def reading_at_k(by_k, reference, source):  # each k read at its own rates: the measured EM, not the estimate
        return {k: t[source]["found"] * (t[source]["em_found"] or 0) + (1 - t[source]["found"]) * (t[source]["em_missed"] or 0)
                for k, t in by_k.items()}

    def none_as_zero(by_k, reference, source):  # a side without an EM at the reference read as never right
        ref = by_k[reference][source]
        return {k: t[source]["found"] * (ref["em_found"] or 0) + (1 - t[source]["found"]) * (ref["em_missed"] or 0)
                for k, t in by_k.items()}

    return [
        (checkers.check_constant_reading, reading_at_k),
        (checkers.check_constant_reading, none_as_zero),
        (checkers.check_finding_and_reading, any_gold),
        (checkers.check_finding_and_reading, last_search_only),
        (checkers.check_finding_and_reading, keeps_unknown),
        (checkers.check_added_second_searches, every_second_search),
        (checkers.check_added_second_searches, different_questions),
        (checkers.check_added_second_searches, paired_by_position),
        (checkers.check_search_again_rule, strict_bounds),
        (checkers.check_search_again_rule, shares_only),
        (checkers.check_symmetrised_loss, one_order),
        (checkers.check_gate, linear_sum),
        (checkers.check_rewrite_bonus, exact_match_reward),
        (checkers.check_rewrite_bonus, any_search_bonus),
        (checkers.check_rewrite_bonus, bonus_without_answer),
        (checkers.check_blocks_that_fit, knapsack),
        (checkers.check_new_gold_per_search, every_gold_seen),
        (checkers.check_importance_sampling_loss, per_output_mean),
        (checkers.check_importance_sampling_loss, without_ratio),
        (checkers.check_importance_sampling_loss, unmasked),
        (checkers.check_importance_sampling_loss, clipped),
        (checkers.check_parse_assistant, answer_everything),
        (checkers.check_normalize_answer, unstripped_normalise),
        (checkers.check_score_answer, articles_kept),
        (checkers.check_consume_assistant, budget_ignored),
        (checkers.check_build_datum, unshifted),
        (checkers.check_assign_group_advantages, one_batch_mean),
        (checkers.check_weight_micro_batch, one_over_n),
        (checkers.check_tool_penalty, flat_price),
    ]


@pytest.mark.parametrize("check, wrong", _near_misses(), ids=lambda x: getattr(x, "__name__", ""))
def test_a_near_miss_fails_and_the_first_failure_is_shown(check, wrong):
    ok, lines = _run(check, wrong)
    assert not ok
    assert lines[-1].startswith("not yet: ")
    assert any(line.lstrip().startswith("✗") for line in lines)
    failure = next(i for i, line in enumerate(lines) if line.startswith("first failure"))
    assert [lines[failure + k].split(":")[0].strip() for k in (1, 2, 3)] == ["input", "expected", "got"]


def test_a_function_that_raises_is_reported_not_propagated():
    def broken(text):
        raise KeyError("oops")

    ok, lines = _run(checkers.check_parse_assistant, broken)
    assert not ok and any("raised KeyError" in line for line in lines)
    ok, lines = _run(checkers.check_parse_assistant, None)
    assert not ok and lines == ["not yet: pass your function itself to the checker (got NoneType)"]
