"""Replay a micro-batch whose backward made a GRPO step's gradient non-finite, on any machine.

A run on the GPU keeps the first such micro-batch and the LoRA weights it ran on
(`COURSE_ENGINE_NON_FINITE_DIR`, `helpers.engine.training`). This runs the same forward and backward
again in each dtype asked for, over the whole micro-batch and then row by row, and prints where the
gradient stops being finite: which rows, their losses, their lowest trained log-probs (a token the
sampler drew that the trainer finds very unlikely gives a large importance ratio), and whether the
float32 replay is finite where bfloat16 is not (an overflow of the low-precision path) or neither is
(the loss itself). On a CPU the 0.5B replays a 30-row micro-batch in minutes. Another device runs
other kernels: a fault of one device's kernel (cuDNN's masked attention on an H100, see
`benchmarks/attention_mask_nan.py`) replays finite on a CPU in every dtype.

    python benchmarks/replay_non_finite.py /root/non_finite/run_x_step00012.pt --dtypes bfloat16,float32
    python benchmarks/replay_non_finite.py KEPT.pt --rows 0,3 --out replay.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def load_kept(path: str | Path) -> dict:
    import torch

    kept = torch.load(path, map_location="cpu", weights_only=False)
    missing = {"tensors", "lora", "layout", "run", "loss_fn", "loss_config", "base_model"} - set(kept)
    if missing:
        raise ValueError(f"{path} is not a kept non-finite micro-batch (missing {sorted(missing)})")
    return kept


def _run_on(kept: dict, dtype: str, device: str):
    """A fresh LoRA run of the kept layout on this machine, holding the kept weights."""
    import torch

    from helpers.engine.host import get_host
    from helpers.engine.training import LoraLayout, LoraRun

    host = get_host(kept["base_model"], device=device, dtype=getattr(torch, dtype))
    run = LoraRun(host, LoraLayout(**kept["layout"]), seed=0)
    weights = {name.replace(kept["run"], run.name): value for name, value in kept["lora"].items()}
    if set(weights) != set(run.param_names):
        raise ValueError("the kept LoRA weights do not match the layout's parameters")
    with torch.no_grad():
        for name, param in zip(run.param_names, run.params):
            param.copy_(weights[name].to(param.dtype))
    return run


def replay_rows(run, kept: dict, rows: list[int]) -> dict:
    """Forward and backward of `rows` of the kept micro-batch: losses, lowest trained log-prob, and
    the gradient's finiteness and norm."""
    import torch

    from helpers.engine.training import micro_batch_losses

    device = run.host.device
    tensors = {key: value[rows].to(device) for key, value in kept["tensors"].items()}
    for param in run.params:
        param.grad = None
    run.activate(grad=True)
    run.host.peft.train()
    try:
        per_datum, lp = micro_batch_losses(run.host.peft, tensors, kept["loss_fn"], kept["loss_config"])
        (per_datum.sum() / len(rows)).backward()
    finally:
        run.host.peft.eval()
    grads = [p.grad for p in run.params if p.grad is not None]
    norm = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])))
    trained = lp.detach().float()[tensors["active"] > 0]
    return {"rows": rows, "losses": [round(float(v), 4) for v in per_datum.detach().float()],
            "min_trained_logprob": float(trained.min()) if trained.numel() else None,
            "finite": math.isfinite(norm), "grad_norm": norm,
            "tensors_hit": sum(not bool(torch.isfinite(g).all()) for g in grads), "tensors": len(grads)}


def replay(path: str | Path, dtypes=("bfloat16", "float32"), device: str = "cpu", rows: list[int] | None = None) -> dict:
    """Per dtype, the whole micro-batch and each row on its own."""
    kept = load_kept(path)
    n = int(kept["tensors"]["ids"].shape[0])
    rows = list(range(n)) if rows is None else rows
    if any(r < 0 or r >= n for r in rows):
        raise ValueError(f"rows must lie in 0..{n - 1}, got {rows}")
    out = {"kept": str(path), "description": kept.get("description"), "rows": n, "dtypes": {}}
    for dtype in dtypes:
        run = _run_on(kept, dtype, device)
        out["dtypes"][dtype] = {"all": replay_rows(run, kept, rows), "by_row": [replay_rows(run, kept, [r]) for r in rows]}
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kept", help="a .pt file from COURSE_ENGINE_NON_FINITE_DIR")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rows", default=None, help="comma-separated row numbers (default: every row)")
    parser.add_argument("--out", default=None, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    rows = None if args.rows is None else [int(r) for r in args.rows.split(",") if r]
    result = replay(args.kept, [d for d in args.dtypes.split(",") if d], args.device, rows)
    print(f"kept: {result['description']}")
    for dtype, found in result["dtypes"].items():
        whole = found["all"]
        print(f"{dtype}: whole micro-batch {'finite' if whole['finite'] else 'NOT finite'} "
              f"(grad norm {whole['grad_norm']:.4g}, {whole['tensors_hit']} of {whole['tensors']} tensors hit)")
        bad = [r for r in found["by_row"] if not r["finite"]]
        print(f"  rows not finite alone: {[r['rows'][0] for r in bad] or 'none'}")
        for r in sorted(found["by_row"], key=lambda r: r["min_trained_logprob"] if r["min_trained_logprob"] is not None else 0)[:5]:
            print(f"  row {r['rows'][0]}: loss {r['losses'][0]:.4g}, lowest trained log-prob "
                  f"{r['min_trained_logprob']}, grad norm {r['grad_norm']:.4g}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
