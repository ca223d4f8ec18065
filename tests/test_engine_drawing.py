"""The token draw's inverse CDF: the two-level search picks the token one float64 scan over the whole
vocabulary picks, and never a token of zero mass."""

import random

import pytest
import torch

from helpers.engine.drawing import CDF_BLOCK, DrawParams, Row, draw, inverse_cdf


def one_scan(probs, u):
    """The definition: the first token whose float64 cumulative mass reaches u × the row's total."""
    cdf = probs.double().cumsum(-1)
    return torch.searchsorted(cdf, (u * cdf[:, -1])[:, None]).clamp_(max=probs.shape[-1] - 1)[:, 0]


@pytest.mark.parametrize("vocab", [5, CDF_BLOCK, 3 * CDF_BLOCK + 17, 49152])
@pytest.mark.parametrize("shape", ["peaked", "flat", "sparse"])
def test_two_levels_pick_what_one_scan_picks(vocab, shape):
    gen = torch.Generator().manual_seed(vocab)
    rows = 64
    logits = torch.randn(rows, vocab, generator=gen) * (8.0 if shape == "peaked" else 1.0)
    probs = torch.softmax(logits, dim=-1)
    if shape == "sparse":  # truncated rows: most tokens carry no mass, as after top-k / top-p
        probs = probs * (torch.rand(rows, vocab, generator=gen) < 0.05)
        probs[:, 0] += 1e-3  # every row keeps some mass
    for _ in range(20):
        u = torch.rand(rows, generator=gen, dtype=torch.float64).clamp_(min=1e-12)
        assert torch.equal(inverse_cdf(probs, u), one_scan(probs, u))


def test_uniforms_at_the_ends_pick_the_first_and_last_tokens_with_mass():
    vocab = 2 * CDF_BLOCK + 3
    probs = torch.zeros(3, vocab)
    probs[:, 7] = 0.25
    probs[:, CDF_BLOCK + 1] = 0.5
    probs[:, vocab - 2] = 0.25  # the last token (vocab - 1) has none
    u = torch.tensor([1e-12, 0.5, 1 - 1e-16], dtype=torch.float64)
    assert inverse_cdf(probs, u).tolist() == [7, CDF_BLOCK + 1, vocab - 2]


def test_a_target_on_a_block_boundary_never_lands_on_a_token_without_mass():
    # blocks that start and end with tokens of no mass, and targets on (and a few ulps either side of) the
    # end of a block: there the block sums and the in-block running sums round differently
    gen = torch.Generator().manual_seed(0)
    rows, blocks = 4096, 8
    probs = torch.rand(rows, blocks * CDF_BLOCK, generator=gen) ** 4
    probs.view(rows, blocks, CDF_BLOCK)[:, :, -3:] = 0
    probs.view(rows, blocks, CDF_BLOCK)[:, :, :2] = 0
    upto = probs.view(rows, blocks, CDF_BLOCK).sum(-1, dtype=torch.float64).cumsum(-1)
    ends = upto.gather(1, torch.randint(0, blocks, (rows, 1), generator=gen))[:, 0] / upto[:, -1]
    for ulps in (-2, -1, 0, 1, 2):
        u = (ends * (1 + ulps * 2.0 ** -53)).clamp(1e-12, 1 - 1e-16)
        picks = inverse_cdf(probs, u)
        assert bool((probs.gather(1, picks[:, None]) > 0).all())
        # and it is the inverse CDF's token up to rounding: its mass brackets the target
        cdf = probs.double().cumsum(-1)
        target = u * cdf[:, -1]
        after = cdf.gather(1, picks[:, None])[:, 0]
        before = after - probs.double().gather(1, picks[:, None])[:, 0]
        assert bool(((before <= target * (1 + 1e-12)) & (after >= target * (1 - 1e-12))).all())


def test_a_row_that_is_not_finite_still_names_a_token_of_the_vocabulary():
    probs = torch.full((2, 300), float("nan"))
    picks = inverse_cdf(probs, torch.tensor([0.3, 0.9], dtype=torch.float64))
    assert bool(((picks >= 0) & (picks < 300)).all())


def test_draw_keeps_each_rows_samples_and_logprobs():
    """End to end through `draw`: the tokens one scan would give, with top-p truncation and without."""
    vocab = 1000
    logits = torch.randn(6, vocab, generator=torch.Generator().manual_seed(1)) * 3
    for top_p in (1.0, 0.9):
        rows = [Row(prompt=[1], job_index=i, max_tokens=4, temperature=0.7, top_k=0, top_p=top_p, stop_ids=set(),
                    stop_strings=[], rng=random.Random(i)) for i in range(6)]
        params = DrawParams(rows, "cpu")
        for step in range(4):
            tokens, logps = draw(logits, params, step)
            probs = torch.softmax(logits / 0.7, dim=-1)
            if top_p < 1.0:
                sorted_probs, order = probs.sort(dim=-1, descending=True)
                sorted_probs = sorted_probs.masked_fill(sorted_probs.cumsum(-1) - sorted_probs > top_p, 0.0)
                expected = order.gather(1, one_scan(sorted_probs, params.uniforms[:, step])[:, None])[:, 0]
            else:
                expected = one_scan(probs, params.uniforms[:, step])
            assert torch.equal(tokens, expected)
            assert torch.allclose(logps, torch.log_softmax(logits, -1).gather(1, tokens[:, None])[:, 0])


def test_the_draw_benchmark_times_both_on_the_same_draws_and_puts_the_two_levels_back(tmp_path):
    import importlib.util
    import json
    from pathlib import Path

    from helpers.engine import drawing

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "bench_draw.py"
    spec = importlib.util.spec_from_file_location("bench_draw", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "draw.json"
    assert bench.main(["--batch-sizes", "2,3", "--vocab", "300", "--steps", "5", "--repeats", "2",
                       "--device", "cpu", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["batch"] for r in rows] == [2, 3]
    assert all(r["same_token"] == 1.0 and r["before_ms"] > 0 and r["after_ms"] > 0 for r in rows)
    assert drawing.inverse_cdf is inverse_cdf


def test_the_decode_benchmark_samples_the_same_tokens_with_the_one_scan_draw(tmp_path):
    """`bench_grpo_gpu.py decode --one-scan` puts the old draw back for a whole decode step: same tokens."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    shas, paths = [], []
    for flag in ([], ["--one-scan"]):
        out = tmp_path / f"decode{len(shas)}.json"
        done = subprocess.run([sys.executable, str(root / "benchmarks" / "bench_grpo_gpu.py"), "decode", "--model",
                               "smollm2-135m", "--batch-sizes", "3", "--max-tokens", "12", "--repeats", "1", *flag,
                               "--out", str(out)], capture_output=True, text=True, timeout=600, cwd=root,
                              env={**os.environ, "COURSE_ENGINE_DECODE": "graphs"})
        assert done.returncode == 0, done.stderr[-2000:]
        row = json.loads(out.read_text())["rows"][0]
        shas.append(row["tokens_sha"])
        paths.append(row["decode_path"])
    assert shas[0] == shas[1] and paths == ["graphs", "graphs one-scan draw"]
