"""One base model per process, and the single worker thread that runs everything on it.

Sampling and training share the base weights: LoRA adapters (peft) hold the only trainable
tensors, and sampler snapshots are plain dicts of adapter tensors copied into a per-run
"sampler slot" just before they are used. All model work happens on one thread per model,
so adapters can be switched safely; concurrent sample requests that arrive within a few
milliseconds are decoded together in one batch.
"""

from __future__ import annotations

import atexit
import itertools
import queue
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable

from helpers import config

_HOSTS: dict[tuple[str, str, str], "ModelHost"] = {}
_HOSTS_LOCK = threading.Lock()
_STOP = object()  # the worker's last job: it returns, so no thread is inside torch at interpreter exit


def shutdown_hosts(timeout: float = 60.0) -> None:
    """Stop every host's worker thread after the work queued before (run at interpreter exit).

    A daemon worker still alive when the interpreter tears down can be inside a CUDA or autograd
    call; C++ then aborts ("terminate called without an active exception") and a command that
    finished its work exits with a non-zero status.
    """
    with _HOSTS_LOCK:
        hosts = list(_HOSTS.values())
    for host in hosts:
        host.close(timeout)


atexit.register(shutdown_hosts)

ATTN_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP_MODULES = ("gate_proj", "up_proj", "down_proj")
UNEMBED_MODULES = ("lm_head",)
LORA_ALPHA = 32  # fixed alpha, so the LoRA scale is alpha / rank


def get_host(name: str, device: str | None = None, dtype=None) -> "ModelHost":
    """The process-wide host of `name` (loaded once, in seconds, from the model cache)."""
    device = device or config.device()
    dtype = dtype or config.dtype()
    key = (name, device, str(dtype))
    with _HOSTS_LOCK:
        host = _HOSTS.get(key)
        if host is None:
            host = ModelHost(name, device, dtype)
            _HOSTS[key] = host
        return host


@dataclass
class SampleJob:
    prompt: list[int]
    num_samples: int
    params: Any  # pytrio SamplingParams
    adapter: Any  # None (base model) or an AdapterSnapshot
    include_prompt_logprobs: bool
    return_text: bool
    future: Future = field(default_factory=Future)


@dataclass
class CallJob:
    fn: Callable[[], Any]
    future: Future = field(default_factory=Future)


@dataclass
class AdapterSnapshot:
    """Frozen copy of one training run's adapter tensors (what a sampler loads)."""

    slot: str  # the sampler adapter slot with this snapshot's LoRA layout
    tensors: dict[str, Any]
    uid: int = field(default_factory=lambda: next(_SNAPSHOT_IDS))


_SNAPSHOT_IDS = itertools.count(1)


