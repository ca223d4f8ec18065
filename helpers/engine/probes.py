"""Measurements that work on any backend (local or the real PyTRIO service).

`probe_loss_normalisation` answers: does one `forward_backward` call sum or average over its
datums, and over tokens? It cannot read gradients (the remote service does not return them),
so it reads their effect. With Adam's `eps` far larger than any gradient entry and beta1 = 0,
one `optim_step` moves the weights by (lr / eps) * g, an SGD step proportional to the
accumulated gradient g. Then the increase of S = sum_t A_t * logp_t over a probe datum d is
proportional to the scale of g. Comparing the increase after one call on

    [d]          (reference)
    [d, d]       x1 when datums are averaged, x2 when they are summed
    d + padding  d followed by extra zero-advantage tokens: x1 when tokens are summed,
                 x n/(n+k) when a call divides by its active-token count

gives the reduction. The steps are tiny, so the model hardly moves; a repeat of [d] at the
end checks that the measurement stayed in the linear regime (and the two [d] runs are
interpolated to cancel slow drift).

`measure_logprob_agreement` samples, recomputes the same tokens' logprobs with the trainer,
and reports the train/inference mismatch as a KL estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytrio as trio

PROBE_TEXT = "The quick brown fox jumps over the lazy dog because it wants to see the river."


@dataclass
class NormalisationReport:
    gain_single: float      # increase of S after [d]
    gain_pair: float        # after [d, d]
    gain_padded: float      # after d + k zero-advantage tokens
    gain_repeat: float      # after [d] again (linearity check)
    active_tokens: int
    padding_tokens: int

    def _reference(self, step: int) -> float:
        # [d] ran at steps 0 and 3: interpolate, so slow drift of the model cancels out
        return self.gain_single + (self.gain_repeat - self.gain_single) * step / 3

    @property
    def datum_ratio(self) -> float:
        return self.gain_pair / self._reference(1)

    @property
    def padding_ratio(self) -> float:
        return self.gain_padded / self._reference(2)

    @property
    def datums(self) -> str:
        return _closest(self.datum_ratio, {"mean": 1.0, "sum": 2.0})

    @property
    def tokens(self) -> str:
        n, k = self.active_tokens, self.padding_tokens
        return _closest(self.padding_ratio, {"sum": 1.0, "mean over active tokens": n / (n + k)})

    @property
    def linear(self) -> bool:
        return abs(self.gain_repeat / self.gain_single - 1.0) < 0.2

    def summary(self) -> str:
        return (
            f"one forward_backward call takes the {self.datums} over datums "
            f"([d, d] / [d] = {self.datum_ratio:.3f}) and the {self.tokens} over tokens "
            f"(padded / plain = {self.padding_ratio:.3f}; a token mean would give "
            f"{self.active_tokens / (self.active_tokens + self.padding_tokens):.3f}); "
            f"linear regime: {'yes' if self.linear else 'NO, lower learning_rate'}"
        )


def _closest(value: float, options: dict[str, float]) -> str:
    return min(options, key=lambda name: abs(math.log(max(value, 1e-9) / options[name])))


def _policy_datum(tokens: list[int], old: list[float], advantages: list[float]) -> trio.Datum:
    return trio.Datum(
        model_input=trio.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": tokens[1:], "logprobs": old, "advantages": advantages},
    )


def _score(training_client, datum: trio.Datum) -> float:
    """S = sum_t A_t * logp_t under the current weights."""
    out = training_client.forward([datum], loss_fn="importance_sampling").result()
    lp = out.loss_fn_outputs[0]["logprobs"].data
    adv = datum.loss_fn_inputs["advantages"].data
    return float(sum(a * l for a, l in zip(adv, lp)))


def probe_loss_normalisation(training_client, text: str = PROBE_TEXT, padding_tokens: int = 24,
                             learning_rate: float = 3e-2, eps: float = 1e4) -> NormalisationReport:
    """Measure how one `forward_backward(..., "importance_sampling")` reduces over datums and tokens.

    Changes the client's weights by a few tiny steps: use a throwaway training client.
    """
    tokenizer = training_client.get_tokenizer()
    tokens = list(tokenizer.encode(text))
    n = len(tokens) - 1
    half = n // 2  # first half is context (advantage 0), second half is "action" (advantage 1)
    advantages = [0.0] * half + [1.0] * (n - half)
    probe = _policy_datum(tokens, [0.0] * n, advantages)
    old = training_client.forward([probe], loss_fn="importance_sampling").result().loss_fn_outputs[0]["logprobs"].data
    d = _policy_datum(tokens, list(old), advantages)
    pad_ids = list(tokenizer.encode(" and then the story goes on for a while longer." * 4))[:padding_tokens]
    padded_tokens = tokens + pad_ids
    padded_old = training_client.forward(
        [_policy_datum(padded_tokens, [0.0] * (len(padded_tokens) - 1), [0.0] * (len(padded_tokens) - 1))],
        loss_fn="importance_sampling",
    ).result().loss_fn_outputs[0]["logprobs"].data
    padded = _policy_datum(padded_tokens, list(padded_old), advantages + [0.0] * len(pad_ids))
    adam = trio.AdamParams(learning_rate=learning_rate, beta1=0.0, beta2=0.999, eps=eps, weight_decay=0.0,
                           grad_clip_norm=0.0)

    def gain(batch: list[trio.Datum]) -> float:
        before = _score(training_client, d)
        training_client.forward_backward(batch, loss_fn="importance_sampling").result()
        training_client.optim_step(adam).result()
        return _score(training_client, d) - before

    single = gain([d])
    pair = gain([d, d])
    padded_gain = gain([padded])
    repeat = gain([d])
    return NormalisationReport(single, pair, padded_gain, repeat, active_tokens=n, padding_tokens=len(pad_ids))


@dataclass
class AgreementReport:
    tokens: int
    kl: float                 # E_sampler[exp(r) - 1 - r], r = logp_trainer - logp_sampler (k3 estimator)
    mean_abs_diff: float
    max_abs_diff: float

    def summary(self) -> str:
        return (f"sampler vs trainer over {self.tokens} sampled tokens: KL ~ {self.kl:.2e}, "
                f"mean |diff| {self.mean_abs_diff:.2e}, max |diff| {self.max_abs_diff:.2e} nats")


def measure_logprob_agreement(training_client, sampling_client, prompts: list[list[int]],
                              sampling_params: trio.SamplingParams, num_samples: int = 1) -> AgreementReport:
    """Sample, then recompute the sampled tokens' logprobs with the trainer and compare.

    The sampling client must hold the training client's current weights (for example from
    `save_weights_and_get_sampling_client()`).
    """
    diffs: list[float] = []
    kl_terms: list[float] = []
    datums, sampled = [], []
    for prompt in prompts:
        response = sampling_client.sample(prompt=trio.ModelInput.from_ints(prompt), num_samples=num_samples,
                                          sampling_params=sampling_params).result()
        for seq in response.sequences:
            full = list(prompt) + list(seq.tokens)
            datums.append(trio.Datum(model_input=trio.ModelInput.from_ints(full[:-1]),
                                     loss_fn_inputs={"target_tokens": full[1:]}))
            sampled.append((len(prompt) - 1, seq.logprobs))
    outputs = training_client.forward(datums, loss_fn="cross_entropy").result().loss_fn_outputs
    for output, (start, sampler_lp) in zip(outputs, sampled):
        trainer_lp = output["logprobs"].data[start:start + len(sampler_lp)]
        for t, s in zip(trainer_lp, sampler_lp):
            r = t - s
            diffs.append(abs(r))
            kl_terms.append(math.expm1(r) - r)
    count = max(len(diffs), 1)
    return AgreementReport(tokens=len(diffs), kl=sum(kl_terms) / count, mean_abs_diff=sum(diffs) / count,
                           max_abs_diff=max(diffs, default=0.0))


def warm_up_decoding(sampling_client, shapes=((1, 32), (9, 32), (9, 600)), max_tokens: int = 4) -> list[dict]:
    """Decode once at a few (rows, prompt tokens) shapes, so the compiled decode step exists.

    On CUDA the compiled graphs land in torch's on-disk cache, and other processes that start
    afterwards load them instead of compiling. Measured on an H200: a second process's first
    calls took 8.0 s / 0.2 s / 9.1 s instead of 29.6 s / 1.1 s / 41.0 s at batch 1 / 8 / 64.
    But inside a full run, warming up alone took 227 s, more than it saved four concurrent
    processes, so results/run.sh does not call it. Returns the seconds each shape took.
    """
    import asyncio
    import time

    tokenizer = sampling_client.get_tokenizer()
    filler = tokenizer.encode(" search", add_special_tokens=False) or [0]
    out = []
    for rows, length in shapes:
        prompts = [(filler * length)[:length] + [i % 7 + 1] for i in range(rows)]  # distinct rows

        async def batch():
            return await asyncio.gather(*[
                sampling_client.sample_async(prompt=trio.ModelInput.from_ints(p), num_samples=1,
                                             sampling_params=trio.SamplingParams(max_tokens=max_tokens, seed=i))
                for i, p in enumerate(prompts)])

        started = time.perf_counter()
        asyncio.run(batch())
        out.append({"rows": rows, "prompt_tokens": length + 1, "seconds": round(time.perf_counter() - started, 2)})
    return out
