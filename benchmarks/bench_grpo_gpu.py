"""What a GPU minute buys in GRPO: decode speed against the roofline, and the steps of real runs.

    python benchmarks/bench_grpo_gpu.py decode --batch-sizes 1,64 --max-tokens 256   # this process's decode path
    COURSE_ENGINE_FUSE=merge python benchmarks/bench_grpo_gpu.py decode --adapter results/h200_agent/adapter ...
                                                        # the graph path's layer variant (helpers.engine.graphs)
    COURSE_ENGINE_DECODE=static python benchmarks/bench_grpo_gpu.py decode ...         # the compiled transformers step
    python benchmarks/bench_grpo_gpu.py report runs/a/grpo_habit runs/b/grpo_habit        # GRPO runs' metrics
    python benchmarks/bench_grpo_gpu.py train --rows 96 --length 1200 --trained 48 --trace 25   # the trainer alone
    COURSE_ENGINE_RECOMPUTE=0 python benchmarks/bench_grpo_gpu.py train ...   # activations kept (own process)

`decode`: B distinct prompts sampled once each at temperature 1, `max-tokens` new tokens per row with
EOS ignored, through the engine's sampling client (prefill included), after one untimed call whose
time is reported as the first call (compilation, graph capture). A decode step yields one token per
row; steps/s = max_tokens / seconds. The roofline is the fewest bytes a step must read, the weights
once (the tied embedding counted once, as the output projection) plus each row's KV cache up to its
length, over the device's copy bandwidth measured here (bytes read + written by a large copy).

`--eager` runs the graph path's chunk without capturing it (the same kernels, each launched from the host):
against the captured figure it shows what launching costs, and its trace lists every kernel.

`--one-scan` draws each token with the inverse CDF as one float64 scan over the vocabulary, as the
engine did before it took it in two levels (`helpers.engine.drawing.inverse_cdf`): the same tokens, so
the two runs' steps/s compare the draws inside a whole decode step.

`--trace N` adds one more call per batch size under torch's profiler and prints where a decode step's
device time goes: the N kernels with the most self time, totals by kind (GEMM, attention, elementwise
and norms, copies and cache writes, sampling) and kernels per decode step. GPU only: the engine
decodes on its own thread, which a CPU trace does not see.

`train`: the trainer alone on one GRPO step's worth of datums shaped like a search agent's (`rows`
trajectories of about `length` tokens, the last `trained` of each the policy's own, the rest prompt and
search results): one `forward_backward(importance_sampling)` over all of them and one `optim_step`, after
one untimed step (compilation, allocator warm-up). It prints input tokens a second, the arithmetic that
rate implies and, with `--trace N`, where the step's device time goes, so a trainer change is measured
without sampling or search in the way. The arithmetic counts per input token 2 FLOPs per non-embedding
weight for the forward, 2 for the backward to the activations (a LoRA trains no base weight, so there is
no weight-gradient pass over them), 2 more when activations are recomputed, and 2 × vocab × hidden for
the unembedding of every position; attention's own arithmetic is left out (a lower bound).

`report`: from each run's `metrics.jsonl` the first step, the median later step and its parts,
updates per minute and informative groups (groups whose rewards differ) per minute of the run.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def copy_bandwidth(device: str) -> float | None:
    """Bytes per second of a 2 GiB device-to-device copy (read + write), the median of 5."""
    import torch

    if device != "cuda":
        return None
    src = torch.empty(1 << 30, dtype=torch.bfloat16, device=device).normal_()
    dst = torch.empty_like(src)
    times = []
    for _ in range(6):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    return 2 * (1 << 30) * 2 / statistics.median(times[1:])


def step_bytes(model, rows: int, context: int) -> int:
    """Fewest bytes one decode step reads: every weight once, and each row's KV cache of `context` tokens."""
    cfg = model.config
    seen, weights = set(), 0
    for param in model.parameters():
        if param.data_ptr() in seen:
            continue
        seen.add(param.data_ptr())
        weights += param.numel() * param.element_size()
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    element = next(model.parameters()).element_size()
    kv = cfg.num_hidden_layers * 2 * cfg.num_key_value_heads * head_dim * context * rows * element
    return weights + kv


