"""Test doubles for the rollout: a scripted sampler and a scripted search backend.

The sampler returns real pytrio SampleResponse objects whose tokens are the real tokenizer's
encoding of scripted texts, ending on the stop token or just before it, so the state machine
meets the same token shapes as with a model. Other rollout test files import from here.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest
from pytrio.types import SampleResponse, SampleSequence

from helpers.models import load_tokenizer
from helpers.protocol import stop_token_ids
from helpers.search.types import SearchItem, SearchResult, SearchStats

Script = Callable[[str, int], str]  # (prompt text, sample index) -> assistant text


def fake_logprob(position: int) -> float:
    return -0.05 * (position % 11 + 1)


class ScriptedSamplingClient:
    """Answers each request from a script; records every request it saw."""

    def __init__(self, tokenizer, script: Script, include_stop: bool | Callable[[int], bool] = True, delay: float = 0.0):
        self.tokenizer = tokenizer
        self.script = script
        self.include_stop = include_stop
        self.delay = delay
        self.requests: list[dict] = []
        self.calls = 0
        self.concurrent = 0
        self.max_concurrent = 0
        self._lock = threading.Lock()

    def _sequence(self, prompt: list[int], index: int, params) -> SampleSequence:
        text = self.script(self.tokenizer.decode(prompt, skip_special_tokens=False), index)
        tokens = list(self.tokenizer.encode(text, add_special_tokens=False))
        with_stop = self.include_stop(self.calls) if callable(self.include_stop) else self.include_stop
        stop_reason = "stop"
        if with_stop:
            tokens.append(stop_token_ids(self.tokenizer)[0])
        if params.max_tokens is not None and len(tokens) > params.max_tokens:
            tokens, stop_reason = tokens[: params.max_tokens], "length"
        return SampleSequence(
            stop_reason=stop_reason, tokens=tokens, logprobs=[fake_logprob(i) for i in range(len(tokens))],
            text=self.tokenizer.decode(tokens),
        )

    def _respond(self, prompt, num_samples, sampling_params) -> SampleResponse:
        tokens = prompt.to_ints()
        with self._lock:
            self.calls += 1
            self.requests.append({"prompt": tokens, "num_samples": num_samples, "params": sampling_params})
        return SampleResponse(sequences=[self._sequence(tokens, i, sampling_params) for i in range(num_samples)])

    async def sample_async(self, prompt, num_samples=1, sampling_params=None, return_text=True, **_):
        with self._lock:
            self.concurrent += 1
            self.max_concurrent = max(self.max_concurrent, self.concurrent)
        try:
            await asyncio.sleep(self.delay)
            return self._respond(prompt, num_samples, sampling_params)
        finally:
            with self._lock:
                self.concurrent -= 1


class FakeSearchClient:
    """Returns `items_per_query` items per query; queries in `fail` fail, in `explode` raise."""

    name = "fake"

    def __init__(self, items_per_query: int = 3, content_words: int = 30, fail=(), explode=(), delay=0.0,
                 passage_ids: bool = False):
        self.stats = SearchStats()
        self.passage_ids = passage_ids  # items carry ids like a corpus backend ("<query>#<rank>")
        self.items_per_query = items_per_query
        self.content_words = content_words
        self.fail = set(fail)
        self.explode = set(explode)
        self.delay = delay
        self.queries: list[str] = []
        self.concurrent = self.max_concurrent = 0
        self._lock = threading.Lock()

    def search(self, query: str) -> SearchResult:
        with self._lock:
            self.queries.append(query)
            self.concurrent += 1
            self.max_concurrent = max(self.max_concurrent, self.concurrent)
        time.sleep(self.delay)
        with self._lock:
            self.concurrent -= 1
        if query in self.explode:
            raise ConnectionError("https://api.example/search?key=sk-SECRET exploded")
        if query in self.fail:
            result = SearchResult(ok=False, items=[], latency=0.01, status=503, error="HTTP 503")
        else:
            words = " ".join(f"{query.split()[0] if query.split() else 'x'}{i}" for i in range(self.content_words))
            items = [SearchItem(title=f"{query} page {k}", content=f"Evidence {k}: {words}", source="Fake",
                                passage_id=f"{query}#{k}" if self.passage_ids else None)
                     for k in range(self.items_per_query)]
            result = SearchResult(ok=True, items=items, latency=0.01, status=200)
        self.stats.record(result)
        return result


def call(query: str) -> str:
    return '<tool_call>\n{"name": "search", "arguments": {"query": "%s"}}\n</tool_call>' % query


@pytest.fixture(scope="module", params=["qwen2.5-0.5b", "smollm2-135m"])
def any_tokenizer(request):
    return load_tokenizer(request.param)


def test_scripted_sampler_ends_on_or_before_the_stop_token(any_tokenizer):
    import pytrio as trio

    stop = stop_token_ids(any_tokenizer)[0]
    params = trio.SamplingParams(max_tokens=50)
    prompt = trio.ModelInput.from_ints([1, 2, 3])
    with_stop = ScriptedSamplingClient(any_tokenizer, lambda p, i: "Answer: Paris", include_stop=True)
    without = ScriptedSamplingClient(any_tokenizer, lambda p, i: "Answer: Paris", include_stop=False)
    a = asyncio.run(with_stop.sample_async(prompt, 2, params)).sequences
    b = asyncio.run(without.sample_async(prompt, 1, params)).sequences[0]
    assert len(a) == 2 and a[0].tokens[-1] == stop and b.tokens[-1] != stop
    assert a[0].tokens[:-1] == b.tokens and len(a[0].logprobs) == len(a[0].tokens)
    short = asyncio.run(with_stop.sample_async(prompt, 1, trio.SamplingParams(max_tokens=2))).sequences[0]
    assert len(short.tokens) == 2 and short.stop_reason == "length"
