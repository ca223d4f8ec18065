"""The local engine: the PyTRIO client API on a real model, in this process, with no network.

    import pytrio as trio
    from helpers.engine import connect

    service = connect()                                  # local; COURSE_BACKEND=pytrio for the real service
    tc = service.create_lora_training_client("smollm2-135m", rank=32, seed=0)
    sc = tc.save_weights_and_get_sampling_client()       # or service.create_sampling_client(base_model=...)
    tok = tc.get_tokenizer()

    # sampling: returns the SDK's own SampleResponse
    response = sc.sample(
        prompt=trio.ModelInput.from_ints(tok.encode("The capital of France is")),
        num_samples=4,
        sampling_params=trio.SamplingParams(max_tokens=32, temperature=1.0, top_p=1.0, seed=0,
                                            stop=["</tool_call>"]),
    ).result()
    seq = response.sequences[0]   # seq.tokens, seq.logprobs, seq.text, seq.stop_reason ('stop'|'length')
    # async twin (also inside Jupyter's running loop); concurrent calls are decoded in one batch:
    #   responses = await asyncio.gather(*(sc.sample_async(prompt=p, num_samples=G, sampling_params=sp)
    #                                      for p in prompts))

    # training: every call returns an APIFuture (.result() or await)
    datum = trio.Datum(model_input=trio.ModelInput.from_ints(input_ids),
                       loss_fn_inputs={"target_tokens": targets,      # same length as input_ids
                                       "logprobs": old_logprobs,     # sampler logprobs, 0 elsewhere
                                       "advantages": advantages})    # 0 on prompt/observation tokens
    out = tc.forward_backward([datum], loss_fn="importance_sampling").result()
    out.metrics            # {'loss_sum', 'loss_mean', 'token_count'}
    out.loss_fn_outputs[0]["logprobs"]   # TensorData: trainer logprob of every target
    tc.optim_step(trio.AdamParams(learning_rate=1e-4)).result()
    path = tc.save_weights_for_sampler("step-1").result().path      # 'local://<run>/weights/step-1'
    sc = tc.create_sampling_client(path)

Details worth knowing:
- `sequence.logprobs` are the model's own log-probabilities of the sampled tokens (log-softmax of
  the raw logits, temperature 1): the quantity the trainer computes for the same tokens, so the
  importance ratio starts at 1. They equal the sampling distribution's logprobs only when
  temperature is 1 and top-k/top-p do not truncate.
- The returned tokens include the token that ended the sequence (EOS, a stop token id, or the
  token that completed a stop string); `text` decodes them with special tokens skipped.
- `connect(backend)`: the argument wins, else COURSE_BACKEND, else "local".
- `<|im_end|>` and `<|endoftext|>` always end a sequence (stop_reason 'stop'), besides `stop`.
- Losses: per-datum sum over tokens, mean over the datums of one call (see `losses`).
  `forward_backward_custom` follows the SDK's algorithm (a cross-entropy surrogate weighted by
  the custom loss's gradient), so its gradient is also divided by the number of datums.
- One copy of the base weights per process and model; samplers hold LoRA tensors only.
- `save_weights_and_get_sampling_client()` returns a SamplingClient (as the SDK does), backed
  by an in-memory snapshot. `save_weights_for_sampler(name)` / `save_state(name)` write
  safetensors under `cache_dir()/checkpoints/<run>/{weights,state}/<name>` and return
  `local://<run>/...` paths; `create_sampling_client(model_path)` also takes a directory.
- Batching: sample requests arriving within 5 ms of each other are decoded together; on CUDA
  the decode step uses a static KV cache and is compiled (CUDA graphs). COURSE_ENGINE_STATIC=0|1
  and COURSE_ENGINE_COMPILE=0 switch these off/on. COURSE_ENGINE_DECODE=graphs|static|dynamic picks the
  decode path; COURSE_ENGINE_FUSE=0 runs the graphs path's layer projection by projection, =merge and/or
  =inductor (comma-joined) the fused layer with its LoRA merged into the weights / its halves compiled.
- Training recomputes each decoder layer's activations in backward (less memory, bigger micro-batches);
  COURSE_ENGINE_RECOMPUTE=0 keeps them instead (less arithmetic, micro-batches a quarter the size; the
  same gradient).
- `probe_loss_normalisation(training_client)` measures a backend's reduction;
  `measure_logprob_agreement(training_client, sampling_client, prompts, params)` reports the
  sampler/trainer mismatch as a KL.
"""

from __future__ import annotations

import os

from helpers.engine.local import SamplingClient, ServiceClient, TrainingClient
from helpers.engine.losses import LOSS_FUNCTIONS
from helpers.engine.probes import measure_logprob_agreement, probe_loss_normalisation

BACKENDS = ("local", "pytrio")

__all__ = [
    "BACKENDS",
    "LOSS_FUNCTIONS",
    "SamplingClient",
    "ServiceClient",
    "TrainingClient",
    "connect",
    "measure_logprob_agreement",
    "probe_loss_normalisation",
]


def connect(backend: str | None = None):
    """A ServiceClient: `backend` if given, else `COURSE_BACKEND`, else "local".

    "pytrio" returns a real `pytrio.ServiceClient()`; without a key or network it fails within
    seconds with a message naming what to configure.
    """
    choice = (backend or os.environ.get("COURSE_BACKEND") or "local").strip().lower()
    if choice not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {choice!r} (from COURSE_BACKEND or the argument)")
    if choice == "local":
        return ServiceClient()
    from helpers.engine.remote import connect_remote

    return connect_remote()
