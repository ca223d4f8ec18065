"""The local engine's surface, without running a model: signatures, validation, losses, backends."""

from __future__ import annotations

import inspect
import time

import pytest
import pytrio
import torch
from pytrio.errors.base import ValidationError

from helpers.engine import SamplingClient, ServiceClient, TrainingClient, connect, losses
from helpers.engine.remote import BackendUnavailable

# create_rest_client manages checkpoints stored on the remote service; there is nothing local to manage.
REMOTE_ONLY = {"create_rest_client"}


def _public(cls) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls, callable)
        if not name.startswith("_")
    }


def _shape(signature: inspect.Signature) -> list[tuple]:
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


@pytest.mark.parametrize(
    ("local", "remote"),
    [(ServiceClient, pytrio.ServiceClient), (TrainingClient, pytrio.TrainingClient),
     (SamplingClient, pytrio.SamplingClient)],
)
def test_public_methods_match_the_sdk(local, remote):
    sdk, ours = _public(remote), _public(local)
    assert set(sdk) - REMOTE_ONLY == set(ours), "method names differ from the SDK"
    for name in ours:
        assert _shape(ours[name]) == _shape(sdk[name]), f"{local.__name__}.{name} parameters differ"
        assert inspect.iscoroutinefunction(getattr(local, name)) == inspect.iscoroutinefunction(getattr(remote, name))


@pytest.mark.parametrize("rank", [0, 3, 65, 128])
def test_rank_outside_4_to_64_is_rejected_like_the_sdk(rank):
    with pytest.raises(ValidationError, match=r"rank must be in \[4, 64\]") as info:
        ServiceClient().create_lora_training_client("smollm2-135m", rank=rank)
    assert info.value.code == "validation.invalid_lora_rank"


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="backend must be one of"):
        connect("cloud")


def test_connect_defaults_to_local_and_reads_course_backend(monkeypatch):
    monkeypatch.delenv("COURSE_BACKEND", raising=False)
    assert isinstance(connect(), ServiceClient)
    monkeypatch.setenv("COURSE_BACKEND", "nonsense")
    with pytest.raises(ValueError, match="nonsense"):
        connect()


@pytest.fixture()
def isolated_pytrio(monkeypatch, tmp_path):
    """No stored login, no key, no .env: and the SDK's process-wide settings restored afterwards."""
    from pytrio.config.config import auth_state, configuration

    from helpers.engine import remote

    saved, saved_key = configuration.model_dump(), auth_state.api_key
    pytrio.configure(home=str(tmp_path))
    auth_state.api_key = ""
    monkeypatch.delenv("PYTRIO_API_KEY", raising=False)
    monkeypatch.setattr(remote, "_load_dotenv", lambda: None)
    yield remote
    for key, value in saved.items():
        setattr(configuration, key, value)
    auth_state.api_key = saved_key


def test_pytrio_backend_without_a_key_fails_fast_and_says_what_to_configure(isolated_pytrio):
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="PYTRIO_API_KEY") as info:
        connect("pytrio")
    assert time.monotonic() - started < 15
    assert "COURSE_BACKEND=local" in str(info.value)