class ModelHost:
    """Base model + tokenizer + peft adapters + the worker thread that owns them."""

    batch_window_s = 0.005  # how long the worker waits for more sample requests
    max_batch_rows = 256

    @property
    def max_batch_tokens(self) -> int:
        """KV-cache budget of one decode batch, in rows x (prompt + max_tokens) tokens."""
        return 1 << 21 if self.device == "cuda" else 1 << 15

    def __init__(self, name: str, device: str, dtype) -> None:
        import torch

        from helpers import models

        if device == "cpu":
            _tame_cpu_allocator()
        self.name = name
        self.device = device
        self.dtype = dtype
        self.tokenizer = models.load_tokenizer(name)
        self.model = models.load_model(name, device=device, dtype=dtype)
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.peft = None  # PeftModel, created with the first training run
        self.loaded_slots: dict[str, int] = {}  # sampler slot -> snapshot uid loaded in it
        self.eos_ids = _eos_ids(self.tokenizer, self.model)
        self.max_context = int(getattr(self.model.config, "max_position_embeddings", 0) or 0) or None
        self.torch = torch
        self.stats = {"decode_batches": 0, "sample_requests": 0, "sampled_rows": 0}
        self._static_caches: dict = {}  # (rows, length) -> StaticCache, most recent last
        self._steps: dict = {}  # id(model) -> decode step (compiled on CUDA)
        self._graph_decoder = None  # helpers.engine.graphs.GraphDecoder, made on first use
        self.active_slot: str | None = None  # the sampler slot in use (None: the base model)
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name=f"engine-{name}", daemon=True)
        self._thread.start()

    # -- submission -------------------------------------------------------------------
    def call(self, fn: Callable[[], Any]) -> Future:
        """Run `fn` on the worker thread, after everything submitted before it."""
        job = CallJob(fn)
        self._queue.put(job)
        return job.future

    def sample(self, job: SampleJob) -> Future:
        self._queue.put(job)
        return job.future

    # -- worker -----------------------------------------------------------------------
    def close(self, timeout: float = 60.0) -> None:
        """Finish the queued work, then stop the worker thread (the host takes no work after)."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join(timeout)

    def _loop(self) -> None:
        deferred: list = []
        while True:
            job = deferred.pop(0) if deferred else self._queue.get()
            if job is _STOP:
                return
            if isinstance(job, CallJob):
                self._run_call(job)
                continue
            batch = [job]
            rows, tokens = job.num_samples, _kv_tokens(job)
            deadline = time.monotonic() + self.batch_window_s
            while rows < self.max_batch_rows:
                try:
                    nxt = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                fits = (rows + getattr(nxt, "num_samples", 0) <= self.max_batch_rows
                        and tokens + _kv_tokens(nxt) <= self.max_batch_tokens)
                if isinstance(nxt, SampleJob) and fits:
                    batch.append(nxt)
                    rows, tokens = rows + nxt.num_samples, tokens + _kv_tokens(nxt)
                else:  # keep submission order: a training call (or a full batch) ends the batch
                    deferred.append(nxt)
                    break
            self._run_samples(batch)

    def _run_call(self, job: CallJob) -> None:
        if not job.future.set_running_or_notify_cancel():
            return
        try:
            job.future.set_result(job.fn())
        except BaseException as error:  # noqa: BLE001 - handed to the caller's future
            job.future.set_exception(error)
        finally:
            if self.device == "cpu" and _LIBC is not None:
                _LIBC.malloc_trim(0)  # hand freed activation memory back to the OS

    def _run_samples(self, jobs: list[SampleJob]) -> None:
        from helpers.engine.sampler import run_sample_jobs

        live = [j for j in jobs if j.future.set_running_or_notify_cancel()]
        groups: dict[int, list[SampleJob]] = {}
        for j in live:
            groups.setdefault(0 if j.adapter is None else j.adapter.uid, []).append(j)
        for group in groups.values():
            try:
                with self.adapter_context(group[0].adapter):
                    results = run_sample_jobs(self, group)
                self.stats["decode_batches"] += 1
                self.stats["sample_requests"] += len(group)
                self.stats["sampled_rows"] += sum(j.num_samples for j in group)
                for j, r in zip(group, results):
                    j.future.set_result(r)
            except BaseException as error:  # noqa: BLE001
                for j in group:
                    if not j.future.done():
                        j.future.set_exception(error)

    # -- adapters (worker thread only) --------------------------------------------------
    def lora_config(self, rank: int, train_mlp: bool, train_attn: bool, train_unembed: bool):
        from peft import LoraConfig

        targets = []
        if train_attn:
            targets += ATTN_MODULES
        if train_mlp:
            targets += MLP_MODULES
        if train_unembed:
            targets += UNEMBED_MODULES
        if not targets:
            raise ValueError("at least one of train_mlp, train_attn, train_unembed must be True")
        return LoraConfig(r=rank, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules=targets, bias="none")

    def add_adapter(self, name: str, lora_config, seed: int | None) -> None:
        import warnings

        from peft import get_peft_model

        if seed is not None:
            self.torch.manual_seed(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tied lm_head / embedding notices
            if self.peft is None:
                self.peft = get_peft_model(self.model, lora_config, adapter_name=name)
            else:
                self.peft.add_adapter(name, lora_config)
        self.peft.eval()

    def delete_adapter(self, name: str) -> None:
        if self.peft is not None and name in self.peft.peft_config:
            others = [n for n in self.peft.peft_config if n != name]
            if others and name in self.peft.active_adapters:
                self.peft.set_adapter(others[0])  # every operation activates its own adapter anyway
            self.peft.delete_adapter(name)
            self.loaded_slots.pop(name, None)

    def adapter_state(self, name: str) -> dict[str, Any]:
        """The adapter's tensors, keyed by module path (a detached copy)."""
        state = {}
        for key, module in self.peft.named_modules():
            a = getattr(module, "lora_A", None)
            if a is not None and name in a:
                state[f"{key}.lora_A"] = a[name].weight.detach().clone()
                state[f"{key}.lora_B"] = module.lora_B[name].weight.detach().clone()
        return state

    def adapter_shapes(self, name: str) -> dict[str, tuple[int, ...]]:
        """The shape of every tensor ``adapter_state(name)`` holds, keyed the same way."""
        shapes = {}
        for key, module in self.peft.named_modules():
            a = getattr(module, "lora_A", None)
            if a is not None and name in a:
                shapes[f"{key}.lora_A"] = tuple(a[name].weight.shape)
                shapes[f"{key}.lora_B"] = tuple(module.lora_B[name].weight.shape)
        return shapes

    def load_adapter_state(self, name: str, state: dict[str, Any]) -> None:
        with self.torch.no_grad():
            seen = 0
            for key, module in self.peft.named_modules():
                a = getattr(module, "lora_A", None)
                if a is not None and name in a:
                    a[name].weight.copy_(state[f"{key}.lora_A"])
                    module.lora_B[name].weight.copy_(state[f"{key}.lora_B"])
                    seen += 2
        if seen != len(state):
            raise ValueError(f"adapter tensors do not match the run's LoRA layout ({seen} vs {len(state)})")

    def adapter_context(self, snapshot: AdapterSnapshot | None):
        """Activate the base model (None) or a sampler snapshot for the duration of a block."""
        import contextlib

        if snapshot is None:
            self.active_slot = None
            if self.peft is None:
                return contextlib.nullcontext()
            return self.peft.disable_adapter()
        slot = self.active_slot = snapshot.slot
        if self.loaded_slots.get(slot) != snapshot.uid:
            self.load_adapter_state(slot, snapshot.tensors)
            self.loaded_slots[slot] = snapshot.uid
        self.peft.set_adapter(slot)
        return contextlib.nullcontext()

    # -- static decoding (worker thread only) ---------------------------------------------
    def static_cache(self, rows: int, length: int):
        """A reusable StaticCache of this shape (compiled graphs need stable tensor addresses)."""
        from transformers import StaticCache

        key = (rows, length)
        cache = self._static_caches.pop(key, None)
        if cache is None:
            while len(self._static_caches) >= 2:  # bound memory: keep the two most recent shapes
                self._static_caches.pop(next(iter(self._static_caches)))
            cache = StaticCache(config=self.model.config, max_cache_len=length)
        self._static_caches[key] = cache
        return cache

    def decode_step(self):
        """step(input_ids [B,1], position_ids [B,1], attention_mask [B,L], cache) -> last logits [B,V].

        On CUDA the step is compiled with mode="reduce-overhead" (CUDA graphs); if compiling
        fails the eager step is used from then on, with a warning (running out of device memory is
        raised to the caller instead: a smaller batch keeps the compiled step). COURSE_ENGINE_COMPILE=0 turns it off; a
        backend name (e.g. "eager") compiles with that backend on any device.
        """
        import os
        import warnings

        from helpers.engine.sampler import _cache_argument

        model = self.forward_model()
        key = id(model)
        if key in self._steps:
            return self._steps[key]
        cache_arg = _cache_argument(self)
        torch = self.torch

        def eager(ids, positions, mask, cache):
            out = model(input_ids=ids, position_ids=positions, attention_mask=mask, use_cache=True,
                        **{cache_arg: cache})
            return out.logits[:, -1]

        step = eager
        compile_backend = os.environ.get("COURSE_ENGINE_COMPILE", "1" if self.device == "cuda" else "0")
        if compile_backend != "0":
            torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
            # dynamic=None: the first new shape recompiles with symbolic batch and cache length,
            # later shapes only record a CUDA graph (3 compiles in all, not one per bucket)
            if compile_backend == "1":
                compiled = torch.compile(eager, mode="reduce-overhead", dynamic=None)
            else:  # a named backend (tests count graphs with "eager" on CPU)
                compiled = torch.compile(eager, backend=compile_backend, dynamic=None)
            graphs = self.device == "cuda" and compile_backend == "1"
            state = {"ok": True}

            def step(ids, positions, mask, cache):
                if state["ok"]:
                    try:
                        if graphs:
                            torch.compiler.cudagraph_mark_step_begin()
                        return compiled(ids, positions, mask, cache).clone()
                    except torch.OutOfMemoryError:
                        # the batch, not the compiled step: the sampler decodes it again in halves,
                        # and the halves keep the compiled step
                        raise
                    except Exception as error:  # noqa: BLE001 - fall back, but say so
                        state["ok"] = False
                        warnings.warn(f"compiled decode step failed ({type(error).__name__}: {error}); "
                                      "using the eager step", RuntimeWarning, stacklevel=2)
                return eager(ids, positions, mask, cache)

        self._steps[key] = step
        return step

    def graph_decoder(self):
        """The CUDA-graph decoder of this host (its buffers and graphs live as long as the host)."""
        if self._graph_decoder is None:
            from helpers.engine.graphs import GraphDecoder

            self._graph_decoder = GraphDecoder(self)
        return self._graph_decoder

    def release_decode_buffers(self) -> None:
        """Drop the decode buffers kept for reuse and hand cached blocks back to the device: after a decode
        batch ran out of memory, so that its halves (and the other runs on the GPU) get the room.

        The graph decoder's bucket states and the graphs captured over them go together (a graph reads its
        state's buffers at fixed addresses); the next batch allocates the state of its own bucket and
        captures again (a fraction of a second). The static path's caches are likewise made anew."""
        import torch

        if self._graph_decoder is not None:
            self._graph_decoder.graphs.clear()
            self._graph_decoder.states.clear()
        self._static_caches.clear()
        if self.device == "cuda":
            torch.cuda.empty_cache()

    def forward_model(self):
        """The module to call for logits: the peft wrapper once adapters exist."""
        return self.peft if self.peft is not None else self.model


