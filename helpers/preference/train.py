"""Training and evaluating the preference model on labelled pairs; saving it beside the adapters.

`train_preference(train_pairs, config)` returns a `Preference` (model + tokenizer + what it was
trained with). `symmetrise=True` optimises the post's L_sym (each pair in both orders),
`symmetrise=False` the one-order loss on the pairs as given: the model the symmetrised one is compared with.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import torch

from helpers import config as course_config
from helpers.models import load_model, load_tokenizer
from helpers.preference.loss import bt_loss, position_bias, position_free_probability, symmetrised_loss
from helpers.preference.model import EncodedPair, PreferenceModel, encode_pair
from helpers.preference.pairs import PreferencePair

WEIGHTS_FILE = "preference.safetensors"
CONFIG_FILE = "preference.json"


@dataclass(frozen=True)
class PreferenceConfig:
    """How the preference model is built and trained (the CPU defaults train in a few minutes)."""

    model: str | None = None  # None: the profile's model (the policy's own backbone)
    symmetrise: bool = True
    lora_layers: int = 2
    rank: int = 8
    alpha: float = 16.0
    epochs: int = 3
    batch_size: int = 8
    lr: float = 1e-3
    head_lr: float = 1e-2
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("lora_layers", "rank", "epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"PreferenceConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.lr <= 0 or self.head_lr <= 0:
            raise ValueError("PreferenceConfig learning rates must be > 0")

    def resolved_model(self) -> str:
        return self.model or course_config.default_model()


class Preference:
    """A trained (or fresh) preference model with its tokenizer: scores pairs, saves, loads."""

    def __init__(self, config: PreferenceConfig = PreferenceConfig(), backbone=None) -> None:
        self.config = config
        self.tokenizer = load_tokenizer(config.resolved_model())
        if backbone is None:
            backbone = load_model(config.resolved_model()).model  # the LM head is not used
        torch.manual_seed(config.seed)
        self.model = PreferenceModel(backbone, lora_layers=config.lora_layers, rank=config.rank,
                                     alpha=config.alpha, seed=config.seed)
        self.history: list[dict] = []
        self._cache: dict[tuple[str, str, str], torch.Tensor] = {}

    # ------------------------------------------------------------ reading pairs

    def encoded(self, question: str, first: str, second: str) -> EncodedPair:
        return encode_pair(self.tokenizer, question, first, second)

    def frozen_states(self, items: Sequence[tuple[str, str, str]], batch_size: int = 16,
                      progress: bool = False) -> list[torch.Tensor]:
        """The frozen blocks' output for each (question, first, second), computed once and kept."""
        missing = list(dict.fromkeys(item for item in items if item not in self._cache))
        if missing:
            bar = _bar(len(missing), "frozen blocks", progress)
            for start in range(0, len(missing), batch_size):
                chunk = missing[start:start + batch_size]
                states = self.model.encode([self.encoded(*item) for item in chunk])
                self._cache.update(zip(chunk, states))
                bar.update(len(chunk))
            bar.close()
        return [self._cache[item] for item in items]

    def deltas(self, items: Sequence[tuple[str, str, str]], batch_size: int = 16,
               progress: bool = False) -> torch.Tensor:
        """Delta(x, first, second) for every item, without gradients."""
        states = self.frozen_states(items, batch_size, progress)
        out = []
        with torch.no_grad():
            for start in range(0, len(items), batch_size):
                chunk = items[start:start + batch_size]
                out.append(self.model.delta(states[start:start + batch_size], [self.encoded(*i) for i in chunk]))
        return torch.cat(out) if out else torch.zeros(0)

    def both_deltas(self, pairs: Sequence[PreferencePair], progress: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(Delta(x, a, b), Delta(x, b, a)) for every pair."""
        items = [(p.question, p.a, p.b) for p in pairs] + [(p.question, p.b, p.a) for p in pairs]
        d = self.deltas(items, progress=progress)
        return d[: len(pairs)], d[len(pairs):]

    def probability(self, question: str, reply: str, reference: str) -> float:
        """s = P-bar(reply is preferred over reference), in [0, 1] and independent of the order shown."""
        d = self.deltas([(question, reply, reference), (question, reference, reply)])
        return float(position_free_probability(d[0], d[1]))

    def share_frozen_states(self, other: "Preference") -> None:
        """Use `other`'s cache of frozen-block outputs (same backbone, same trained blocks): two
        models compared on the same pairs then pay for the frozen pass once."""
        if (other.config.resolved_model(), other.model.cut) != (self.config.resolved_model(), self.model.cut):
            raise ValueError("frozen states can only be shared between models with the same backbone and cut")
        self._cache = other._cache

    # ------------------------------------------------------------ training

    def fit(self, pairs: Sequence[PreferencePair], progress: bool = True) -> list[dict]:
        """Optimise L_sym (config.symmetrise) or the one-order BT loss on `pairs`; one row per epoch."""
        if not pairs:
            raise ValueError("no training pairs")
        cfg = self.config
        items = [(p.question, p.a, p.b) for p in pairs]
        swapped = [(p.question, p.b, p.a) for p in pairs]
        self.frozen_states(items + (swapped if cfg.symmetrise else []), progress=progress)
        head = [p for n, p in self.model.trainable().items() if n.startswith("value_head")]
        lora = [p for n, p in self.model.trainable().items() if not n.startswith("value_head")]
        for p in head + lora:
            p.requires_grad_(True)
        optimiser = torch.optim.AdamW([{"params": lora, "lr": cfg.lr}, {"params": head, "lr": cfg.head_lr}],
                                      weight_decay=0.0)
        order = list(range(len(pairs)))
        rng = random.Random(cfg.seed)
        steps = cfg.epochs * -(-len(pairs) // cfg.batch_size)
        bar = _bar(steps, "symmetrised" if cfg.symmetrise else "one order", progress)
        for epoch in range(cfg.epochs):
            rng.shuffle(order)
            started, total = time.perf_counter(), 0.0
            for start in range(0, len(order), cfg.batch_size):
                idx = order[start:start + cfg.batch_size]
                r = torch.tensor([pairs[i].r for i in idx], dtype=torch.float32, device=self.model.device)
                delta_ab = self._delta_with_grad([items[i] for i in idx])
                if cfg.symmetrise:
                    loss = symmetrised_loss(delta_ab, self._delta_with_grad([swapped[i] for i in idx]), r)
                else:
                    loss = bt_loss(delta_ab, r)
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                total += float(loss.detach()) * len(idx)
                bar.update(1)
                bar.set_postfix(loss=f"{float(loss.detach()):.3f}")
            self.history.append({"epoch": epoch + 1, "loss": total / len(order),
                                 "seconds": time.perf_counter() - started})
        bar.close()
        for p in head + lora:
            p.requires_grad_(False)
        return self.history

    def _delta_with_grad(self, items: list[tuple[str, str, str]]) -> torch.Tensor:
        return self.model.delta(self.frozen_states(items), [self.encoded(*i) for i in items])

    # ------------------------------------------------------------ evaluation

    def evaluate(self, pairs: Sequence[PreferencePair], progress: bool = False) -> dict:
        """Accuracy and position bias on `pairs` (each read in both orders).

        accuracy: P-bar agrees with the label (P-bar = 0.5 counts as wrong; None with ties only);
        accuracy_one_order: sigma(Delta(x, a, b)) read in the order given;
        p_bar_bias: max over pairs of |P-bar(a, b) + P-bar(b, a) - 1|, the post's position bias of
            the score s(tau) uses, with P-bar(b, a) read again from the swapped pair (see below);
        position_bias: the mean of P(a, b) + P(b, a) - 1 with P = sigma(Delta) read in one order
            (> 0: the first slot wins more often): the slot preference of the reading itself, which
            the symmetrised loss trains down and P-bar averages out;
        position_bias_abs: its mean size per pair;
        by_rule: accuracy per kind of flaw.
        """
        if not pairs:
            raise ValueError("no pairs to evaluate")
        d_ab, d_ba = self.both_deltas(pairs, progress=progress)
        p_bar = position_free_probability(d_ab, d_ba)
        # P-bar(b, a) from the swapped pairs, read in a call of their own (other batches, other
        # padding): computed from the same two Deltas it would be 1 - P-bar(a, b) by algebra, and
        # an order leaking into the reading (batch composition, padding, non-determinism) would not show.
        s_ba, s_ab = self.both_deltas([p.swapped() for p in pairs])
        p_bar_swapped = position_free_probability(s_ba, s_ab)
        bias = position_bias(d_ab, d_ba)
        decided = [i for i, p in enumerate(pairs) if p.rule != "tie"]
        by_rule: dict[str, list[bool]] = {}
        right, right_one = [], []
        for i in decided:
            preferred_first = pairs[i].r == 1
            ok = bool(p_bar[i] > 0.5) if preferred_first else bool(p_bar[i] < 0.5)
            right.append(ok)
            right_one.append(bool(d_ab[i] > 0) if preferred_first else bool(d_ab[i] < 0))
            by_rule.setdefault(pairs[i].rule, []).append(ok)
        mean = lambda values: sum(values) / len(values) if values else None  # noqa: E731
        return {
            "pairs": len(pairs),
            "accuracy": mean(right),
            "accuracy_one_order": mean(right_one),
            "p_bar_bias": float((p_bar + p_bar_swapped - 1).abs().max()),
            "position_bias": float(bias.mean()),
            "position_bias_abs": float(bias.abs().mean()),
            "by_rule": {rule: mean(v) for rule, v in sorted(by_rule.items())},
        }

    # ------------------------------------------------------------ save / load

    def save(self, folder: str | Path) -> Path:
        """The trained tensors (safetensors) and the config (json), in `folder`."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        save_file({n: p.detach().cpu().contiguous() for n, p in self.model.trainable().items()},
                  str(folder / WEIGHTS_FILE))
        # the backbone by name, so a model saved under one profile loads on the same backbone under another
        saved = asdict(replace(self.config, model=self.config.resolved_model()))
        (folder / CONFIG_FILE).write_text(json.dumps({"config": saved, "history": self.history}, indent=2))
        return folder

    @classmethod
    def load(cls, folder: str | Path, backbone=None) -> "Preference":
        """A saved preference model; an unknown layout or a missing file is a clear error."""
        from safetensors.torch import load_file

        folder = Path(folder)
        if not (folder / CONFIG_FILE).exists() or not (folder / WEIGHTS_FILE).exists():
            raise FileNotFoundError(f"{folder} holds no saved preference model ({CONFIG_FILE} + {WEIGHTS_FILE})")
        saved = json.loads((folder / CONFIG_FILE).read_text())
        known = {f.name for f in fields(PreferenceConfig)}
        preference = cls(PreferenceConfig(**{k: v for k, v in saved["config"].items() if k in known}), backbone)
        tensors = load_file(str(folder / WEIGHTS_FILE))
        own = preference.model.trainable()
        if set(tensors) != set(own):
            raise ValueError(f"{folder / WEIGHTS_FILE} does not match the model's layout "
                             f"({len(tensors)} tensors saved, {len(own)} expected)")
        with torch.no_grad():
            for name, tensor in tensors.items():
                if tensor.shape != own[name].shape:
                    raise ValueError(f"{name}: saved shape {tuple(tensor.shape)}, expected {tuple(own[name].shape)}")
                own[name].copy_(tensor)
        preference.history = saved.get("history", [])
        return preference


def train_preference(pairs: Sequence[PreferencePair], config: PreferenceConfig = PreferenceConfig(),
                     progress: bool = True, backbone=None) -> Preference:
    """A preference model trained on `pairs` with `config`."""
    preference = Preference(config, backbone)
    preference.fit(pairs, progress=progress)
    return preference


def _bar(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, disable=not enabled, leave=False)