def bench_decode(args) -> dict:
    import pytrio as trio
    import torch

    from helpers import config
    from helpers.engine import connect
    from helpers.engine.graphs import fuse_setting
    from helpers.engine.host import get_host
    from helpers.engine.sampler import decode_path

    if args.eager:  # the graph path's chunk run as it is, not captured: every kernel launched (and traced) singly
        from helpers.engine import graphs

        def plain_runner(decoder, weights, state, slot, truncate, greedy):
            return lambda: graphs.chunk(weights, state, decoder.layer_fn, truncate, greedy)

        graphs.GraphDecoder.runner = plain_runner
    if args.one_scan:  # the draw as it was: one float64 scan over the vocabulary (the step's "before")
        from bench_draw import one_scan

        from helpers.engine import drawing

        drawing.inverse_cdf = one_scan
    host = get_host(args.model)
    service = connect("local")
    sc = (service.create_sampling_client(base_model=args.model, model_path=args.adapter) if args.adapter
          else service.create_sampling_client(base_model=args.model))
    bandwidth = copy_bandwidth(host.device) if args.bandwidth is None else args.bandwidth * 1e12
    layer = ",".join(sorted(fuse_setting()))  # COURSE_ENGINE_FUSE: the graph path's layer
    rows_out = []
    for batch in [int(b) for b in args.batch_sizes.split(",") if b]:
        prompts = []
        for i in range(batch):
            messages = [{"role": "user", "content": f"({i}) Explain, step by step, how a search engine ranks pages."}]
            prompts.append(list(host.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                                   return_dict=True)["input_ids"]))

        async def run():
            params = [trio.SamplingParams(max_tokens=args.max_tokens, temperature=1.0, seed=i) for i in range(batch)]
            return await asyncio.gather(*[sc.sample_async(prompt=trio.ModelInput.from_ints(p), num_samples=1,
                                                          sampling_params=sp) for p, sp in zip(prompts, params)])

        saved, host.eos_ids = host.eos_ids, set()
        try:
            start = time.perf_counter()
            asyncio.run(run())
            first = time.perf_counter() - start
            times = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                responses = asyncio.run(run())
                times.append(time.perf_counter() - start)
        finally:
            host.eos_ids = saved
        seconds = statistics.median(times)
        tokens = sum(len(s.tokens) for r in responses for s in r.sequences)
        steps_s = args.max_tokens / seconds
        context = int(statistics.mean(len(p) for p in prompts) + args.max_tokens / 2)
        need = step_bytes(host.model, batch, context)
        roof = bandwidth / need if bandwidth else None
        path = decode_path(host)
        if args.eager and path == "graphs":
            path += " uncaptured"
        if args.one_scan:
            path += " one-scan draw"
        row = {"batch": batch, "decode_path": path, "layer": layer, "first_call_s": round(first, 2),
               "steps_per_s": round(steps_s, 1), "tokens_per_s": round(tokens / seconds, 1),
               "bytes_per_step": need, "roofline_steps_per_s": None if roof is None else round(roof, 1),
               "roofline_share": None if roof is None else round(steps_s / roof, 3),
               # the sampled tokens' fingerprint: two runs (two layers, two draws) did the same work if equal
               "tokens_sha": hashlib.sha256(json.dumps([s.tokens for r in responses for s in r.sequences]).encode())
               .hexdigest()[:12]}
        row.update(agreement(sc, prompts, responses, args.check_rows))
        if args.trace:
            row["trace"] = trace_call(lambda: asyncio.run(run()), host.device, args.max_tokens, args.trace)
        rows_out.append(row)
        share = "" if roof is None else f"  roofline {roof:,.0f} steps/s -> {steps_s / roof:.1%}"
        print(f"[{row['decode_path']} {layer}] batch {batch:>3}: {steps_s:8.1f} steps/s  {tokens / seconds:9.1f} tok/s  "
              f"first call {first:6.1f} s{share}  sampler-vs-forward KL(k3) {row['kl_k3']:.2e}  tokens {row['tokens_sha']}",
              flush=True)
    return {"model": args.model, "device": host.device, "dtype": str(host.dtype), "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name() if host.device == "cuda" else None,
            "bandwidth_bytes_s": bandwidth, "compile": os.environ.get("COURSE_ENGINE_COMPILE"),
            "fuse": os.environ.get("COURSE_ENGINE_FUSE"), "adapter": args.adapter,
            "profile": config.profile(), "rows": rows_out}