_LIBC = None


def _tame_cpu_allocator() -> None:
    """On Linux, serve blocks over 1 MiB with mmap so freed activations leave the process.

    glibc otherwise raises its mmap threshold after the first large free and keeps later
    blocks in fragmented heaps: a LoRA step of the small model then peaked ~1 GiB higher.
    """
    global _LIBC
    if _LIBC is not None or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 1 << 20)  # M_MMAP_THRESHOLD
        _LIBC = libc
    except (OSError, AttributeError):
        pass


def _kv_tokens(job) -> int:
    if not isinstance(job, SampleJob):
        return 0
    return job.num_samples * (len(job.prompt) + int(job.params.max_tokens or 0))


END_TOKENS = ("<|endoftext|>", "<|im_end|>")  # ChatML end of turn / end of text (Qwen2.5, SmolLM2)


def _eos_ids(tokenizer, model) -> set[int]:
    """Tokens that always end a sequence: the tokenizer's and generation config's EOS, plus the
    ChatML end markers (the provisioned Qwen config lists only one of them)."""
    ids: set[int] = set()
    for source in (tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif isinstance(source, (list, tuple)):
            ids.update(int(i) for i in source)
    vocab = tokenizer.get_vocab()
    ids.update(vocab[t] for t in END_TOKENS if t in vocab)
    return ids
