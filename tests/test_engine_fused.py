"""The fused decode layer (helpers.engine.fused) against the projection-by-projection reference
(helpers.engine.graphs.LayerFunctions) and transformers' forward, on a tiny random Qwen2 (biases on
q/k/v, LoRA on every projection and the unembedding), in fp32 and bf16 on the CPU."""

from __future__ import annotations

import types

import pytest
import torch

from helpers.engine import graphs
from helpers.engine.fused import Fuser, FusedLayerFunctions

torch.set_num_threads(1)
SLOT = "slot"


def tiny_qwen2(dtype, rank: int, seed: int = 0):
    """A 2-layer Qwen2 with an adapter whose B is far from zero; returns (peft model, fake host)."""
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         tie_word_embeddings=False, rms_norm_eps=1e-6)
    model = Qwen2ForCausalLM(config).to(dtype).eval()
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head"]
    peft = get_peft_model(model, LoraConfig(r=rank, lora_alpha=32, target_modules=targets, lora_dropout=0.0),
                          adapter_name=SLOT).eval()
    perturb(peft, seed)
    return peft, types.SimpleNamespace(model=model, peft=peft, torch=torch, device="cpu", dtype=dtype)


def perturb(peft, seed: int) -> dict:
    """New LoRA tensors for the slot, loaded in place as a sampler snapshot is (host.load_adapter_state)."""
    from helpers.engine.host import ModelHost

    gen = torch.Generator().manual_seed(seed)
    state = {}
    for key, module in peft.named_modules():
        if getattr(module, "lora_A", None) is not None and SLOT in module.lora_A:
            for name, layer in (("lora_A", module.lora_A[SLOT]), ("lora_B", module.lora_B[SLOT])):
                state[f"{key}.{name}"] = torch.randn(layer.weight.shape, generator=gen) * 0.1
    host = types.SimpleNamespace(peft=peft, torch=torch)
    with torch.inference_mode():  # where the sampler loads snapshots
        ModelHost.load_adapter_state(host, SLOT, state)
    return state


def decode(weights, layer_fn, dtype, rows: int = 3, length: int = 16):
    """One chunk of greedy steps from an empty cache, each row starting from its own token."""
    state = graphs.DecodeState(weights, rows, length, weights.lm_head.weight.shape[0], "cpu", dtype)
    state.bias.fill_(torch.finfo(dtype).min)
    state.greedy.fill_(True)
    state.logits.zero_()
    state.logits[torch.arange(rows), torch.arange(rows) * 7 + 3] = 10.0  # first tokens 3, 10, 17
    with torch.inference_mode():
        graphs.chunk(weights, state, layer_fn, truncate=False, greedy=True)
    return state.tokens.T.clone(), state.logps.T.clone()


def forward_logps(peft, tokens):
    """transformers' forward (the trainer's) over the decoded tokens: each token's logprob."""
    with torch.inference_mode():
        logits = peft(input_ids=tokens).logits.float()
    logp = torch.log_softmax(logits[:, :-1], -1).gather(2, tokens[:, 1:, None])[..., 0]
    return logits[:, :-1].argmax(-1), logp


@pytest.mark.parametrize("dtype,rank", [(torch.float32, 4), (torch.bfloat16, 4), (torch.bfloat16, 3)])
def test_fused_layers_decode_as_the_reference_and_the_forward(dtype, rank):
    """rank 4: the LoRA scale 32/4 is a power of two and folded (exact); rank 3: 32/3 is multiplied
    as peft does, and the concatenated GEMMs may sum in another order (bf16 roundings can differ).
    In bf16 a decode step and a whole-sequence forward round differently too (other GEMM shapes):
    the fused step may be as far from the forward as the reference step is, not further."""
    peft, host = tiny_qwen2(dtype, rank)
    weights = graphs.DecoderWeights.gather(host, SLOT)
    assert weights.layers[0]["q_proj"].bias is not None and weights.layers[0]["q_proj"].lora_a is not None
    ref_tokens, ref_logps = decode(weights, graphs.LayerFunctions(), dtype)
    tokens, logps = decode(Fuser().fuse(weights), FusedLayerFunctions(), dtype)
    assert torch.equal(tokens, ref_tokens)
    assert torch.allclose(logps, ref_logps, atol=1e-5 if dtype == torch.float32 or rank == 4 else 1e-2)
    argmax, forward = forward_logps(peft, tokens)
    assert torch.equal(argmax, tokens[:, 1:])  # greedy: each token is the forward's argmax
    gap = (logps[:, 1:] - forward).abs().mean().item()
    ref_gap = (ref_logps[:, 1:] - forward).abs().mean().item()
    assert gap < 1e-5 if dtype == torch.float32 else gap <= ref_gap + 1e-3


def test_a_snapshot_loaded_in_place_reaches_the_fused_copies():
    """The concatenated q/k/v and gate/up LoRA copies are refreshed when the slot's tensors are
    overwritten in place, at the same addresses (a captured graph stays valid)."""
    dtype = torch.float32
    peft, host = tiny_qwen2(dtype, 4, seed=1)
    fuser = Fuser()
    first = fuser.fuse(graphs.DecoderWeights.gather(host, SLOT))
    old_tokens, _ = decode(first, FusedLayerFunctions(), dtype)
    builds = fuser.builds
    perturb(peft, seed=2)
    weights = graphs.DecoderWeights.gather(host, SLOT)
    fused = fuser.fuse(weights)
    assert fuser.builds == builds and fused.signature() == first.signature()
    ref_tokens, ref_logps = decode(weights, graphs.LayerFunctions(), dtype)
    tokens, logps = decode(fused, FusedLayerFunctions(), dtype)
    assert not torch.equal(ref_tokens, old_tokens)  # the new snapshot decodes differently
    assert torch.equal(tokens, ref_tokens)
    assert torch.allclose(logps, ref_logps, atol=1e-5)


def test_new_adapter_tensors_get_new_copies():
    """Tensors that are new objects (an adapter made anew) are not served stale copies."""
    peft, host = tiny_qwen2(torch.float32, 4, seed=3)
    fuser = Fuser()
    first = fuser.fuse(graphs.DecoderWeights.gather(host, SLOT))
    layer = peft.base_model.model.model.layers[0].self_attn.q_proj
    old = layer.lora_A[SLOT].weight
    layer.lora_A[SLOT].weight = torch.nn.Parameter(old.detach() * 2)
    again = fuser.fuse(graphs.DecoderWeights.gather(host, SLOT))
    assert again.layers[0].qkv.lora_a.data_ptr() != first.layers[0].qkv.lora_a.data_ptr()
    rank = old.shape[0]
    assert torch.equal(again.layers[0].qkv.lora_a[:rank], old.detach() * 2)
