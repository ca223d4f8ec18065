"""Decoding as replayed CUDA graphs: the decode step written out in plain tensor operations.

The transformers forward pass is general, and that generality costs a decode step dearly: a
hundred Python calls per layer, masks rebuilt every step, peft's adapter bookkeeping. Compiling it
(`torch.compile(mode="reduce-overhead")`) removes the overhead but takes minutes per process, and
more when several processes compile at once. This module writes the step of a Qwen2/Llama-family
decoder (RMSNorm, rotary positions, grouped-query attention over a static KV cache, SwiGLU, LoRA
on any projection) as a few dozen tensor operations, and captures `GRAPH_STEPS` consecutive steps,
token draws included, as one CUDA graph per (rows, cache length) bucket. Capturing takes a fraction
of a second; a replay runs the whole chunk without Python.

Numerics follow the trainer's forward: the same RMSNorm in fp32, rotary tables computed in fp32 and
cast to the model dtype, LoRA computed as peft does (input cast to the adapter's dtype, B(A(x)) times
the scale, added to the base output and cast back), tokens drawn by `drawing.draw`.

Speed: a replayed step is bound by its kernel launches, not by memory. The layer that runs is
`helpers.engine.fused`'s: projections that read one input as one GEMM, fewer casts and elementwise
ops (45 ops a layer instead of 82 with LoRA everywhere; `benchmarks/decode_ops.py` counts them).
`LayerFunctions` here is the projection-by-projection reference it is tested against
(COURSE_ENGINE_FUSE=0 runs it). Two options of the fused layer cut more: `merge` folds each LoRA
into a copy of its base weight (29 ops a layer; not exact, so off by default) and `inductor` compiles
the layer's two pure halves around the cache write (its kernels fuse the elementwise chains; compiled
once per row bucket). `fuse_setting` reads the setting; `benchmarks/decode_variants.py` (CPU: tokens,
sampler-trainer KL) and `benchmarks/bench_grpo_gpu.py decode` (any device: steps/s, KL) compare them.

Adapters: a sampler slot's tensors are updated in place when a new snapshot is loaded, so a graph
captured for a slot stays valid; a graph remembers the addresses of the weights it read and is
captured again if they moved (an adapter deleted and created anew). The fused layer's concatenated
copies are refreshed from the slot's tensors before each decode call (`GraphDecoder.prepare`).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

GRAPH_STEPS = 8  # decode steps per graph replay: the host reads tokens once per chunk
# COURSE_ENGINE_FUSE: which layer decodes. "0": LayerFunctions (projection by projection, the reference);
# "1": the fused layer (exact, the default); options of the fused layer, joined by commas: "merge" (each
# LoRA folded into a copy of its base weight: fewer ops, not exact), "inductor" (its pure halves compiled)
FUSE_SETTING, FUSE_DEFAULT, FUSE_OPTIONS = "COURSE_ENGINE_FUSE", "1", ("merge", "inductor")
STATE_BYTES = 12 << 30  # KV caches kept for reuse (a GRPO step meets a few shapes, one per turn)


@dataclass
class Linear:
    """A projection: base weight (+ bias), and the active LoRA pair with its scale, if any."""

    weight: Any
    bias: Any = None
    lora_a: Any = None
    lora_b: Any = None
    scaling: float = 0.0

    def tensors(self) -> list:
        return [t for t in (self.weight, self.bias, self.lora_a, self.lora_b) if t is not None]


def _linear(module, slot: str | None) -> Linear:
    base = getattr(module, "base_layer", module)
    lin = Linear(base.weight, base.bias)
    lora_a = getattr(module, "lora_A", None)
    if slot is not None and lora_a is not None and slot in lora_a:
        lin.lora_a, lin.lora_b = lora_a[slot].weight, module.lora_B[slot].weight
        lin.scaling = float(module.scaling[slot])
    return lin


def apply_linear(x, lin: Linear):
    """peft's LoRA forward without its bookkeeping: base(x) + B(A(x)) * scale, in the result's dtype."""
    import torch.nn.functional as F

    out = F.linear(x, lin.weight, lin.bias)
    if lin.lora_a is None:
        return out
    low = F.linear(F.linear(x.to(lin.lora_a.dtype), lin.lora_a), lin.lora_b)
    return (out + low * lin.scaling).to(out.dtype)


def rms_norm(x, weight, eps: float):
    import torch

    dtype = x.dtype
    x = x.to(torch.float32)
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x.to(dtype)


def rotate_half(x):
    import torch

    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


@dataclass
class DecoderWeights:
    """Every tensor one decode step reads, gathered once from the (possibly peft-wrapped) model."""

    embed: Any
    layers: list  # per layer: dict of norms (tensors) and Linear projections
    norm: Any
    lm_head: Linear
    inv_freq: Any
    rope_scale: float
    eps: float
    heads: int
    kv_heads: int
    head_dim: int

    @classmethod
    def gather(cls, host, slot: str | None) -> "DecoderWeights":
        model = host.model  # peft wraps modules in place: the base model holds the LoRA layers too
        inner = model.model
        cfg = model.config
        layers = []
        for layer in inner.layers:
            attn, mlp = layer.self_attn, layer.mlp
            layers.append({
                "in_norm": layer.input_layernorm.weight, "post_norm": layer.post_attention_layernorm.weight,
                **{name: _linear(getattr(attn, name), slot) for name in ("q_proj", "k_proj", "v_proj", "o_proj")},
                **{name: _linear(getattr(mlp, name), slot) for name in ("gate_proj", "up_proj", "down_proj")},
            })
        heads = cfg.num_attention_heads
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
        rotary = inner.rotary_emb
        return cls(embed=inner.embed_tokens.weight, layers=layers, norm=inner.norm.weight,
                   lm_head=_linear(model.lm_head, slot), inv_freq=rotary.inv_freq,
                   rope_scale=float(getattr(rotary, "attention_scaling", 1.0)), eps=float(cfg.rms_norm_eps),
                   heads=heads, kv_heads=cfg.num_key_value_heads, head_dim=head_dim)

    def signature(self) -> tuple[int, ...]:
        """Addresses of every tensor read: equal signatures mean a captured graph reads live weights."""
        ptrs = [self.embed.data_ptr(), self.norm.data_ptr(), *(t.data_ptr() for t in self.lm_head.tensors())]
        for layer in self.layers:
            if not isinstance(layer, dict):  # fused layers (helpers.engine.fused) list their own
                ptrs += [t.data_ptr() for t in layer.tensors()]
                continue
            for value in layer.values():
                ptrs += [t.data_ptr() for t in value.tensors()] if isinstance(value, Linear) else [value.data_ptr()]
        return tuple(ptrs)


PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def flat_layer(layer: dict) -> tuple[tuple, tuple[float, ...]]:
    """A layer's tensors as one flat tuple (norms, then weight, bias, LoRA A, LoRA B per projection) and
    its LoRA scales: plain arguments, so one compiled function serves every layer."""
    tensors: list = [layer["in_norm"], layer["post_norm"]]
    for name in PROJECTIONS:
        lin = layer[name]
        tensors += [lin.weight, lin.bias, lin.lora_a, lin.lora_b]
    return tuple(tensors), tuple(layer[name].scaling for name in PROJECTIONS)


def _project(x, tensors: tuple, scales: tuple, index: int):
    weight, bias, lora_a, lora_b = tensors[2 + 4 * index: 6 + 4 * index]
    return apply_linear(x, Linear(weight, bias, lora_a, lora_b, scales[index]))


def layer_input(h, tensors: tuple, scales: tuple, cos, sin, eps: float, heads: int, kv_heads: int, head_dim: int):
    """A layer's attention inputs for one new token per row: normed, projected and rotated q, k, v."""
    rows = h.shape[0]
    x = rms_norm(h, tensors[0], eps)
    q = _project(x, tensors, scales, 0).view(rows, heads, head_dim)
    k = _project(x, tensors, scales, 1).view(rows, kv_heads, head_dim)
    v = _project(x, tensors, scales, 2).view(rows, kv_heads, head_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin, v


def layer_output(h, attended, tensors: tuple, scales: tuple, eps: float):
    """The rest of the layer: output projection, residual, norm, SwiGLU MLP, residual."""
    import torch.nn.functional as F

    h = h + _project(attended, tensors, scales, 3)
    x = rms_norm(h, tensors[1], eps)
    gated = F.silu(_project(x, tensors, scales, 4)) * _project(x, tensors, scales, 5)
    return h + _project(gated, tensors, scales, 6)


def attend(q, k, v, k_cache, v_cache, col, mask):
    """Write the new token's K/V at cache column `col`, attend over the cache (masked by `mask`)."""
    import torch.nn.functional as F

    rows, heads, head_dim = q.shape
    kv_heads = k.shape[1]
    k_cache.index_copy_(2, col, k.unsqueeze(2))
    v_cache.index_copy_(2, col, v.unsqueeze(2))
    # grouped-query attention as "group queries per KV head": no copy of the cache per query head
    out = F.scaled_dot_product_attention(q.view(rows, kv_heads, heads // kv_heads, head_dim), k_cache, v_cache,
                                         attn_mask=mask)
    return out.reshape(rows, heads * head_dim)


@dataclass
class LayerFunctions:
    """The layer projection by projection, as peft runs it: two pure halves around the in-place cache
    write. It is the reference for `helpers.engine.fused.FusedLayerFunctions` (the default), and runs
    when COURSE_ENGINE_FUSE=0."""

    input: Any = layer_input
    output: Any = layer_output

    @staticmethod
    def rotary(cos, sin):
        """What a step's layers receive of the rotary tables (computed once a step)."""
        return cos, sin

    @staticmethod
    def head(h, lin):
        return apply_linear(h, lin)

    def __call__(self, h, layer, k_cache, v_cache, col, rot, mask, w):
        tensors, scales = flat_layer(layer)
        q, k, v = self.input(h, tensors, scales, *rot, w.eps, w.heads, w.kv_heads, w.head_dim)
        return self.output(h, attend(q, k, v, k_cache, v_cache, col, mask), tensors, scales, w.eps)


class DecodeState:
    """Fixed-address buffers of one (rows, cache length) bucket: KV cache, positions, draws, outputs."""

    def __init__(self, weights: DecoderWeights, rows: int, length: int, vocab: int, device: str, dtype) -> None:
        import torch

        shape = (rows, weights.kv_heads, length, weights.head_dim)
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in weights.layers]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in weights.layers]
        self.bias = torch.zeros((rows, length), device=device, dtype=dtype)
        self.positions = torch.zeros(rows, device=device, dtype=torch.long)
        self.col = torch.zeros(1, device=device, dtype=torch.long)
        self.step = torch.zeros(1, device=device, dtype=torch.long)
        self.logits = torch.zeros((rows, vocab), device=device, dtype=dtype)
        self.temps = torch.ones((rows, 1), device=device, dtype=torch.float32)
        self.uniforms = torch.full((rows, length), 0.5, device=device, dtype=torch.float64)
        self.greedy = torch.zeros(rows, device=device, dtype=torch.bool)
        self.top_k = torch.full((rows, 1), 1 << 30, device=device, dtype=torch.long)
        self.top_p = torch.ones((rows, 1), device=device, dtype=torch.float32)
        self.tokens = torch.zeros((GRAPH_STEPS, rows), device=device, dtype=torch.long)
        self.logps = torch.zeros((GRAPH_STEPS, rows), device=device, dtype=torch.float32)
        self.rows, self.length = rows, length
        self.bytes = sum(t.numel() * t.element_size() for t in (*self.k, *self.v))


