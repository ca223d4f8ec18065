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


def test_merged_layer_folds_each_lora_into_its_weight_and_follows_snapshots():
    """COURSE_ENGINE_FUSE=merge: W + s·B·A (fp32 sum, one rounding) replaces base + LoRA. In fp32 it
    decodes as the reference does; a snapshot loaded in place refreshes the merged copies at the
    same addresses."""
    dtype = torch.float32
    peft, host = tiny_qwen2(dtype, 4, seed=4)
    fuser = Fuser(merge=True)
    weights = graphs.DecoderWeights.gather(host, SLOT)
    merged = fuser.fuse(weights)
    q = weights.layers[0]["q_proj"]
    expected = q.weight + q.scaling * q.lora_b @ q.lora_a
    assert merged.layers[0].qkv.lora_a is None and merged.lm_head.lora_a is None
    assert torch.allclose(merged.layers[0].qkv.weight[:q.weight.shape[0]], expected, atol=1e-6)
    ref_tokens, ref_logps = decode(weights, graphs.LayerFunctions(), dtype)
    tokens, logps = decode(merged, FusedLayerFunctions(), dtype)
    assert torch.equal(tokens, ref_tokens)
    assert torch.allclose(logps, ref_logps, atol=1e-4)
    signature = merged.signature()
    perturb(peft, seed=5)
    weights = graphs.DecoderWeights.gather(host, SLOT)
    again = fuser.fuse(weights)
    assert again.signature() == signature  # refreshed in place: a captured graph stays valid
    q = weights.layers[0]["q_proj"]
    assert torch.allclose(again.layers[0].qkv.weight[:q.weight.shape[0]],
                          q.weight + q.scaling * q.lora_b @ q.lora_a, atol=1e-6)
    ref_tokens, ref_logps = decode(weights, graphs.LayerFunctions(), dtype)
    tokens, logps = decode(again, FusedLayerFunctions(), dtype)
    assert torch.equal(tokens, ref_tokens) and torch.allclose(logps, ref_logps, atol=1e-4)


def test_merged_layer_dispatches_no_lora_ops():
    """Counted as benchmarks/decode_ops.py counts (a LoRA on every projection): merging removes the four
    LoRA groups' two GEMMs, input cast and add each (and q/k/v's block-diagonal B)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from decode_ops import count_layer

    dtype = torch.bfloat16
    _, host = tiny_qwen2(dtype, 4)
    weights = graphs.DecoderWeights.gather(host, SLOT)
    counts = {label: count_layer(w, fn, dtype).kernels for label, w, fn in (
        ("reference", weights, graphs.LayerFunctions()),
        ("fused", Fuser().fuse(weights), FusedLayerFunctions()),
        ("merged", Fuser(merge=True).fuse(weights), FusedLayerFunctions()))}
    totals = {label: sum(c.values()) for label, c in counts.items()}
    assert totals["reference"] > totals["fused"] > totals["merged"]
    assert totals["fused"] - totals["merged"] == 16  # 4 groups x (cast, A GEMM, B GEMM, add)
    assert counts["merged"]["mm"] + counts["merged"].get("addmm", 0) == 4  # qkv, o, gate_up, down
    assert "_to_copy" not in counts["merged"] or counts["merged"]["_to_copy"] == counts["fused"]["_to_copy"] - 4


def test_fuse_setting_reads_values_and_rejects_others(monkeypatch):
    from helpers.engine.fused import CompiledFusedLayerFunctions

    monkeypatch.delenv("COURSE_ENGINE_FUSE", raising=False)
    assert graphs.fuse_setting() == {"1"}
    fuser, fn = graphs.decode_layer(graphs.fuse_setting())
    assert not fuser.merge and type(fn) is FusedLayerFunctions
    monkeypatch.setenv("COURSE_ENGINE_FUSE", "0")
    assert graphs.decode_layer(graphs.fuse_setting())[0] is None
    monkeypatch.setenv("COURSE_ENGINE_FUSE", "merge, inductor")
    fuser, fn = graphs.decode_layer(graphs.fuse_setting())
    assert fuser.merge and isinstance(fn, CompiledFusedLayerFunctions)
    for bad in ("2", "merge,0", "fast"):
        with pytest.raises(ValueError, match="COURSE_ENGINE_FUSE"):
            graphs.fuse_setting(bad)


def one_layer(layer_fn, weights, dtype, rows: int = 3):
    """One layer of one decode step on fixed inputs: (layer output, the K cache it wrote)."""
    gen = torch.Generator().manual_seed(0)
    dim = weights.head_dim
    state = graphs.DecodeState(weights, rows, 16, weights.lm_head.weight.shape[0], "cpu", dtype)
    state.bias.fill_(torch.finfo(dtype).min)
    state.bias[:, :4] = 0
    state.col.fill_(3)
    state.k[0][:, :, :3].copy_(torch.randn(state.k[0][:, :, :3].shape, generator=gen))
    state.v[0][:, :, :3].copy_(torch.randn(state.v[0][:, :, :3].shape, generator=gen))
    cos = torch.randn(rows, 1, dim, generator=gen).to(dtype)
    sin = torch.randn(rows, 1, dim, generator=gen).to(dtype)
    h = torch.randn(rows, weights.embed.shape[1], generator=gen).to(dtype)
    with torch.inference_mode():
        out = layer_fn(h, weights.layers[0], state.k[0], state.v[0], state.col,
                       layer_fn.rotary(cos, sin), state.bias[:, None, None, :], weights)
    return out, state.k[0].clone()


@pytest.mark.slow
def test_inductor_layer_rounds_as_eager_does():
    """COURSE_ENGINE_FUSE=inductor: the fused layer's pure halves compiled by inductor (C++ on the CPU)
    give the eager layer's bits in bf16, cache write included. The cause of the wrong tokens inductor
    gave before: fused bf16 chains kept fp32 between ops (more precise, not the trainer's roundings);
    `emulate_precision_casts` makes it round where eager rounds. Without it the bits differ."""
    from helpers.engine.fused import CompiledFusedLayerFunctions

    dtype = torch.bfloat16
    _, host = tiny_qwen2(dtype, 4)
    weights = Fuser().fuse(graphs.DecoderWeights.gather(host, SLOT))
    eager_out, eager_k = one_layer(FusedLayerFunctions(), weights, dtype)
    out, k = one_layer(CompiledFusedLayerFunctions(), weights, dtype)
    assert torch.equal(k, eager_k) and torch.equal(out, eager_out)
    loose_out, _ = one_layer(CompiledFusedLayerFunctions(emulate=False), weights, dtype)
    assert not torch.equal(loose_out, eager_out)
    tokens, logps = decode(weights, FusedLayerFunctions(), dtype)
    compiled_tokens, compiled_logps = decode(weights, CompiledFusedLayerFunctions(), dtype)
    assert torch.equal(compiled_tokens, tokens) and torch.equal(compiled_logps, logps)
