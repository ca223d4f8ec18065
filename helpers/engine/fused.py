"""The decode layer with fewer tensor operations: projections that read one input as one GEMM.

A replayed decode step costs what its kernel launches cost, so this module rewrites the layer of
`helpers.engine.graphs` with fewer operations while keeping the trainer's numerics:

- q/k/v read one input, and so do gate/up: their base weights (and biases) are concatenated into
  one GEMM each; their LoRA A matrices are concatenated into one GEMM and their B matrices placed on
  a block diagonal, so a group's adapter costs two GEMMs whatever its size. The extra K columns of
  the block diagonal are exact zeros; only the GEMM's summation order may differ.
- the LoRA scale: peft computes `(out + B(A(x)) * s).to(out.dtype)`. `out.add_(low, alpha=s)`
  computes the same sum in the wider dtype and rounds it once into `out` (no cast kernel). When s is a
  power of two (alpha 32 over a power-of-two rank) `low * s` is exact, so it is folded into the
  block-diagonal B or into add's alpha; otherwise it is multiplied first, as peft does.
- RMSNorm writes the normalised fp32 product straight into the model dtype (`torch.mul(..., out=)`:
  one rounding, as `.to(dtype)` does). `F.rms_norm` is not used: it multiplies by the weight in
  fp32 before rounding, which is not the trainer's forward.
- rotary: `rotate_half(x) * sin == x.roll(half) * sin'` with sin' = (-sin1, sin2), exactly (a sign
  flip is exact); sin' is computed once a step, and q and k are rotated as one tensor.

Copies: the concatenated tensors are copies of the model's. A sampler slot's LoRA tensors are
overwritten in place when a snapshot loads, so every copy records its sources' version counters
(bumped by each in-place write, `copy_` included) and is refreshed before decoding when they moved;
sources that are new objects (an adapter deleted and made again) get new copies, hence new
addresses, and a captured graph that read the old ones is captured again.

Two options trade exactness or start-up time for fewer kernels (`COURSE_ENGINE_FUSE`, see
`helpers.engine.graphs.fuse_setting`):

- merge: each LoRA folded into a copy of its base weight, W' = W + s·B·A summed in fp32 and rounded
  once to the model dtype, refreshed like the other copies when the adapter is written in place. The
  layer then runs no LoRA GEMM, cast or add: 29 ops instead of 45 with LoRA everywhere. It is not the
  trainer's computation: the trainer rounds base(x) to bf16 and adds B(A(x))·s in fp32, the merged
  weight rounds W + s·B·A to bf16 element by element, which loses the parts of a small adapter update
  below W's last bit. The sampler-trainer KL it adds must be measured (`benchmarks/decode_variants.py`);
  a copy of every adapted weight per adapter slot (about 0.7 GB for Qwen2.5-0.5B in bf16) is its memory.
- inductor: the layer's two pure halves (`fused_input`, `fused_output`) compiled; the in-place KV-cache
  writes and the attention stay eager between them. Inductor fuses a chain of bf16 elementwise ops
  into one kernel and by default keeps fp32 between them, where eager PyTorch (and so the trainer)
  rounds every op's output to bf16: more precise, but other bits, so greedy tokens part from the
  eager layer's after tens of tokens. `emulate_precision_casts` makes it round where eager rounds.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass
class Projection:
    """One GEMM over the (concatenated) base weight, and the LoRA of all its parts as two GEMMs.

    `alpha` scales B(A(x)) inside the final add (exact: a power of two, or 1.0); `post_scale`, when
    set (a float or a per-column tensor), multiplies it first, as peft does for other scales."""

    weight: Any
    bias: Any = None
    lora_a: Any = None
    lora_b: Any = None
    alpha: float = 1.0
    post_scale: Any = None

    def tensors(self) -> list:
        parts = (self.weight, self.bias, self.lora_a, self.lora_b, self.post_scale)
        return [t for t in parts if t is not None and not isinstance(t, float)]


def project(x, p: Projection):
    """base(x) + B(A(x)) * scale, rounded once to the base output's dtype (peft's LoRA forward)."""
    return project_parts(x, p.weight, p.bias, p.lora_a, p.lora_b, p.alpha, p.post_scale)


def project_parts(x, weight, bias, lora_a, lora_b, alpha, post_scale):
    """`project` on a Projection's fields (plain arguments: what a compiled function takes)."""
    import torch.nn.functional as F

    out = F.linear(x, weight, bias)
    if lora_a is None:
        return out
    low = F.linear(F.linear(x.to(lora_a.dtype), lora_a), lora_b)
    if post_scale is not None:
        low = low.mul_(post_scale)
    return out.add_(low, alpha=alpha)