class _StateParams:
    """`drawing.draw`'s view of a DecodeState: uniforms are read at the device-side step counter."""

    def __init__(self, state: DecodeState, truncate: bool, greedy: bool) -> None:
        self.temps, self.truncate, self.state = state.temps, truncate, state
        self.top_k, self.top_p = state.top_k, state.top_p
        self.greedy = state.greedy if greedy else None

    @property
    def uniforms(self):
        return self.state.uniforms


def chunk(weights: DecoderWeights, state: DecodeState, layer_fn, truncate: bool, greedy: bool) -> None:
    """GRAPH_STEPS decode steps: draw from `state.logits`, record, feed the token back, advance."""
    import torch
    import torch.nn.functional as F

    from helpers.engine.drawing import draw

    params = _StateParams(state, truncate, greedy)
    mask = state.bias[:, None, None, :]  # a view: the attention mask of query groups per KV head
    for i in range(GRAPH_STEPS):
        tokens, logps = draw(state.logits, params, state.step)
        state.tokens[i].copy_(tokens)
        state.logps[i].copy_(logps)
        state.bias.index_fill_(1, state.col, 0.0)
        freqs = state.positions[:, None].float() * weights.inv_freq[None, :].float()
        emb = torch.cat((freqs, freqs), dim=-1)
        dtype = state.k[0].dtype
        cos = (emb.cos() * weights.rope_scale).to(dtype)[:, None, :]
        sin = (emb.sin() * weights.rope_scale).to(dtype)[:, None, :]
        rot = layer_fn.rotary(cos, sin)
        h = F.embedding(tokens, weights.embed)
        for layer, k_cache, v_cache in zip(weights.layers, state.k, state.v):
            h = layer_fn(h, layer, k_cache, v_cache, state.col, rot, mask, weights)
        h = rms_norm(h, weights.norm, weights.eps)
        state.logits.copy_(layer_fn.head(h, weights.lm_head))
        state.positions.add_(1)
        state.col.add_(1)
        state.step.add_(1)


