"""The trainer's log-probs of right-padded rows: no attention mask reaches the attention kernels.

A causal decoder with right padding never lets a real position see a padding one, so the engine hands
the decoder no mask (and positions that count on through the padding) for such a micro-batch. A mask
would send the attention to masked kernels; on an H100 with PyTorch 2.11 that is cuDNN's, whose
backward writes NaN into the query gradient at key lengths of 64 modulo 128 when a query row's
logsumexp is below -88.7, which Qwen2.5-0.5B's layer-8 head 3 reaches. These tests run a tiny random
Qwen2 on the CPU: which arguments the attention gets, and that the log-probs and gradients of the
real positions are those of each row run alone (and of the masked computation).
"""

from __future__ import annotations

import pytest

WIDTH = 192  # 64 modulo 128, like the micro-batch (1,600 tokens) whose gradient came out NaN


@pytest.fixture(scope="module")
def tiny_qwen2():
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         attn_implementation="sdpa")
    return Qwen2ForCausalLM(config).float().eval()


def _batch(lengths, width=WIDTH, seed=0):
    """Right-padded ids, mask and targets (-100 on padding and on each row's last token)."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, 96, (len(lengths), width), generator=generator)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    targets = torch.full((len(lengths), width), -100)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
        ids[row, n:] = 0
        targets[row, : n - 1] = ids[row, 1:n]
    return ids, mask, targets


def _attention_calls(monkeypatch):
    import torch

    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, **kwargs):
        calls.append({"mask": attn_mask is not None, "is_causal": is_causal, "keys": key.shape[-2]})
        return real(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return calls


def test_right_padded_rows_reach_the_attention_without_a_mask(tiny_qwen2, monkeypatch):
    """Forward and backward of a padded micro-batch run the causal kernels, never a masked one."""
    from helpers.engine.logprobs import sequence_logprobs

    calls = _attention_calls(monkeypatch)
    ids, mask, targets = _batch([150, WIDTH, 97])
    trained = targets >= 0
    lp = sequence_logprobs(tiny_qwen2, ids, mask, targets, trained=trained)
    lp[trained].sum().backward()
    tiny_qwen2.zero_grad(set_to_none=True)
    assert calls and {c["keys"] for c in calls} == {WIDTH}
    assert not any(c["mask"] for c in calls), "a right-padded micro-batch handed the attention a mask"
    assert all(c["is_causal"] for c in calls)


def test_left_padding_keeps_its_mask(tiny_qwen2, monkeypatch):
    """Where padding comes first a real position would see it: the mask stays."""
    import torch

    from helpers.engine.logprobs import decoder_inputs, sequence_logprobs

    ids, mask, targets = _batch([150, WIDTH])
    left = mask.flip(-1)
    given, positions = decoder_inputs(left)
    assert given is left
    assert positions[0, WIDTH - 150:].tolist() == list(range(150)) and positions[1].tolist() == list(range(WIDTH))
    calls = _attention_calls(monkeypatch)
    with torch.no_grad():
        sequence_logprobs(tiny_qwen2, ids.flip(-1), left, targets.flip(-1))
    assert calls and all(c["mask"] for c in calls)


def test_padded_rows_give_each_row_alone_log_probs_and_gradient(tiny_qwen2, monkeypatch):
    """Real positions: the log-probs and gradients of each row run alone (no padding), and the
    log-probs the masked computation gives."""
    import torch

    import helpers.engine.logprobs as logprobs

    lengths = [150, WIDTH, 97]
    ids, mask, targets = _batch(lengths, seed=1)
    trained = targets >= 0
    params = list(tiny_qwen2.parameters())

    def forward_backward(i, m, t):
        tiny_qwen2.zero_grad(set_to_none=True)
        lp = logprobs.sequence_logprobs(tiny_qwen2, i, m, t, trained=t >= 0)
        lp[t >= 0].sum().backward()
        grads = torch.cat([p.grad.reshape(-1) for p in params])
        tiny_qwen2.zero_grad(set_to_none=True)
        return lp.detach(), grads

    batch_lp, batch_grad = forward_backward(ids, mask, targets)
    alone_grad = torch.zeros_like(batch_grad)
    for row, n in enumerate(lengths):
        lp, grad = forward_backward(ids[row:row + 1, :n], mask[row:row + 1, :n], targets[row:row + 1, :n])
        torch.testing.assert_close(batch_lp[row, :n], lp[0], rtol=0, atol=1e-5)
        alone_grad += grad
        assert (batch_lp[row, n:] == 0).all()
    scale = float(alone_grad.abs().max())
    torch.testing.assert_close(batch_grad, alone_grad, rtol=1e-4, atol=1e-5 * scale)

    def masked(m):  # what the decoder was handed before: the mask, positions held on the padding
        return m, (m.cumsum(-1) - 1).clamp(min=0)

    monkeypatch.setattr(logprobs, "decoder_inputs", masked)
    with torch.no_grad():
        masked_lp = logprobs.sequence_logprobs(tiny_qwen2, ids, mask, targets)
    torch.testing.assert_close(batch_lp[trained], masked_lp[trained], rtol=0, atol=1e-5)
