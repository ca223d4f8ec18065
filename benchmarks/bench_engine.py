"""Local engine benchmarks: sampling throughput vs `model.generate`, and LoRA training memory.

    python benchmarks/bench_engine.py --model smollm2-135m --batch-sizes 1,8 --max-tokens 16 --device cpu
    python benchmarks/bench_engine.py --model qwen2.5-0.5b --device cuda --batch-sizes 1,8,64 \\
        --max-tokens 256 --train-shapes 8x2048,64x2048 --out results/bench_engine_h200.json

Sampling: B distinct chat prompts, each sampled once (temperature 1, top_p 1), `max_tokens` new
tokens per row. EOS is ignored on both sides (`min_new_tokens` for generate, no EOS stop for the
engine) so both produce exactly B * max_tokens tokens. The engine receives the B requests as
concurrent `sample_async` calls, as a rollout does; every configuration runs once untimed first
(warm-up, compilation). Figures are new tokens per second of wall time.

Training memory: one `forward_backward(..., "importance_sampling")` on a B x L batch of random
tokens, peak allocated CUDA memory (or peak RSS growth on CPU) around that call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import resource
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

QUESTIONS = [
    "Who wrote the novel War and Peace?", "What is the tallest mountain in Africa?",
    "When did the Berlin Wall fall?", "Which planet has the most moons?",
    "Who painted The Night Watch?", "What is the capital of Australia?",
    "Which element has the symbol Fe?", "Who discovered penicillin?",
]


def prompts(tokenizer, count: int) -> list[list[int]]:
    out = []
    for i in range(count):
        messages = [{"role": "user", "content": f"({i}) {QUESTIONS[i % len(QUESTIONS)]} Explain step by step."}]
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        out.append(list(ids["input_ids"] if not isinstance(ids, list) else ids))
    return out


def bench_engine(service, model: str, batch: int, max_tokens: int, host) -> tuple[float, float]:
    """(new tokens/s of a warm run, seconds of the first run: compilation and graph capture)."""
    import pytrio as trio

    sc = service.create_sampling_client(base_model=model)
    batch_prompts = prompts(host.tokenizer, batch)
    saved_eos, host.eos_ids = host.eos_ids, set()  # fixed-length rows, like min_new_tokens below
    try:
        async def run():
            params = [trio.SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=i) for i in range(batch)]
            return await asyncio.gather(*[
                sc.sample_async(prompt=trio.ModelInput.from_ints(p), num_samples=1, sampling_params=sp)
                for p, sp in zip(batch_prompts, params)
            ])

        start = time.perf_counter()
        asyncio.run(run())  # warm-up (and compilation on CUDA)
        first = time.perf_counter() - start
        start = time.perf_counter()
        responses = asyncio.run(run())
        seconds = time.perf_counter() - start
    finally:
        host.eos_ids = saved_eos
    tokens = sum(len(s.tokens) for r in responses for s in r.sequences)
    return tokens / seconds, first


def bench_generate(host, batch: int, max_tokens: int) -> float:
    import torch

    tok = host.tokenizer
    batch_prompts = prompts(tok, batch)
    width = max(len(p) for p in batch_prompts)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    ids = torch.full((batch, width), pad, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for i, p in enumerate(batch_prompts):
        ids[i, width - len(p):] = torch.tensor(p)
        mask[i, width - len(p):] = 1
    ids, mask = ids.to(host.device), mask.to(host.device)

    def run():
        with torch.inference_mode():
            return host.model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0,
                                       top_p=1.0, top_k=0, max_new_tokens=max_tokens, min_new_tokens=max_tokens,
                                       pad_token_id=pad)

    run()
    _sync(host.device)
    start = time.perf_counter()
    out = run()
    _sync(host.device)
    seconds = time.perf_counter() - start
    return (out.shape[1] - width) * batch / seconds


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def bench_train_memory(service, model: str, batch: int, length: int, host) -> dict:
    import pytrio as trio
    import torch

    tc = service.create_lora_training_client(model, rank=32, seed=0)
    gen = torch.Generator().manual_seed(0)
    vocab = len(host.tokenizer)
    data = []
    for _ in range(batch):
        ids = torch.randint(0, vocab, (length + 1,), generator=gen).tolist()
        data.append(trio.Datum(model_input=trio.ModelInput.from_ints(ids[:-1]), loss_fn_inputs={
            "target_tokens": ids[1:], "logprobs": [-5.0] * length,
            "advantages": [0.0] * (length // 2) + [1.0] * (length - length // 2)}))
    if host.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    tc.forward_backward(data, loss_fn="importance_sampling").result()
    seconds = time.perf_counter() - start
    result = {"batch": batch, "length": length, "seconds": round(seconds, 2)}
    if host.device == "cuda":
        result["peak_allocated_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        result["peak_over_weights_gib"] = round((torch.cuda.max_memory_allocated() - base) / 2**30, 2)
    else:
        result["peak_rss_growth_gib"] = round((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before)
                                              / 2**20, 2)
    tc.optim_step(trio.AdamParams(learning_rate=0.0)).result()  # drop the gradients
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--batch-sizes", default="1,8,64")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--device", default=None, help="cpu | cuda | mps (default: helpers.config.device())")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--skip-generate", action="store_true")
    parser.add_argument("--train-shapes", default="", help="comma list of BATCHxLENGTH, e.g. 8x512,64x2048")
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args(argv)

    import torch

    from helpers import config
    from helpers.engine import connect
    from helpers.engine.host import get_host
    from helpers.engine.sampler import use_static_cache

    if args.threads:
        torch.set_num_threads(args.threads)
    device = args.device or config.device()
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    # the engine's clients use helpers.config's device; pin it to the requested one
    config.device.cache_clear()
    config.device = lambda: device  # type: ignore[assignment]
    config.dtype = lambda: dtype  # type: ignore[assignment]
    host = get_host(args.model, device, dtype)
    service = connect("local")
    info = {
        "date": datetime.now(timezone.utc).isoformat(timespec="minutes"),
        "machine": f"{platform.node()} {platform.processor() or platform.machine()}, {os.cpu_count()} cores"
                   + (f", {torch.cuda.get_device_name()}" if device == "cuda" else ""),
        "model": args.model, "device": device, "dtype": str(dtype), "threads": torch.get_num_threads(),
        "max_tokens": args.max_tokens, "static_cache": use_static_cache(host),
        "torch": torch.__version__, "command": " ".join(["python", "benchmarks/bench_engine.py", *(argv or sys.argv[1:])]),
    }
    rows = []
    for batch in [int(b) for b in args.batch_sizes.split(",") if b]:
        engine, first = bench_engine(service, args.model, batch, args.max_tokens, host)
        generate = None if args.skip_generate else bench_generate(host, batch, args.max_tokens)
        row = {"batch": batch, "engine_tok_s": round(engine, 1), "engine_first_call_s": round(first, 1),
               "generate_tok_s": None if generate is None else round(generate, 1),
               "speedup": None if generate is None else round(engine / generate, 2)}
        rows.append(row)
        print(f"batch {batch:>4}: engine {engine:9.1f} tok/s   generate "
              f"{'-' if generate is None else f'{generate:9.1f}'} tok/s   speedup "
              f"{'-' if generate is None else f'{engine / generate:.2f}x'}   first call {first:.1f}s", flush=True)
    memory = []
    for shape in [s for s in args.train_shapes.split(",") if s]:
        b, length = (int(x) for x in shape.lower().split("x"))
        result = bench_train_memory(service, args.model, b, length, host)
        memory.append(result)
        print(f"train {b}x{length}: {result}", flush=True)
    report = {**info, "sampling": rows, "train_memory": memory}
    print(json.dumps(report, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