def fuse_setting(value: str | None = None) -> frozenset:
    """COURSE_ENGINE_FUSE (or `value`) as a set: {"0"}, {"1"} or fused-layer options such as {"merge"}."""
    import os

    raw = os.environ.get(FUSE_SETTING, FUSE_DEFAULT) if value is None else value
    chosen = frozenset(part.strip() for part in (raw.strip() or FUSE_DEFAULT).split(",") if part.strip())
    if chosen in ({"0"}, {"1"}) or (chosen and chosen <= set(FUSE_OPTIONS)):
        return chosen
    raise ValueError(f"{FUSE_SETTING}={raw!r}: choose 0, 1, or fused-layer options among {FUSE_OPTIONS} "
                     "joined by commas")


def decode_layer(chosen: frozenset):
    """(fuser or None, layer functions) for a `fuse_setting()`."""
    from helpers.engine.fused import CompiledFusedLayerFunctions, Fuser, FusedLayerFunctions

    if chosen == {"0"}:
        return None, LayerFunctions()
    fn = CompiledFusedLayerFunctions() if "inductor" in chosen else FusedLayerFunctions()
    return Fuser(merge="merge" in chosen), fn


class GraphDecoder:
    """Per host: the gathered weights, bucket states and captured graphs of each adapter slot."""

    def __init__(self, host) -> None:
        self.host = host
        self.fuser, self.layer_fn = decode_layer(fuse_setting())
        self.states: dict[tuple[int, int], DecodeState] = {}
        self.graphs: dict[tuple, tuple[Any, tuple]] = {}  # key -> (CUDAGraph, weight signature)
        self.pool = None
        self.captures = 0

    def prepare(self, weights: DecoderWeights) -> DecoderWeights:
        """The weights the layer functions read: fused (copies refreshed from the live tensors) or as gathered."""
        return self.fuser.fuse(weights) if self.fuser is not None else weights

    def state(self, weights: DecoderWeights, rows: int, length: int) -> DecodeState:
        key = (rows, length)
        state = self.states.get(key)
        if state is None:
            vocab = weights.lm_head.weight.shape[0]
            state = DecodeState(weights, rows, length, vocab, self.host.device, self.host.dtype)
            while self.states and sum(s.bytes for s in self.states.values()) + state.bytes > STATE_BYTES:
                old = next(iter(self.states))  # least recently used first
                self.states.pop(old)
                self.graphs = {k: g for k, g in self.graphs.items() if (k[1], k[2]) != old}
        else:
            self.states.pop(key)
        self.states[key] = state
        return state

    def runner(self, weights: DecoderWeights, state: DecodeState, slot, truncate: bool, greedy: bool):
        """A callable that runs one chunk: a graph replay on CUDA, the plain function elsewhere."""
        import torch

        def plain():
            chunk(weights, state, self.layer_fn, truncate, greedy)

        if self.host.device != "cuda":
            return plain
        key = (slot, state.rows, state.length, truncate, greedy)
        signature = weights.signature()
        found = self.graphs.get(key)
        if found is not None and found[1] == signature:
            return found[0].replay
        current, side = torch.cuda.current_stream(), torch.cuda.Stream()
        try:
            side.wait_stream(current)
            with torch.cuda.stream(side):  # compile, autotune and allocate outside the capture
                plain()
            current.wait_stream(side)
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            # A graph allocates from its own pool, which cannot reuse the blocks the default pool keeps
            # cached: under a memory share (COURSE_CUDA_MEMORY_FRACTION) a training step's freed blocks
            # leave a capture no room. Give them back to the device first (once per captured bucket).
            torch.cuda.empty_cache()
            graph = torch.cuda.CUDAGraph()
            # thread_local: only this thread's unsafe calls break the capture. In the default global
            # mode a CUDA call another thread of the process makes meanwhile (the rollout loop, the
            # trainer's host) invalidates it, which surfaces as "operation failed due to a previous
            # error during capture" with no earlier error in this thread.
            with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                plain()
        except Exception as error:  # noqa: BLE001 - decoding goes on uncaptured, but say so
            # Out of memory (several runs share one GPU under memory caps), say, the warm-up stops part
            # way with its queued work still running on the side stream, writing this state's buffers,
            # which the caller refills next: wait for it. A capture whose end fails leaves its own stream
            # current: put the caller's back. Nothing is kept of the graph; the next batch captures again,
            # into a fresh memory pool: a capture that failed part way can leave the allocator recording
            # into its pool (torch 2.11), and every later capture into that pool then fails with
            # "already recording to mempool_id".
            torch.cuda.set_stream(current)
            current.wait_stream(side)
            self.pool = None
            warnings.warn(f"CUDA graph capture failed ({type(error).__name__}: {error}); decoding without graphs",
                          RuntimeWarning, stacklevel=2)
            return plain
        self.captures += 1
        self.graphs[key] = (graph, signature)
        return graph.replay


