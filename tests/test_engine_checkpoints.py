"""Checkpoints the local engine can trust, and training clients that give their memory back."""

from __future__ import annotations

import gc
import json
import pickle

import pytest
import pytrio as trio
import torch
from safetensors.torch import load_file, save_file

from helpers.engine import connect
from helpers.engine.host import get_host
from helpers.engine.local import resolve_path
from helpers.engine.training import ADAPTER_FILE, META_FILE, OPTIMIZER_FILE, DamagedCheckpoint, file_sha256

torch.set_num_threads(1)
MODEL = "smollm2-135m"
LAYOUT = dict(rank=4, train_mlp=False, train_unembed=False)


@pytest.fixture(scope="module")
def service():
    return connect("local")


@pytest.fixture(scope="module")
def prompt(service):
    tokenizer = service.create_sampling_client(base_model=MODEL).get_tokenizer()
    return list(tokenizer.encode("Question: what is the capital of France?\nAnswer: Paris"))


def datum(ids):
    return trio.Datum(model_input=trio.ModelInput.from_ints(ids[:-1]), loss_fn_inputs={"target_tokens": ids[1:]})


@pytest.fixture(scope="module")
def saved_state(service, prompt):
    """A save_state directory after one optimiser step."""
    tc = service.create_lora_training_client(MODEL, seed=0, **LAYOUT)
    tc.forward_backward([datum(prompt)]).result()
    tc.optim_step(trio.AdamParams(learning_rate=1e-3)).result()
    return resolve_path(tc.save_state("integrity", overwrite=True).result().path)


def copy_of(directory, tmp_path):
    import shutil

    target = tmp_path / "copy"
    shutil.copytree(directory, target)
    return target


def reseal(directory):
    """Rewrite meta.json's checksums, as if the damage had happened before the save."""
    meta = json.loads((directory / META_FILE).read_text())
    meta["sha256"] = {name: file_sha256(directory / name) for name in (ADAPTER_FILE, OPTIMIZER_FILE)
                      if (directory / name).exists()}
    (directory / META_FILE).write_text(json.dumps(meta))


def test_a_save_records_the_checksum_of_every_file(saved_state):
    meta = json.loads((saved_state / META_FILE).read_text())
    assert meta["sha256"] == {ADAPTER_FILE: file_sha256(saved_state / ADAPTER_FILE),
                              OPTIMIZER_FILE: file_sha256(saved_state / OPTIMIZER_FILE)}


def test_nan_weights_are_refused_and_the_file_is_named(service, saved_state, tmp_path):
    directory = copy_of(saved_state, tmp_path)
    tensors = load_file(str(directory / ADAPTER_FILE))
    first = sorted(tensors)[0]
    tensors[first] = torch.full_like(tensors[first], float("nan"))
    save_file(tensors, str(directory / ADAPTER_FILE))
    reseal(directory)
    with pytest.raises(DamagedCheckpoint, match=rf"{directory / ADAPTER_FILE}: tensor .* NaN"):
        service.create_sampling_client(MODEL, model_path=str(directory))
    with pytest.raises(DamagedCheckpoint, match="NaN"):
        service.create_lora_training_client(MODEL, **LAYOUT).load_state(str(directory)).result()


