"""One GRPO-shaped `forward_backward` on the CPU: where a training step's time goes.

    python benchmarks/bench_train_cpu.py --model qwen2.5-0.5b --rows 4 --length 1000 --trained 42

A GRPO datum of this course is about a thousand tokens (system prompt, question, tool
observations) of which a few dozen are the policy's own tokens, the only ones with a non-zero
advantage. The rows here have that shape: random tokens, `trained` positions with advantage 1 in
three spans (after each of two observations and at the end), the rest 0.

Each variant runs the same batch in one process, after one untimed warm-up call:

- `all positions`: the unembedding and log-softmax under autograd at every position;
- `trained positions`: under autograd only where the advantage is non-zero (the engine's way);
- `... no checkpointing`: the same without recomputing the decoder layers in the backward pass.

It prints seconds per call, padded tokens per second, the peak RSS growth of the call, and the
largest difference of any LoRA gradient from the first variant (the variants compute one gradient).
"""

from __future__ import annotations

import argparse
import platform
import resource
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

VARIANTS = ("all positions", "trained positions", "trained positions, no checkpointing")


def grpo_rows(vocab: int, rows: int, length: int, trained: int, seed: int = 0):
    import pytrio as trio
    import torch

    gen = torch.Generator().manual_seed(seed)
    span = max(1, trained // 3)
    starts = [length * 2 // 5, length * 3 // 5, length - span]
    data = []
    for _ in range(rows):
        ids = torch.randint(0, vocab, (length + 1,), generator=gen).tolist()
        advantages = [0.0] * length
        for start in starts:
            advantages[start:start + span] = [1.0] * span
        data.append(trio.Datum(model_input=trio.ModelInput.from_ints(ids[:-1]), loss_fn_inputs={
            "target_tokens": ids[1:], "logprobs": [-5.0] * length, "advantages": advantages}))
    return data


def run_variant(tc, host, data, variant: str):
    from helpers.engine import losses, training

    every = variant == "all positions"
    original = losses.trained_positions
    losses.trained_positions = (lambda loss_fn, inputs: None) if every else original
    model = host.model
    checkpointing = "no checkpointing" not in variant
    if checkpointing:
        training._enable_activation_checkpointing(model)
    elif hasattr(model, "activation_checkpointing_disable"):
        model.activation_checkpointing_disable()
    else:
        model.gradient_checkpointing_disable()
    try:
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        tc.forward_backward(data, loss_fn="importance_sampling").result()
        seconds = time.perf_counter() - start
        growth = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss) / 2**20
    finally:
        losses.trained_positions = original
        training._enable_activation_checkpointing(model)
    grads = [p.grad.detach().clone() for p in lora_params(host)]
    for p in lora_params(host):
        p.grad = None
    return seconds, growth, grads


def lora_params(host):
    return [p for n, p in host.peft.named_parameters() if "lora_" in n and p.grad is not None]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="qwen2.5-0.5b")
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--length", type=int, default=1000)
    parser.add_argument("--trained", type=int, default=42)
    parser.add_argument("--variants", default=";".join(VARIANTS),
                        help=f"separated by ;, from: {', '.join(VARIANTS)}")
    args = parser.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(";") if v.strip()]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}; choose from {VARIANTS}")

    import torch

    from helpers.engine import connect
    from helpers.engine.host import get_host

    service = connect("local")
    tc = service.create_lora_training_client(args.model, rank=32, seed=0)
    host = get_host(args.model)
    data = grpo_rows(len(host.tokenizer), args.rows, args.length, args.trained)
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} threads, {args.model}, {args.rows} rows x {args.length} tokens, "
          f"{args.trained} trained per row", flush=True)
    run_variant(tc, host, data[:1], "trained positions")  # warm-up
    reference = None
    for variant in variants:
        seconds, growth, grads = run_variant(tc, host, data, variant)
        if reference is None:
            reference, diff = grads, 0.0
        else:
            diff = max(float((a - b).abs().max()) for a, b in zip(reference, grads))
        print(f"{variant:40s} {seconds:7.1f} s  {args.rows * args.length / seconds:7.1f} tok/s  "
              f"peak RSS +{growth:.2f} GiB  max |grad diff| {diff:.2e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
