"""The rows of a decode batch and the token draw, shared by every decode path.

A `Row` is one sample being decoded: its prompt, settings, stop conditions and the tokens and
logprobs drawn so far. `draw` takes one token per row from the logits by inverse CDF (`inverse_cdf`) with the
row's own pre-drawn uniforms; `accept` appends a token and decides whether the row goes on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


LENGTH_BUCKET = 512  # static cache lengths are multiples of this: few shapes, few CUDA graphs


def bucket_rows(n: int) -> int:
    """Rows of a fixed-shape decode batch: a power of two >= 8, so a run meets a handful of shapes."""
    size = 8
    while size < n:
        size *= 2
    return size


@dataclass
class Row:
    prompt: list[int]
    job_index: int
    max_tokens: int
    temperature: float
    top_k: int
    top_p: float
    stop_ids: set[int]
    stop_strings: list[str]
    rng: random.Random
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stop_reason: str | None = None


class DrawParams:
    """Per-row sampling settings as device tensors, built once per decode batch.

    Uniforms for every step are drawn up front from each row's own generator (one per step,
    in order), so the decode loop never moves data from the host to the device.
    """

    def __init__(self, rows: list[Row], device, batch: int | None = None, steps: int | None = None) -> None:
        import torch

        batch = batch or len(rows)
        steps = steps or max(r.max_tokens for r in rows)
        filler = batch - len(rows)  # static-shape filler rows: plain sampling, ignored
        temps = [max(r.temperature, 1e-6) for r in rows] + [1.0] * filler
        self.temps = torch.tensor(temps, device=device, dtype=torch.float32)[:, None]
        uniforms = [[max(r.rng.random(), 1e-12) for _ in range(r.max_tokens)] + [0.5] * (steps - r.max_tokens)
                    for r in rows] + [[0.5] * steps] * filler
        self.uniforms = torch.tensor(uniforms, dtype=torch.float64).to(device)
        self.truncate = any(r.top_k > 0 or r.top_p < 1.0 for r in rows)
        if self.truncate:
            # top-k of 0 or -1 means no limit: a rank no row can reach
            self.top_k = torch.tensor([r.top_k if r.top_k > 0 else 1 << 30 for r in rows] + [1 << 30] * filler,
                                      device=device)[:, None]
            self.top_p = torch.tensor([r.top_p for r in rows] + [1.0] * filler, device=device,
                                      dtype=torch.float32)[:, None]
        self.greedy = None
        if any(r.temperature <= 0 for r in rows):  # decided in Python: no device sync
            self.greedy = torch.tensor([r.temperature <= 0 for r in rows] + [False] * filler, device=device)

    def select(self, index) -> "DrawParams":
        """The same settings for a subset of rows (the dynamic path drops finished rows)."""
        import copy

        other = copy.copy(self)
        for name in ("temps", "uniforms", "top_k", "top_p", "greedy"):
            value = getattr(self, name, None)
            if value is not None:
                setattr(other, name, value.index_select(0, index))
        return other


def draw(logits, params: DrawParams, step: int):
    """One token per row from logits [B, V] at decode step `step`; returns (tokens [B], model logprobs [B])."""
    import torch

    logits = logits.float()
    logp = torch.log_softmax(logits, dim=-1)
    probs = torch.softmax(logits / params.temps, dim=-1)
    if params.truncate:
        probs, order = probs.sort(dim=-1, descending=True)
        ranks = torch.arange(probs.shape[-1], device=logits.device)
        before = probs.cumsum(-1) - probs  # mass strictly before each token: the first always stays
        drop = (ranks[None, :] >= params.top_k) | (before > params.top_p)
        probs = probs.masked_fill(drop, 0.0)
    # a device-side step counter (a captured graph) reads its column without a host sync
    u = params.uniforms[:, step] if isinstance(step, int) else params.uniforms.index_select(1, step)[:, 0]
    pick = inverse_cdf(probs, u)
    tokens = order.gather(1, pick[:, None]).squeeze(1) if params.truncate else pick
    if params.greedy is not None:
        tokens = torch.where(params.greedy, logits.argmax(-1), tokens)
    return tokens, logp.gather(1, tokens[:, None]).squeeze(1)


CDF_BLOCK = 128  # tokens a block of the two-level inverse CDF (Qwen2.5's 151,936 = 1,187 blocks)


def inverse_cdf(probs, u):
    """Per row, the first token whose cumulative mass reaches u × the row's total mass: probs [B, V] >= 0
    (need not sum to 1), u [B] in (0, 1) float64. Returns [B] token ids, never one of zero mass.

    The cumulative sums are float64 so that a uniform picks the same token on any device. They are taken
    in two levels: the mass of each block of CDF_BLOCK tokens, the cumulative sum over blocks, then the
    cumulative sum inside the one block each row lands in. One float64 scan over the whole vocabulary is a
    single slow kernel on a GPU (about 0.28 ms a decode step at batch 64 on an H100, over 10 % of the step);
    the two levels scan 1/128 of it. The result is the same token up to the order of float64 additions: the
    two can differ only when u × total falls within rounding (~1e-16 of the total) of a token's boundary.
    """
    import torch
    import torch.nn.functional as F

    rows, vocab = probs.shape
    pad = -vocab % CDF_BLOCK
    blocks = (F.pad(probs, (0, pad)) if pad else probs).view(rows, -1, CDF_BLOCK)
    mass = blocks.sum(-1, dtype=torch.float64)  # [B, blocks]
    upto = mass.cumsum(-1)
    target = (u * upto[:, -1])[:, None]
    # the first block whose cumulative mass reaches the target holds mass (the one before it fell short)
    block = torch.searchsorted(upto, target).clamp_(max=upto.shape[1] - 1)
    before = F.pad(upto, (1, 0)).gather(1, block)  # the mass of the blocks before it
    inner = blocks.gather(1, block[:, :, None].expand(-1, 1, CDF_BLOCK))[:, 0].double().cumsum(-1)
    # rounding between the two levels must not land on a token of zero mass at either end of the block:
    # the rest is kept within (0, the block's own total]
    rest = torch.minimum((target - before).clamp_(min=torch.finfo(torch.float64).tiny), inner[:, -1:])
    within = torch.searchsorted(inner, rest).clamp_(max=CDF_BLOCK - 1)
    return (block * CDF_BLOCK + within)[:, 0].clamp_(max=vocab - 1)  # a non-finite row still names a token


def accept(row: Row, token: int, logprob: float, tokenizer) -> bool:
    """Append one sampled token to a running row; True if the row goes on."""
    row.tokens.append(token)
    row.logprobs.append(logprob)
    if token in row.stop_ids or _stopped_by_string(row, tokenizer):
        row.stop_reason = "stop"
    elif len(row.tokens) >= row.max_tokens:
        row.stop_reason = "length"
    else:
        return True
    return False


def _stopped_by_string(row: Row, tokenizer) -> bool:
    if not row.stop_strings:
        return False
    # A stop string can only have just appeared if the new token's text holds its last character
    # (or the token is part of a character split over several tokens): skip the decode otherwise.
    piece = _piece(tokenizer, row.tokens[-1])
    if "\ufffd" not in piece and not any(s[-1] in piece for s in row.stop_strings):
        return False
    longest = max(len(s) for s in row.stop_strings)
    tail = tokenizer.decode(row.tokens[-(longest + 2):], skip_special_tokens=False)
    return any(s in tail for s in row.stop_strings)


_PIECES: dict[tuple[int, int], str] = {}


def _piece(tokenizer, token: int) -> str:
    key = (id(tokenizer), token)
    piece = _PIECES.get(key)
    if piece is None:
        piece = _PIECES[key] = tokenizer.decode([token], skip_special_tokens=False)
    return piece


def collect(host, rows: list[Row], running: set[int], step_output) -> None:
    tokens, logps = step_output
    for i in list(running):
        if not accept(rows[i], tokens[i], logps[i], host.tokenizer):
            running.discard(i)


