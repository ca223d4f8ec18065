"""Tensor operations per decoded layer: the projection-by-projection layer, the fused one, and the fused
one with each LoRA merged into its base weight (`COURSE_ENGINE_FUSE=merge`, not exact).

A replayed decode step is bound by its kernel launches, so the count of operations a layer dispatches
is what the fused layer (helpers.engine.fused) cuts. This counts them on the CPU, over one eager
layer of a decode step of a model with a LoRA adapter on every projection (bf16 base, fp32 adapter,
as on the GPU), with a TorchDispatchMode: every aten call that reaches a backend kernel. Views
(outputs aliasing an input) and allocations launch no kernel and are counted apart. It also decodes
one chunk with each and compares tokens and logprobs with the reference's. (The `inductor` option
is not counted here: its kernels are inductor's, not aten ops.)

    python benchmarks/decode_ops.py [--model smollm2-135m] [--rank 16] [--figure out.png] [--json out.json]

On CUDA, sdpa and roll are one kernel each as on the CPU; GEMMs may add a kernel (split-K). The
steps/s this buys is measured on a GPU: `bench_grpo_gpu.py decode --batch-sizes 1,64` under each
COURSE_ENGINE_FUSE value (0: the reference layer; 1: fused, the default; merge; inductor).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ALLOCATIONS = {"empty", "empty_like", "empty_strided", "zeros", "new_empty", "new_zeros"}


def counter():
    """A TorchDispatchMode that tallies aten ops: (kernels Counter, views Counter, allocations Counter)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.kernels, self.views, self.allocs = collections.Counter(), collections.Counter(), collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            returns = func._schema.returns
            aliasing = bool(returns) and returns[0].alias_info is not None and not returns[0].alias_info.is_write
            (self.allocs if name in ALLOCATIONS else self.views if aliasing else self.kernels)[name] += 1
            return func(*args, **(kwargs or {}))

    return Count()


def adapted_host(model: str, rank: int, dtype):
    """The engine's host for `model` with one LoRA slot on every projection, B far from zero."""
    import torch

    from helpers.engine.host import get_host

    host = get_host(model, "cpu", dtype)
    slot = "ops"

    def add():
        host.add_adapter(slot, host.lora_config(rank, True, True, True), seed=0)
        gen = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, param in host.peft.named_parameters():
                if f"lora_B.{slot}." in name:
                    param.copy_(torch.randn(param.shape, generator=gen).to(param.dtype) * 0.02)
        host.active_slot = slot
        host.peft.set_adapter(slot)

    host.call(add).result()
    return host, slot


def count_layer(weights, layer_fn, dtype):
    """The ops one layer of one decode step dispatches (rows 8, cache 64)."""
    import torch

    from helpers.engine import graphs

    rows, length = 8, 64
    state = graphs.DecodeState(weights, rows, length, weights.lm_head.weight.shape[0], "cpu", dtype)
    state.bias.fill_(torch.finfo(dtype).min)
    state.bias[:, :5] = 0
    state.col.fill_(4)
    cos = torch.ones(rows, 1, weights.head_dim, dtype=dtype)
    rot = layer_fn.rotary(cos, cos * 0.5)  # per step, not per layer: outside the count
    h = torch.randn(rows, weights.embed.shape[1], dtype=dtype)
    mask = state.bias[:, None, None, :]
    # under no_grad, not inference_mode: composite ops (linear, sdpa) decompose into the ops that run
    with torch.no_grad(), counter() as c:
        layer_fn(h, weights.layers[0], state.k[0], state.v[0], state.col, rot, mask, weights)
    return c


def decode_chunk(weights, layer_fn, dtype, prompt_rows: int = 8):
    """One chunk (8 greedy steps) from an empty cache: (tokens, logprobs)."""
    import torch

    from helpers.engine import graphs

    state = graphs.DecodeState(weights, prompt_rows, 64, weights.lm_head.weight.shape[0], "cpu", dtype)
    state.bias.fill_(torch.finfo(dtype).min)
    state.greedy.fill_(True)
    state.logits[torch.arange(prompt_rows), torch.arange(prompt_rows) * 101 + 7] = 10.0
    with torch.inference_mode():
        graphs.chunk(weights, state, layer_fn, truncate=False, greedy=True)
    return state.tokens.T.clone(), state.logps.T.clone()


def main() -> None:
    import torch

    from helpers.engine import graphs
    from helpers.engine.fused import Fuser, FusedLayerFunctions

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--figure", default="")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dtype = torch.bfloat16
    host, slot = adapted_host(args.model, args.rank, dtype)
    weights = graphs.DecoderWeights.gather(host, slot)
    fused = Fuser().fuse(weights)
    merged = Fuser(merge=True).fuse(weights)
    results = {}
    for label, w, fn in (("reference", weights, graphs.LayerFunctions()), ("fused", fused, FusedLayerFunctions()),
                         ("merged", merged, FusedLayerFunctions())):
        c = count_layer(w, fn, dtype)
        results[label] = {"kernels": sum(c.kernels.values()), "views": sum(c.views.values()),
                          "allocations": sum(c.allocs.values()), "by_op": dict(c.kernels.most_common())}
        print(f"{label:>9}: {results[label]['kernels']} kernel ops a layer (+{results[label]['views']} views, "
              f"+{results[label]['allocations']} allocations): {dict(c.kernels.most_common())}")
    ref_t, ref_l = decode_chunk(weights, graphs.LayerFunctions(), dtype)
    numerics = {}
    for label, w in (("fused", fused), ("merged", merged)):
        t, lp = decode_chunk(w, FusedLayerFunctions(), dtype)
        numerics[label] = {"same_tokens": bool(torch.equal(t, ref_t)),
                           "max_abs_logprob_diff": float((lp - ref_l).abs().max())}
        print(f"{label}, one chunk, 8 rows x 8 greedy steps, bf16, against the reference: same tokens "
              f"{numerics[label]['same_tokens']}, max |logprob diff| {numerics[label]['max_abs_logprob_diff']:.2e}")
    out = {"model": args.model, "rank": args.rank, "dtype": "bfloat16", "layers": len(weights.layers),
           "per_layer": results, "numerics": numerics}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    if args.figure:
        figure(out, args.figure)


def figure(out: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["reference\n(projection by projection)", "fused", "fused, LoRA merged\n(not exact)"]
    parts = [("kernels", "kernel ops", "#3b6ea8"), ("views", "views (no kernel)", "#b7c7dd"),
             ("allocations", "allocations (no kernel)", "#e0e0e0")]
    fig, ax = plt.subplots(figsize=(8, 4.2))
    left = [0, 0, 0]
    for key, name, colour in parts:
        values = [out["per_layer"][label][key] for label in ("reference", "fused", "merged")]
        ax.barh(labels, values, left=left, color=colour, label=name)
        for i, v in enumerate(values):
            if key == "kernels":
                ax.text(v / 2, i, str(v), ha="center", va="center", color="white", fontweight="bold")
        left = [a + b for a, b in zip(left, values)]
    ax.invert_yaxis()
    ax.set_xlabel("aten ops per decoded layer")
    ax.set_xlim(0, max(left) * 1.05)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title(f"Decode step, one layer: {out['model']}, bf16, LoRA rank {out['rank']} on every projection\n"
                 "ops dispatched in one eager step, counted on the CPU", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
