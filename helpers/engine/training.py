"""Worker-side training for one LoRA run: forward(_backward), optimizer step, checkpoints.

Everything here runs on the model host's worker thread (see host.py). Batches were already
validated by the SDK's own planner in the client, so errors match the remote service.

A checkpoint directory is trusted only after checks: ``meta.json`` is written last (its presence
marks a complete save) and records a SHA-256 of every other file; loading verifies those sums,
reads the tensors, and refuses NaN/inf values or shapes the LoRA layout does not expect. Every
failure is a ``DamagedCheckpoint`` that names the file, raised before any weight is changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from pytrio.types import (
    AdamParams,
    Datum,
    ForwardBackwardOutput,
    OptimStepResponse,
    TensorData,
)

from helpers.engine import losses
from helpers.engine.host import AdapterSnapshot, ModelHost
from helpers.engine.logprobs import sequence_logprobs

ADAPTER_FILE = "adapter.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
META_FILE = "meta.json"


class OutOfMemory(RuntimeError):
    """A micro-batch did not fit in device memory (its rows are retried in two halves)."""


class DamagedCheckpoint(ValueError):
    """A checkpoint file that cannot be trusted: unreadable, truncated, altered, or not finite."""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_file(directory: Path, name: str, meta: dict) -> Path:
    """``directory/name`` if it exists and matches the checksum saved with it (older saves have none)."""
    path = directory / name
    if not path.is_file():
        raise DamagedCheckpoint(f"{path} is missing")
    saved = (meta.get("sha256") or {}).get(name)
    if saved is not None and file_sha256(path) != saved:
        raise DamagedCheckpoint(f"{path} does not match the SHA-256 written when it was saved "
                                "(truncated or changed since); use an earlier checkpoint")
    return path


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


@dataclass(frozen=True)
class LoraLayout:
    base_model: str
    rank: int
    train_mlp: bool
    train_attn: bool
    train_unembed: bool

    @property
    def slot(self) -> str:
        """Name of the sampler adapter slot shared by every snapshot with this layout."""
        flags = "".join(str(int(f)) for f in (self.train_mlp, self.train_attn, self.train_unembed))
        return f"sampler_r{self.rank}_{flags}"


RECOMPUTE_SETTING = "COURSE_ENGINE_RECOMPUTE"


def recompute() -> bool:
    """COURSE_ENGINE_RECOMPUTE (default 1): recompute each decoder layer's activations in backward
    instead of keeping them. Off, backward skips one forward of every layer (about a quarter of a
    training step's arithmetic) for activation memory that grows with the layers, so micro-batches
    are smaller; the gradient is the same either way."""
    raw = os.environ.get(RECOMPUTE_SETTING, "1").strip()
    if raw not in {"0", "1"}:
        raise ValueError(f"{RECOMPUTE_SETTING}={raw!r}: choose 1 (recompute activations, the default) or 0 (keep them)")
    return raw == "1"


NON_FINITE_SETTING = "COURSE_ENGINE_NON_FINITE_DIR"


def non_finite_dir() -> Path | None:
    """COURSE_ENGINE_NON_FINITE_DIR (unset: off): where the first micro-batch whose backward made the
    gradient non-finite is kept, once per run, with the adapter it ran on, so that the rare skipped
    step can be replayed and traced on another machine (token ids, loss inputs, and the LoRA weights:
    about an exported adapter's size)."""
    raw = os.environ.get(NON_FINITE_SETTING, "").strip()
    return Path(raw) if raw else None


def tokens_per_micro_batch(device: str) -> int:
    """Padded tokens per internal micro-batch (bounds activation memory, not the maths): every
    layer's activations are kept without recomputation, so a micro-batch holds a quarter as many."""
    budget = 32768 if device == "cuda" else 2048
    return budget if recompute() else budget // 4


class LoraRun:
    """The trainable state of one training client (worker thread only)."""

    def __init__(self, host: ModelHost, layout: LoraLayout, seed: int | None) -> None:
        self.host = host
        self.layout = layout
        self.run_id = uuid.uuid4().hex[:12]
        self.name = f"run_{self.run_id}"
        self.started = False  # a training operation ran (load_state is refused after)
        self.steps = 0
        cfg = host.lora_config(layout.rank, layout.train_mlp, layout.train_attn, layout.train_unembed)
        if recompute():
            _enable_activation_checkpointing(host.model)
        host.add_adapter(self.name, cfg, seed)
        ensure_slot(host, layout)
        self.params = [p for n, p in host.peft.named_parameters() if f".{self.name}." in n]
        self.param_names = [n for n, p in host.peft.named_parameters() if f".{self.name}." in n]
        self.optimizer = None
        self.non_finite: str | None = None  # the first micro-batch since the last step whose backward was not finite
        self.kept_non_finite = False  # that micro-batch was saved for a replay (non_finite_dir): once a run

    # -- forward / backward --------------------------------------------------------------
    def activate(self, grad: bool) -> None:
        self.host.peft.set_adapter(self.name)
        for p in self.params:
            p.requires_grad_(grad)

    def forward(self, data: list[Datum], loss_fn: str, loss_fn_config: dict | None,
                auto_shift: bool, backward: bool) -> ForwardBackwardOutput:
        import torch

        config = losses.check_config(loss_fn, loss_fn_config)
        self.activate(grad=backward)
        self.started = True
        prepared = [_prepare(d, loss_fn, auto_shift) for d in data]
        total = len(prepared)
        outputs: list = [None] * total
        loss_sum, token_count = 0.0, 0
        pending = _pack(prepared, tokens_per_micro_batch(self.host.device))
        while pending:
            batch = pending.pop(0)
            try:
                per_datum, active, lp = self._micro_batch([prepared[i] for i in batch], loss_fn, config,
                                                          backward, total)
            except OutOfMemory as error:
                if len(batch) == 1:
                    raise error.__cause__  # one row that does not fit: the device's own message
                # several runs share one GPU: the same rows in two halves need about half the memory, and
                # the datums' losses add up, so the gradient is the same
                half = len(batch) // 2
                pending[:0] = [batch[:half], batch[half:]]
                continue
            loss_sum += float(per_datum.sum())
            token_count += active
            for row, i in enumerate(batch):
                n = prepared[i]["length"]
                values = lp[row, :n]
                if auto_shift:  # report against the caller's (unshifted) labels
                    values = torch.cat([values.new_zeros(1), values[: n - 1]])
                outputs[i] = {"logprobs": TensorData.from_torch(values.contiguous())}
        return ForwardBackwardOutput(
            loss_fn_outputs=outputs,
            metrics={
                "loss_sum": loss_sum,
                "loss_mean": loss_sum / token_count if token_count else 0.0,
                "token_count": float(token_count),
            },
        )

    def _micro_batch(self, items: list[dict], loss_fn: str, config, backward: bool, total: int):
        """One packed micro-batch: (per-datum losses, trained tokens, logprobs on the CPU). Out of
        device memory, the gradients are put back as they were before it and `OutOfMemory` is raised."""
        import torch

        tensors = _collate(items, self.host.device)
        model = self.host.peft
        before = [None if p.grad is None else p.grad.clone() for p in self.params] if backward else None
        if backward:
            model.train()  # enables gradient checkpointing of the decoder layers (when recompute() is on)
        try:
            with torch.set_grad_enabled(backward):
                per_datum, lp = micro_batch_losses(model, tensors, loss_fn, config)
                if backward:
                    (per_datum.sum() / total).backward()
                    if self.non_finite is None:
                        self.non_finite = self._non_finite_after(tensors, per_datum.detach(), lp.detach())
                        if self.non_finite is not None:
                            self._keep_non_finite(tensors, loss_fn, config)
        except torch.OutOfMemoryError as error:
            del tensors
            if before is not None:  # a backward cut short may have added part of this batch's gradient
                for p, grad in zip(self.params, before):
                    p.grad = grad
            if self.host.device == "cuda":
                torch.cuda.empty_cache()
            raise OutOfMemory(f"{len(items)} rows did not fit in device memory") from error
        finally:
            model.eval()
        return per_datum.detach(), int(tensors["active"].sum()), lp.detach().float().cpu()

    def _non_finite_after(self, tensors: dict, per_datum, lp) -> str | None:
        """None while the accumulated gradient is finite; else what the micro-batch that made it not
        finite looked like (its shape, losses and log-probs, the parameters hit): one fused norm and
        one device sync per micro-batch, so a rare bad step can be traced to its rows."""
        import torch

        grads = [(name, p.grad) for name, p in zip(self.param_names, self.params) if p.grad is not None]
        if not grads or bool(torch.isfinite(torch.stack(torch._foreach_norm([g for _, g in grads]))).all()):
            return None
        hit = [name for name, g in grads if not bool(torch.isfinite(g).all())]
        kinds = "NaN" if any(bool(torch.isnan(g).any()) for _, g in grads) else "inf"
        trained = lp[tensors["active"] > 0]
        return (f"a micro-batch of {tensors['ids'].shape[0]} rows x {tensors['ids'].shape[1]} tokens "
                f"({int(tensors['active'].sum())} trained): {kinds} in {len(hit)} of {len(grads)} LoRA tensors "
                f"(first {', '.join(hit[:3])}); its losses {float(per_datum.min()):.4g}..{float(per_datum.max()):.4g}, "
                f"trained log-probs from {float(trained.min()) if trained.numel() else float('nan'):.4g}")

    def _keep_non_finite(self, tensors: dict, loss_fn: str, config) -> None:
        """Save what replays this micro-batch's backward (non_finite_dir): its tensors, the loss and its
        settings, the LoRA weights it ran on (the gradient before it was finite); a run's first only."""
        folder = non_finite_dir()
        if folder is None or self.kept_non_finite:
            return
        import torch

        self.kept_non_finite = True
        path = folder / f"{self.name}_step{self.steps:05d}.pt"
        try:  # a diagnostic: a full disk or a read-only folder must not stop the training step
            folder.mkdir(parents=True, exist_ok=True)
            torch.save({"description": self.non_finite, "step": self.steps, "loss_fn": loss_fn, "run": self.name,
                        "layout": dataclasses.asdict(self.layout),
                        "loss_config": dict(config), "base_model": self.host.name, "dtype": str(self.host.dtype),
                        "tensors": {k: v.detach().cpu() for k, v in tensors.items()},
                        "lora": {n: p.detach().cpu() for n, p in zip(self.param_names, self.params)}}, path)
        except OSError as error:
            print(f"engine: could not keep the non-finite micro-batch in {path}: {error}", file=sys.stderr, flush=True)
            return
        print(f"engine: kept the non-finite micro-batch in {path}", file=sys.stderr, flush=True)

    # -- optimizer -------------------------------------------------------------------------
    def optim_step(self, adam: AdamParams) -> OptimStepResponse:
        import torch

        self.started = True
        if self.optimizer is None:
            self.optimizer = torch.optim.AdamW(self.params, lr=adam.learning_rate)
        for group in self.optimizer.param_groups:
            group.update(lr=adam.learning_rate, betas=(adam.beta1, adam.beta2), eps=adam.eps,
                         weight_decay=adam.weight_decay)
        with_grad = [p for p in self.params if p.grad is not None]
        grad_norm = 0.0
        if with_grad:
            max_norm = adam.grad_clip_norm if adam.grad_clip_norm > 0 else float("inf")
            grad_norm = float(torch.nn.utils.clip_grad_norm_(with_grad, max_norm))
        finite = math.isfinite(grad_norm)
        if finite:
            self.optimizer.step()
        elif self.non_finite:
            print(f"engine: non-finite gradient, first after {self.non_finite}", file=sys.stderr, flush=True)
        self.non_finite = None
        # A NaN/inf gradient would write NaN into every LoRA weight (seen 2026-11-30: GRPO step 29,
        # every later rollout invalid). Drop it; the adapter and Adam's moments stay as they were.
        self.optimizer.zero_grad(set_to_none=True)
        self.steps += 1
        return OptimStepResponse(metrics={"grad_norm": grad_norm, "learning_rate": adam.learning_rate,
                                          "step": float(self.steps), "skipped_non_finite": float(not finite)})

    # -- weights -----------------------------------------------------------------------------
    def snapshot(self) -> AdapterSnapshot:
        return AdapterSnapshot(slot=self.layout.slot, tensors=self.host.adapter_state(self.name))

    def save(self, directory: Path, with_optimizer: bool) -> int:
        import torch
        from safetensors.torch import save_file

        from helpers.models import tokenizer_fingerprint

        directory.mkdir(parents=True, exist_ok=True)
        (directory / META_FILE).unlink(missing_ok=True)  # until the new one is written, not a checkpoint
        # keys are module paths without the adapter name, so any run with the same layout can load them
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.host.adapter_state(self.name).items()}
        save_file(tensors, str(directory / ADAPTER_FILE))
        files = [ADAPTER_FILE]
        if with_optimizer and self.optimizer is not None:
            torch.save(self.optimizer.state_dict(), directory / OPTIMIZER_FILE)
            files.append(OPTIMIZER_FILE)
        meta = {"format": "helpers.engine/lora-v1", **self.layout.__dict__, "lora_alpha": 32,
                "steps": self.steps, "has_optimizer": bool(with_optimizer and self.optimizer),
                "tokenizer": tokenizer_fingerprint(self.host.tokenizer),
                "sha256": {name: file_sha256(directory / name) for name in files}}
        _write_atomic(directory / META_FILE, json.dumps(meta, indent=1))
        return sum(f.stat().st_size for f in directory.iterdir() if f.is_file())

    def load(self, directory: Path, with_optimizer: bool) -> None:
        import torch

        meta = read_meta(directory)
        if with_optimizer:
            if not (directory / OPTIMIZER_FILE).is_file():
                raise FileNotFoundError(f"{directory} has no optimizer state; save it with save_state()")
            optimizer_file = verify_file(directory, OPTIMIZER_FILE, meta)  # before any weight changes
        tensors = read_adapter(directory, self.host, meta, expected=self.host.adapter_shapes(self.name))
        if with_optimizer:
            try:
                # weights_only: a checkpoint is data; never run code from it, whatever torch's default
                state = torch.load(optimizer_file, map_location=self.host.device, weights_only=True)
                optimizer = torch.optim.AdamW(self.params, lr=1e-4)
                optimizer.load_state_dict(state)
            except Exception as exc:
                raise DamagedCheckpoint(f"{optimizer_file} cannot be loaded ({type(exc).__name__}: "
                                        f"{str(exc)[:200]})") from None
            self.host.load_adapter_state(self.name, tensors)
            self.optimizer = optimizer
        else:
            self.host.load_adapter_state(self.name, tensors)
        self.started = True

    def release(self) -> None:
        """Remove this run's adapter from the shared model and drop its parameters and moments."""
        self.host.delete_adapter(self.name)
        self.params, self.param_names, self.optimizer = [], [], None


def _enable_activation_checkpointing(model) -> None:
    """Recompute each decoder layer in backward: activation memory ~ one layer, not all of them."""
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.x
        if not model.is_activation_checkpointing:
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    elif not model.is_gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


def ensure_slot(host: ModelHost, layout: LoraLayout) -> str:
    if host.peft is None or layout.slot not in host.peft.peft_config:
        cfg = host.lora_config(layout.rank, layout.train_mlp, layout.train_attn, layout.train_unembed)
        host.add_adapter(layout.slot, cfg, seed=0)
    return layout.slot


def read_meta(directory: Path) -> dict:
    path = directory / META_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no LoRA checkpoint at {directory} (missing {META_FILE})")
    try:
        meta = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DamagedCheckpoint(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise DamagedCheckpoint(f"{path} is not a JSON object")
    return meta


def check_tokenizer(meta: dict, host: ModelHost, path) -> None:
    """Refuse weights trained with a tokenizer that splits the template markers differently."""
    from pytrio.errors.base import ValidationError

    from helpers.models import tokenizer_fingerprint

    saved = meta.get("tokenizer")
    if not saved:
        return  # checkpoints written before fingerprints existed
    current = tokenizer_fingerprint(host.tokenizer)
    differ = {m: (ids, current.get(m)) for m, ids in saved.items() if current.get(m) != ids}
    if differ:
        detail = "; ".join(f"{m}: trained {a}, here {b}" for m, (a, b) in differ.items())
        raise ValidationError(
            f"{path} was trained with a tokenizer that splits the chat-template markers differently "
            f"({detail}). Its policy would see prompts it never saw. Use weights trained with this "
            f"model cache, or re-provision the model (python -m helpers setup) where it was trained.",
            code="validation.checkpoint_config_mismatch")


def layout_of(meta: dict) -> LoraLayout:
    return LoraLayout(meta["base_model"], int(meta["rank"]), bool(meta["train_mlp"]),
                      bool(meta["train_attn"]), bool(meta["train_unembed"]))


def read_adapter(directory: Path, host: ModelHost, meta: dict | None = None,
                 expected: dict[str, tuple[int, ...]] | None = None) -> dict:
    """The adapter's tensors on the host's device, after the checks above (DamagedCheckpoint)."""
    import torch
    from safetensors.torch import load_file

    meta = read_meta(directory) if meta is None else meta
    path = verify_file(directory, ADAPTER_FILE, meta)
    try:
        tensors = load_file(str(path))
    except Exception as exc:  # SafetensorError, OSError: a truncated or foreign file
        raise DamagedCheckpoint(f"{path} cannot be read ({type(exc).__name__}: {str(exc)[:200]})") from None
    for key, tensor in tensors.items():
        if not bool(torch.isfinite(tensor).all()):
            raise DamagedCheckpoint(f"{path}: tensor {key} holds NaN or infinite values")
    if expected is not None:
        if set(tensors) != set(expected):
            missing, extra = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
            raise DamagedCheckpoint(f"{path} does not hold this LoRA layout's tensors "
                                    f"(missing {missing[:3]}, unexpected {extra[:3]})")
        for key, tensor in tensors.items():
            if tuple(tensor.shape) != tuple(expected[key]):
                raise DamagedCheckpoint(f"{path}: tensor {key} has shape {tuple(tensor.shape)}, "
                                        f"the LoRA layout expects {tuple(expected[key])}")
    return {k: v.to(host.device, host.dtype) for k, v in tensors.items()}


def snapshot_from_disk(host: ModelHost, directory: Path) -> AdapterSnapshot:
    meta = read_meta(directory)
    check_tokenizer(meta, host, directory)
    layout = layout_of(meta)
    slot = ensure_slot(host, layout)
    return AdapterSnapshot(slot=slot, tensors=read_adapter(directory, host, meta, expected=host.adapter_shapes(slot)))


# -- batching helpers --------------------------------------------------------------------------
def _prepare(datum: Datum, loss_fn: str, auto_shift: bool) -> dict:
    ids = datum.model_input.to_ints()
    n = len(ids)
    inputs = datum.loss_fn_inputs
    targets = [int(t) for t in inputs["target_tokens"].data]
    if loss_fn == "cross_entropy":
        extra = {"weights": list(inputs["weights"].data) if "weights" in inputs else [1.0] * n}
    else:
        extra = {"logprobs": list(inputs["logprobs"].data), "advantages": list(inputs["advantages"].data)}
    if auto_shift:  # position t predicts label t + 1; the last position has no label
        targets = targets[1:] + [-100]
        extra = {k: v[1:] + [0.0] for k, v in extra.items()}
    if loss_fn == "cross_entropy":
        active = [float(t != -100 and w != 0.0) for t, w in zip(targets, extra["weights"])]
    else:
        active = [float(t != -100) for t in targets]
    return {"ids": ids, "targets": targets, "active": active, "length": n, **extra}


def _pack(prepared: list[dict], budget: int) -> list[list[int]]:
    """Indices of `prepared` in micro-batches of at most `budget` padded tokens. Rows of similar
    length go together (a row is padded to the longest of its micro-batch)."""
    batches, current, longest = [], [], 0
    for i in sorted(range(len(prepared)), key=lambda i: prepared[i]["length"]):
        item = prepared[i]
        longest_if = max(longest, item["length"])
        if current and longest_if * (len(current) + 1) > budget:
            batches.append(current)
            current, longest_if = [], item["length"]
        current.append(i)
        longest = longest_if
    if current:
        batches.append(current)
    return batches


def micro_batch_losses(model, tensors: dict, loss_fn: str, config: dict):
    """(per-datum losses, per-token log-probs) of one collated micro-batch: the forward a training step
    differentiates, shared with the replay of a kept non-finite micro-batch."""
    lp = sequence_logprobs(model, tensors["ids"], tensors["mask"], tensors["targets"],
                           trained=losses.trained_positions(loss_fn, tensors))
    return losses.token_losses(loss_fn, lp, tensors, config).sum(dim=1), lp


def _collate(items: list[dict], device: str) -> dict:
    import torch

    width = max(it["length"] for it in items)

    def pad(key, fill, dtype):
        rows = [it[key] + [fill] * (width - it["length"]) for it in items]
        return torch.tensor(rows, dtype=dtype, device=device)

    out = {
        "ids": pad("ids", 0, torch.long),
        "targets": pad("targets", -100, torch.long),
        "active": pad("active", 0.0, torch.float32),
        "mask": torch.tensor([[1] * it["length"] + [0] * (width - it["length"]) for it in items], device=device),
    }
    for key in ("weights", "logprobs", "advantages"):
        if key in items[0]:
            out[key] = pad(key, 0.0, torch.float32)
    return out