def parts(p: Projection) -> tuple:
    return (p.weight, p.bias, p.lora_a, p.lora_b, p.alpha, p.post_scale)


def merged_weight(weight, lora_a, lora_b, scale: float):
    """W + s·B·A summed in fp32 and rounded once to W's dtype: the LoRA folded into the base weight."""
    import torch

    return torch.addmm(weight.float(), lora_b.float(), lora_a.float(), alpha=scale).to(weight.dtype)


def exact_scale(scale: float) -> bool:
    """Whether multiplying by `scale` is exact in floating point (a power of two)."""
    return scale > 0 and math.frexp(scale)[0] == 0.5


def _version(t):
    try:
        return t._version
    except RuntimeError:  # an inference tensor keeps no version counter: refresh it every time
        return object()


class _Copy:
    """A tensor built from source tensors, filled again when a source was written in place.

    It holds weak references only: copies of a deleted adapter die with it. `fill(dst, sources)`
    must read the sources it is given (a closure over the tensors would keep them alive)."""

    def __init__(self, sources: list, make, fill) -> None:
        self.refs = [weakref.ref(t) for t in sources]
        self.fill = fill
        self.tensor = make()
        self.stamp = self._stamp(sources)

    @staticmethod
    def _stamp(sources: list) -> tuple:
        return tuple((t.data_ptr(), _version(t)) for t in sources)

    def alive(self) -> bool:
        return all(r() is not None for r in self.refs)

    def refresh(self, sources: list) -> None:
        stamp = self._stamp(sources)
        if stamp != self.stamp:
            self.fill(self.tensor, sources)
            self.stamp = stamp


