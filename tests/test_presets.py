"""helpers.presets: every named set applies to its config by name, and the text parser of helpers.runs."""

from __future__ import annotations

import pytest

from helpers import presets
from helpers.rollout import RolloutConfig
from helpers.runs import override, updated
from helpers.train import TrainConfig


def test_every_profile_has_the_same_names_and_its_budgets_are_rollout_fields():
    fast, full = presets.PROFILES["fast"], presets.PROFILES["full"]
    assert set(fast) == set(full)
    rollout_names = {name for name in fast if name in RolloutConfig.__dataclass_fields__}
    assert {"group_size", "max_search_calls", "max_trajectory_tokens"} <= rollout_names
    for values in (fast, full):
        config = updated(RolloutConfig(), {name: values[name] for name in rollout_names})
        assert all(getattr(config, name) == values[name] for name in rollout_names)
    assert all(fast[name] <= full[name] for name in ("questions", "group_size", "max_trajectory_tokens"))


def test_profile_budgets_are_fresh_copies_and_an_unknown_profile_is_refused():
    one = presets.profile_budgets("fast")
    one["sweep_budgets"].append(99)
    one["group_size"] = 99
    assert presets.profile_budgets("fast") == presets.PROFILES["fast"] and 99 not in presets.PROFILES["fast"]["sweep_budgets"]
    with pytest.raises(ValueError, match="fast"):
        presets.profile_budgets("huge")


def test_the_sweep_and_the_comparison_apply_to_their_configs():
    sweep = updated(RolloutConfig(), presets.SWEEP_ROLLOUT)
    assert sweep.temperature == 0.6 and sweep.max_assistant_turns > max(presets.SWEEP_BUDGETS)
    compare = updated(TrainConfig(), presets.EFFICIENCY_COMPARE)
    assert compare.rollout.group_size == 4 and compare.rollout.max_search_calls == RolloutConfig().max_search_calls
    assert presets.SWEEP_BUDGETS[0] == 0


def test_override_reads_a_field_from_its_text_as_its_flag_would():
    config = TrainConfig()
    assert override(config, "rollout.max_search_calls", "2").rollout.max_search_calls == 2
    assert override(config, "learning_rate", "3e-5").learning_rate == 3e-5
    assert override(config, "resume", "no").resume is False and override(config, "resume", "yes").resume is True
    assert override(config, "limit", "none").limit is None
    assert override(config, "reward_options", '{"gain": 0.2}').reward_options == {"gain": 0.2}
    with pytest.raises(ValueError, match="JSON object"):
        override(config, "reward_options", "0.2")
    with pytest.raises(ValueError, match="no field 'lr'"):
        override(config, "lr", "1")
    with pytest.raises(ValueError, match="no nested config 'learning_rate'"):
        override(config, "learning_rate.x", "1")
    assert config == TrainConfig()  # a copy: the config itself is unchanged
