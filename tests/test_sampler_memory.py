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


def test_a_failed_graph_capture_leaves_its_memory_pool_and_the_next_capture_takes_a_fresh_one(monkeypatch):
    """A capture that fails part way can leave the allocator recording into its pool; the decoder must
    not capture into that pool again (it would fail with "already recording to mempool_id"), and must
    keep decoding (uncaptured) meanwhile. Before each capture the default pool's cached blocks go back
    to the device: the graph's own pool cannot use them, and under a memory share they leave it no room."""
    import contextlib
    import warnings
    from types import SimpleNamespace

    import torch

    from helpers.engine import graphs

    pools, ran = [], []

    class Stream:
        def wait_stream(self, other):
            pass

    fail = {"next": True}

    @contextlib.contextmanager
    def graph(g, pool=None, capture_error_mode="global"):
        g.pool = pool
        ran.append(("mode", capture_error_mode))
        yield
        if fail["next"]:
            fail["next"] = False
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")

    class Graph:
        def replay(self):
            ran.append(("replay", self.pool))

    fake_cuda = SimpleNamespace(current_stream=Stream, Stream=Stream, stream=lambda s: contextlib.nullcontext(),
                                set_stream=lambda s: None, CUDAGraph=Graph, graph=graph,
                                graph_pool_handle=lambda: pools.append(len(pools)) or pools[-1],
                                empty_cache=lambda: ran.append("empty_cache"))
    monkeypatch.setattr(torch, "cuda", fake_cuda)
    monkeypatch.setattr(graphs, "chunk", lambda *args: ran.append("chunk"))
    decoder = graphs.GraphDecoder.__new__(graphs.GraphDecoder)
    decoder.host, decoder.layer_fn = SimpleNamespace(device="cuda"), None
    decoder.graphs, decoder.pool, decoder.captures = {}, None, 0
    weights = SimpleNamespace(signature=lambda: ("w",))
    state = SimpleNamespace(rows=8, length=512)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = decoder.runner(weights, state, 0, False, True)
    assert any("capture failed" in str(w.message) for w in caught)
    first()  # decoding goes on, uncaptured
    assert ran[-1] == "chunk" and decoder.captures == 0 and decoder.pool is None
    second = decoder.runner(weights, state, 0, False, True)
    second()
    assert pools == [0, 1] and ran[-1] == ("replay", 1) and decoder.captures == 1  # a fresh pool, captured
    # the default pool's cached blocks go back to the device before each capture (warm-up, release, capture)
    assert [r for r in ran if r != ("mode", "thread_local")][:3] == ["chunk", "empty_cache", "chunk"]
    assert ran.count("empty_cache") == 2
    # only the capturing thread's own calls may break a capture, never another thread's
    assert ran.count(("mode", "thread_local")) == 2 and not any(r[0] == "mode" and r != ("mode", "thread_local")
                                                                  for r in ran if isinstance(r, tuple))
    third = decoder.runner(SimpleNamespace(signature=lambda: ("w",)), SimpleNamespace(rows=16, length=512), 0, False, True)
    third()
    assert pools == [0, 1] and ran[-1] == ("replay", 1)  # a capture that succeeded shares its pool with the next


def test_the_compiled_step_survives_a_batch_out_of_memory_but_not_a_failed_compile(client, monkeypatch):
    """Out of memory is the batch's doing: it reaches the sampler (which decodes the batch again in
    halves) and the compiled step stays; any other failure of the compiled step falls back to the
    eager step for good, with a warning."""
    import warnings

    from helpers.engine.host import get_host

    calls = []
    failures = [torch.OutOfMemoryError("CUDA out of memory (a test's)"), None, RuntimeError("inductor: no"), None]

    def fake_compile(fn, **kwargs):
        def compiled(*args):
            calls.append("compiled")
            failure = failures.pop(0)
            if failure is not None:
                raise failure
            return fn(*args)
        return compiled

    host = get_host(MODEL)
    monkeypatch.setattr(host, "_steps", {})
    monkeypatch.setattr(host.torch, "compile", fake_compile)
    monkeypatch.setenv("COURSE_ENGINE_COMPILE", "eager")
    step = host.decode_step()
    forward = host.forward_model()
    ids = torch.tensor([[1, 2, 3]])
    positions = torch.arange(3).unsqueeze(0)
    mask = torch.ones(1, 3, dtype=torch.long)

    def run():
        from transformers import DynamicCache

        return step(ids, positions, mask, DynamicCache(config=forward.config))

    with pytest.raises(torch.OutOfMemoryError):
        run()
    assert run().shape[0] == 1 and calls == ["compiled", "compiled"]  # still compiled after the OOM
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expected = run()
    assert any("using the eager step" in str(w.message) for w in caught) and calls == ["compiled"] * 3
    assert torch.allclose(run(), expected) and calls == ["compiled"] * 3  # eager from then on
