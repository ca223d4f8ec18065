"""The graph decoder's layer variants on the CPU: tokens, agreement with the trainer's forward, speed.

Each variant (`COURSE_ENGINE_FUSE` values: 0, 1, merge, inductor, ...) decodes the same rows greedily
from an empty cache for `--steps` tokens (`graphs.chunk`, eager on the CPU, as the GPU path replays it),
then transformers' forward with the same adapter (the trainer's computation) scores the tokens:

- `same_as_fused`: tokens equal to the exact fused layer's (the default), and where the first
  difference is; logprob gaps to it before that point;
- `kl_k3`: the mean k3 estimate of KL(decoder || forward) over the decoded tokens (the sampler-trainer
  KL a GRPO step reports; goal < 1e-3), `max_gap` its largest |logprob difference|;
- `steps_per_s`: decode steps a second on this CPU (first call, with any compile, timed apart).

    python benchmarks/decode_variants.py --model smollm2-135m --steps 256 [--adapter results/h200_agent/adapter]
        [--variants 1,merge,inductor] [--json out.json]

Without `--adapter` the model gets a random LoRA (rank 16, alpha 32) on every projection with B far from
zero (as benchmarks/decode_ops.py does); with it, the exported adapter's tensors.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

VARIANTS = ("0", "1", "merge", "inductor", "inductor-fp32", "merge,inductor")


def load_adapter(host, folder: str) -> str:
    """Load an exported adapter (adapter.safetensors + meta.json) into a new slot of `host`."""
    from safetensors.torch import load_file

    meta = json.loads((Path(folder) / "meta.json").read_text())
    tensors = load_file(str(Path(folder) / "adapter.safetensors"))
    slot = "variants"

    def add():
        host.add_adapter(slot, host.lora_config(meta["rank"], meta["train_mlp"], meta["train_attn"],
                                                meta["train_unembed"]), seed=0)
        host.load_adapter_state(slot, tensors)
        host.active_slot = slot
        host.peft.set_adapter(slot)

    host.call(add).result()
    return slot


def layer(weights, variant: str):
    """(weights the layer reads, layer functions) of one variant."""
    from helpers.engine import graphs
    from helpers.engine.fused import CompiledFusedLayerFunctions

    if variant == "inductor-fp32":  # inductor as it comes: fp32 between fused bf16 ops
        fuser, _ = graphs.decode_layer(graphs.fuse_setting("1"))
        return fuser.fuse(weights), CompiledFusedLayerFunctions(emulate=False)
    fuser, fn = graphs.decode_layer(graphs.fuse_setting(variant))
    return (fuser.fuse(weights) if fuser is not None else weights), fn


def decode(weights, fn, rows: int, steps: int, dtype):
    """Greedy decoding from an empty cache, row i starting at token 101 i + 7: (tokens, logps, seconds
    of the first chunk, seconds of the rest)."""
    import torch

    from helpers.engine import graphs

    state = graphs.DecodeState(weights, rows, steps + graphs.GRAPH_STEPS, weights.lm_head.weight.shape[0], "cpu", dtype)
    state.bias.fill_(torch.finfo(dtype).min)
    state.greedy.fill_(True)
    state.logits[torch.arange(rows), torch.arange(rows) * 101 + 7] = 10.0
    tokens, logps, times = [], [], []
    with torch.inference_mode():
        for _ in range(steps // graphs.GRAPH_STEPS):
            start = time.perf_counter()
            graphs.chunk(weights, state, fn, truncate=False, greedy=True)
            times.append(time.perf_counter() - start)
            tokens.append(state.tokens.T.clone())
            logps.append(state.logps.T.clone())
    return torch.cat(tokens, 1), torch.cat(logps, 1), times[0], sum(times[1:])


def forward_logps(host, tokens):
    """The trainer's logprob of each decoded token after the first (transformers' forward, adapter on)."""
    import torch

    with torch.inference_mode():
        logits = host.forward_model()(input_ids=tokens).logits.float()
    return torch.log_softmax(logits[:, :-1], -1).gather(2, tokens[:, 1:, None])[..., 0]


def measure(host, weights, variants, rows: int, steps: int, dtype) -> dict:
    out, base = {}, None
    for variant in ["1", *[v for v in variants if v != "1"]]:
        w, fn = layer(weights, variant)
        tokens, logps, first, rest = decode(w, fn, rows, steps, dtype)
        forward = forward_logps(host, tokens)
        ratio = forward - logps[:, 1:]
        row = {"kl_k3": float((ratio.exp() - 1 - ratio).mean()), "max_gap": float(ratio.abs().max()),
               "mean_gap": float(ratio.abs().mean()), "first_chunk_s": round(first, 2),
               "steps_per_s": round((steps - 8) / rest, 2) if rest else None}
        if base is None:
            base = tokens, logps
        else:
            same = tokens == base[0]
            first_diff = [int((~r).nonzero()[0]) if not r.all() else None for r in same]
            before = [(logps[i, :f] - base[1][i, :f]).abs().max() if f != 0 else torch_zero()
                      for i, f in enumerate(first_diff)]
            row.update(same_as_fused=bool(same.all()), first_difference=first_diff,
                       max_logp_diff_before_it=float(max(before)))
        out[variant] = row
        print(f"{variant:>15}: " + ", ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    return out


def torch_zero():
    import torch

    return torch.zeros(())


def main() -> None:
    import torch

    from helpers.engine import graphs
    from helpers.engine.host import get_host

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--adapter", default="")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--steps", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--variants", default=",".join(v for v in VARIANTS if v != "merge,inductor"),
                        help="';'-separated when a variant has a comma, e.g. '1;merge;merge,inductor'")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dtype = torch.bfloat16
    if args.adapter:
        host = get_host(args.model, "cpu", dtype)
        slot = load_adapter(host, args.adapter)
    else:
        from decode_ops import adapted_host

        host, slot = adapted_host(args.model, args.rank, dtype)
    weights = graphs.DecoderWeights.gather(host, slot)
    variants = args.variants.split(";") if ";" in args.variants else args.variants.split(",")
    result = {"model": args.model, "adapter": args.adapter or f"random rank {args.rank}", "rows": args.rows,
              "steps": args.steps, "threads": args.threads, "torch": torch.__version__,
              "variants": measure(host, weights, variants, args.rows, args.steps, dtype)}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
