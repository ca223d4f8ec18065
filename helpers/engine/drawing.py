"""The rows of a decode batch and the token draw, shared by every decode path.

A `Row` is one sample being decoded: its prompt, settings, stop conditions and the tokens and
logprobs drawn so far. `draw` takes one token per row from the logits by inverse CDF with the row's
own pre-drawn uniforms; `accept` appends a token and decides whether the row goes on.
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
    cdf = probs.double().cumsum(-1)
    # a device-side step counter (a captured graph) reads its column without a host sync
    u = params.uniforms[:, step] if isinstance(step, int) else params.uniforms.index_select(1, step)[:, 0]
    pick = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None]).clamp_(max=probs.shape[-1] - 1)
    tokens = order.gather(1, pick).squeeze(1) if params.truncate else pick.squeeze(1)
    if params.greedy is not None:
        tokens = torch.where(params.greedy, logits.argmax(-1), tokens)
    return tokens, logp.gather(1, tokens[:, None]).squeeze(1)


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