class Fuser:
    """The concatenated copies of one host, kept across decode calls (their addresses stay put).

    The base copies (q/k/v and gate/up weights, shared by every slot) add what those weights take:
    about 0.47 GB for Qwen2.5-0.5B in bf16."""

    def __init__(self, merge: bool = False) -> None:
        self.copies: dict[tuple, _Copy] = {}
        self.builds = 0  # copies made, not refreshed
        self.merge = merge  # fold each LoRA into a copy of its base weight (not exact: see the module)

    def _copy(self, kind: str, sources: list, extra: tuple, make, fill):
        key = (kind, tuple(id(t) for t in sources), extra)
        found = self.copies.get(key)
        if found is None or any(r() is not t for r, t in zip(found.refs, sources)):
            found = self.copies[key] = _Copy(sources, make, fill)
            self.builds += 1
        else:
            found.refresh(sources)
        return found.tensor

    def group(self, kind: str, parts: list) -> Projection:
        """One Projection computing the concatenation of `parts`' outputs (graphs.Linear each)."""
        import torch

        rows = [p.weight.shape[0] for p in parts]
        offsets = [sum(rows[:i]) for i in range(len(parts))]
        if self.merge and any(p.lora_a is not None for p in parts):
            return Projection(self._merged(kind, parts), self._bias(kind, parts, rows, offsets))
        weight = self._copy(kind + ".weight", [p.weight for p in parts], (),
                            lambda: torch.cat([p.weight for p in parts]), lambda dst, src: torch.cat(src, out=dst))
        bias = self._bias(kind, parts, rows, offsets)
        adapted = [(off, p) for off, p in zip(offsets, parts) if p.lora_a is not None]
        if not adapted:
            return Projection(weight, bias)
        fold = all(exact_scale(p.scaling) for _, p in adapted)
        a_src = [p.lora_a for _, p in adapted]
        b_src = [p.lora_b for _, p in adapted]
        ranks = [a.shape[0] for a in a_src]
        blocks = [(off, p.weight.shape[0], sum(ranks[:i]), r, p.scaling) for i, ((off, p), r) in enumerate(zip(adapted, ranks))]
        lora_a = self._copy(kind + ".lora_a", a_src, (), lambda: torch.cat(a_src), lambda dst, src: torch.cat(src, out=dst))

        def fill_b(dst, src):  # B_i at (its output rows, its rank columns); zeros elsewhere
            for (row, n, col, r, scale), b in zip(blocks, src):
                block = dst[row:row + n, col:col + r].copy_(b)
                if fold:
                    block.mul_(scale)  # exact: a power of two

        def make_b():
            dst = b_src[0].new_zeros((sum(rows), sum(ranks)))
            fill_b(dst, b_src)
            return dst

        lora_b = self._copy(kind + ".lora_b", b_src, (fold, tuple(blk[4] for blk in blocks)), make_b, fill_b)
        if fold:
            return Projection(weight, bias, lora_a, lora_b)

        def make_scale():  # per output column: its part's scale (0 where a part has no adapter)
            column = torch.zeros(sum(rows), dtype=lora_b.dtype, device=lora_b.device)
            for row, n, _, _, scale in blocks:
                column[row:row + n] = scale
            return column

        post = self._copy(kind + ".scale", a_src, tuple(blk[4] for blk in blocks), make_scale, lambda dst, src: None)
        return Projection(weight, bias, lora_a, lora_b, post_scale=post)

    def _bias(self, kind: str, parts: list, rows: list, offsets: list):
        """The parts' biases concatenated (zeros for a part without one), or None."""
        biased = [(off, p.bias) for off, p in zip(offsets, parts) if p.bias is not None]
        if not biased:
            return None
        spans = [(off, b.shape[0]) for off, b in biased]

        def fill_bias(dst, src):  # parts without a bias add zeros
            for (off, n), b in zip(spans, src):
                dst[off:off + n].copy_(b)

        def make_bias():
            dst = biased[0][1].new_zeros(sum(rows))
            fill_bias(dst, [b for _, b in biased])
            return dst

        return self._copy(kind + ".bias", [b for _, b in biased], (), make_bias, fill_bias)

    def _merged(self, kind: str, parts: list):
        """The parts' weights stacked, each with its LoRA folded in (W + s·B·A, one rounding)."""
        import torch

        sources, layout = [], []
        for p in parts:
            adapted = p.lora_a is not None
            sources += [p.weight, p.lora_a, p.lora_b] if adapted else [p.weight]
            layout.append((p.weight.shape[0], p.scaling if adapted else None))

        def fill(dst, src):
            row, i = 0, 0
            for n, scale in layout:
                if scale is None:
                    dst[row:row + n].copy_(src[i])
                    i += 1
                else:
                    dst[row:row + n].copy_(merged_weight(src[i], src[i + 1], src[i + 2], scale))
                    i += 3
                row += n

        def make():
            dst = parts[0].weight.new_empty((sum(n for n, _ in layout), parts[0].weight.shape[1]))
            fill(dst, sources)
            return dst

        return self._copy(kind + ".merged", sources, tuple(scale for _, scale in layout), make, fill)

    def single(self, lin, kind: str = "") -> Projection:
        """A projection of its own: no copy, the LoRA scale in add's alpha when that is exact (merged:
        one copy of the weight with the LoRA folded in)."""
        if lin.lora_a is None:
            return Projection(lin.weight, lin.bias)
        if self.merge:
            return Projection(self._merged(kind, [lin]), lin.bias)
        if exact_scale(lin.scaling):
            return Projection(lin.weight, lin.bias, lin.lora_a, lin.lora_b, alpha=lin.scaling)
        return Projection(lin.weight, lin.bias, lin.lora_a, lin.lora_b, post_scale=lin.scaling)

    def fuse(self, weights):
        """`weights` (a graphs.DecoderWeights) with fused layers, every copy current.

        Copies are made and refreshed under inference mode, where decoding reads them."""
        import torch

        self.copies = {k: c for k, c in self.copies.items() if c.alive()}
        layers = []
        with torch.inference_mode():
            for i, layer in enumerate(weights.layers):
                qkv = self.group(f"{i}.qkv", [layer["q_proj"], layer["k_proj"], layer["v_proj"]])
                gate_up = self.group(f"{i}.gate_up", [layer["gate_proj"], layer["up_proj"]])
                layers.append(FusedLayer(layer["in_norm"], layer["post_norm"], qkv, self.single(layer["o_proj"], f"{i}.o"),
                                         gate_up, self.single(layer["down_proj"], f"{i}.down")))
        return replace(weights, layers=layers, lm_head=self.single(weights.lm_head, "lm_head"))


