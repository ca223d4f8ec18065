"""The preference score s(tau) of Perplexity's post, at the course's scale.

A Bradley–Terry preference model on the policy's own backbone (LoRA on its top blocks, the
language-model head replaced by a scalar value head) learns which of two replies is preferred;
s(tau) = P-bar(the policy's reply is preferred over the reference policy's reply), the
position-free probability, is what the gated reward R = r_base * s - pen_eff multiplies.

Modules, in the order of the chain:
- pairs: preference pairs labelled by a rule (a stand-in for human preferences), split;
- model: the pair encoding, the value-head model, its frozen-blocks cache;
- loss: the BT loss, the symmetrised loss, P-bar, the position bias;
- train: `PreferenceConfig`, `Preference` (fit, evaluate, probability, save/load), `train_preference`;
- score: `PreferenceScore`, s(tau) for a GRPO group (what `GatedReward(preference=...)` calls);
- rubrics: rubric-checked prompts, the pass@4 filter, the 90/10 prompt mix (`helpers.rubrics`);
- cli: `python -m helpers.preference train | evaluate | rubrics`.
"""

from helpers.preference.loss import bt_loss, position_bias, position_free_probability, symmetrised_loss
from helpers.preference.model import EncodedPair, LoRALinear, PreferenceModel, encode_pair
from helpers.preference.pairs import (RULES, PreferencePair, both_orders, make_pairs, make_ties, split_pairs,
                                      worse_reply)
from helpers.preference.score import PreferenceScore, final_reply
from helpers.preference.train import Preference, PreferenceConfig, train_preference

__all__ = [
    "RULES", "EncodedPair", "LoRALinear", "Preference", "PreferenceConfig", "PreferenceModel",
    "PreferencePair", "PreferenceScore", "both_orders", "bt_loss", "encode_pair", "final_reply", "make_pairs", "make_ties", "position_bias",
    "position_free_probability", "split_pairs", "symmetrised_loss", "train_preference", "worse_reply",
]
