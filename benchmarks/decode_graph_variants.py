"""The graph decoder's layer variants on a GPU, on a random model of a real architecture (no download).

For each `COURSE_ENGINE_FUSE` value it captures the decode chunk as `GraphDecoder` does (one warm-up
run on a side stream, then `GRAPH_STEPS` steps captured as one CUDA graph) and reports:

- steps/s of replayed graphs at each batch (cache of `--length` columns, the first `--context` filled),
  the figure `bench_grpo_gpu.py decode` measures through the whole engine on the real model;
- agreement: one captured step from the same state, its logits against the exact fused layer's run
  eagerly (max |difference| and KL of the next-token distributions, mean over rows), so a variant
  that decodes wrong tokens on the GPU (a compiled layer gone wrong, say) shows at once.

    python benchmarks/decode_graph_variants.py [--variants '1;merge;inductor;merge,inductor'] [--batches 1,64]

Random weights (std 0.02, LoRA rank 16 on attention and MLP, B std 1e-3) decide no token worth
reading, but a step costs what it costs on the trained model: the same shapes, the same kernels.
Runs without the course's dependencies (only torch, transformers and peft): helpers.engine's package
`__init__` (which imports the PyTRIO client) is skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ARCHITECTURES = {  # Qwen2.5-0.5B (the course's GPU model) and a smaller one for CPU runs
    "qwen2.5-0.5b": dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, rope_theta=1e6, tie_word_embeddings=True),
    "tiny": dict(vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True),
}


def engine_modules():
    """helpers.engine.graphs and .fused without running helpers.engine's __init__."""
    if "helpers.engine" not in sys.modules:
        package = types.ModuleType("helpers.engine")
        package.__path__ = [str(ROOT / "helpers" / "engine")]
        sys.modules["helpers.engine"] = package
    from helpers.engine import fused, graphs

    return graphs, fused


def random_host(arch: str, device: str, dtype, rank: int):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(max_position_embeddings=32768, rms_norm_eps=1e-6, **ARCHITECTURES[arch])
    with torch.device(device):
        model = Qwen2ForCausalLM(config).to(dtype).eval()
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    peft = get_peft_model(model, LoraConfig(r=rank, lora_alpha=32, target_modules=targets, lora_dropout=0.0),
                          adapter_name="slot").eval()
    with torch.no_grad():
        for name, param in peft.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 1e-3)
    return types.SimpleNamespace(model=model, peft=peft, device=device, dtype=dtype), "slot"


def fill(state, context: int, seed: int = 0) -> None:
    """A state as after a prefill of `context` tokens: random K/V, mask open up to there."""
    import torch

    gen = torch.Generator(device=state.k[0].device).manual_seed(seed)
    for cache in (*state.k, *state.v):
        cache.zero_()
        cache[:, :, :context].normal_(generator=gen)
    state.bias.fill_(torch.finfo(state.bias.dtype).min)
    state.bias[:, :context] = 0
    state.positions.fill_(context)
    state.col.fill_(context)
    state.step.zero_()
    state.greedy.fill_(True)
    state.logits.normal_(generator=gen)


def sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def capture(graphs, weights, state, fn):
    import torch

    def plain():
        graphs.chunk(weights, state, fn, truncate=False, greedy=True)

    if state.k[0].device.type != "cuda":  # a smoke run on the CPU: no graph, the chunk itself
        plain()
        return types.SimpleNamespace(replay=plain)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        plain()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plain()
    return graph


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--arch", default="qwen2.5-0.5b", choices=sorted(ARCHITECTURES))
    parser.add_argument("--variants", default="1;merge;inductor;merge,inductor")
    parser.add_argument("--batches", default="1,64")
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--replays", type=int, default=30, help="replays timed (each 8 steps), at most what the cache holds")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--device", default="cuda", help="cpu: a smoke run of this script, no graphs")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    graphs, fused = engine_modules()
    device, dtype = args.device, torch.bfloat16
    host, slot = random_host(args.arch, device, dtype, args.rank)
    gathered = graphs.DecoderWeights.gather(host, slot)
    vocab = gathered.lm_head.weight.shape[0]
    variants = args.variants.split(";")
    out = {"arch": args.arch, "torch": torch.__version__, "rows": [],
           "gpu": torch.cuda.get_device_name() if device == "cuda" else None}
    # agreement: one step (GRAPH_STEPS = 1) captured, from the same state, against the exact layer run eagerly
    steps = graphs.GRAPH_STEPS
    graphs.GRAPH_STEPS = 1
    rows = 64
    fuser, fn = graphs.decode_layer(graphs.fuse_setting("1"))
    exact = fuser.fuse(gathered)
    state = graphs.DecodeState(exact, rows, args.length, vocab, device, dtype)
    fill(state, args.context)
    with torch.inference_mode():
        graphs.chunk(exact, state, fn, truncate=False, greedy=True)
    reference = state.logits.float().log_softmax(-1)
    agreement = {}
    for variant in variants:
        fuser, fn = graphs.decode_layer(graphs.fuse_setting(variant))
        weights = fuser.fuse(gathered) if fuser is not None else gathered
        state = graphs.DecodeState(weights, rows, args.length, vocab, device, dtype)
        with torch.inference_mode():
            graph = capture(graphs, weights, state, fn)
            fill(state, args.context)
            graph.replay()
        logp = state.logits.float().log_softmax(-1)
        agreement[variant] = {"max_abs_logp_diff": float((logp - reference).abs().max()),
                              "kl": float((reference.exp() * (reference - logp)).sum(-1).mean()),
                              "same_argmax": float((logp.argmax(-1) == reference.argmax(-1)).float().mean())}
        print(f"agreement, {variant:>15}: {agreement[variant]}", flush=True)
    out["agreement"] = agreement
    graphs.GRAPH_STEPS = steps
    for variant in variants:
        fuser, fn = graphs.decode_layer(graphs.fuse_setting(variant))
        weights = fuser.fuse(gathered) if fuser is not None else gathered
        for batch in [int(b) for b in args.batches.split(",")]:
            state = graphs.DecodeState(weights, batch, args.length, vocab, device, dtype)
            with torch.inference_mode():
                start = time.perf_counter()
                graph = capture(graphs, weights, state, fn)
                sync()
                first = time.perf_counter() - start
                times = []
                for _ in range(3):
                    fill(state, args.context)
                    sync()
                    start = time.perf_counter()
                    for _ in range(args.replays):  # each replay advances 8 columns: stay inside the cache
                        if int(state.col) + steps >= args.length:
                            break
                        graph.replay()
                    sync()
                    done = (int(state.col) - args.context) // steps  # replays made
                    times.append((time.perf_counter() - start) / max(done, 1))
            row = {"variant": variant, "batch": batch, "capture_s": round(first, 2),
                   "steps_per_s": round(steps / sorted(times)[1], 1)}
            out["rows"].append(row)
            print(row, flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