KINDS = (  # the first kind whose words occur in a kernel's name (lower case) names it
    ("attention", ("attention", "fmha", "flash", "sdpa", "efficient")),
    ("gemm", ("gemm", "cutlass", "matmul", "addmm", "aten::mm", "aten::bmm", "sm90_xmma", "nvjet")),
    ("sampling", ("softmax", "sort", "topk", "multinomial", "exponential", "argmax", "cumsum", "gather")),
    ("copies and cache writes", ("copy", "index", "cat", "scatter", "memcpy", "memset", "fill")),
    ("elementwise and norms", ("elementwise", "vectorized", "reduce", "triton", "pow", "mean", "rsqrt", "mul",
                               "add", "silu", "neg", "roll")),
)


def kind_of(name: str) -> str:
    lower = name.lower()
    return next((kind for kind, words in KINDS if any(word in lower for word in words)), "other")


def trace_call(call, device: str, steps: int, top: int) -> dict:
    """One call under torch.profiler: the device time of its kernels (self time of CPU ops on a CPU),
    by kernel and by kind, and kernels per decode step (`steps` steps in the call; 1 for a training step)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        call()
    cuda = device == "cuda"
    rows = []
    for event in prof.key_averages():
        us = event.self_device_time_total if cuda else event.self_cpu_time_total
        if us > 0 and (not cuda or "CUDA" in str(getattr(event, "device_type", ""))):
            rows.append({"name": event.key, "us": us, "count": event.count, "kind": kind_of(event.key)})
    if not rows:  # the engine decodes on its own thread, where a CPU trace records nothing; on a GPU the
        # kernels are recorded whatever thread launched them, unless graph replays are not traced
        print("trace: nothing recorded (" + ("graph replays not traced by this profiler build" if cuda else
              "the engine samples and trains on its own thread, which a CPU trace does not see: trace on a GPU") + ")", flush=True)
        return {}
    rows.sort(key=lambda r: -r["us"])
    total = sum(r["us"] for r in rows) or 1.0
    kinds: dict[str, float] = {}
    for r in rows:
        kinds[r["kind"]] = kinds.get(r["kind"], 0.0) + r["us"]
    kernels = sum(r["count"] for r in rows)
    print(f"trace: {total / 1e3:.1f} ms of {'device' if cuda else 'CPU'} time, {kernels / max(steps, 1):.0f} "
          f"{'kernels' if cuda else 'ops'} a decode step; by kind: "
          + ", ".join(f"{k} {v / total:.0%}" for k, v in sorted(kinds.items(), key=lambda kv: -kv[1])), flush=True)
    for r in rows[:top]:
        print(f"  {r['us'] / total:6.1%}  {r['count']:7d}x  {r['kind']:24s} {r['name'][:110]}", flush=True)
    return {"total_ms": round(total / 1e3, 2), "per_step": round(kernels / max(steps, 1), 1),
            "by_kind": {k: round(v / total, 4) for k, v in kinds.items()},
            "top": [{**r, "us": round(r["us"], 1)} for r in rows[:top]]}


def agreement(sc, prompts, responses, rows: int) -> dict:
    """The sampled tokens' logprobs against one transformers forward over prompt + tokens (the
    trainer's computation): the k3 estimate of KL(sampler || forward) per token, and the largest gap."""
    import math

    import pytrio as trio

    k3, gaps = [], []
    for prompt, response in list(zip(prompts, responses))[:rows]:
        sequence = response.sequences[0]
        forward = sc.compute_logprobs(trio.ModelInput.from_ints(prompt + list(sequence.tokens))).result()
        for sampled, trained in zip(sequence.logprobs, forward[len(prompt):]):
            log_ratio = trained - sampled
            k3.append(math.exp(log_ratio) - 1 - log_ratio)
            gaps.append(abs(log_ratio))
    return {"kl_k3": sum(k3) / max(len(k3), 1), "max_logprob_gap": max(gaps, default=0.0)}


def train_datums(tokenizer_size: int, rows: int, length: int, trained: int, seed: int = 0) -> list:
    """`rows` importance-sampling datums of `length` ± 25 % tokens (seeded), the last `trained` positions of
    each carrying an advantage of ±1 and the rest 0, like a search agent's trajectories (prompt, search
    results, then the policy's own tokens). Sampler logprobs are 0 here; `bench_train` replaces them with
    the trainer's own before timing, so the importance ratio is 1 as after sampling."""
    import random

    import numpy as np
    import pytrio as trio

    rng = random.Random(seed)
    out = []
    for row in range(rows):
        n = max(trained + 2, int(length * rng.uniform(0.75, 1.25)))
        ids = [rng.randrange(100, tokenizer_size - 100) for _ in range(n)]
        advantages = [0.0] * (n - trained) + [1.0 if row % 2 else -1.0] * trained
        out.append(trio.Datum(model_input=trio.ModelInput.from_ints(ids),
                              loss_fn_inputs={"target_tokens": np.asarray(ids[1:] + [ids[0]], dtype=np.int64),
                                              "logprobs": np.zeros(n, dtype=np.float32),
                                              "advantages": np.asarray(advantages, dtype=np.float32)}))
    return out