def test_a_truncated_adapter_is_named_whether_or_not_a_checksum_catches_it(service, saved_state, tmp_path):
    directory = copy_of(saved_state, tmp_path)
    data = (directory / ADAPTER_FILE).read_bytes()
    (directory / ADAPTER_FILE).write_bytes(data[: len(data) // 2])
    with pytest.raises(DamagedCheckpoint, match=rf"{directory / ADAPTER_FILE} does not match the SHA-256"):
        service.create_sampling_client(MODEL, model_path=str(directory))
    reseal(directory)  # no checksum to catch it: the reader must still name the file
    with pytest.raises(DamagedCheckpoint, match=rf"{directory / ADAPTER_FILE} cannot be read"):
        service.create_sampling_client(MODEL, model_path=str(directory))


def test_tensors_of_the_wrong_shape_are_refused_before_any_weight_changes(service, saved_state, prompt, tmp_path):
    directory = copy_of(saved_state, tmp_path)
    tensors = load_file(str(directory / ADAPTER_FILE))
    key = sorted(k for k in tensors if k.endswith("lora_A"))[0]
    tensors[key] = torch.zeros(tensors[key].shape[0] * 2, tensors[key].shape[1])
    save_file(tensors, str(directory / ADAPTER_FILE))
    reseal(directory)
    with pytest.raises(DamagedCheckpoint, match=rf"tensor {key} has shape"):
        service.create_sampling_client(MODEL, model_path=str(directory))
    tc = service.create_lora_training_client(MODEL, seed=0, **LAYOUT)
    ids = trio.ModelInput.from_ints(prompt)
    before = tc.save_weights_and_get_sampling_client().compute_logprobs(ids).result()
    with pytest.raises(DamagedCheckpoint, match="has shape"):
        tc.load_state_with_optimizer(str(directory)).result()
    assert tc.save_weights_and_get_sampling_client().compute_logprobs(ids).result() == before
    tc.load_state_with_optimizer(str(saved_state)).result()  # a failed load leaves the client loadable


class _Payload:
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_optimizer_state_never_runs_code_whatever_torch_defaults_to(service, saved_state, tmp_path, monkeypatch):
    directory = copy_of(saved_state, tmp_path)
    marker = tmp_path / "code-ran"
    with open(directory / OPTIMIZER_FILE, "wb") as handle:
        pickle.dump({"state": {}, "param_groups": [], "x": _Payload(marker)}, handle)
    reseal(directory)
    real_load = torch.load

    def old_default(*args, weights_only=False, **kwargs):  # torch < 2.6 unpickled anything by default
        return real_load(*args, weights_only=weights_only, **kwargs)

    monkeypatch.setattr(torch, "load", old_default)
    with pytest.raises(DamagedCheckpoint, match=rf"{directory / OPTIMIZER_FILE} cannot be loaded"):
        service.create_lora_training_client(MODEL, **LAYOUT).load_state_with_optimizer(str(directory)).result()
    assert not marker.exists()


def test_a_dropped_training_client_gives_its_adapter_back(service, prompt):
    host = get_host(MODEL)

    def adapters():
        return host.call(lambda: sorted(n for n in host.peft.peft_config if n.startswith("run_"))).result()

    def parameter_bytes():
        return host.call(lambda: sum(p.numel() * p.element_size() for p in host.peft.parameters())).result()

    gc.collect()
    host.call(lambda: None).result()
    before, bytes_before = adapters(), parameter_bytes()
    samplers = []
    for seed in range(3):
        tc = service.create_lora_training_client(MODEL, seed=seed, **LAYOUT)
        tc.forward_backward([datum(prompt)]).result()
        tc.optim_step(trio.AdamParams(learning_rate=1e-3)).result()
        assert len(adapters()) == len(before) + 1
        samplers.append(tc.save_weights_and_get_sampling_client())
        del tc
        gc.collect()
    host.call(lambda: None).result()  # the removals were queued on the worker
    assert adapters() == before and parameter_bytes() == bytes_before
    out = samplers[0].sample(prompt=trio.ModelInput.from_ints(prompt), num_samples=1,
                             sampling_params=trio.SamplingParams(max_tokens=3, seed=0)).result()
    assert len(out.sequences[0].tokens) >= 1  # samplers of dropped clients still work


def test_a_resume_skips_a_damaged_newest_checkpoint(service, prompt, tmp_path):
    from helpers.runs import RunDir, materialise_checkpoint, resume_checkpoint

    tc = service.create_lora_training_client(MODEL, seed=0, **LAYOUT)
    run = RunDir(tmp_path / "run")
    for step in (1, 2):
        tc.forward_backward([datum(prompt)]).result()
        tc.optim_step(trio.AdamParams(learning_rate=1e-3)).result()
        saved = tc.save_state(f"resume-{step}").result()
        run.record_checkpoint(step, materialise_checkpoint(saved.path, run.path / "checkpoints" / f"step{step:05d}"),
                              has_optimizer=True)
    newest = run.path / "checkpoints" / "step00002" / ADAPTER_FILE
    newest.write_bytes(newest.read_bytes()[:100])  # the disk filled up during the last save
    fresh = service.create_lora_training_client(MODEL, **LAYOUT)
    with pytest.warns(RuntimeWarning, match="step 2 cannot be used .*adapter.safetensors"):
        row = resume_checkpoint(run, lambda path, row: fresh.load_state_with_optimizer(path).result())
    assert row["step"] == 1 and row["path"] == str(run.path / "checkpoints" / "step00001")
