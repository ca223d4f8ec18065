"""The token draw alone: one float64 scan over the vocabulary against the two-level inverse CDF.

    python benchmarks/bench_draw.py                                  # this machine's device (CUDA if any)
    python benchmarks/bench_draw.py --batch-sizes 1,64,128 --vocab 151936 --out draw.json

Each decode step ends in `helpers.engine.drawing.draw`: softmax, then the inverse CDF of the row's
uniform. `before` runs `draw` with the inverse CDF as one float64 cumulative sum over the whole vocabulary
and a search; `after` with `inverse_cdf` (block masses, a scan over blocks, a scan inside one block).
Both run in the same process on the same logits (Qwen2.5's vocabulary by default, logits drawn like a
language model's: a few large values over a long tail) and uniforms. Reported per batch size: the median
time of one `draw` call launched from the host (CUDA events on a GPU, after warm-up) and, on a GPU, of one
call replayed from a captured graph of 8 (as the decode path runs it: no launch cost), the ratios, and the
share of draws in which the two pick the same token.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def one_scan(probs, u):
    """The inverse CDF as one float64 cumulative sum over the vocabulary (the reference)."""
    import torch

    cdf = probs.double().cumsum(-1)
    return torch.searchsorted(cdf, (u * cdf[:, -1])[:, None]).clamp_(max=probs.shape[-1] - 1)[:, 0]


def time_calls(call, device: str, repeats: int) -> float:
    """Median milliseconds of one call."""
    import torch

    for _ in range(3):
        call()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            call()
            times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def time_captured(call, repeats: int) -> float:
    """Median milliseconds of one call replayed from a CUDA graph of 8 calls, as the decode path runs it."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(8):
            call()
    return time_calls(graph.replay, "cuda", repeats) / 8


def bench(batch: int, vocab: int, steps: int, repeats: int, device: str) -> dict:
    import torch

    from helpers.engine import drawing

    gen = torch.Generator().manual_seed(batch)
    logits = torch.randn(batch, vocab, generator=gen) * 2 + (torch.randn(batch, vocab, generator=gen) > 2.5) * 8.0
    logits = logits.to(device=device, dtype=torch.bfloat16)
    rows = [drawing.Row(prompt=[1], job_index=i, max_tokens=steps, temperature=1.0, top_k=0, top_p=1.0,
                        stop_ids=set(), stop_strings=[], rng=random.Random(i)) for i in range(batch)]
    params = drawing.DrawParams(rows, device)
    two_levels = drawing.inverse_cdf
    out = {"batch": batch, "vocab": vocab, "device": device}
    picks = {}
    for name, inverse in (("before", one_scan), ("after", two_levels)):
        drawing.inverse_cdf = inverse
        try:
            picks[name] = torch.stack([drawing.draw(logits, params, s)[0] for s in range(steps)])
            step = iter(range(10 ** 9))
            out[f"{name}_ms"] = round(time_calls(lambda: drawing.draw(logits, params, next(step) % steps), device,
                                                 repeats), 4)
            if device == "cuda":  # the step counter on the device, as in a captured decode chunk
                counter = torch.zeros(1, dtype=torch.long, device=device)
                captured = time_captured(lambda: drawing.draw(logits, params, counter), repeats)
                out[f"{name}_captured_ms"] = round(captured, 4)
        finally:
            drawing.inverse_cdf = two_levels
    out["speedup"] = round(out["before_ms"] / out["after_ms"], 2)
    if device == "cuda":
        out["captured_speedup"] = round(out["before_captured_ms"] / out["after_captured_ms"], 2)
    out["same_token"] = round((picks["before"] == picks["after"]).float().mean().item(), 6)
    return out


def main(argv: list[str] | None = None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch-sizes", default="1,64,128")
    parser.add_argument("--vocab", type=int, default=151936, help="Qwen2.5's vocabulary")
    parser.add_argument("--steps", type=int, default=64, help="draws per row whose tokens are compared")
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    rows = []
    for batch in [int(b) for b in args.batch_sizes.split(",") if b]:
        row = bench(batch, args.vocab, args.steps, args.repeats, args.device)
        rows.append(row)
        captured = (f"; captured {row['before_captured_ms']:.3f} ms, {row['after_captured_ms']:.3f} ms "
                    f"({row['captured_speedup']:.2f}x)") if "captured_speedup" in row else ""
        print(f"batch {batch:>4}: one scan {row['before_ms']:.3f} ms, two levels {row['after_ms']:.3f} ms "
              f"({row['speedup']:.2f}x){captured}; same token in {row['same_token']:.4%} of {batch * args.steps} draws",
              flush=True)
    result = {"torch": torch.__version__, "device": args.device,
              "gpu": torch.cuda.get_device_name() if args.device == "cuda" else None, "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