def decode_graphs(host, rows: list, logits, prefix, mask, next_pos) -> None:
    """Fill every row's tokens, logprobs and stop reason, decoding in replayed chunks of GRAPH_STEPS."""
    import torch

    from helpers.engine.drawing import LENGTH_BUCKET, DrawParams, bucket_rows, collect

    decoder = host.graph_decoder()
    slot = host.active_slot
    weights = decoder.prepare(DecoderWeights.gather(host, slot))  # after the slot's snapshot was loaded
    dyn_cache, index = prefix
    n_rows, width = len(rows), mask.shape[1]
    batch = bucket_rows(n_rows)
    steps = max(r.max_tokens for r in rows)
    length = -(-(width + steps + GRAPH_STEPS) // LENGTH_BUCKET) * LENGTH_BUCKET
    state = decoder.state(weights, batch, length)
    params = DrawParams(rows, host.device, batch=batch, steps=steps + GRAPH_STEPS)
    greedy = params.greedy is not None
    # capture first: capturing runs the chunk once for real, which advances the state it reads
    run = decoder.runner(weights, state, slot, params.truncate, greedy)
    full_index = torch.cat([index, torch.zeros(batch - n_rows, dtype=index.dtype, device=index.device)])
    for k_cache, v_cache, layer in zip(state.k, state.v, dyn_cache.layers):
        k_cache.zero_()
        v_cache.zero_()
        k_cache[:, :, :width].copy_(layer.keys.index_select(0, full_index))
        v_cache[:, :, :width].copy_(layer.values.index_select(0, full_index))
    full_mask = torch.cat([mask, mask[:1].expand(batch - n_rows, -1)])
    state.bias.fill_(torch.finfo(state.bias.dtype).min)
    state.bias[:, :width].masked_fill_(full_mask.bool(), 0.0)
    state.positions.copy_(torch.cat([next_pos, next_pos[:1].expand(batch - n_rows)]))
    state.col.fill_(width)
    state.step.zero_()
    state.logits.copy_(torch.cat([logits, logits[:1].expand(batch - n_rows, -1)]))
    state.temps.copy_(params.temps)
    state.uniforms[:, :steps + GRAPH_STEPS].copy_(params.uniforms)
    if greedy:
        state.greedy.copy_(params.greedy)
    if params.truncate:
        state.top_k.copy_(params.top_k)
        state.top_p.copy_(params.top_p)
    running = set(range(n_rows))
    done = 0
    while running and done < steps:
        run()
        tokens, logps = state.tokens.tolist(), state.logps.tolist()
        for i in range(min(GRAPH_STEPS, steps - done)):
            collect(host, rows, running, (tokens[i], logps[i]))
            if not running:
                break
        done += GRAPH_STEPS
