"""The gated reward with a preference score and reference lengths, and the rubric data: a wrong
answer never gets preference credit, the winners of the length penalty are correct AND preferred,
the pass@k filter drops what teaches nothing, and the mix holds its share."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.efficiency import EfficiencyConfig, GatedReward, ReferenceLengths, score_group
from helpers.preference import PreferenceScore
from helpers.reward_functions import make_reward
from helpers.multihop.mix import batch_with_share
from helpers.rubrics import CITATION_MARK, RUBRIC_SHARE, make_rubric_prompts, pass_at_k_filter

member = st.tuples(st.integers(0, 1), st.integers(0, 5), st.integers(1, 400), st.floats(0, 1), st.integers(1, 400))
groups = st.lists(member, min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(groups, st.lists(st.floats(0, 1), min_size=8, max_size=8), st.booleans())
def test_a_wrong_answer_never_gets_preference_credit(group, other_scores, with_references):
    r_base, calls, lengths, prefs, refs = (list(column) for column in zip(*group))
    refs = refs if with_references else None
    rows = score_group(r_base, calls, lengths, preferences=prefs, reference_lengths=refs)
    # change the preference score of every wrong answer: nothing in the group may move
    changed = [p if r else other_scores[i] for i, (r, p) in enumerate(zip(r_base, prefs))]
    again = score_group(r_base, calls, lengths, preferences=changed, reference_lengths=refs)
    for row, other in zip(rows, again):
        assert row.reward == pytest.approx(other.reward) and row.advantage == pytest.approx(other.advantage)
        if not row.r_base:
            assert row.reward == pytest.approx(-row.pen_eff) and row.reward <= 0
        else:
            assert row.reward == pytest.approx(row.preference - row.pen_eff)


def test_the_length_winners_are_correct_and_preferred():
    # both correct with the same length; only the preferred one is measured against the winners' baseline
    rows = score_group([1, 1, 0], calls=[1, 1, 1], lengths=[300, 300, 300], preferences=[0.9, 0.2, 1.0],
                       reference_lengths=[100, 100, 400], config=EfficiencyConfig(lambda_tool=0.0))
    assert rows[0].pen_len > 0  # preferred winner, 3x the winners' reference length: verbose
    assert rows[1].pen_len == 0.0  # correct but not preferred: a loser, and losers pay only for terseness
    assert rows[1].reward == pytest.approx(0.2)


def _group(finals, exact, qid="q1"):
    example = SimpleNamespace(id=qid, question="who wrote it", answers=["Ada Lovelace"], metadata={})
    trajectories = [SimpleNamespace(final_text=f, exact_match=e, valid_format=True, search_calls=1,
                                    failed_searches=0, sampled_tokens=len(f.split()) + 1, reward=0.0)
                    for f, e in zip(finals, exact)]
    return SimpleNamespace(example=example, trajectories=trajectories, step=0, index=0)


class _FixedPreference:
    """Stands in for a trained model: prefers the shorter reply, by a fixed margin per word."""

    def deltas(self, items):
        import torch

        return torch.tensor([0.3 * (len(b.split()) - len(a.split())) for _, a, b in items])


def test_the_registered_gated_reward_takes_s_from_a_preference_score_against_the_reference():
    group = _group(["Ada Lovelace.", "I think it might be Ada Lovelace, not sure.", "Charles Babbage."],
                   [True, True, False])
    score = PreferenceScore(_FixedPreference(), {"q1": "The answer is Ada Lovelace."})
    s = score.scores(group)
    assert s[0] > 0.5 > s[1]  # shorter than the reference: preferred; longer: not
    reward = make_reward("gated", preference=score, lambda_tool=0.0, lambda_len=0.0)
    got = reward(group)
    assert got.rewards == pytest.approx([s[0], s[1], 0.0])
    plain = make_reward("gated", lambda_tool=0.0, lambda_len=0.0)(group)
    assert plain.rewards == pytest.approx([1.0, 1.0, 0.0])  # default unchanged: s = 1
    with pytest.raises(ValueError, match="no option"):
        make_reward("gated", preferences=score)
    with pytest.raises(KeyError, match="no reference reply"):
        PreferenceScore(_FixedPreference(), {}).scores(group)


def test_reference_rollouts_give_both_the_lengths_and_the_replies(monkeypatch):
    group = _group(["Ada Lovelace.", "Charles Babbage."], [True, False])
    reference_group = [SimpleNamespace(sampled_tokens=n, final_text=t) for n, t in ((40, "Ada."), (60, "Ada L."))]
    monkeypatch.setattr("helpers.efficiency.reference.rollout_groups", lambda *a, **k: [reference_group])
    reference = ReferenceLengths(None, None, None, rollout_config=lambda step: None)
    gated = GatedReward(EfficiencyConfig(lambda_tool=0.0), reference=reference,
                        preference=PreferenceScore(_FixedPreference(), reference))
    gated.prepare([group])
    rows = gated.breakdown(group)
    assert [r.reference_length for r in rows] == [40.0, 60.0]
    assert reference.reply(group.example) == "Ada."
    with pytest.raises(ValueError, match="not both"):
        GatedReward(preference=object(), preference_fn=lambda t: 1.0)


# ---------------------------------------------------------------- rubrics


def _examples(n):
    return [SimpleNamespace(id=f"e{i}", question=f"Who led the band number {i}?", answers=["Frankie Valli"])
            for i in range(n)]


def test_rubric_prompts_have_three_to_five_rules_that_check_replies():
    prompts = make_rubric_prompts(_examples(30), seed=0)
    assert prompts == make_rubric_prompts(_examples(30), seed=0)
    assert all(3 <= len(p.rubrics) <= 5 for p in prompts)
    assert {len(p.rubrics) for p in prompts} == {3, 4, 5}
    prompt = prompts[0]
    assert prompt.r_base("Frankie Valli led it.") in (0, 1)
    assert prompt.r_base("Frankie Valli [web:3].") == 0  # citation marks always fail
    assert prompt.r_base("The Four Seasons.") == 0  # the answer is necessary
    assert CITATION_MARK.search("see [attached_file:2]") and not CITATION_MARK.search("[A] reply")
    hedged = [p for p in prompts if any(r.name == "no hedges" for r in p.rubrics)]
    assert hedged and all(p.r_base("Maybe Frankie Valli.") == 0 for p in hedged)
    assert all(p.rubrics[0]("frankie valli") for p in prompts)


def test_the_pass_at_4_filter_drops_prompts_no_sample_or_every_sample_passes():
    prompts = make_rubric_prompts(_examples(9), seed=1)
    good, bad = "Frankie Valli.", "Perhaps Frankie Valli [web:1]"
    samples = {p.id: [good] * (i % 3 * 2) + [bad] * (4 - i % 3 * 2) for i, p in enumerate(prompts)}
    report = pass_at_k_filter(prompts, lambda p, k: samples[p.id], k=4)
    assert report.counts() == {"prompts": 9, "kept": 3, "dropped: no sample passes": 3,
                               "dropped: every sample passes": 3}
    assert all(report.passes[p.id] == 2 for p in report.kept)
    with pytest.raises(ValueError, match="expected 4"):
        pass_at_k_filter(prompts, lambda p, k: [good], k=4)


def test_the_rubric_mix_holds_its_share_and_is_reproducible():
    verifiable, rubric = [f"v{i}" for i in range(200)], [f"r{i}" for i in range(30)]

    def mix(step, seed=2, share=RUBRIC_SHARE, size=50):
        return batch_with_share(verifiable, rubric, step, size, seed, share)

    assert RUBRIC_SHARE == 0.1
    batch = mix(0)
    assert sum(x.startswith("r") for x in batch) == 5 and len(set(batch)) == 50
    assert batch == mix(0) != mix(0, seed=3)  # a pure function of (step, seed): a resumed run replays it
    assert not set(mix(0)) & set(mix(1))  # the next step draws fresh prompts of both kinds
    assert all(x.startswith("v") for x in mix(0, share=0.0, size=20))
    with pytest.raises(ValueError, match="within"):
        mix(0, share=1.5)


def test_rubric_prompts_in_a_training_batch_are_rewarded_by_their_rubrics(tmp_path):
    from helpers.reward import GroupRewards
    from helpers.rubrics import RUBRIC_SOURCE, RubricReward, as_example, load_rubric_prompts, write_filter

    prompts = make_rubric_prompts(_examples(4), seed=0)
    example = as_example(prompts[0])
    assert example.data_source == RUBRIC_SOURCE and example.question == prompts[0].prompt
    replies = ["Frankie Valli.", "Perhaps Frankie Valli [web:1]"]
    rubric_group = SimpleNamespace(example=example, trajectories=[SimpleNamespace(final_text=r) for r in replies])
    other = SimpleNamespace(example=SimpleNamespace(id="q", data_source="nq"), trajectories=rubric_group.trajectories)
    prepared = []

    class Inner:  # a verifiable-question reward with a prepare hook (as the gated reward has)
        def prepare(self, groups):
            prepared.extend(groups)

        def __call__(self, group):
            return GroupRewards([0.5, 0.5], {"eff/x": [1.0, 1.0]})

    reward = RubricReward(Inner(), prompts)
    reward.prepare([rubric_group, other])
    assert prepared == [other]  # the inner reward never samples references for rubric prompts
    assert not hasattr(reward, "sample_counterfactuals")  # nothing to forward from Inner
    asked = []

    class WithCounterfactuals(Inner):  # a reward that asks the policy what it would have done (search_gain)
        def sample_counterfactuals(self, sampling_client, tokenizer, groups):
            asked.append((sampling_client, tokenizer, groups))

    RubricReward(WithCounterfactuals(), prompts).sample_counterfactuals("sampler", "tok", [rubric_group, other])
    assert asked == [("sampler", "tok", [other])]  # only the verifiable questions
    got = reward(rubric_group)
    assert got.rewards == [float(prompts[0].r_base(r)) for r in replies] and got.rewards[1] == 0.0
    assert got.components["rubric/prompt"] == [1.0, 1.0]
    assert reward(other).rewards == [0.5, 0.5] and reward(other).components["rubric/prompt"] == [0.0, 0.0]
    # a filter's kept prompts are what a run reads back (TrainConfig.rubric_prompts)
    report = pass_at_k_filter(prompts, lambda p, k: [p.answers[0] + "."] * 3 + ["No."], k=4)
    path = write_filter(tmp_path / "kept.json", report, n=4, split="validation", seed=0)
    saved = json.loads(path.read_text())
    assert saved["counts"] == report.counts() and saved["kept"] == [p.id for p in report.kept]


def test_a_run_reads_back_the_prompts_a_filter_kept(tmp_path):
    from helpers.rubrics import load_rubric_prompts, rubric_set, write_filter

    prompts = rubric_set(6)
    report = pass_at_k_filter(prompts, lambda p, k: [p.answers[0] + "."] * (k - 1) + ["No."] if p.id != prompts[0].id
                              else ["No."] * k, k=4)
    path = write_filter(tmp_path / "kept.json", report, n=6, split="validation", seed=0)
    kept = load_rubric_prompts(path)
    assert [p.id for p in kept] == [p.id for p in report.kept] and prompts[0].id not in {p.id for p in kept}
    assert [p.id for p in load_rubric_prompts(None)] == [p.id for p in rubric_set()]


def test_a_constant_preference_halves_a_right_answers_credit_and_leaves_a_wrong_one_alone():
    from helpers.runs import override
    from helpers.train import TrainConfig

    group = _group(["Ada Lovelace.", "Charles Babbage.", "Ada Lovelace, I think."], [True, False, True])
    plain = make_reward("gated", lambda_tool=0.0, lambda_len=0.0)(group)
    config = override(TrainConfig(reward="gated"), "reward_options",
                      '{"lambda_tool": 0.0, "lambda_len": 0.0, "preference": 0.5}')  # as --set writes it
    halved = config.reward_fn()(group)
    assert halved.rewards[0] == pytest.approx(0.5 * plain.rewards[0]) and plain.rewards[0] > 0
    assert halved.rewards[1] == pytest.approx(plain.rewards[1])  # no credit to halve
    assert halved.components["eff/preference_mean"] == [0.5, 0.5, 0.5]
    for bad in (1.5, -0.1):
        with pytest.raises(ValueError, match=r"\[0, 1\]"):
            make_reward("gated", preference=bad)