def test_pytrio_backend_with_an_unreachable_service_fails_within_the_limit(monkeypatch, isolated_pytrio):
    secret = "sk-test-never-shown-0123456789"
    monkeypatch.setenv("PYTRIO_API_KEY", secret)
    monkeypatch.setenv("PYTRIO_BASE_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    started = time.monotonic()
    with pytest.raises(BackendUnavailable, match="no answer") as info:
        isolated_pytrio.connect_remote(timeout_s=3)
    assert time.monotonic() - started < 8
    assert secret not in str(info.value)


def _t(rows):
    return torch.tensor(rows, dtype=torch.float32)


def test_importance_sampling_loss_is_minus_ratio_times_advantage():
    lp, old, adv = _t([[-1.0, -2.0, -0.5]]), _t([[-1.0, -1.0, -1.0]]), _t([[0.0, 2.0, -1.0]])
    inputs = {"logprobs": old, "advantages": adv, "active": _t([[1, 1, 1]])}
    got = losses.token_losses("importance_sampling", lp, inputs, losses.check_config("importance_sampling", None))
    expected = -torch.exp(lp - old) * adv
    assert torch.allclose(got, expected)


def test_ppo_clips_the_ratio_with_configured_thresholds():
    config = losses.check_config("ppo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1})
    old = _t([[0.0, 0.0, 0.0, 0.0]])
    lp = torch.log(_t([[2.0, 2.0, 0.5, 0.5]]))   # ratios 2, 2, 0.5, 0.5
    adv = _t([[1.0, -1.0, 1.0, -1.0]])
    inputs = {"logprobs": old, "advantages": adv, "active": _t([[1, 1, 1, 1]])}
    got = losses.token_losses("ppo", lp, inputs, config)
    # min(r*A, clip(r)*A): A>0 caps the gain at 1.1; A<0 keeps the larger penalty
    assert torch.allclose(got, _t([[-1.1, 2.0, -0.5, 0.9]]))


def test_cross_entropy_uses_weights_and_ignores_inactive_tokens():
    lp = _t([[-1.0, -2.0, -3.0]])
    inputs = {"weights": _t([[1.0, 0.5, 1.0]]), "active": _t([[1, 1, 0]])}
    got = losses.token_losses("cross_entropy", lp, inputs, {})
    assert torch.allclose(got, _t([[1.0, 1.0, 0.0]]))


def test_loss_config_rejects_unknown_keys_and_losses():
    with pytest.raises(ValueError, match="clip_eps"):
        losses.check_config("ppo", {"clip_eps": 0.2})
    with pytest.raises(ValueError, match="forward_backward_custom"):
        losses.check_config("dro", None)
    assert losses.check_config("ppo", None) == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}


def test_server_capabilities_list_the_course_models():
    from helpers.models import SPECS, is_provisioned

    service = ServiceClient()
    caps = service.get_server_capabilities()
    assert isinstance(caps, pytrio.types.GetServerCapabilitiesResponse)
    assert {m.model_name for m in caps.supported_models} == set(SPECS) == set(service.get_supported_models())
    for model in caps.supported_models:
        assert model.sampling.available == model.training.available == is_provisioned(model.model_name)


def test_checkpoint_paths_resolve_under_the_cache(tmp_path):
    from helpers.engine.local import checkpoints_root, resolve_path

    assert resolve_path("local://abc/weights/step-1") == checkpoints_root() / "abc" / "weights" / "step-1"
    assert resolve_path(str(tmp_path)) == tmp_path
    assert resolve_path(f"file://{tmp_path}") == tmp_path
    with pytest.raises(ValidationError, match="cannot load"):
        resolve_path("trio://workspace/checkpoint")


def test_course_dtype_sets_the_dtype_of_sampler_and_trainer(monkeypatch):
    import torch

    from helpers import config

    monkeypatch.setenv("COURSE_DTYPE", "bfloat16")
    assert config.dtype() is torch.bfloat16
    monkeypatch.setenv("COURSE_DTYPE", "float32")
    assert config.dtype() is torch.float32
    monkeypatch.setenv("COURSE_DTYPE", "fp8")
    with pytest.raises(ValueError, match="COURSE_DTYPE must be one of"):
        config.dtype()
    monkeypatch.delenv("COURSE_DTYPE")
    assert config.dtype() is (torch.bfloat16 if config.device() == "cuda" else torch.float32)


def test_cuda_memory_fraction_caps_a_process_or_says_what_it_takes(monkeypatch):
    from unittest import mock

    import torch

    from helpers import config

    monkeypatch.delenv("COURSE_CUDA_MEMORY_FRACTION", raising=False)
    assert config.cuda_memory_fraction() is None
    monkeypatch.setenv("COURSE_CUDA_MEMORY_FRACTION", "0.3")
    assert config.cuda_memory_fraction() == 0.3
    for bad in ("0", "1.5", "half", "nan"):
        monkeypatch.setenv("COURSE_CUDA_MEMORY_FRACTION", bad)
        with pytest.raises(ValueError, match="COURSE_CUDA_MEMORY_FRACTION must be a number in"):
            config.cuda_memory_fraction()
    # on a GPU machine the cap is applied when the device is first chosen
    monkeypatch.setenv("COURSE_CUDA_MEMORY_FRACTION", "0.25")
    config.device.cache_clear()
    try:
        with mock.patch.object(torch.cuda, "is_available", return_value=True), \
             mock.patch.object(torch.cuda, "set_per_process_memory_fraction") as cap:
            assert config.device() == "cuda"
        cap.assert_called_once_with(0.25)
    finally:
        config.device.cache_clear()