def train_flops_per_token(model, recompute: bool) -> float:
    """Lower-bound FLOPs per input token of one LoRA training step (see the module's docstring)."""
    config = model.config
    hidden, vocab = config.hidden_size, config.vocab_size
    embedding = vocab * hidden  # the tied embedding: a lookup on the way in, the unembedding on the way out
    weights = sum(p.numel() for p in model.parameters()) - embedding
    return 2 * weights * (3 if recompute else 2) + 2 * vocab * hidden


def bench_train(args) -> dict:
    import pytrio as trio
    import torch

    from helpers.engine import connect
    from helpers.engine.host import get_host
    from helpers.engine.training import recompute, tokens_per_micro_batch

    host = get_host(args.model)
    tc = connect("local").create_lora_training_client(args.model, rank=args.rank, seed=0)
    datums = train_datums(len(host.tokenizer), args.rows, args.length, args.trained)
    # the sampler's logprobs := the trainer's own, so the importance ratio starts at 1 as after sampling
    forward = tc.forward(datums, loss_fn="importance_sampling").result()
    datums = [trio.Datum(model_input=d.model_input,
                         loss_fn_inputs={**d.loss_fn_inputs, "logprobs": out["logprobs"].to_numpy().astype("float32")})
              for d, out in zip(datums, forward.loss_fn_outputs)]
    adam = trio.AdamParams(learning_rate=1e-6)

    def step() -> float:
        start = time.perf_counter()
        tc.forward_backward(datums, loss_fn="importance_sampling").result()
        tc.optim_step(adam).result()
        if host.device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    if host.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    first = step()
    seconds = statistics.median(step() for _ in range(args.repeats))
    tokens = sum(d.model_input.length for d in datums)
    flops = train_flops_per_token(host.model, recompute()) * tokens / seconds
    row = {"model": args.model, "device": host.device, "dtype": str(host.dtype), "torch": torch.__version__,
           "gpu": torch.cuda.get_device_name() if host.device == "cuda" else None,
           "recompute": recompute(), "micro_batch_tokens": tokens_per_micro_batch(host.device),
           "rows": args.rows, "input_tokens": tokens, "trained_tokens": args.rows * args.trained,
           "first_step_s": round(first, 2), "step_s": round(seconds, 3), "tokens_per_s": round(tokens / seconds),
           "flops_per_s": flops,
           "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if host.device == "cuda" else None}
    print(f"[train recompute={int(row['recompute'])}] {args.rows} rows, {tokens:,} input tokens: step {seconds:.2f} s "
          f"(first {first:.1f} s), {tokens / seconds:,.0f} input tokens/s, >= {flops:.2e} FLOP/s"
          + (f", peak {row['peak_memory_gib']} GiB" if row["peak_memory_gib"] is not None else ""), flush=True)
    if args.trace:
        row["trace"] = trace_call(step, host.device, 1, args.trace)
    return row


def summarise_run(folder: Path) -> dict:
    metrics = folder / "metrics.jsonl"
    if not metrics.is_file():  # a stage of the recipe this run did not train (a folder from a glob)
        return {"run": str(folder), "steps": 0}
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    if not rows:
        return {"run": str(folder), "steps": 0}
    later = rows[1:] or rows
    minutes = sum(r["time_step"] for r in rows) / 60
    parts = {key: round(statistics.median(r.get(key, 0.0) for r in later), 2)
             for key in ("time_step", "time_sampling", "time_search", "time_search_latency_sum", "time_training")}
    informative = sum(r.get("informative_groups", 0) for r in rows)
    # an update changed the weights: a step with no informative group, or whose gradient was not
    # finite, is a step but not an update
    updates = sum(1 for r in rows if r.get("informative_groups", 1) and not r.get("optim_skipped"))
    return {"run": str(folder), "steps": len(rows), "updates": updates, "first_step_s": round(rows[0]["time_step"], 1),
            "median_step": parts, "minutes": round(minutes, 2),
            "updates_per_min": round(updates / minutes, 2) if minutes else None,
            "informative_groups": informative,
            "informative_groups_per_min": round(informative / minutes, 1) if minutes else None,
            # the trainer's input tokens (prompt, search results, own turns) a second of its training time,
            # over the steps after the first: what the trainer's settings (COURSE_ENGINE_RECOMPUTE) change
            "training_tokens_per_s": (round(sum(r.get("input_tokens", 0) for r in later)
                                            / sum(r.get("time_training", 0.0) for r in later))
                                      if sum(r.get("time_training", 0.0) for r in later) else None),
            "kl_k3_max": max((r.get("kl_sampler_trainer_k3") or 0.0) for r in rows),
            # steps whose gradient was not finite (dropped by the engine: not an update), and the
            # importance ratio's widest log over the run, what such a step shows first
            "skipped_non_finite": sum(1 for r in rows if r.get("optim_skipped")),
            "log_ratio_max": max((r["log_ratio_max"] for r in rows if "log_ratio_max" in r), default=None)}


def report(args) -> list[dict]:
    out = []
    for folder in args.runs:
        summary = summarise_run(Path(folder))
        out.append(summary)
        if not summary["steps"]:
            print(f"{folder}: no steps{'' if (Path(folder) / 'metrics.jsonl').is_file() else ' (no metrics.jsonl)'}",
                  flush=True)
            continue
        m = summary["median_step"]
        print(f"{folder}: {summary['updates']} updates ({summary['steps']} steps) in {summary['minutes']:.1f} min "
              f"({summary['updates_per_min']:.2f}/min), first step {summary['first_step_s']:.1f} s, median step "
              f"{m['time_step']:.1f} s (sampling {m['time_sampling']:.1f}, search {m['time_search']:.1f} of which "
              f"searches {m['time_search_latency_sum']:.1f}, training {m['time_training']:.1f}), informative groups "
              f"{summary['informative_groups_per_min']:.1f}/min, trainer "
              f"{format(summary['training_tokens_per_s'], ',') if summary['training_tokens_per_s'] else '–'} "
              f"input tokens/s, max sampler-trainer KL {summary['kl_k3_max']:.2e}, "
              f"{summary['skipped_non_finite']} steps skipped for a non-finite gradient"
              + (f", max log-ratio {summary['log_ratio_max']:.3g}" if summary["log_ratio_max"] is not None else ""),
              flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    dec = sub.add_parser("decode")
    dec.add_argument("--model", default="qwen2.5-0.5b")
    dec.add_argument("--adapter", default=None, help="sample with this adapter (an exported LoRA folder)")
    dec.add_argument("--batch-sizes", default="1,64")
    dec.add_argument("--max-tokens", type=int, default=256)
    dec.add_argument("--repeats", type=int, default=3)
    dec.add_argument("--check-rows", type=int, default=8, help="rows whose logprobs are checked against the forward")
    dec.add_argument("--bandwidth", type=float, default=None, help="TB/s (default: measured here)")
    dec.add_argument("--trace", type=int, default=0, metavar="N",
                     help="profile one more call per batch size and print its N costliest kernels")
    dec.add_argument("--eager", action="store_true",
                     help="the graph path without capture: its launch cost, and a trace of every kernel launched")
    dec.add_argument("--one-scan", action="store_true",
                     help="draw with one float64 scan over the vocabulary (bench_draw.one_scan), not two levels")
    dec.add_argument("--out", default=None)
    tr = sub.add_parser("train")
    tr.add_argument("--model", default="qwen2.5-0.5b")
    tr.add_argument("--rank", type=int, default=32)
    tr.add_argument("--rows", type=int, default=96, help="trajectories in the step (a search agent's step: 64-128)")
    tr.add_argument("--length", type=int, default=1200, help="their mean length in tokens (±25 %%)")
    tr.add_argument("--trained", type=int, default=48, help="the policy's own tokens at the end of each")
    tr.add_argument("--repeats", type=int, default=3)
    tr.add_argument("--trace", type=int, default=0, metavar="N",
                    help="profile one more step and print its N costliest kernels")
    tr.add_argument("--out", default=None)
    rep = sub.add_parser("report")
    rep.add_argument("runs", nargs="+")
    rep.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    result = {"decode": bench_decode, "train": bench_train, "report": report}[args.command](args)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