@dataclass
class FusedLayer:
    in_norm: Any
    post_norm: Any
    qkv: Projection
    o_proj: Projection
    gate_up: Projection
    down_proj: Projection

    def tensors(self) -> list:
        out = [self.in_norm, self.post_norm]
        for f in fields(self)[2:]:
            out += getattr(self, f.name).tensors()
        return out


def rms_norm(x, weight, eps: float):
    """The trainer's RMSNorm: in fp32, rounded to the model dtype, times the weight in that dtype."""
    import torch

    xf = x.to(torch.float32)
    scale = xf.pow(2).mean(-1, keepdim=True).add_(eps).rsqrt_()
    normed = torch.mul(xf, scale, out=torch.empty_like(x))  # computed in fp32, rounded once on write
    return weight * normed


def fused_input(h, norm, qkv: tuple, cos, sin, eps: float, heads: int, kv_heads: int, dim: int):
    """The attention inputs of one new token per row: normed, projected (one GEMM), rotated q, k and v."""
    rows = h.shape[0]
    out = project_parts(rms_norm(h, norm, eps), *qkv)
    qk = out[:, :(heads + kv_heads) * dim].view(rows, heads + kv_heads, dim)
    qk = qk * cos + qk.roll(dim // 2, -1) * sin  # q and k rotated together
    v = out[:, (heads + kv_heads) * dim:].view(rows, kv_heads, dim)
    return qk[:, :heads].reshape(rows, kv_heads, heads // kv_heads, dim), qk[:, heads:], v


def fused_output(h, attended, o_proj: tuple, norm, gate_up: tuple, down_proj: tuple, eps: float):
    """The rest of the layer: output projection, residual, norm, SwiGLU MLP (gate/up one GEMM), residual."""
    import torch.nn.functional as F

    h = h + project_parts(attended, *o_proj)
    both = project_parts(rms_norm(h, norm, eps), *gate_up)
    inter = both.shape[1] // 2
    return h + project_parts(F.silu(both[:, :inter]) * both[:, inter:], *down_proj)


class FusedLayerFunctions:
    """The decode layer on FusedLayer weights (same call shape as graphs.LayerFunctions): two pure
    halves (`fused_input`, `fused_output`) around the in-place KV-cache write and the attention."""

    input = staticmethod(fused_input)
    output = staticmethod(fused_output)

    @staticmethod
    def rotary(cos, sin):
        """(cos, sin') with rotate_half(x) * sin == x.roll(half, -1) * sin': computed once a step."""
        import torch

        half = sin.shape[-1] // 2
        return cos, torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)

    @staticmethod
    def head(h, lin):
        return project(h, lin)

    def __call__(self, h, layer: FusedLayer, k_cache, v_cache, col, rot, mask, w):
        import torch.nn.functional as F

        rows = h.shape[0]
        q, k, v = self.input(h, layer.in_norm, parts(layer.qkv), *rot, w.eps, w.heads, w.kv_heads, w.head_dim)
        k_cache.index_copy_(2, col, k.unsqueeze(2))
        v_cache.index_copy_(2, col, v.unsqueeze(2))
        attended = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask)
        return self.output(h, attended.reshape(rows, w.heads * w.head_dim), parts(layer.o_proj), layer.post_norm,
                           parts(layer.gate_up), parts(layer.down_proj), w.eps)


class CompiledFusedLayerFunctions(FusedLayerFunctions):
    """FusedLayerFunctions with its two pure halves compiled by inductor; the cache writes and the
    attention stay eager (in-place writes into the static cache are never inside a compiled region).

    `emulate_precision_casts` makes inductor round every intermediate to the model dtype where eager
    PyTorch does: without it a fused bf16 chain (RMSNorm, the LoRA add, SiLU·up) keeps fp32 between
    ops, which is more precise but is not the trainer's forward."""

    def __init__(self, emulate: bool = True) -> None:
        import torch

        options = {"emulate_precision_casts": emulate}
        # one compile per row bucket (shapes static); the halves serve every layer
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
        self.input = torch.compile(fused_input, options=options, dynamic=False)
        self.output = torch.compile(fused_output, options=options, dynamic=False)
