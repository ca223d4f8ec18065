"""The preference model: the policy's own backbone, its language-model head replaced by a value head.

Perplexity's post scores a reply with s_theta(x, y), the value head read at the reply's last
token. A score computed on (x, y) alone makes Delta(x, a, b) = -Delta(x, b, a) by construction, so
position bias could not exist and the symmetrised loss would have nothing to remove. A judge
that compares, though, reads both replies: here the model reads one sequence

    Question: x \\n [A] y_first \\n [B] y_second \\n

and the value head is read at the newline that closes each reply. The first reply's score is
computed before the second is seen, the second's after the first (causal attention), and the two
slots sit at different positions behind different markers. Nothing ties the two readings of a
pair together, so a model can learn that "[A]" wins — which a one-order loss on data that shows
the preferred reply first more often rewards, and the symmetrised loss does not.

At CPU scale the backbone is frozen except for LoRA on its top `lora_layers` blocks. The blocks
below never change, so their output is computed once per sequence (`encode`) and every epoch runs
only the top blocks, the final norm and the value head (`delta`).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
MAX_QUESTION_TOKENS = 64
MAX_REPLY_TOKENS = 48


class LoRALinear(nn.Module):
    """W x + (alpha / rank) B A x, with W frozen and B zero at the start (the model starts as the base)."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, generator: torch.Generator) -> None:
        super().__init__()
        self.base = base
        self.scale = alpha / rank
        a = torch.empty(rank, base.in_features)
        nn.init.kaiming_uniform_(a, a=math.sqrt(5), generator=generator)
        # drawn on the CPU (the seeded generator's device), then placed beside the frozen weight
        self.lora_A = nn.Parameter(a.to(base.weight.device, base.weight.dtype))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, rank, dtype=base.weight.dtype,
                                               device=base.weight.device))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_A.T @ self.lora_B.T) * self.scale


@dataclass
class EncodedPair:
    """One pair as the model reads it: token ids and where each reply ends."""

    ids: list[int]
    first_end: int
    second_end: int


def encode_pair(tokenizer, question: str, first: str, second: str) -> EncodedPair:
    """Token ids of 'Question: x / [A] first / [B] second' and the positions of the closing newlines."""
    def piece(text: str, limit: int) -> list[int]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids[:limit]

    question_ids = piece(f"Question: {' '.join(question.split())}", MAX_QUESTION_TOKENS) + piece("\n", 4)
    first_ids = piece(f"[A] {first}", MAX_REPLY_TOKENS) + piece("\n", 4)
    second_ids = piece(f"[B] {second}", MAX_REPLY_TOKENS) + piece("\n", 4)
    ids = question_ids + first_ids + second_ids
    return EncodedPair(ids, len(question_ids) + len(first_ids) - 1, len(ids) - 1)


class _Stop(Exception):
    """Raised by the frozen pass once it holds the input of the first trained block."""

    def __init__(self, hidden: torch.Tensor) -> None:
        super().__init__()
        self.hidden = hidden


