"""The local ServiceClient / TrainingClient / SamplingClient, mirroring pytrio 0.2.9.

Same method names, parameters, defaults and return types as the SDK (a conformance test checks
the signatures): synchronous methods return `pytrio.types.APIFuture` (or a client, where the SDK
does), and every `*_async` twin awaits the way the SDK's does. Inputs are validated in the
caller's thread, with the SDK's own planner for training batches, so errors match the remote
service and are raised before anything is queued.
"""

from __future__ import annotations

import asyncio
import weakref
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Callable

from pytrio.client.builders.training import build_trainer_save_payload
from pytrio.client.training_batch import plan_training_batch
from pytrio.errors.base import ValidationError
from pytrio.model.limits import TrainingLimits
from pytrio.types import (
    AdamParams,
    APIFuture,
    Datum,
    ForwardBackwardOutput,
    GetServerCapabilitiesResponse,
    ModelInput,
    ModelOperationCapabilities,
    OptimStepResponse,
    SampleResponse,
    SamplingParams,
    SaveWeightsForSamplerResponse,
    SaveWeightsResponse,
    SupportedModel,
    TensorData,
)

from helpers import config
from helpers.engine.host import AdapterSnapshot, ModelHost, SampleJob, get_host
from helpers.engine.sampler import split_stop, validate_params

_DEFAULT_SAMPLING_PARAMS = SamplingParams()
URI_SCHEME = "local://"


def checkpoints_root() -> Path:
    path = config.cache_dir() / "checkpoints"
    path.mkdir(parents=True, exist_ok=True)
    return path


def resolve_path(path: str) -> Path:
    """`local://<run>/<kind>/<name>` (under cache_dir()/checkpoints), `file://...` or a directory."""
    if path.startswith(URI_SCHEME):
        return checkpoints_root() / path[len(URI_SCHEME):]
    if path.startswith("file://"):
        return Path(path[len("file://"):])
    if "://" in path:
        raise ValidationError(
            f"the local engine cannot load {path!r}: use a local:// path returned by save_weights_for_sampler "
            "or save_state, or a directory holding adapter.safetensors + meta.json",
            code="validation.invalid_checkpoint_uri",
        )
    return Path(path)


def _known_model(base_model: str) -> str:
    from helpers.models import SPECS

    if base_model not in SPECS:
        raise ValidationError(
            f"unknown base_model {base_model!r}; the local engine serves {sorted(SPECS)}",
            code="validation.unknown_model",
        )
    return base_model


def _wrap(future: Future, transform: Callable | None = None) -> APIFuture:
    api = APIFuture(future)
    return api.map(transform) if transform else api


class ServiceClient:
    """Local stand-in for `pytrio.ServiceClient`: one process, one device, no network."""

    def __init__(self, api_key: str | None = None) -> None:
        del api_key  # accepted for signature compatibility; nothing to authenticate locally

    def get_supported_models(self) -> list[str]:
        return [m.model_name for m in self.get_server_capabilities().supported_models]

    def get_server_capabilities(self) -> GetServerCapabilitiesResponse:
        from helpers.models import SPECS, is_provisioned

        models = []
        for name in SPECS:
            ok = is_provisioned(name)
            caps = ModelOperationCapabilities(available=ok, max_batch_size=None, max_tokens_per_request=None,
                                              max_seq_len=None)
            models.append(SupportedModel(model_name=name, max_context_length=None, training=caps, sampling=caps))
        return GetServerCapabilitiesResponse(supported_models=models)

    async def get_server_capabilities_async(self) -> GetServerCapabilitiesResponse:
        return await asyncio.to_thread(self.get_server_capabilities)

    def create_lora_training_client(self, base_model: str, rank: int = 32, seed: int | None = None,
                                    train_mlp: bool = True, train_attn: bool = True,
                                    train_unembed: bool = True) -> "TrainingClient":
        from helpers.engine.training import LoraLayout, LoraRun

        if rank not in range(4, 65):
            raise ValidationError(f"rank must be in [4, 64]. Got {rank}", code="validation.invalid_lora_rank")
        host = get_host(_known_model(base_model))
        layout = LoraLayout(base_model, rank, train_mlp, train_attn, train_unembed)
        run = host.call(lambda: LoraRun(host, layout, seed)).result()
        return TrainingClient(host, run)

    async def create_lora_training_client_async(self, base_model: str, rank: int = 32, seed: int | None = None,
                                                train_mlp: bool = True, train_attn: bool = True,
                                                train_unembed: bool = True) -> "TrainingClient":
        return await asyncio.to_thread(self.create_lora_training_client, base_model, rank, seed, train_mlp,
                                       train_attn, train_unembed)

    def create_sampling_client(self, base_model: str, model_path: str | None = None) -> "SamplingClient":
        from helpers.engine.training import read_meta, snapshot_from_disk

        host = get_host(_known_model(base_model))
        if model_path is None:
            return SamplingClient(host, None)
        directory = resolve_path(model_path)
        meta = read_meta(directory)
        if meta["base_model"] != base_model:
            raise ValidationError(
                f"{model_path} holds LoRA weights for {meta['base_model']!r}, not {base_model!r}",
                code="validation.checkpoint_config_mismatch",
            )
        snapshot = host.call(lambda: snapshot_from_disk(host, directory)).result()
        return SamplingClient(host, snapshot)

    async def create_sampling_client_async(self, base_model: str, model_path: str | None = None) -> "SamplingClient":
        return await asyncio.to_thread(self.create_sampling_client, base_model, model_path)

    def create_training_client_from_state(self, path: str) -> "TrainingClient":
        return self._from_state(path, with_optimizer=False)

    async def create_training_client_from_state_async(self, path: str) -> "TrainingClient":
        return await asyncio.to_thread(self._from_state, path, False)

    def create_training_client_from_state_with_optimizer(self, path: str) -> "TrainingClient":
        return self._from_state(path, with_optimizer=True)

    async def create_training_client_from_state_with_optimizer_async(self, path: str) -> "TrainingClient":
        return await asyncio.to_thread(self._from_state, path, True)

    def _from_state(self, path: str, with_optimizer: bool) -> "TrainingClient":
        from helpers.engine.training import read_meta

        meta = read_meta(resolve_path(path))
        client = self.create_lora_training_client(meta["base_model"], rank=int(meta["rank"]),
                                                  train_mlp=meta["train_mlp"], train_attn=meta["train_attn"],
                                                  train_unembed=meta["train_unembed"])
        loader = client.load_state_with_optimizer if with_optimizer else client.load_state
        loader(path).result()
        return client


