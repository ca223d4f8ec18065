"""The local engine on the small model: sampling, batching, training, checkpoints, probes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import pytrio as trio
import torch
from pytrio.errors.base import ValidationError

from helpers.engine import connect, measure_logprob_agreement, probe_loss_normalisation
from helpers.engine.host import get_host

torch.set_num_threads(1)  # the test machine is shared; one thread is also the fastest there
MODEL = "smollm2-135m"


@pytest.fixture(scope="module")
def service():
    return connect("local")


@pytest.fixture(scope="module")
def tokenizer(service):
    return service.create_sampling_client(base_model=MODEL).get_tokenizer()


@pytest.fixture(scope="module")
def prompt(tokenizer):
    return list(tokenizer.encode("Question: what is the capital of France?\nAnswer:"))


def params(**kw):
    return trio.SamplingParams(**{"max_tokens": 6, "temperature": 1.0, "seed": 0, **kw})


def test_sample_returns_the_sdk_response_with_aligned_tokens_and_logprobs(service, prompt):
    sc = service.create_sampling_client(base_model=MODEL)
    response = sc.sample(prompt=trio.ModelInput.from_ints(prompt), num_samples=3, sampling_params=params()).result()
    assert isinstance(response, trio.types.SampleResponse)
    assert len(response.sequences) == 3
    for seq in response.sequences:
        assert 1 <= len(seq.tokens) <= 6 and len(seq.logprobs) == len(seq.tokens)
        assert all(lp <= 0 for lp in seq.logprobs)
        assert seq.stop_reason in {"stop", "length"}
        assert seq.text == sc.get_tokenizer().decode(seq.tokens, skip_special_tokens=True)
    assert response.output_tokens == sum(len(s.tokens) for s in response.sequences)


def test_seeded_samples_do_not_depend_on_what_else_is_in_the_batch(service, prompt, tokenizer):
    sc = service.create_sampling_client(base_model=MODEL)
    alone = sc.sample(prompt=trio.ModelInput.from_ints(prompt), num_samples=2, sampling_params=params(seed=7)).result()
    other = list(tokenizer.encode("A completely different and somewhat longer prompt about rivers and seas:"))

    async def together():
        return await asyncio.gather(
            sc.sample_async(prompt=trio.ModelInput.from_ints(other), num_samples=3, sampling_params=params(seed=1)),
            sc.sample_async(prompt=trio.ModelInput.from_ints(prompt), num_samples=2, sampling_params=params(seed=7)),
        )

    _, mixed = asyncio.run(together())
    assert [s.tokens for s in mixed.sequences] == [s.tokens for s in alone.sequences]
    for a, b in zip(alone.sequences, mixed.sequences):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    different = sc.sample(prompt=trio.ModelInput.from_ints(prompt), num_samples=2, sampling_params=params(seed=8)).result()
    assert [s.tokens for s in different.sequences] != [s.tokens for s in alone.sequences]


def test_concurrent_async_calls_are_decoded_in_one_batch(service, prompt):
    sc = service.create_sampling_client(base_model=MODEL)
    host = get_host(MODEL)

    async def many():
        return await asyncio.gather(*[
            sc.sample_async(prompt=trio.ModelInput.from_ints(prompt[: 8 + i]), num_samples=2,
                            sampling_params=params(max_tokens=3, seed=i))
            for i in range(5)
        ])

    before = dict(host.stats)
    responses = asyncio.run(many())
    assert [len(r.sequences) for r in responses] == [2] * 5
    assert host.stats["sample_requests"] - before["sample_requests"] == 5
    assert host.stats["decode_batches"] - before["decode_batches"] == 1


def test_stop_strings_token_ids_and_max_tokens_end_sequences(service, tokenizer):
    sc = service.create_sampling_client(base_model=MODEL)
    prompt = list(tokenizer.encode("1, 2, 3, 4, 5, 6, 7,"))  # greedy keeps counting: no early EOS
    greedy = sc.sample(prompt=trio.ModelInput.from_ints(prompt), num_samples=1,
                       sampling_params=params(temperature=0.0, max_tokens=8)).result().sequences[0]
    assert greedy.stop_reason == "length" and len(greedy.tokens) == 8
    # stop on the greedy continuation's third token id, and on the text of its second token
    by_id = sc.sample(prompt=trio.ModelInput.from_ints(prompt), num_samples=1,
                      sampling_params=params(temperature=0.0, max_tokens=8, stop=[greedy.tokens[2]])).result()
    assert by_id.sequences[0].tokens == greedy.tokens[:3] and by_id.sequences[0].stop_reason == "stop"
    piece = tokenizer.decode(greedy.tokens[:2])
    by_text = sc.sample(prompt=trio.ModelInput.from_ints(prompt), num_samples=1,
                        sampling_params=params(temperature=0.0, max_tokens=8, stop=piece.strip() or piece)).result()
    seq = by_text.sequences[0]
    assert seq.stop_reason == "stop" and len(seq.tokens) <= 2 and greedy.tokens[: len(seq.tokens)] == seq.tokens


def test_sampling_validates_like_the_sdk(service, prompt):
    sc = service.create_sampling_client(base_model=MODEL)
    with pytest.raises(ValidationError, match="max_tokens"):
        sc.sample(prompt=trio.ModelInput.from_ints(prompt), sampling_params=trio.SamplingParams())
    with pytest.raises(ValidationError, match="empty"):
        sc.sample(prompt=trio.ModelInput.from_ints([]), sampling_params=params())


def test_sample_async_works_inside_a_running_event_loop(service, prompt):
    sc = service.create_sampling_client(base_model=MODEL)

    async def notebook_cell():  # what a Jupyter cell does: await in the kernel's running loop
        assert asyncio.get_running_loop().is_running()
        response = await sc.sample_async(prompt=trio.ModelInput.from_ints(prompt), sampling_params=params(max_tokens=2))
        logprobs = await sc.compute_logprobs_async(trio.ModelInput.from_ints(prompt))
        return response, logprobs

    response, logprobs = asyncio.run(notebook_cell())
    assert len(response.sequences) == 1
    assert logprobs[0] is None and len(logprobs) == len(prompt) and all(x <= 0 for x in logprobs[1:])


@pytest.fixture(scope="module")
def training(service):
    return service.create_lora_training_client(MODEL, rank=8, seed=0)


def _rl_datum(prompt, seq, advantage):
    full = prompt + seq.tokens
    n_prompt = len(prompt) - 1
    return trio.Datum(
        model_input=trio.ModelInput.from_ints(full[:-1]),
        loss_fn_inputs={
            "target_tokens": full[1:],
            "logprobs": [0.0] * n_prompt + seq.logprobs,
            "advantages": [0.0] * n_prompt + [advantage] * len(seq.tokens),
        },
    )


def test_sampler_and_trainer_logprobs_agree(training, prompt):
    sc = training.save_weights_and_get_sampling_client()
    report = measure_logprob_agreement(training, sc, [prompt], params(max_tokens=8), num_samples=2)
    assert report.tokens >= 2
    assert report.kl < 1e-3 and report.max_abs_diff < 1e-3, report.summary()


def test_forward_backward_returns_logprobs_per_datum_and_the_sdk_metrics(training, prompt):
    sc = training.save_weights_and_get_sampling_client()
    seqs = sc.sample(prompt=trio.ModelInput.from_ints(prompt), num_samples=2, sampling_params=params()).result().sequences
    data = [_rl_datum(prompt, s, a) for s, a in zip(seqs, (1.0, -1.0))]
    out = training.forward_backward(data, loss_fn="importance_sampling").result()
    assert isinstance(out, trio.types.ForwardBackwardOutput)
    assert set(out.metrics) == {"loss_sum", "loss_mean", "token_count"}
    assert out.metrics["token_count"] == sum(len(d.model_input.to_ints()) for d in data)
    # the ratio is 1 at the sampling weights, so the loss is -sum(A) over action tokens
    assert out.metrics["loss_sum"] == pytest.approx(-(len(seqs[0].tokens) - len(seqs[1].tokens)), abs=1e-3)
    for datum, seq, output in zip(data, seqs, out.loss_fn_outputs):
        lp = output["logprobs"].data
        assert len(lp) == len(datum.model_input.to_ints())
        assert lp[len(prompt) - 1:] == pytest.approx(seq.logprobs, abs=1e-3)
    training.optim_step(trio.AdamParams(learning_rate=1e-4)).result()  # leave no pending gradient


def test_training_validates_batches_with_the_sdk_planner(training, prompt):
    bad_shape = trio.Datum(model_input=trio.ModelInput.from_ints(prompt), loss_fn_inputs={"target_tokens": prompt[1:]})
    with pytest.raises(ValueError, match="target_tokens must have shape"):
        training.forward_backward([bad_shape], loss_fn="cross_entropy")
    out_of_vocab = trio.Datum(model_input=trio.ModelInput.from_ints(prompt),
                              loss_fn_inputs={"target_tokens": [10**7] * len(prompt)})
    with pytest.raises(ValidationError, match="outside the tokenizer vocabulary"):
        training.forward_backward([out_of_vocab], loss_fn="cross_entropy")
    with pytest.raises(ValueError, match="logprobs is required"):
        training.forward_backward([bad_shape], loss_fn="importance_sampling")
    with pytest.raises(ValidationError, match="cannot be empty"):
        training.forward_backward([], loss_fn="cross_entropy")


def test_probe_measures_mean_over_datums_and_sum_over_tokens(service):
    report = probe_loss_normalisation(service.create_lora_training_client(MODEL, rank=4, seed=1))
    assert report.linear, report.summary()
    assert report.datums == "mean" and report.datum_ratio == pytest.approx(1.0, abs=0.1)
    assert report.tokens == "sum" and report.padding_ratio == pytest.approx(1.0, abs=0.1)


def _ce(ids):
    return trio.Datum(model_input=trio.ModelInput.from_ints(ids[:-1]), loss_fn_inputs={"target_tokens": ids[1:]})


def test_training_moves_snapshots_not_the_samplers_already_handed_out(service, prompt):
    tc = service.create_lora_training_client(MODEL, rank=8, seed=3, train_mlp=False)
    base = service.create_sampling_client(base_model=MODEL)
    before = tc.save_weights_and_get_sampling_client()
    p = trio.ModelInput.from_ints(prompt)
    base_lp = base.compute_logprobs(p).result()
    assert before.compute_logprobs(p).result() == pytest.approx(base_lp, abs=1e-5)  # LoRA starts at zero
    for _ in range(2):
        tc.forward_backward([_ce(prompt)], loss_fn="cross_entropy").result()
        tc.optim_step(trio.AdamParams(learning_rate=1e-2)).result()
    after = tc.save_weights_and_get_sampling_client()
    after_lp = after.compute_logprobs(p).result()
    assert sum(after_lp[1:]) > sum(base_lp[1:]) + 0.5  # cross-entropy on the prompt made it likelier
    assert before.compute_logprobs(p).result() == pytest.approx(base_lp, abs=1e-5)
    assert base.compute_logprobs(p).result() == pytest.approx(base_lp, abs=1e-5)

    saved = tc.save_weights_for_sampler("after-two-steps").result()
    assert saved.path.startswith("local://") and saved.size > 0
    for loaded in (tc.create_sampling_client(saved.path), service.create_sampling_client(MODEL, model_path=saved.path)):
        assert loaded.compute_logprobs(p).result() == pytest.approx(after_lp, abs=1e-5)


def test_save_state_and_load_state_round_trip_and_check_the_layout(service, prompt):
    tc = service.create_lora_training_client(MODEL, rank=4, seed=5, train_mlp=False, train_unembed=False)
    tc.forward_backward([_ce(prompt)], loss_fn="cross_entropy").result()
    tc.optim_step(trio.AdamParams(learning_rate=1e-2)).result()
    state = tc.save_state("round-trip").result()
    with pytest.raises(ValidationError, match="already exists"):
        tc.save_state("round-trip")
    expected = tc.forward([_ce(prompt)]).result().loss_fn_outputs[0]["logprobs"].data

    restored = service.create_training_client_from_state_with_optimizer(state.path)
    assert restored.forward([_ce(prompt)]).result().loss_fn_outputs[0]["logprobs"].data == pytest.approx(expected, abs=1e-5)
    with pytest.raises(ValidationError, match="after training has started"):
        restored.load_state(state.path)
    other = service.create_lora_training_client(MODEL, rank=8)
    with pytest.raises(ValidationError, match="rank"):
        other.load_state(state.path)


def test_custom_loss_matches_the_built_in_cross_entropy(service, prompt):
    data = [_ce(prompt), _ce(prompt[:10])]

    # Same direction as the built-in loss; the surrogate adds a 1/N scale (as the SDK's does),
    # which Adam's update does not see, so both runs land on the same weights.
    def nll(batch, logprobs):
        return -sum(lp.sum() for lp in logprobs) / len(logprobs), {"custom": 1.0}

    results = []
    for custom in (False, True):
        tc = service.create_lora_training_client(MODEL, rank=4, seed=11, train_mlp=False)
        out = (tc.forward_backward_custom(data, nll) if custom else tc.forward_backward(data, "cross_entropy")).result()
        tc.optim_step(trio.AdamParams(learning_rate=1e-2)).result()
        results.append(tc.forward(data).result().loss_fn_outputs[0]["logprobs"].data)
        if custom:
            assert out.metrics["custom"] == 1.0
    assert results[0] == pytest.approx(results[1], abs=1e-4)


def test_a_non_finite_gradient_is_dropped_not_applied(service, prompt):
    """A NaN gradient once wrote NaN into every LoRA weight (GRPO step 29, 2026-11-30); now the step is skipped."""
    tc = service.create_lora_training_client(MODEL, rank=4, seed=3, train_mlp=False)
    tc.forward_backward([_ce(prompt)], loss_fn="cross_entropy").result()
    tc.optim_step(trio.AdamParams(learning_rate=1e-2)).result()
    before = [p.detach().clone() for p in tc._run.params]
    tc.forward_backward([_ce(prompt)], loss_fn="cross_entropy").result()
    next(p for p in tc._run.params if p.grad is not None).grad.view(-1)[0] = float("nan")
    out = tc.optim_step(trio.AdamParams(learning_rate=1e-2)).result()
    assert out.metrics["skipped_non_finite"] == 1.0 and out.metrics["grad_norm"] != out.metrics["grad_norm"]
    assert all(torch.equal(a, b) for a, b in zip(before, tc._run.params))
    assert all(p.grad is None for p in tc._run.params)  # the bad gradient does not leak into the next step
    tc.forward_backward([_ce(prompt)], loss_fn="cross_entropy").result()
    out = tc.optim_step(trio.AdamParams(learning_rate=1e-2)).result()
    assert out.metrics["skipped_non_finite"] == 0.0
    assert all(torch.isfinite(p).all() for p in tc._run.params)
    assert any(not torch.equal(a, b) for a, b in zip(before, tc._run.params))


def test_a_non_finite_gradient_names_the_micro_batch_and_the_tensors_it_hit(service, prompt, capsys):
    tc = service.create_lora_training_client(MODEL, rank=4, seed=3, train_mlp=False)
    name, param = next((n, p) for n, p in zip(tc._run.param_names, tc._run.params) if "lora_B" in n)
    param.requires_grad_(True)  # as a backward pass sets it
    hook = param.register_hook(lambda grad: torch.full_like(grad, float("inf")))  # a backward that overflows
    tc.forward_backward([_ce(prompt)], loss_fn="cross_entropy").result()
    out = tc.optim_step(trio.AdamParams(learning_rate=1e-2)).result()
    assert out.metrics["skipped_non_finite"] == 1.0
    said = capsys.readouterr().err
    assert "non-finite gradient, first after a micro-batch of 1 rows" in said
    assert f"inf in 1 of {len(tc._run.params)} LoRA tensors (first {name})" in said and "trained log-probs" in said
    hook.remove()
    tc.forward_backward([_ce(prompt)], loss_fn="cross_entropy").result()
    assert tc.optim_step(trio.AdamParams(learning_rate=1e-2)).result().metrics["skipped_non_finite"] == 0.0
    assert "non-finite" not in capsys.readouterr().err  # the record does not outlive its step


def test_the_first_non_finite_micro_batch_of_a_run_is_kept_for_a_replay(service, prompt, capsys, monkeypatch, tmp_path):
    from helpers.engine import training as training_module

    monkeypatch.setenv(training_module.NON_FINITE_SETTING, str(tmp_path / "kept"))
    tc = service.create_lora_training_client(MODEL, rank=4, seed=3, train_mlp=False)
    name, param = next((n, p) for n, p in zip(tc._run.param_names, tc._run.params) if "lora_B" in n)
    param.requires_grad_(True)
    hook = param.register_hook(lambda grad: torch.full_like(grad, float("inf")))
    for _ in range(2):  # two bad steps: only the first is kept
        tc.forward_backward([_ce(prompt)], loss_fn="cross_entropy").result()
        assert tc.optim_step(trio.AdamParams(learning_rate=1e-2)).result().metrics["skipped_non_finite"] == 1.0
    hook.remove()
    (kept,) = (tmp_path / "kept").iterdir()
    saved = torch.load(kept, weights_only=False)
    assert saved["loss_fn"] == "cross_entropy" and saved["base_model"] == MODEL and saved["step"] == 0
    assert saved["tensors"]["ids"].shape == saved["tensors"]["targets"].shape and saved["tensors"]["ids"].shape[0] == 1
    assert set(saved["lora"]) == set(tc._run.param_names)  # the weights it ran on, unchanged by the skipped step
    assert all(torch.equal(saved["lora"][n], p.detach().cpu()) for n, p in zip(tc._run.param_names, tc._run.params))
    assert "inf in 1 of" in saved["description"] and str(kept) in capsys.readouterr().err
    monkeypatch.delenv(training_module.NON_FINITE_SETTING)
    assert training_module.non_finite_dir() is None

    blocked = tmp_path / "a file"  # a folder that cannot be made: the step is skipped as before, training goes on
    blocked.write_text("")
    monkeypatch.setenv(training_module.NON_FINITE_SETTING, str(blocked / "kept"))
    tc = service.create_lora_training_client(MODEL, rank=4, seed=3, train_mlp=False)
    param = next(p for n, p in zip(tc._run.param_names, tc._run.params) if "lora_B" in n)
    param.requires_grad_(True)
    hook = param.register_hook(lambda grad: torch.full_like(grad, float("inf")))
    tc.forward_backward([_ce(prompt)], loss_fn="cross_entropy").result()
    assert tc.optim_step(trio.AdamParams(learning_rate=1e-2)).result().metrics["skipped_non_finite"] == 1.0
    hook.remove()
    assert "could not keep the non-finite micro-batch" in capsys.readouterr().err


def test_a_kept_micro_batch_replays_elsewhere_and_shows_where_the_gradient_breaks(service, prompt, monkeypatch, tmp_path,
                                                                                  capsys):
    import importlib.util
    import json

    from helpers.engine import training as training_module

    spec = importlib.util.spec_from_file_location("replay_non_finite", Path(__file__).resolve().parents[1]
                                                  / "benchmarks" / "replay_non_finite.py")
    replay_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(replay_module)
    monkeypatch.setenv(training_module.NON_FINITE_SETTING, str(tmp_path / "kept"))
    tc = service.create_lora_training_client(MODEL, rank=4, seed=3, train_mlp=False)
    tc.forward_backward([_ce(prompt)], loss_fn="cross_entropy").result()
    tc.optim_step(trio.AdamParams(learning_rate=1e-2)).result()  # weights away from their initial values
    param = next(p for n, p in zip(tc._run.param_names, tc._run.params) if "lora_B" in n)
    hook = param.register_hook(lambda grad: torch.full_like(grad, float("nan")))  # a backward that breaks once
    tc.forward_backward([_ce(prompt)], loss_fn="cross_entropy").result()
    tc.optim_step(trio.AdamParams(learning_rate=1e-2)).result()
    hook.remove()
    (kept,) = (tmp_path / "kept").iterdir()
    expected = tc.forward([_ce(prompt)], loss_fn="cross_entropy").result().metrics["loss_sum"]

    replayed = replay_module.replay(kept, dtypes=("float32", "bfloat16"))["dtypes"]
    assert replayed["bfloat16"]["all"]["finite"]  # the low-precision path replays too
    clean = replayed["float32"]
    assert clean["all"]["finite"] and clean["all"]["tensors_hit"] == 0  # the hook is not in the kept file
    assert clean["all"]["losses"][0] == pytest.approx(expected, abs=1e-3)  # the kept weights, not fresh ones

    saved = torch.load(kept, weights_only=False)
    name = next(n for n in saved["lora"] if "lora_A" in n)
    saved["lora"][name] = torch.full_like(saved["lora"][name], float("inf"))
    torch.save(saved, tmp_path / "broken.pt")
    broken = replay_module.replay(tmp_path / "broken.pt", dtypes=("float32",))["dtypes"]["float32"]
    assert not broken["all"]["finite"] and [r["finite"] for r in broken["by_row"]] == [False]
    with pytest.raises(ValueError, match="rows must lie"):
        replay_module.replay(kept, dtypes=("float32",), rows=[3])
    assert replay_module.main([str(tmp_path / "broken.pt"), "--dtypes", "float32", "--out", str(tmp_path / "r.json")]) == 0
    assert "NOT finite" in capsys.readouterr().out
    assert json.loads((tmp_path / "r.json").read_text())["dtypes"]["float32"]["all"]["finite"] is False


def test_internal_micro_batches_do_not_change_the_gradient(service, prompt, monkeypatch):
    from helpers.engine import training as training_module

    data = [_ce(prompt), _ce(prompt[:9]), _ce(prompt[3:])]
    grads = []
    for budget in (10**6, 1):  # one micro-batch, then one datum per micro-batch
        monkeypatch.setattr(training_module, "tokens_per_micro_batch", lambda device, b=budget: b)
        tc = service.create_lora_training_client(MODEL, rank=4, seed=2, train_mlp=False)
        out = tc.forward_backward(data, "cross_entropy").result()
        grads.append((out.metrics["loss_sum"], [p.grad.clone() for p in tc._run.params]))
        tc.optim_step(trio.AdamParams(learning_rate=0.0)).result()
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-5)
    scale = max(float(g.abs().max()) for g in grads[0][1])
    assert scale > 0
    # the same gradient up to fp32 rounding, which differs with the shapes of the two computations
    # (a lost micro-batch or a wrong weighting is off by far more than 1e-4 of the largest entry)
    for a, b in zip(grads[0][1], grads[1][1]):
        assert float((a - b).abs().max()) <= 1e-4 * scale


def test_keeping_activations_gives_the_gradient_that_recomputing_them_gives(service, prompt, monkeypatch):
    from helpers.engine import training as training_module

    data = [_ce(prompt), _ce(prompt[:9]), _ce(prompt[3:])]
    model = get_host(MODEL).model
    grads = []
    try:
        for setting in ("1", "0"):
            monkeypatch.setenv(training_module.RECOMPUTE_SETTING, setting)
            if setting == "0":  # the host's model is shared: take off what an earlier run switched on
                model.activation_checkpointing_disable()
            tc = service.create_lora_training_client(MODEL, rank=4, seed=2, train_mlp=False)
            assert model.is_activation_checkpointing == (setting == "1")
            out = tc.forward_backward(data, "cross_entropy").result()
            grads.append((out.metrics["loss_sum"], [p.grad.clone() for p in tc._run.params]))
            tc.optim_step(trio.AdamParams(learning_rate=0.0)).result()
    finally:
        monkeypatch.undo()
        training_module._enable_activation_checkpointing(model)
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-6)
    scale = max(float(g.abs().max()) for g in grads[0][1])
    assert scale > 0
    for a, b in zip(grads[0][1], grads[1][1]):
        assert float((a - b).abs().max()) <= 1e-5 * scale


def test_the_recompute_setting_sizes_micro_batches_and_refuses_other_values(monkeypatch):
    from helpers.engine import training as training_module

    monkeypatch.setenv(training_module.RECOMPUTE_SETTING, "1")
    kept = training_module.tokens_per_micro_batch("cuda")
    monkeypatch.setenv(training_module.RECOMPUTE_SETTING, "0")
    assert training_module.tokens_per_micro_batch("cuda") == kept // 4
    monkeypatch.setenv(training_module.RECOMPUTE_SETTING, "off")
    with pytest.raises(ValueError, match="COURSE_ENGINE_RECOMPUTE='off': choose 1"):
        training_module.tokens_per_micro_batch("cuda")


def _policy_datum(ids, trained_from):
    n = len(ids) - 1
    advantages = [0.0] * trained_from + [0.7] * (n - trained_from)
    return trio.Datum(model_input=trio.ModelInput.from_ints(ids[:-1]), loss_fn_inputs={
        "target_tokens": ids[1:], "logprobs": [-2.0] * n, "advantages": advantages})


@pytest.mark.parametrize("loss_fn", ["importance_sampling", "cross_entropy"])
def test_the_unembedding_under_autograd_only_where_the_loss_is_not_zero(service, prompt, monkeypatch, loss_fn):
    from helpers.engine import losses

    if loss_fn == "cross_entropy":
        data = [trio.Datum(model_input=trio.ModelInput.from_ints(prompt[:-1]), loss_fn_inputs={
            "target_tokens": prompt[1:], "weights": [0.0] * 6 + [1.0] * (len(prompt) - 7)})]
    else:
        data = [_policy_datum(prompt, 5), _policy_datum(prompt[:10], 6), _policy_datum(prompt[2:], len(prompt) - 5)]
    results = []
    for everywhere in (True, False):
        if everywhere:  # the plain way: every position's logprob under autograd
            monkeypatch.setattr(losses, "trained_positions", lambda loss_fn, inputs: None)
        else:
            monkeypatch.undo()
        tc = service.create_lora_training_client(MODEL, rank=4, seed=3, train_mlp=False)
        out = tc.forward_backward(data, loss_fn).result()
        results.append(([torch.tensor(o["logprobs"].data) for o in out.loss_fn_outputs], out.metrics["loss_sum"],
                        [p.grad.clone() for p in tc._run.params]))
        tc.optim_step(trio.AdamParams(learning_rate=0.0)).result()
    (every_lp, every_loss, every_grad), (lp, loss, grad) = results
    assert [len(x) for x in lp] == [len(d.model_input.to_ints()) for d in data]
    for a, b in zip(every_lp, lp):  # every position's logprob is still returned
        assert torch.allclose(a, b, atol=1e-5)
    assert loss == pytest.approx(every_loss, rel=1e-5)
    scale = max(float(g.abs().max()) for g in every_grad)
    assert scale > 0
    # the same gradient up to fp32 rounding, which differs with the shapes of the two computations
    for a, b in zip(every_grad, grad):
        assert float((a - b).abs().max()) <= 1e-3 * scale


def test_micro_batches_hold_rows_of_similar_length():
    from helpers.engine.training import _pack

    rows = [{"length": n} for n in (10, 100, 12, 98, 11)]
    batches = _pack(rows, budget=200)
    assert sorted(i for b in batches for i in b) == list(range(5))
    assert batches == [[0, 4, 2], [3, 1]]  # 3 x 12 and 2 x 100 padded tokens, not 2 x 100 three times


def test_static_cache_decoding_matches_the_dynamic_path(service, tokenizer, monkeypatch):
    """The GPU fast path (static KV cache, fixed shapes) run eagerly on CPU gives the same samples."""
    sc = service.create_sampling_client(base_model=MODEL)
    prompts = [list(tokenizer.encode("1, 2, 3, 4, 5,")), list(tokenizer.encode("The longest river in the world is"))]

    async def batch():
        return await asyncio.gather(*[
            sc.sample_async(prompt=trio.ModelInput.from_ints(p), num_samples=2,
                            sampling_params=params(max_tokens=4 + 2 * i, seed=i, stop=[","]))
            for i, p in enumerate(prompts)
        ])

    results = []
    for flag in ("0", "1"):
        monkeypatch.setenv("COURSE_ENGINE_STATIC", flag)
        results.append(asyncio.run(batch()))
    for dynamic, static in zip(*results):
        for a, b in zip(dynamic.sequences, static.sequences):
            assert a.tokens == b.tokens and a.stop_reason == b.stop_reason
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_top_k_one_and_tiny_top_p_are_greedy(service, tokenizer):
    sc = service.create_sampling_client(base_model=MODEL)
    prompt = trio.ModelInput.from_ints(list(tokenizer.encode("Once upon a time")))

    def tokens(**kw):
        return sc.sample(prompt=prompt, num_samples=2, sampling_params=params(max_tokens=4, **kw)).result()

    greedy = tokens(temperature=0.0).sequences[0].tokens
    for response in (tokens(top_k=1, seed=5), tokens(top_p=1e-6, seed=6)):
        assert [s.tokens for s in response.sequences] == [greedy, greedy]


def test_auto_shift_predicts_the_next_label(training, prompt):
    shifted = training.forward([_ce(prompt)]).result().loss_fn_outputs[0]["logprobs"].data
    unshifted = trio.Datum(model_input=trio.ModelInput.from_ints(prompt), loss_fn_inputs={"target_tokens": prompt})
    auto = training.forward([unshifted], auto_shift=True).result().loss_fn_outputs[0]["logprobs"].data
    assert auto[0] == 0.0 and len(auto) == len(prompt)
    assert auto[1:] == pytest.approx(shifted, rel=1e-5, abs=1e-5)  # fp32: the two inputs differ in length


def test_compiled_decode_step_recompiles_a_few_times_not_once_per_shape(service, tokenizer, monkeypatch):
    """Static decoding over many (rows, cache length) buckets: dynamo compiles at most 3 graphs.

    One graph per bucket cost the first H200 GRPO step 254 s of compilation.
    """
    import torch
    from torch._dynamo.utils import counters

    from helpers.engine.host import get_host

    monkeypatch.setenv("COURSE_ENGINE_STATIC", "1")
    monkeypatch.setenv("COURSE_ENGINE_COMPILE", "eager")
    host = get_host(MODEL)
    host._steps.clear()
    torch._dynamo.reset()
    counters.clear()
    sc = service.create_sampling_client(base_model=MODEL)
    try:
        # four shapes: rows 2 / 9 -> buckets 8 / 16; ~12 / ~560 prompt tokens -> cache 512 / 1024
        for rows, words in ((2, 10), (9, 10), (2, 550), (9, 550)):
            prompt = list(tokenizer.encode("hello " * words))

            async def batch():
                return await asyncio.gather(*[
                    sc.sample_async(prompt=trio.ModelInput.from_ints(prompt + [i]), num_samples=1,
                                    sampling_params=params(max_tokens=2, seed=i)) for i in range(rows)])

            responses = asyncio.run(batch())
            assert all(len(r.sequences[0].tokens) >= 1 for r in responses)
        assert 1 <= counters["stats"]["unique_graphs"] <= 3
        assert not counters["graph_break"]
    finally:
        host._steps.clear()
        torch._dynamo.reset()


def test_checkpoints_carry_the_tokenizer_split_and_refuse_another(service, prompt, tmp_path):
    """Weights trained where `<tool_call>` was four tokens must not be sampled where it is one."""
    import json
    import shutil

    from helpers.engine.local import resolve_path

    tc = service.create_lora_training_client(MODEL, rank=4, seed=1, train_mlp=False, train_unembed=False)
    saved = tc.save_weights_for_sampler("fingerprint").result()
    directory = resolve_path(saved.path)
    meta = json.loads((directory / "meta.json").read_text())
    assert meta["tokenizer"]["<|im_end|>"] == [tokenizer_ids := tc.get_tokenizer().convert_tokens_to_ids("<|im_end|>")]
    assert tokenizer_ids is not None
    service.create_sampling_client(MODEL, model_path=saved.path)  # same tokenizer: fine

    other = tmp_path / "other"
    shutil.copytree(directory, other)
    meta["tokenizer"]["<|im_end|>"] = [27, 91, 318, 6213, 91, 29]
    (other / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ValidationError, match="splits the chat-template markers differently"):
        service.create_sampling_client(MODEL, model_path=str(other))
    fresh = service.create_lora_training_client(MODEL, rank=4, train_mlp=False, train_unembed=False)
    with pytest.raises(ValidationError, match="re-provision"):
        fresh.load_state(str(other))


def _word_level_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "<": 1, ">": 2, "tool": 3, "_": 4, "call": 5, "hi": 6, "<tool_call>": 7, "<|im_end|>": 8,
             "|": 9, "im": 10, "end": 11}
    raw = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    raw.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Punctuation()])
    return PreTrainedTokenizerFast(tokenizer_object=raw)


def test_learned_markers_become_single_tokens():
    """transformers 5.17 left user-defined GGUF tokens split; a token the model learned is made whole."""
    from helpers.models import settle_marker_tokens

    tok = _word_level_tokenizer()
    assert tok.encode("<tool_call>hi", add_special_tokens=False) != [7, 6]
    changed = settle_marker_tokens(tok, [(7, "<tool_call>", 4), (8, "<|im_end|>", 3), (99, "<absent>", 4)])
    assert changed == {"<tool_call>": "single", "<|im_end|>": "single"}
    assert tok.encode("<tool_call>hi<|im_end|>", add_special_tokens=False) == [7, 6, 8]
    # user-defined markers stay in decoded text, control tokens are special
    decoded = tok.decode([7, 6, 8], skip_special_tokens=True)
    assert "<tool_call>" in decoded and "<|im_end|>" not in decoded
    assert settle_marker_tokens(tok, [(7, "<tool_call>", 4)]) == {}  # idempotent


def test_untrained_markers_are_spelled_in_pieces(tmp_path):
    """A user-defined token the model never learned is split the same way on every version."""
    import torch
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast

    from helpers.models import settle_marker_tokens, untrained_rows

    embeddings = torch.randn(12, 16)
    embeddings[7] = embeddings[5] * 3  # same direction: an initial vector nobody trained
    assert untrained_rows(embeddings, [5, 7, 8]) == {5, 7}
    assert untrained_rows(embeddings, [7, 8]) == set()
    tok = _word_level_tokenizer()
    tok.add_tokens([AddedToken("<tool_call>", special=False, normalized=False)])  # what 5.24 does
    assert tok.encode("<tool_call>", add_special_tokens=False) == [7]
    changed = settle_marker_tokens(tok, [(7, "<tool_call>", 4), (8, "<|im_end|>", 3)], untrained={7})
    assert changed == {"<tool_call>": "pieces", "<|im_end|>": "single"}
    pieces = tok.encode("<tool_call>hi", add_special_tokens=False)
    assert pieces[:4] == [1, 3, 4, 5] and 7 not in pieces
    assert tok.decode(pieces).replace(" ", "") == "<tool_call>hi"
    tok.save_pretrained(tmp_path)  # the rule survives the cache
    again = PreTrainedTokenizerFast.from_pretrained(tmp_path)
    assert again.encode("<tool_call>hi<|im_end|>", add_special_tokens=False) == pieces + [8]


def test_warm_up_decodes_every_requested_shape(service):
    from helpers.engine.probes import warm_up_decoding

    from helpers.engine.host import get_host

    sc = service.create_sampling_client(base_model=MODEL)
    before = dict(get_host(MODEL).stats)
    timings = warm_up_decoding(sc, shapes=((1, 8), (3, 20)), max_tokens=2)
    after = get_host(MODEL).stats
    assert [(t["rows"], t["prompt_tokens"]) for t in timings] == [(1, 9), (3, 21)]
    assert after["sampled_rows"] - before["sampled_rows"] == 4  # every row of every shape was decoded
    assert after["decode_batches"] - before["decode_batches"] == 2  # each shape's rows in one batch
    assert all(t["seconds"] > 0 for t in timings)


def _random_adapter(service, seed: int, train_unembed: bool):
    """A sampling client whose LoRA is far from zero (B is zero at init), on every projection."""
    tc = service.create_lora_training_client(MODEL, rank=4, seed=seed, train_unembed=train_unembed)
    host = get_host(MODEL)

    def perturb():
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for name, param in host.peft.named_parameters():
                if "lora_B" in name and f".run_{tc.training_run_cuid}." in name:
                    param.copy_(torch.randn(param.shape, generator=gen) * 0.05)
                    changed.append(name)

    changed: list[str] = []
    host.call(perturb).result()
    assert changed
    return tc.save_weights_and_get_sampling_client()


def test_graph_decoding_matches_the_transformers_forward(service, tokenizer, monkeypatch):
    """The decode step written out in tensor ops (what the GPU replays as CUDA graphs) draws the
    same tokens with the same logprobs as transformers' forward, with and without a LoRA adapter,
    for rows of different prompt lengths, stop strings and sampling settings."""
    clients = [service.create_sampling_client(base_model=MODEL), _random_adapter(service, 21, train_unembed=True)]
    prompts = [list(tokenizer.encode("1, 2, 3, 4, 5,")), list(tokenizer.encode("The longest river in the world is"))]

    async def batch(sc):
        return await asyncio.gather(*[
            sc.sample_async(prompt=trio.ModelInput.from_ints(p), num_samples=3,
                            sampling_params=params(max_tokens=11 + 3 * i, seed=i, stop=[","] if i == 0 else None,
                                                   top_p=0.9 if i else 1.0))
            for i, p in enumerate(prompts)
        ])

    for sc in clients:
        results = {}
        for path in ("dynamic", "graphs"):
            monkeypatch.setenv("COURSE_ENGINE_DECODE", path)
            results[path] = asyncio.run(batch(sc))
        for dynamic, graphs in zip(results["dynamic"], results["graphs"]):
            for a, b in zip(dynamic.sequences, graphs.sequences):
                assert a.tokens == b.tokens and a.stop_reason == b.stop_reason
                assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    adapted = [s.tokens for r in results["graphs"] for s in r.sequences]
    monkeypatch.setenv("COURSE_ENGINE_DECODE", "graphs")
    base = [s.tokens for r in asyncio.run(batch(clients[0])) for s in r.sequences]
    assert adapted != base  # the adapter is really applied on the graph path


def test_an_unknown_decode_path_is_refused(service, monkeypatch):
    from helpers.engine.sampler import decode_path

    monkeypatch.setenv("COURSE_ENGINE_DECODE", "warp")
    with pytest.raises(ValueError, match="COURSE_ENGINE_DECODE"):
        decode_path(get_host(MODEL))


def test_capturing_a_graph_does_not_advance_the_decode_state(service, tokenizer, monkeypatch):
    """Capturing a CUDA graph runs its chunk once for real. Here (no CUDA) that run is simulated:
    the tokens must still be those of the transformers forward, so the capture must happen before
    the state is filled with the batch it decodes."""
    from helpers.engine import graphs

    original = graphs.GraphDecoder.runner

    def capturing_runner(self, weights, state, slot, truncate, greedy):
        run = original(self, weights, state, slot, truncate, greedy)
        run()  # what the warm-up before a capture does to the state
        return run

    sc = service.create_sampling_client(base_model=MODEL)
    prompt = list(tokenizer.encode("The longest river in the world is"))

    def sample():
        return sc.sample(prompt=trio.ModelInput.from_ints(prompt), num_samples=2,
                         sampling_params=params(max_tokens=12, seed=4)).result()

    monkeypatch.setenv("COURSE_ENGINE_DECODE", "dynamic")
    expected = [s.tokens for s in sample().sequences]
    monkeypatch.setenv("COURSE_ENGINE_DECODE", "graphs")
    monkeypatch.setattr(graphs.GraphDecoder, "runner", capturing_runner)
    assert [s.tokens for s in sample().sequences] == expected