class PreferenceModel(nn.Module):
    """Backbone (frozen, LoRA on the top blocks) + a scalar value head.

    `encode` runs the frozen blocks once; `delta` runs the trained top on what `encode` returned
    and gives Delta = s(first slot) - s(second slot) for every pair of the batch.
    """

    def __init__(self, backbone: nn.Module, *, lora_layers: int = 2, rank: int = 8, alpha: float = 16.0,
                 seed: int = 0) -> None:
        super().__init__()
        layers = backbone.layers
        if not 1 <= lora_layers <= len(layers):
            raise ValueError(f"lora_layers must lie in 1..{len(layers)}, got {lora_layers}")
        for parameter in backbone.parameters():
            parameter.requires_grad_(False)
        self.backbone = backbone
        self.cut = len(layers) - lora_layers
        self.lora_layers, self.rank, self.alpha = lora_layers, rank, alpha
        generator = torch.Generator().manual_seed(seed)
        for layer in list(layers)[self.cut:]:
            for parent in layer.modules():
                for name, child in list(parent.named_children()):
                    if name in TARGETS and isinstance(child, nn.Linear):
                        setattr(parent, name, LoRALinear(child, rank, alpha, generator))
        # kept out of the module tree: it shares the backbone's weights, which are registered once
        object.__setattr__(self, "top", _top_view(backbone, self.cut))
        weight = next(backbone.parameters())
        self.value_head = nn.Linear(backbone.config.hidden_size, 1, dtype=weight.dtype, device=weight.device)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def trainable(self) -> dict[str, torch.Tensor]:
        """The tensors training changes (and a save keeps): LoRA A/B of the top blocks and the value head."""
        return {name: p for name, p in self.named_parameters() if "lora_" in name or name.startswith("value_head")}

    @property
    def device(self) -> torch.device:
        return self.value_head.weight.device

    @torch.no_grad()
    def encode(self, batch: list[EncodedPair]) -> list[torch.Tensor]:
        """The input of the first trained block for each sequence ([length, hidden]); computed once."""
        ids, mask = _padded([p.ids for p in batch], self.device)
        captured = self.backbone.layers[self.cut].register_forward_pre_hook(_capture, with_kwargs=True)
        try:
            self.backbone(input_ids=ids, attention_mask=mask, use_cache=False)
            raise RuntimeError("the frozen pass did not reach the first trained block")
        except _Stop as stop:
            hidden = stop.hidden
        finally:
            captured.remove()
        return [hidden[i, : len(p.ids)].detach().clone() for i, p in enumerate(batch)]

    def delta(self, hidden: list[torch.Tensor], batch: list[EncodedPair]) -> torch.Tensor:
        """Delta = s(x, first) - s(x, second), the value head read at each reply's closing newline."""
        length = max(h.shape[0] for h in hidden)
        states = torch.zeros(len(hidden), length, hidden[0].shape[1], dtype=hidden[0].dtype, device=self.device)
        mask = torch.zeros(len(hidden), length, dtype=torch.long, device=self.device)
        for i, h in enumerate(hidden):
            states[i, : h.shape[0]] = h
            mask[i, : h.shape[0]] = 1
        out = self.top(inputs_embeds=states, attention_mask=mask, use_cache=False).last_hidden_state
        rows = torch.arange(len(batch), device=self.device)
        first = torch.tensor([p.first_end for p in batch], device=self.device)
        second = torch.tensor([p.second_end for p in batch], device=self.device)
        values = self.value_head(out).squeeze(-1)
        return values[rows, first] - values[rows, second]


def _capture(module, args, kwargs):
    hidden = args[0] if args else kwargs["hidden_states"]
    raise _Stop(hidden)


def _padded(sequences: list[list[int]], device) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids and mask: with causal attention a real token never sees the padding."""
    length = max(len(s) for s in sequences)
    ids = torch.zeros(len(sequences), length, dtype=torch.long, device=device)
    mask = torch.zeros(len(sequences), length, dtype=torch.long, device=device)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask


def _top_view(backbone: nn.Module, cut: int) -> nn.Module:
    """The same backbone object seen from block `cut` upwards: shares every weight, runs fewer blocks.

    Its forward takes `inputs_embeds` (the cached hidden states), so the library's own code still
    builds the attention mask and rotary positions (positions restart at 0, as in the full pass).
    """
    top = copy.copy(backbone)
    top._modules = dict(backbone._modules)
    top._modules["layers"] = nn.ModuleList(list(backbone.layers)[cut:])
    top.config = copy.copy(backbone.config)
    top.config.num_hidden_layers = len(backbone.layers) - cut
    if getattr(backbone.config, "layer_types", None) is not None:
        top.config.layer_types = list(backbone.config.layer_types)[cut:]
    return top