class SamplingClient:
    """Samples from the base model (adapter None) or from a frozen LoRA snapshot."""

    def __init__(self, host: ModelHost, adapter: AdapterSnapshot | None) -> None:
        self._host = host
        self._adapter = adapter
        self.model_id = host.name

    def sample(self, prompt: ModelInput, num_samples: int = 1,
               sampling_params: SamplingParams = _DEFAULT_SAMPLING_PARAMS, include_prompt_logprobs: bool = False,
               topk_prompt_logprobs: int = 0, return_text: bool = True) -> APIFuture[SampleResponse]:
        ids = self._check_prompt(prompt)
        if topk_prompt_logprobs:
            raise ValidationError("the local engine does not return top-k prompt logprobs; pass 0",
                                  code="validation.invalid_sampling_request")
        if num_samples < 1:
            raise ValidationError("num_samples must be at least 1", code="validation.invalid_sampling_request")
        validate_params(sampling_params, len(ids), self._host.max_context)
        split_stop(sampling_params.stop)
        job = SampleJob(ids, num_samples, sampling_params, self._adapter, include_prompt_logprobs, return_text)
        return _wrap(self._host.sample(job))

    async def sample_async(self, prompt: ModelInput, num_samples: int = 1,
                           sampling_params: SamplingParams = _DEFAULT_SAMPLING_PARAMS,
                           include_prompt_logprobs: bool = False, topk_prompt_logprobs: int = 0,
                           return_text: bool = True) -> SampleResponse:
        return await self.sample(prompt, num_samples, sampling_params, include_prompt_logprobs,
                                 topk_prompt_logprobs, return_text)

    def compute_logprobs(self, prompt: ModelInput) -> APIFuture[list[float | None]]:
        from helpers.engine.sampler import prompt_logprobs

        ids = self._check_prompt(prompt)
        host, adapter = self._host, self._adapter

        def work():
            with host.adapter_context(adapter):
                return prompt_logprobs(host, ids)

        return _wrap(host.call(work))

    async def compute_logprobs_async(self, prompt: ModelInput) -> list[float | None]:
        return await self.compute_logprobs(prompt)

    def get_tokenizer(self) -> object:
        return self._host.tokenizer

    @staticmethod
    def _check_prompt(prompt: ModelInput) -> list[int]:
        if prompt.is_empty:
            raise ValidationError("prompt cannot be empty", code="validation.empty_prompt")
        if prompt.has_images:
            raise ValidationError("the local engine serves text-only models", code="validation.invalid_sampling_request")
        return prompt.to_ints()


def _release_run(host: ModelHost, run: Any) -> None:
    """Queue the removal of a dropped client's adapter (never waits: this may run inside the worker)."""
    host.call(run.release)


