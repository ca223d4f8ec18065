"""Does this machine's attention backward write NaN into the query gradient of a padded, masked batch?

The shape of the trainer's failing micro-batch without its model: one head whose every logit is about
-120 (Qwen2.5-0.5B's layer-8 head 3 reaches -600: its keys carry a massive activation), so each query
row's logsumexp is below ln(FLT_MAX) = -88.7; a key length of 1,600 (64 modulo 128); a row of 1,436
real tokens, right-padded. It runs the attention's forward and backward twice: with the padding mask
the trainer used to pass, and causal with no mask (what `helpers.engine.logprobs.decoder_inputs` hands
the decoder now), and prints how many query-gradient entries are not finite in each and how far the
real rows' gradients of the two lie apart. On an H100 with PyTorch 2.11 cuDNN's masked backward is the
one expected to fail; on a CPU both are finite. Seconds on either.

    python benchmarks/attention_mask_nan.py            # cuda in bfloat16 where there is one, else cpu
    python benchmarks/attention_mask_nan.py --device cpu --dtype float32
"""

from __future__ import annotations

import argparse
import math


def attention_grads(device: str, dtype: str, width: int = 1600, length: int = 1436, heads: int = 2,
                    dim: int = 64, logit: float = -120.0, seed: int = 0) -> dict:
    import torch
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(seed)
    shape = (1, heads, width, dim)
    q = torch.randn(shape, generator=generator) * 0.1
    k = torch.randn(shape, generator=generator) * 0.1
    v = torch.randn(shape, generator=generator)
    q[..., 0], k[..., 0] = 1.0, logit * math.sqrt(dim)  # every scaled logit about `logit`
    grad_out = torch.randn(shape, generator=generator)
    grad_out[:, :, length:] = 0  # padding positions carry no gradient
    real = torch.ones(width, width, dtype=torch.bool).tril() & (torch.arange(width) < length)
    out = {}
    for name, kwargs in (("masked", {"attn_mask": real[None, None].to(device)}), ("causal", {"is_causal": True})):
        tensors = [t.to(device, getattr(torch, dtype)).requires_grad_() for t in (q, k, v)]
        F.scaled_dot_product_attention(*tensors, **kwargs).backward(grad_out.to(device, getattr(torch, dtype)))
        grads = [t.grad.float().cpu() for t in tensors]
        out[name] = {"dq_not_finite": int((~torch.isfinite(grads[0])).sum()),
                     "dk_not_finite": int((~torch.isfinite(grads[1])).sum()),
                     "dv_not_finite": int((~torch.isfinite(grads[2])).sum()), "grads": grads}
    a, b = out["masked"]["grads"], out["causal"]["grads"]
    apart = max(float((x[:, :, :length] - y[:, :, :length]).abs().max()) for x, y in zip(a, b))
    for found in out.values():
        del found["grads"]
    return {"device": device, "dtype": dtype, "width": width, "length": length, **out,
            "real_rows_max_abs_difference": apart}


def main(argv=None) -> int:
    import torch

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cuda = torch.cuda.is_available()
    parser.add_argument("--device", default="cuda" if cuda else "cpu")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--width", type=int, default=1600)
    parser.add_argument("--length", type=int, default=1436)
    args = parser.parse_args(argv)
    result = attention_grads(args.device, args.dtype, args.width, args.length)
    if args.device == "cuda":
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
              f"cuDNN attention enabled: {torch.backends.cuda.cudnn_sdp_enabled()}")
    for name in ("masked", "causal"):
        found = result[name]
        print(f"{name}: not finite in dq {found['dq_not_finite']}, dk {found['dk_not_finite']}, dv {found['dv_not_finite']}")
    print(f"real rows' gradients apart by at most {result['real_rows_max_abs_difference']:.3g}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
