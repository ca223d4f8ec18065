"""Sampling out of device memory: the decode batch is retried in two halves, like training's micro-batches.

Several training runs share one GPU, each capped to a share of its memory; a batch of long prompts
can outgrow that share in the prefill or the decode. Here (no GPU) the out-of-memory error is raised
by hand whenever a batch has more than `k` rows.
"""

from __future__ import annotations

import asyncio
import re

import pytest
import pytrio as trio
import torch

from helpers.engine import connect, graphs, sampler

torch.set_num_threads(1)  # the test machine is shared; one thread is also the fastest there
MODEL = "smollm2-135m"
TEXTS = ("1, 2, 3, 4, 5,", "The longest river in the world is", "Question: what is the capital of France?\nAnswer:")


@pytest.fixture(scope="module")
def client():
    return connect("local").create_sampling_client(base_model=MODEL)


@pytest.fixture(scope="module")
def prompts(client):
    return [list(client.get_tokenizer().encode(text)) for text in TEXTS]


def sample_all(client, prompts, **settings):
    """Every prompt with two samples, submitted together (one decode batch of six rows)."""
    settings = {"max_tokens": 5, "temperature": 0.0, **settings}

    async def together():
        return await asyncio.gather(*[
            client.sample_async(prompt=trio.ModelInput.from_ints(p), num_samples=2,
                                sampling_params=trio.SamplingParams(seed=i, **settings))
            for i, p in enumerate(prompts)
        ])

    return asyncio.run(together())


def out_of_memory_above(monkeypatch, k: int, late: bool = False, path: str = "dynamic") -> list[int]:
    """Make a decode batch of more than `k` rows run out of memory: in the prefill, or (`late`) after
    its decode filled the rows' tokens and drew their uniforms. Returns the sizes of the batches that ran."""
    ran: list[int] = []
    if late:
        owner, name = (graphs, "decode_graphs") if path == "graphs" else (sampler, f"_decode_{path}")
    else:
        owner, name = sampler, "_prefill"
    original = getattr(owner, name)

    def patched(host, rows, *args):
        result = original(host, rows, *args)
        if len(rows) > k:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (a test's)")
        ran.append(len(rows))
        return result

    monkeypatch.setattr(owner, name, patched)
    return ran


def same_samples(expected, got) -> None:
    for a_response, b_response in zip(expected, got, strict=True):
        for a, b in zip(a_response.sequences, b_response.sequences, strict=True):
            assert b.stop_reason in {"stop", "length"}
            assert 1 <= len(b.tokens) <= 5 and len(b.logprobs) == len(b.tokens)  # complete, and filled once
            assert a.tokens == b.tokens and a.stop_reason == b.stop_reason and a.text == b.text
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


@pytest.mark.parametrize("path", ["dynamic", "static", "graphs"])
def test_a_batch_whose_prefill_does_not_fit_is_sampled_in_halves(client, prompts, monkeypatch, capsys, path):
    monkeypatch.setenv("COURSE_ENGINE_DECODE", path)
    expected = sample_all(client, prompts)
    ran = out_of_memory_above(monkeypatch, k=2)
    got = sample_all(client, prompts)
    same_samples(expected, got)  # greedy: the same tokens as the whole batch
    assert sum(ran) == 6 and max(ran) <= 2
    said = re.findall(r"^engine: sampling (\d+) rows did not fit in device memory; retrying in two halves$",
                      capsys.readouterr().err, flags=re.M)
    assert said and all(int(n) > 2 for n in said)  # six rows (three if the jobs came in two batches), then three


@pytest.mark.parametrize("path", ["dynamic", "graphs"])
def test_a_retried_row_starts_clean_and_draws_the_same_samples(client, prompts, monkeypatch, path):
    """Out of memory after the decode filled the rows: a retried row has no tokens of the attempt,
    and its seeded samples are those of the whole batch (its generator is put back)."""
    monkeypatch.setenv("COURSE_ENGINE_DECODE", path)
    expected = sample_all(client, prompts, temperature=1.0)
    ran = out_of_memory_above(monkeypatch, k=2, late=True, path=path)
    got = sample_all(client, prompts, temperature=1.0)
    same_samples(expected, got)
    assert sum(ran) == 6


def test_one_row_that_does_not_fit_raises_the_devices_error(client, prompts, monkeypatch, capsys):
    out_of_memory_above(monkeypatch, k=0)
    with pytest.raises(torch.OutOfMemoryError, match="a test's"):
        sample_all(client, prompts[:1])
    assert "sampling 2 rows did not fit" in capsys.readouterr().err  # halved first, then gave up
