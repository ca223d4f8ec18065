"""The preference model of Perplexity's post: rule-labelled pairs, the Bradley–Terry loss and its
symmetrised form, the position-free probability, the value-head model on the small backbone,
training, evaluation and save/load."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from helpers.preference import (RULES, Preference, PreferenceConfig, PreferencePair, both_orders, bt_loss,
                                make_pairs, make_ties, position_bias, position_free_probability, split_pairs,
                                symmetrised_loss)


def _examples(n: int):
    names = ["Paris", "Leo Varadkar", "The Four Seasons", "1969", "Mount Everest", "Ada Lovelace"]
    return [SimpleNamespace(id=f"q{i}", question=f"which answer belongs to question number {i}",
                            answers=[names[i % len(names)]]) for i in range(n)]


# ---------------------------------------------------------------- pairs


def test_pairs_are_reproducible_labelled_by_their_rule_and_flip_with_the_order():
    pairs = make_pairs(_examples(40), seed=3, shown_first=0.5)
    assert pairs == make_pairs(_examples(40), seed=3, shown_first=0.5)
    assert pairs != make_pairs(_examples(40), seed=4, shown_first=0.5)
    assert {p.rule for p in pairs} == set(RULES)
    for p in pairs:
        good, bad = (p.a, p.b) if p.r == 1 else (p.b, p.a)
        assert "[" not in good and len(good) < len(bad) or p.rule == "language"
        assert p.swapped().swapped() == p and p.swapped().r == 1 - p.r
    cited = [p for p in pairs if p.rule == "cited"]
    assert all("[" in (p.b if p.r == 1 else p.a) for p in cited)
    assert all(p.r == 1 for p in make_pairs(_examples(20), shown_first=1.0))
    assert all(p.r == 0 for p in make_pairs(_examples(20), shown_first=0.0))
    shown = [p.r for p in make_pairs(_examples(400), shown_first=0.8)]
    assert 0.72 < sum(shown) / len(shown) < 0.88


def test_the_split_keeps_every_question_on_one_side_and_both_orders_doubles():
    pairs = make_pairs(_examples(30), seed=0)
    train, test = split_pairs(pairs, held_out=0.3, seed=0)
    assert len(train) + len(test) == 30 and len(test) == 9
    assert not {p.question for p in train} & {p.question for p in test}
    assert split_pairs(pairs, 0.3, seed=0) == (train, test)
    doubled = both_orders(train)
    assert len(doubled) == 2 * len(train) and doubled[1] == train[0].swapped()
    ties = make_ties(_examples(5))
    assert all(t.rule == "tie" and t.a != t.b for t in ties)


@pytest.mark.parametrize("call", [lambda: make_pairs(_examples(3), shown_first=1.5),
                                  lambda: make_pairs(_examples(3), rules=("rude",)),
                                  lambda: split_pairs(make_pairs(_examples(3)), held_out=0.0)])
def test_bad_arguments_are_clear_errors(call):
    with pytest.raises(ValueError):
        call()


# ---------------------------------------------------------------- loss


def test_the_bt_loss_is_the_posts_formula():
    delta = torch.tensor([0.0, 2.0, -1.0])
    r = torch.tensor([1.0, 1.0, 0.0])
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    expected = -(math.log(0.5) + math.log(sig(2.0)) + math.log(1 - sig(-1.0))) / 3
    assert float(bt_loss(delta, r)) == pytest.approx(expected, abs=1e-6)
    assert math.isfinite(float(bt_loss(torch.tensor([200.0]), torch.tensor([0.0]))))


def test_the_symmetrised_loss_averages_both_orders_with_the_label_flipped():
    d_ab, d_ba, r = torch.tensor([1.5, -0.3]), torch.tensor([0.4, 0.9]), torch.tensor([1.0, 0.0])
    expected = 0.5 * bt_loss(d_ab, r) + 0.5 * bt_loss(d_ba, 1 - r)
    assert float(symmetrised_loss(d_ab, d_ba, r)) == pytest.approx(float(expected))
    # a constant offset for the first slot is paid for in one order and not undone by the other
    pure = torch.tensor([2.0, -2.0])
    assert float(symmetrised_loss(pure + 1, -pure + 1, torch.tensor([1.0, 0.0]))) > float(
        symmetrised_loss(pure, -pure, torch.tensor([1.0, 0.0])))


def test_p_bar_ignores_the_order_and_the_bias_measures_the_first_slots_advantage():
    d_ab, d_ba = torch.tensor([1.0, 3.0, -2.0]), torch.tensor([0.2, 1.0, -2.0])
    p = position_free_probability(d_ab, d_ba)
    assert torch.allclose(p + position_free_probability(d_ba, d_ab), torch.ones(3))
    assert float(p[2]) == pytest.approx(0.5)
    assert torch.allclose(position_bias(torch.tensor([1.0]), torch.tensor([-1.0])), torch.zeros(1), atol=1e-7)
    assert float(position_bias(torch.tensor([1.0]), torch.tensor([1.0]))) > 0  # both orders favour slot A


# ---------------------------------------------------------------- the model on the small backbone


@pytest.fixture(scope="module")
def trained(small_model_name):
    torch.manual_seed(0)
    pairs = make_pairs(_examples(24), seed=0, shown_first=0.5)
    train, test = split_pairs(pairs, held_out=0.25, seed=0)
    model = Preference(PreferenceConfig(model=small_model_name, epochs=2, lora_layers=1, rank=4))
    model.fit(train, progress=False)
    return model, train, test


def test_the_top_view_reads_what_the_whole_backbone_reads(small_model_name):
    model = Preference(PreferenceConfig(model=small_model_name, lora_layers=2))
    enc = [model.encoded("who wrote it", "Ada Lovelace.", "Maybe Ada Lovelace, not sure."),
           model.encoded("a longer question about a river that runs", "Nile.", "The answer is Nile [web:1].")]
    states = model.model.encode(enc)
    with torch.no_grad():
        full = [model.model.backbone(input_ids=torch.tensor([e.ids])).last_hidden_state[0] for e in enc]
        torch.nn.init.normal_(model.model.value_head.weight)
        expected = torch.stack([model.model.value_head(f[e.first_end]) - model.model.value_head(f[e.second_end])
                                for f, e in zip(full, enc)]).squeeze(-1)
        got = model.model.delta(states, enc)  # padded batch, cached frozen blocks, top blocks only
    assert torch.allclose(got, expected, atol=1e-3 * float(expected.abs().max()) + 1e-4)


def test_training_learns_the_rule_and_only_the_adapter_and_head_change(trained):
    model, train, test = trained
    assert model.history[-1]["loss"] < model.history[0]["loss"]
    assert model.evaluate(train)["accuracy"] >= 0.9
    report = model.evaluate(test)
    assert report["pairs"] == len(test) and report["p_bar_bias"] < 1e-5
    assert set(model.model.trainable()) == {n for n, p in model.model.named_parameters()
                                             if "lora_" in n or n.startswith("value_head")}
    assert all(not p.requires_grad for p in model.model.parameters())


def test_the_bias_of_p_bar_is_read_from_each_order_in_its_own_call(trained, monkeypatch):
    """P-bar(a, b) + P-bar(b, a) = 1 by algebra when both come from the same two Deltas, so the goal
    |P-bar(a, b) + P-bar(b, a) - 1| <= 0.01 is measured with the swapped pair read on its own: a
    reading that depends on the call (batch, padding, what came first) must show as a bias."""
    model, _, test = trained
    assert model.evaluate(test)["p_bar_bias"] <= 0.01  # the goal, after symmetrising

    def leaky(items, *args, **kwargs):  # a call's first half reads 1 higher, whatever the pair
        d = torch.tensor([0.1 * (len(first) - len(second)) for _, first, second in items])
        return d + (torch.arange(len(items)) < len(items) // 2).float()

    monkeypatch.setattr(model, "deltas", leaky)
    assert model.evaluate(test)["p_bar_bias"] > 0.1


def test_save_and_load_give_the_same_scores(trained, tmp_path):
    model, _, test = trained
    folder = model.save(tmp_path / "pref")
    assert {f.name for f in folder.iterdir()} == {"preference.safetensors", "preference.json"}
    again = Preference.load(folder)
    d1 = torch.stack(model.both_deltas(test))
    d2 = torch.stack(again.both_deltas(test))
    assert torch.allclose(d1, d2, atol=1e-5)
    p = again.probability(test[0].question, test[0].a, test[0].b)
    assert 0.0 <= p <= 1.0 and p == pytest.approx(1 - again.probability(test[0].question, test[0].b, test[0].a))
    with pytest.raises(FileNotFoundError):
        Preference.load(tmp_path / "nothing")


def test_a_saved_model_of_another_layout_is_refused(trained, tmp_path, small_model_name):
    model, _, _ = trained
    folder = model.save(tmp_path / "pref")
    import json

    saved = json.loads((folder / "preference.json").read_text())
    saved["config"]["rank"] = 2
    (folder / "preference.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match="shape"):
        Preference.load(folder)


def test_config_errors_are_clear():
    with pytest.raises(ValueError, match="epochs"):
        PreferenceConfig(epochs=0)
    assert PreferencePair("q", "a", "b", 1, "hedged").swapped().a == "b"


def test_the_adapter_and_the_value_head_live_where_the_backbone_does():
    # a backbone on another device (the GPU in a window; "meta" here): every tensor the model adds must
    # sit beside the frozen weights, or the first forward fails with a device mismatch
    from torch import nn

    from helpers.preference.model import PreferenceModel

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj, self.up_proj = nn.Linear(8, 8), nn.Linear(8, 16)

    backbone = nn.Module()
    backbone.layers = nn.ModuleList([Block(), Block()])
    backbone.config = SimpleNamespace(hidden_size=8)
    backbone.to("meta")
    model = PreferenceModel(backbone, lora_layers=1, rank=2)
    assert {p.device.type for p in model.trainable().values()} == {"meta"}
    assert len(model.trainable()) == 6  # LoRA A and B of the two projections, the head's weight and bias