class TrainingClient:
    """One LoRA training run on the local model host.

    The run's adapter lives in the host's shared model; when the client is garbage-collected the
    adapter is deleted there, so a kernel that creates many training clients does not keep every
    one's weights (sampling clients hold their own copies and keep working).
    """

    def __init__(self, host: ModelHost, run: Any) -> None:
        self._host = host
        self._run = run
        self.model_id = host.name
        self.training_run_cuid = run.run_id
        self._limits = TrainingLimits(max_batch_size=None, max_tokens_per_request=None, max_seq_len=host.max_context)
        self._release = weakref.finalize(self, _release_run, host, run)
        self._release.atexit = False

    # -- forward passes ------------------------------------------------------------------
    def _submit_forward(self, data, loss_fn, loss_fn_config, auto_shift, backward) -> APIFuture[ForwardBackwardOutput]:
        from helpers.engine import losses

        if not data:
            raise ValidationError("training data cannot be empty", code="validation.empty_training_data")
        plan_training_batch(data, loss_fn=loss_fn, auto_shift=auto_shift, limits=self._limits,
                            tokenizer_vocab_size=len(self._host.tokenizer))
        loss_fn = loss_fn.strip().lower()
        losses.check_config(loss_fn, loss_fn_config)
        run = self._run
        data = list(data)
        return _wrap(self._host.call(lambda: run.forward(data, loss_fn, loss_fn_config, auto_shift, backward)))

    def forward(self, data: list[Datum], loss_fn: str = "cross_entropy",
                loss_fn_config: dict[str, object] | None = None,
                auto_shift: bool = False) -> APIFuture[ForwardBackwardOutput]:
        return self._submit_forward(data, loss_fn, loss_fn_config, auto_shift, backward=False)

    async def forward_async(self, data: list[Datum], loss_fn: str = "cross_entropy",
                            loss_fn_config: dict[str, object] | None = None,
                            auto_shift: bool = False) -> APIFuture[ForwardBackwardOutput]:
        return self.forward(data, loss_fn, loss_fn_config, auto_shift)

    def forward_backward(self, data: list[Datum], loss_fn: str = "cross_entropy",
                         loss_fn_config: dict[str, object] | None = None,
                         auto_shift: bool = False) -> APIFuture[ForwardBackwardOutput]:
        return self._submit_forward(data, loss_fn, loss_fn_config, auto_shift, backward=True)

    async def forward_backward_async(self, data: list[Datum], loss_fn: str = "cross_entropy",
                                     loss_fn_config: dict[str, object] | None = None,
                                     auto_shift: bool = False) -> APIFuture[ForwardBackwardOutput]:
        return self.forward_backward(data, loss_fn, loss_fn_config, auto_shift)

    def forward_backward_custom(self, data: list[Datum], loss_fn: Callable,
                                loss_fn_config: dict[str, object] | None = None) -> APIFuture[ForwardBackwardOutput]:
        """Same algorithm as the SDK: forward for logprobs, local autograd, then a linear
        cross-entropy surrogate whose weights are the negated gradients. The surrogate goes
        through the same mean over datums as `cross_entropy`, so the applied gradient is
        (1/N) * grad(custom loss) for N datums, here as on the remote service."""
        import torch
        from pytrio.client.training import _invoke_custom_loss

        if not data:
            raise ValidationError("training data cannot be empty", code="validation.empty_training_data")
        forward = self.forward(data, loss_fn="cross_entropy").result()
        leaves = []
        for output in forward.loss_fn_outputs:
            raw = output["logprobs"]
            leaves.append(torch.tensor(raw.data, dtype=torch.float32).reshape(raw.shape).requires_grad_(True))
        loss, custom_metrics = _invoke_custom_loss(loss_fn, data, leaves, loss_fn_config)
        loss.backward()
        surrogate = []
        for datum, leaf in zip(data, leaves, strict=True):
            if leaf.grad is None:
                raise ValidationError("Custom loss output has no gradients. Ensure loss_fn returns a tensor with "
                                      "gradients.", code="validation.missing_custom_loss_gradient")
            surrogate.append(Datum(model_input=datum.model_input, loss_fn_inputs={
                "target_tokens": datum.loss_fn_inputs["target_tokens"],
                "weights": TensorData.from_torch((-leaf.grad).cpu()),
            }))
        return self.forward_backward(surrogate, loss_fn="cross_entropy").map(
            lambda out: ForwardBackwardOutput(loss_fn_outputs=out.loss_fn_outputs,
                                              metrics={**out.metrics, **custom_metrics})
        )

    async def forward_backward_custom_async(self, data: list[Datum], loss_fn: Callable,
                                            loss_fn_config: dict[str, object] | None = None
                                            ) -> APIFuture[ForwardBackwardOutput]:
        return await asyncio.to_thread(self.forward_backward_custom, data, loss_fn, loss_fn_config)

    # -- optimizer -----------------------------------------------------------------------------
    def optim_step(self, adam_params: AdamParams) -> APIFuture[OptimStepResponse]:
        run = self._run
        return _wrap(self._host.call(lambda: run.optim_step(adam_params)))

    async def optim_step_async(self, adam_params: AdamParams) -> APIFuture[OptimStepResponse]:
        return self.optim_step(adam_params)

    # -- checkpoints -------------------------------------------------------------------------
    def _target(self, kind: str, name: str, ttl_seconds, overwrite: bool) -> tuple[str, Path]:
        name = build_trainer_save_payload(name, ttl_seconds, overwrite=overwrite).name  # SDK's name rules
        uri = f"{URI_SCHEME}{self._run.run_id}/{kind}/{name}"
        directory = resolve_path(uri)
        if directory.exists() and not overwrite:
            raise ValidationError(f"checkpoint {uri} already exists; pass overwrite=True or another name",
                                  code="validation.checkpoint_exists")
        return uri, directory

    def save_state(self, name: str, ttl_seconds: int | None = None,
                   overwrite: bool = False) -> APIFuture[SaveWeightsResponse]:
        uri, directory = self._target("state", name, ttl_seconds, overwrite)
        run = self._run
        return _wrap(self._host.call(lambda: run.save(directory, with_optimizer=True)),
                     lambda size: SaveWeightsResponse(path=uri, model=self.model_id, size=size))

    async def save_state_async(self, name: str, ttl_seconds: int | None = None,
                               overwrite: bool = False) -> APIFuture[SaveWeightsResponse]:
        return self.save_state(name, ttl_seconds, overwrite)

    def save_weights_for_sampler(self, name: str,
                                 ttl_seconds: int | None = None) -> APIFuture[SaveWeightsForSamplerResponse]:
        uri, directory = self._target("weights", name, ttl_seconds, overwrite=True)
        run = self._run
        return _wrap(self._host.call(lambda: run.save(directory, with_optimizer=False)),
                     lambda size: SaveWeightsForSamplerResponse(path=uri, model=self.model_id, size=size))

    async def save_weights_for_sampler_async(self, name: str, ttl_seconds: int | None = None
                                             ) -> APIFuture[SaveWeightsForSamplerResponse]:
        return self.save_weights_for_sampler(name, ttl_seconds)

    def _load(self, path: str, with_optimizer: bool) -> APIFuture[dict[str, object]]:
        from helpers.engine.training import check_tokenizer, layout_of, read_meta

        if self._run.started:
            raise ValidationError("load_state cannot be called after training has started. Call load_state "
                                  "before the first training operation.", code="validation.already_initialized")
        directory = resolve_path(path)
        meta = read_meta(directory)
        check_tokenizer(meta, self._run.host, path)
        source = layout_of(meta)
        mismatches = [
            {"field": f, "target": getattr(self._run.layout, f), "source": getattr(source, f)}
            for f in ("base_model", "rank", "train_mlp", "train_attn", "train_unembed")
            if getattr(self._run.layout, f) != getattr(source, f)
        ]
        if mismatches:
            summary = ", ".join(f"{m['field']} (target={m['target']!r}, source={m['source']!r})" for m in mismatches)
            raise ValidationError(f"Checkpoint configuration is incompatible: {summary}.",
                                  code="validation.checkpoint_config_mismatch", details={"mismatches": mismatches})
        run = self._run
        return _wrap(self._host.call(lambda: run.load(directory, with_optimizer)), lambda _: {})

    def load_state(self, path: str) -> APIFuture[dict[str, object]]:
        return self._load(path, with_optimizer=False)

    async def load_state_async(self, path: str) -> APIFuture[dict[str, object]]:
        return self.load_state(path)

    def load_state_with_optimizer(self, path: str) -> APIFuture[dict[str, object]]:
        return self._load(path, with_optimizer=True)

    async def load_state_with_optimizer_async(self, path: str) -> APIFuture[dict[str, object]]:
        return self.load_state_with_optimizer(path)

    # -- samplers ------------------------------------------------------------------------------
    def save_weights_and_get_sampling_client(self) -> SamplingClient:
        """An in-memory snapshot of the current adapter (nothing written to disk)."""
        run = self._run
        return SamplingClient(self._host, self._host.call(run.snapshot).result())

    async def save_weights_and_get_sampling_client_async(self) -> SamplingClient:
        run = self._run
        snapshot = await APIFuture(self._host.call(run.snapshot))
        return SamplingClient(self._host, snapshot)

    def create_sampling_client(self, model_path: str) -> SamplingClient:
        return ServiceClient().create_sampling_client(self.model_id, model_path)

    async def create_sampling_client_async(self, model_path: str) -> SamplingClient:
        return await asyncio.to_thread(self.create_sampling_client, model_path)

    def get_tokenizer(self) -> object:
        return self._host.tokenizer
