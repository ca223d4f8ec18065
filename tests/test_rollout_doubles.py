"""The rollout's test doubles (tests/fixtures/doubles.py) behave like a model and a backend."""

from __future__ import annotations

import asyncio

import pytest

from fixtures.doubles import ScriptedSamplingClient
from helpers.models import load_tokenizer
from helpers.protocol import stop_token_ids


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
