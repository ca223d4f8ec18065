"""The GPU window's shell scripts: they parse, and a call brings back what fits, the named policies first."""

from __future__ import annotations

import re
import subprocess
import tarfile
from pathlib import Path

import pytest

GPU = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu"


@pytest.mark.parametrize("script", sorted(p.name for p in GPU.glob("*.sh")))
def test_every_window_script_parses(script):
    subprocess.run(["bash", "-n", str(GPU / script)], check=True)


def test_pack_takes_the_named_adapters_first_and_stops_at_the_transfer_limit(tmp_path):
    results = tmp_path / "results"
    for name in ("answers", "exact", "trim_answers", "trim_exact"):
        folder = results / name / "adapter"
        folder.mkdir(parents=True)
        (folder / "adapter.safetensors").write_bytes(b"\0" * (17 << 20))  # a 0.5B rank-16 adapter's size
        (folder / "meta.json").write_text("{}")
    (results / "window.log").write_text("all done\n")
    out = tmp_path / "out"
    done = subprocess.run(["bash", str(GPU / "pack.sh"), str(results), str(out)], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "ADAPTERS": "trim_exact trim_answers"}, check=True)
    parts = sorted(out.glob("adapters.tar.part*"))
    assert all(p.stat().st_size <= 16 << 20 for p in out.iterdir()) and len(list(out.iterdir())) <= 8
    assert sum(p.stat().st_size for p in out.iterdir()) <= 64 << 20
    joined = tmp_path / "adapters.tar"
    joined.write_bytes(b"".join(p.read_bytes() for p in parts))
    with tarfile.open(joined) as tar:
        names = tar.getnames()
    assert names[:2] == ["results/trim_exact/adapter/adapter.safetensors",
                         "results/trim_answers/adapter/adapter.safetensors"]
    assert len(names) == 3 and "left for a later call" in done.stdout  # the fourth waits for the next call
    with tarfile.open(out / "window.tgz") as tar:
        packed = tar.getnames()
    assert "results/window.log" in packed and "results/exact/adapter/meta.json" in packed
    assert not any(name.endswith("adapter.safetensors") for name in packed)


def test_the_throughput_report_counts_as_updates_only_the_steps_that_changed_the_weights(tmp_path):
    import json

    bench = _bench_module()
    step = dict(time_step=30.0, time_sampling=10.0, time_search=1.0, time_search_latency_sum=1.0, time_training=5.0)
    rows = [dict(step, informative_groups=6, input_tokens=99_999),  # the first step: left out of the trainer's rate
            dict(step, informative_groups=0, input_tokens=0),  # nothing to learn from
            dict(step, informative_groups=5, optim_skipped=True, log_ratio_max=0.5, input_tokens=20_000),  # a non-finite gradient
            dict(step, informative_groups=7, input_tokens=40_000)]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = bench.summarise_run(tmp_path)
    assert (summary["steps"], summary["updates"], summary["minutes"]) == (4, 2, 2.0)
    assert summary["updates_per_min"] == 1.0 and summary["informative_groups_per_min"] == 9.0
    assert summary["skipped_non_finite"] == 1 and summary["log_ratio_max"] == 0.5
    assert summary["training_tokens_per_s"] == 4000  # 60,000 tokens in 3 later steps of 5 s of training


def _bench_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_grpo_gpu", GPU.parent / "bench_grpo_gpu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_trainer_benchmark_shapes_its_datums_like_a_search_agents_step():
    bench = _bench_module()
    datums = bench.train_datums(5000, rows=12, length=400, trained=32, seed=3)
    assert len(datums) == 12
    lengths = [d.model_input.length for d in datums]
    assert all(300 <= n <= 500 for n in lengths) and len(set(lengths)) > 1  # ±25 %, not all alike
    for row, d in enumerate(datums):
        advantages = d.loss_fn_inputs["advantages"].to_numpy()
        assert len(advantages) == d.model_input.length == len(d.loss_fn_inputs["target_tokens"].to_numpy())
        assert (advantages[:-32] == 0).all() and (abs(advantages[-32:]) == 1).all()  # only the policy's own tail
        assert max(d.model_input.to_ints()) < 5000
    again = bench.train_datums(5000, rows=12, length=400, trained=32, seed=3)
    assert [d.model_input.to_ints() for d in again] == [d.model_input.to_ints() for d in datums]


def test_the_trainer_benchmark_counts_a_recomputed_forward():
    from types import SimpleNamespace

    import torch

    bench = _bench_module()
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 6))  # 40 + 30 weights
    model.config = SimpleNamespace(hidden_size=4, vocab_size=10)
    kept, recomputed = bench.train_flops_per_token(model, False), bench.train_flops_per_token(model, True)
    assert kept == 2 * 30 * 2 + 2 * 10 * 4 and recomputed - kept == 2 * 30


def test_the_throughput_report_names_a_stage_folder_without_metrics_instead_of_failing(tmp_path, capsys):
    bench = _bench_module()
    (tmp_path / "grpo_trim").mkdir()  # a stage of the preset that this run did not train
    assert bench.summarise_run(tmp_path / "grpo_trim") == {"run": str(tmp_path / "grpo_trim"), "steps": 0}
    assert bench.main(["report", str(tmp_path / "grpo_trim")]) == 0
    assert "no steps (no metrics.jsonl)" in capsys.readouterr().out


def test_pack_also_takes_the_adapters_of_a_second_scripts_folder(tmp_path):
    results = tmp_path / "results"
    for name in ("solo", "gain/gain5_s3"):
        folder = results / name / "adapter"
        folder.mkdir(parents=True)
        (folder / "adapter.safetensors").write_bytes(b"\1" * 1024)
    out = tmp_path / "out"
    subprocess.run(["bash", str(GPU / "pack.sh"), str(results), str(out)], capture_output=True, text=True,
                   env={"PATH": "/usr/bin:/bin", "ADAPTERS": "gain/gain5_s3"}, check=True)
    with tarfile.open(out / "adapters.tar.part0") as tar:
        assert tar.getnames() == ["results/gain/gain5_s3/adapter/adapter.safetensors",
                                  "results/solo/adapter/adapter.safetensors"]


def _after(tmp_path, log_text):
    results = tmp_path / "results"
    results.mkdir()
    (results / "window.log").write_text(log_text)
    second = tmp_path / "second.sh"
    second.write_text('echo "$RESULTS $WORK" > "$RESULTS/ran"\n')
    done = subprocess.run(["bash", str(GPU / "after.sh"), "phase 1 exported", "gain", str(second)],
                          capture_output=True, text=True, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "RESULTS": str(results), "WORK": str(tmp_path / "work")})
    return done, results


def test_after_starts_the_second_script_in_its_own_folders_once_the_line_is_logged(tmp_path):
    done, results = _after(tmp_path, "12:00 setup done\n12:09 phase 1 exported\n")
    assert done.returncode == 0
    assert (results / "gain" / "ran").read_text().split() == [str(results / "gain"), f"{tmp_path / 'work'}-gain"]


def test_after_gives_up_when_the_first_script_ended_without_the_line(tmp_path):
    done, results = _after(tmp_path, "12:00 setup failed\n")
    assert done.returncode == 1 and not (results / "gain" / "ran").exists()
    assert "not started" in (results / "window.log").read_text()


def _recording_python(tmp_path, then=""):
    """A stand-in for the window's Python that appends its arguments to calls.txt, then runs `then` (bash)."""
    calls = tmp_path / "calls.txt"
    python = tmp_path / "python"
    python.write_text('#!/bin/bash\necho "$*" >> "%s"\n' % calls + then)
    python.chmod(0o755)
    return python, calls


def _adapter_evals(tmp_path, evals):
    """adapter_evals.sh with a Python that records its arguments (and writes an evaluation's rows)."""
    python, calls = _recording_python(
        tmp_path, 'while [ $# -gt 0 ]; do [ "$1" = --output ] && echo "{}" > "$2"; shift; done\n')
    done = subprocess.run(["bash", str(GPU / "adapter_evals.sh")], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": str(python), "EVALS": evals,
                               "RESULTS": str(tmp_path / "results"), "BUNDLE": str(tmp_path / "none")})
    return done, calls.read_text().splitlines() if calls.exists() else []


def test_adapter_evals_gives_each_adapter_its_passages_and_budgets_side_by_side(tmp_path):
    done, calls = _adapter_evals(tmp_path, "top5=a/adapter@5 base=b/adapter@3")
    assert done.returncode == 0, done.stdout + done.stderr
    evals = {c.split("--label ")[1].split()[0]: c.split() for c in calls if c.startswith("-m helpers.eval")}
    assert set(evals) == {"top5", "base"}

    def value(args, flag):
        return args[args.index(flag) + 1]

    assert value(evals["top5"], "--model-path") == "a/adapter" and value(evals["top5"], "--search-topk") == "5"
    assert value(evals["top5"], "--rollout.max-tool-response-tokens") == "1280"  # 256 a passage
    assert value(evals["top5"], "--rollout.max-trajectory-tokens") == str(4096 + 3 * (1280 - 768))
    assert value(evals["base"], "--search-topk") == "3" and value(evals["base"], "--rollout.max-trajectory-tokens") == "4096"
    assert any(c.startswith("-m helpers.analyse --search-learned") for c in calls)
    log = (tmp_path / "results" / "window.log").read_text()
    assert "top5: evaluation exited 0" in log and "all done" in log


def test_adapter_evals_refuses_an_item_without_its_passages_before_the_set_up(tmp_path):
    done, calls = _adapter_evals(tmp_path, "top5=a/adapter")
    assert done.returncode == 2 and "NAME=ADAPTER@K" in done.stdout
    assert calls == []  # nothing ran, not even the set-up


def _trim_variants(tmp_path, **env):
    """trim_variants.sh with a Python that records its arguments and the recompute setting it ran with."""
    tmp_path.mkdir(exist_ok=True)
    calls = tmp_path / "calls.txt"
    python = tmp_path / "python"
    # an evaluation leaves its rows where the script looks for them, as helpers.experiment does
    python.write_text('#!/bin/bash\nprintf "RECOMPUTE=%%s %%s\\n" "$COURSE_ENGINE_RECOMPUTE" "$*" >> "%s"\n'
                      'case "$*" in *"--stage eval"*) out=$(sed -E "s/.*--out ([^ ]+).*/\\1/" <<<"$*")\n'
                      '  mkdir -p "$out/eval" && touch "$out/eval/sft_grpo.jsonl" ;;\n'
                      '  "-m helpers.eval "*) touch "$(sed -E "s/.*--output ([^ ]+).*/\\1/" <<<"$*")" ;;\n'
                      # the pass@k filter writes its file, or fails where the test says so
                      '  "-m helpers.question_filter "*) [ -n "$FILTER_FAILS" ] && exit 1\n'
                      '    touch "$(sed -E "s/.*--out ([^ ]+).*/\\1/" <<<"$*")" ;; esac\n' % calls)
    python.chmod(0o755)
    done = subprocess.run(["bash", str(GPU / "trim_variants.sh")], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": str(python), "RESULTS": str(tmp_path / "results"),
                               "WORK": str(tmp_path / "work"), "BUNDLE": str(tmp_path / "none"),
                               "INIT_EVAL": str(tmp_path / "none.jsonl"), **env})
    assert done.returncode == 0, done.stdout + done.stderr
    return calls.read_text().splitlines()


def test_trim_variants_keeps_activations_only_for_the_seeds_named_and_none_when_the_list_is_empty(tmp_path):
    def recompute(lines, seed):
        return {c.split()[0] for c in lines if "--stage grpo" in c and f"base_s{seed}" in c}

    lines = _trim_variants(tmp_path / "default", VARIANTS="base", SEEDS="1,2")
    assert recompute(lines, 1) == {"RECOMPUTE=0"} and recompute(lines, 2) == {"RECOMPUTE=1"}
    lines = _trim_variants(tmp_path / "none", VARIANTS="base", SEEDS="1,2", KEEP_ACTIVATIONS_SEEDS="")
    assert recompute(lines, 1) == recompute(lines, 2) == {"RECOMPUTE=1"}


def test_trim_variants_pairs_every_policy_with_init_on_both_splits_when_init_has_validation_rows(tmp_path):
    init_test, init_val = tmp_path / "init_test.jsonl", tmp_path / "init_val.jsonl"
    init_test.write_text(""), init_val.write_text("")

    def verdicts(lines):
        return [c.split(" -m helpers.course.seeds ")[1].split() for c in lines if "helpers.course.seeds" in c]

    lines = _trim_variants(tmp_path / "both", VARIANTS="base-k2", SEEDS="1", INIT_EVAL=str(init_test),
                           INIT_VAL_EVAL=str(init_val))
    test, val = verdicts(lines)
    assert test[0] == f"init={init_test}" and val[0] == f"init={init_val}"
    assert test[1].startswith("base-k2_s1=") and val[1].startswith("base-k2_s1=") and val[1].endswith(
        "/validation/eval/sft_grpo.jsonl")
    assert test[-2:] == val[-2:] == ["--paired-with", "init"]
    # without INIT's validation rows, validation lists the policies alone and pairs nothing
    test, val = verdicts(_trim_variants(tmp_path / "test_only", VARIANTS="base-k2", SEEDS="1", INIT_EVAL=str(init_test)))
    assert test[-2:] == ["--paired-with", "init"]
    assert [item.split("=")[0] for item in val] == ["base-k2_s1"]


def test_trim_variants_adds_fullwiki_for_every_policy_and_init_once_paired_with_init(tmp_path):
    lines = _trim_variants(tmp_path, VARIANTS="base-k2 tool4-k2", SEEDS="1 2", FULLWIKI="1", INIT_TOPK="2",
                           INIT="x/adapter")
    wiki = [c for c in lines if "--stage eval" in c and "eval.split=fullwiki" in c]
    assert sorted(c.split("--out ")[1].split()[0].split("/")[-2] for c in wiki) == [
        "base-k2_s1", "base-k2_s2", "tool4-k2_s1", "tool4-k2_s2"]
    assert all("--set eval.search_topk=2" in c for c in wiki)  # as each policy searched in training
    init = [c.split() for c in lines if c.startswith("RECOMPUTE=") and "-m helpers.eval " in c]
    assert len(init) == 1  # INIT is evaluated once, not once a round
    [args] = init
    assert args[args.index("--model-path") + 1] == "x/adapter" and args[args.index("--split") + 1] == "fullwiki"
    assert args[args.index("--search-topk") + 1] == "2"
    verdicts = [c.split(" -m helpers.course.seeds ")[1].split() for c in lines if "helpers.course.seeds" in c]
    last = verdicts[-1]  # the second round's fullwiki verdicts: INIT first, all four policies, paired
    assert last[0].startswith("init=") and last[0].endswith("/init/fullwiki.jsonl")
    assert len(last) == 1 + 4 + 2 and last[-2:] == ["--paired-with", "init"]
    assert all(item.endswith("/fullwiki/eval/sft_grpo.jsonl") for item in last[1:5])
    # without FULLWIKI, two evaluations a policy and no fullwiki anywhere
    assert not any("fullwiki" in c for c in _trim_variants(tmp_path / "off", VARIANTS="base-k2", SEEDS="1"))


def test_trim_variants_trains_and_evaluates_exact5_with_five_passages_and_budgets_to_fit(tmp_path):
    lines = _trim_variants(tmp_path, VARIANTS="exact5 base", SEEDS="1")

    def experiment(label, stage):
        [line] = [c for c in lines if f"--stage {stage}" in c and f"/{label} " in c + " "]
        return line

    tool, trajectory = 5 * 256, 4096 + 3 * (5 * 256 - 768)
    trained = experiment("exact5_s1", "grpo")
    assert all(f"--set {item}" in trained for item in (
        "trim.reward=exact_match", "trim.synthetic_share=0", "trim.search_topk=5",
        f"trim.rollout.max_tool_response_tokens={tool}", f"trim.rollout.max_trajectory_tokens={trajectory}"))
    evaluations = [c for c in lines if "--stage eval" in c and "exact5_s1" in c]
    assert len(evaluations) == 2  # test and validation, both searching as the policy was trained to
    assert all("--set eval.search_topk=5" in c and f"eval.rollout.max_tool_response_tokens={tool}" in c
               for c in evaluations)
    assert not any("search_topk" in c for c in lines if "base_s1" in c)  # the other variants as recorded


def test_trim_variants_trains_any_variant_with_k_passages_and_evaluates_it_with_them(tmp_path):
    lines = _trim_variants(tmp_path, VARIANTS="charge5-k2 exact2", SEEDS="1")
    tool, trajectory = 2 * 256, 4096 + 3 * (2 * 256 - 768)
    [trained] = [c for c in lines if "--stage grpo" in c and "/charge5-k2_s1 " in c]
    assert all(f"--set {item}" in trained for item in (
        "trim.reward=search_gain", "trim.search_topk=2", f"trim.rollout.max_tool_response_tokens={tool}",
        f"trim.rollout.max_trajectory_tokens={trajectory}"))
    assert "trim.synthetic_share=0" not in trained  # charge5 keeps its synthetic half
    evaluations = [c for c in lines if "--stage eval" in c and "charge5-k2_s1" in c]
    assert len(evaluations) == 2 and all("--set eval.search_topk=2" in c for c in evaluations)
    [exact2] = [c for c in lines if "--stage grpo" in c and "/exact2_s1 " in c]
    assert "--set trim.search_topk=2" in exact2 and "--set trim.reward=exact_match" in exact2


def test_trim_variants_bounds_every_stage_by_trim_max_steps_after_the_variants_own_settings(tmp_path):
    def trained(lines, name):
        [line] = [c.split() for c in lines if "--stage grpo" in c and f"/{name} " in c + " "]
        return [line[i + 1] for i, arg in enumerate(line) if arg == "--set"]

    lines = _trim_variants(tmp_path / "thirty", VARIANTS="gain5ns-k2 exact2", SEEDS="1", TRIM_MAX_STEPS="30")
    assert trained(lines, "gain5ns-k2_s1")[-1] == "trim.max_steps=30"
    exact = trained(lines, "exact2_s1")  # its own 400 comes first, so the later 30 is the one that holds
    assert exact.index("trim.max_steps=400") < exact.index("trim.max_steps=30") == len(exact) - 1
    # unset: the preset's bound, nothing added
    assert not any("max_steps" in item for item in trained(_trim_variants(tmp_path / "unset", VARIANTS="base",
                                                                           SEEDS="1"), "base_s1"))


def test_trim_variants_filters_the_questions_once_from_init_for_the_f_variants_only(tmp_path):
    lines = _trim_variants(tmp_path, VARIANTS="gain5ns-k2 gain5ns-k2-f", SEEDS="1 2", INIT="x/adapter")
    results = tmp_path / "results"
    [judged] = [c.split() for c in lines if "-m helpers.question_filter " in c]  # once, not once a round
    assert lines.index(" ".join(judged)) < min(i for i, c in enumerate(lines) if "--stage grpo" in c)
    sets = [judged[i + 1] for i, arg in enumerate(judged) if arg == "--set"]
    assert "trim.reward=search_gain" in sets and "trim.search_topk=2" in sets  # the -f variant's reward, passages
    assert judged[judged.index("--stage") + 1] == "trim" and judged[judged.index("--init-from") + 1] == "x/adapter"
    assert judged[judged.index("--out") + 1] == str(results / "question_filter.json")

    def trained(name):
        [line] = [c for c in lines if "--stage grpo" in c and f"/{name} " in c + " "]
        return line

    for seed in (1, 2):
        assert f"--set trim.question_filter={results}/question_filter.json" in trained(f"gain5ns-k2-f_s{seed}")
        assert "question_filter" not in trained(f"gain5ns-k2_s{seed}")
        assert "trim.search_topk=2" in trained(f"gain5ns-k2-f_s{seed}").split()
    evaluations = [c.split() for c in lines if "--stage eval" in c and "gain5ns-k2-f_s1" in c]
    assert len(evaluations) == 2 and all("eval.search_topk=2" in c for c in evaluations)  # whole arguments
    # no -f variant: no filter
    assert not any("question_filter" in c for c in _trim_variants(tmp_path / "none", VARIANTS="base", SEEDS="1"))


def test_trim_variants_leaves_the_f_variants_out_when_the_filter_fails_and_trains_the_rest(tmp_path):
    lines = _trim_variants(tmp_path, VARIANTS="base-f gain5ns-k2", SEEDS="1", FILTER_FAILS="1")
    trained = [c for c in lines if "--stage grpo" in c]
    assert len(trained) == 1 and "/gain5ns-k2_s1 " in trained[0]
    assert "the -f variants are left out" in (tmp_path / "results" / "window.log").read_text()


def test_trim_variants_caps_dynamic_sampling_rounds_for_r_variants_with_their_passages_and_filter(tmp_path):
    lines = _trim_variants(tmp_path, VARIANTS="answers-k2 answers-k2-r1 answers-k2-r1-f", SEEDS="1")

    def sets(name):
        [line] = [c.split() for c in lines if "--stage grpo" in c and f"/{name} " in c + " "]
        return [line[i + 1] for i, arg in enumerate(line) if arg == "--set"]

    one = sets("answers-k2-r1_s1")
    assert "trim.dynamic_sampling_rounds=1" in one and "trim.search_topk=2" in one and "trim.reward=exact_match" in one
    assert not any("dynamic_sampling_rounds" in item for item in sets("answers-k2_s1"))  # the preset's rounds
    filtered = sets("answers-k2-r1-f_s1")
    assert "trim.dynamic_sampling_rounds=1" in filtered and any(item.startswith("trim.question_filter=") for item in filtered)
    evaluations = [c.split() for c in lines if "--stage eval" in c and "answers-k2-r1_s1" in c]
    assert len(evaluations) == 2 and all("eval.search_topk=2" in c for c in evaluations)


def test_trim_variants_trains_read_on_answers_mix_with_half_the_gold_handed_over_and_evaluates_it_plainly(tmp_path):
    lines = _trim_variants(tmp_path, VARIANTS="read-k2 answers-k2", SEEDS="1")

    def sets(line):
        words = line.split()
        return [words[i + 1] for i, arg in enumerate(words) if arg == "--set"]

    [read] = [sets(c) for c in lines if "--stage grpo" in c and "/read-k2_s1 " in c + " "]
    [answers] = [sets(c) for c in lines if "--stage grpo" in c and "/answers-k2_s1 " in c + " "]
    assert "trim.gold_first_share=0.5" in read and set(read) - {"trim.gold_first_share=0.5"} == set(answers)
    evaluations = [sets(c) for c in lines if "--stage eval" in c and "read-k2_s1" in c]
    # evaluated with the index alone: the curriculum is a training setting, never an evaluation's
    assert len(evaluations) == 2 and all("eval.search_topk=2" in e and not any("gold" in i for i in e) for e in evaluations)


def test_trim_variants_without_evaluations_trains_exports_and_reports_throughput_only(tmp_path):
    lines = _trim_variants(tmp_path, VARIANTS="answers-k2-r1", SEEDS="1", EVALS="0")
    assert any("--stage grpo" in c for c in lines) and any("bench_grpo_gpu.py report" in c for c in lines)
    assert not any("--stage eval" in c or "helpers.analyse" in c or "helpers.course.seeds" in c for c in lines)
    assert "all done" in (tmp_path / "results" / "window.log").read_text()
    done = subprocess.run(["bash", str(GPU / "trim_variants.sh")], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "EVALS": "no", "RESULTS": str(tmp_path / "r2")})
    assert done.returncode == 2 and "throughput only" in done.stdout


def test_read_window_runs_read_then_both_ceilings_then_the_two_throughput_runs_each_alone(tmp_path):
    python, calls = _recording_python(tmp_path)
    done = subprocess.run(["bash", str(GPU / "read_window.sh")], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": str(python), "RESULTS": str(tmp_path / "results"),
                               "WORK": str(tmp_path / "work"), "BUNDLE": str(tmp_path / "none"), "INIT": "x/adapter",
                               "INIT_EVAL": str(tmp_path / "none.jsonl")})
    assert done.returncode == 0, done.stdout + done.stderr
    lines = calls.read_text().splitlines()
    grpo = [c for c in lines if "--stage grpo" in c]
    assert [re.search(r"/([^/ ]+_s1) ", c).group(1) for c in grpo] == ["read-k2_s1", "answers-k2-r1_s1", "answers-k2_s1"]
    assert all("--init-from x/adapter" in c for c in grpo)
    ceilings = [c for c in lines if "reader_ceiling.py" in c]
    assert sorted(c.split("--model-path ")[1].split()[0] for c in ceilings) == sorted(
        ["x/adapter", str(tmp_path / "results" / "read-k2_s1" / "adapter")])
    assert all("--searches gold" in c and "--topk 2" in c for c in ceilings)
    # the read run alone is evaluated; the throughput runs are not
    assert {re.search(r"--out (\S+)", c).group(1).split("/results/")[1] for c in lines if "--stage eval" in c} == {
        "read-k2_s1", "read-k2_s1/validation"}
    log = (tmp_path / "results" / "window.log").read_text()
    assert "ceilings done" in log and log.index("all done") < log.index("ceilings done")
    for run in ("tp_r1", "tp_r3"):
        assert "all done" in (tmp_path / "results" / run / "window.log").read_text()


def test_run_sh_window_logs_run_sh_status_and_each_stage_logs_verdict_and_ends(tmp_path):
    # a Python that records its arguments; the SFT stage writes a traceback into its log and fails
    python, calls = _recording_python(tmp_path, 'case "$*" in *"--stage sft"*) echo Traceback; exit 1 ;; esac\n')
    done = subprocess.run(["bash", str(GPU / "run_sh_window.sh")], capture_output=True, text=True, timeout=60,
                          cwd=GPU.parents[1], env={"PATH": "/usr/bin:/bin", "PYTHON": str(python), "PRESET": "cpu-dry",
                                                  "RESULTS": str(tmp_path / "results"), "WORK": str(tmp_path / "work"),
                                                  "BUNDLE": str(tmp_path / "none")})
    assert done.returncode == 0, done.stdout + done.stderr
    log = (tmp_path / "results" / "window.log").read_text()
    status = re.search(r"results/run.sh exited (\d+)", log)
    assert status and status.group(1) != "0"  # run.sh stops at the failed stage, and the window says so
    assert "sft.log: traceback" in log and log.rstrip().endswith("all done")
    assert any("--stage sft" in c and "--preset cpu-dry" in c for c in calls.read_text().splitlines())
    # then the decode step under the profiler: the default layer, the fastest captured and uncaptured
    traces = [c for c in calls.read_text().splitlines() if c.startswith("benchmarks/bench_grpo_gpu.py decode")]
    assert [("--eager" in c, "--trace 30" in c) for c in traces] == [(False, True), (False, True), (True, True)]
    for name in ("decode_trace_1", "decode_trace_merge_inductor", "decode_trace_merge_inductor_uncaptured"):
        assert f"{name} exited 0" in log and f"--out {tmp_path / 'results' / name}.json" in " ".join(traces)


def test_run_sh_window_gives_the_decode_traces_the_runs_adapter_and_can_skip_them(tmp_path):
    python, calls = _recording_python(tmp_path, 'case "$*" in *"--stage sft"*) mkdir -p "$RESULTS/cpu-dry/adapter" ;; esac\n')
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(python), "PRESET": "cpu-dry", "RESULTS": str(tmp_path / "results"),
           "WORK": str(tmp_path / "work"), "BUNDLE": str(tmp_path / "none")}
    done = subprocess.run(["bash", str(GPU / "run_sh_window.sh")], capture_output=True, text=True, timeout=60,
                          cwd=GPU.parents[1], env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    traces = [c for c in calls.read_text().splitlines() if c.startswith("benchmarks/bench_grpo_gpu.py decode")]
    assert len(traces) == 3 and all(f"--adapter {tmp_path / 'results' / 'cpu-dry' / 'adapter'}" in c for c in traces)
    calls.unlink()
    done = subprocess.run(["bash", str(GPU / "run_sh_window.sh")], capture_output=True, text=True, timeout=60,
                          cwd=GPU.parents[1], env={**env, "DECODE_TRACE": "0", "RESULTS": str(tmp_path / "again")})
    assert done.returncode == 0 and "all done" in (tmp_path / "again" / "window.log").read_text()
    assert not any("bench_grpo_gpu.py decode" in c for c in calls.read_text().splitlines())


def test_a_run_folder_with_a_checkpoint_is_said_to_resume_instead_of_starting_from_init(tmp_path):
    _trim_variants(tmp_path / "fresh", VARIANTS="base", SEEDS="1")
    assert "holds a checkpoint" not in (tmp_path / "fresh" / "results" / "window.log").read_text()
    earlier = tmp_path / "again" / "work" / "base_s1" / "grpo_trim"
    earlier.mkdir(parents=True)
    (earlier / "checkpoints.jsonl").write_text('{"step": 5}\n')
    _trim_variants(tmp_path / "again", VARIANTS="base", SEEDS="1", INIT="x/adapter")
    log = (tmp_path / "again" / "results" / "window.log").read_text()
    assert "base_s1: " in log and "holds a checkpoint, so it resumes there, not from x/adapter" in log


@pytest.mark.parametrize("variant", ["answers-r1-k2", "answers-r0", "answers-f-r1", "answers-r1-r2"])
def test_trim_variants_refuses_r_suffixes_out_of_order_or_zero_before_the_set_up(tmp_path, variant):
    done = subprocess.run(["bash", str(GPU / "trim_variants.sh")], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "VARIANTS": variant, "RESULTS": str(tmp_path / "r")})
    assert done.returncode == 2 and f"unknown variant {variant}" in done.stdout


@pytest.mark.parametrize("steps", ["0", "thirty", "-5", "1.5"])
def test_trim_variants_refuses_a_trim_max_steps_that_is_not_a_count_before_the_set_up(tmp_path, steps):
    done = subprocess.run(["bash", str(GPU / "trim_variants.sh")], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "VARIANTS": "base", "TRIM_MAX_STEPS": steps,
                               "RESULTS": str(tmp_path / "r")})
    assert done.returncode == 2 and f"not {steps}" in done.stdout


def test_setup_window_puts_the_bundled_synthetic_split_in_the_data_folder_before_set_up(tmp_path):
    """The split built on the CPU reaches the data folder before `helpers setup` runs (which keeps it when
    its fingerprint matches); a split already there is left alone."""
    bundle, data = tmp_path / "b", tmp_path / "data"
    (bundle / "synthetic").mkdir(parents=True)
    (bundle / "synthetic" / "synthetic.jsonl").write_text('{"id": "bundled"}\n')
    (bundle / "synthetic" / "synthetic_report.json").write_text("{}")
    # a candidate cache travels with the split, so the solvers there need not regenerate it
    (bundle / "synthetic" / "synthetic_comparisons.jsonl").write_text('{"version": 1}\n')
    seen = tmp_path / "seen.txt"
    python = tmp_path / "python"
    python.write_text('#!/bin/bash\ncase "$*" in "-m helpers setup"*) cat "$COURSE_DATA/synthetic.jsonl" >> "%s" ;; esac\n'
                      % seen)
    python.chmod(0o755)
    script = f'source {GPU / "common.sh"}; setup_window'
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(python), "BUNDLE": str(bundle), "COURSE_DATA": str(data),
           "RESULTS": str(tmp_path / "r")}
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert seen.read_text() == '{"id": "bundled"}\n' and (data / "synthetic_report.json").exists()
    assert (data / "synthetic_comparisons.jsonl").read_text() == '{"version": 1}\n'
    (data / "synthetic.jsonl").write_text('{"id": "built here"}\n')  # a second script on the same machine
    subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60, env=env, check=True)
    assert seen.read_text().splitlines()[-1] == '{"id": "built here"}'


@pytest.mark.parametrize("variant", ["exact0", "bogus", "bogus-k2", "exact5-k2", "charge5-k0", "base-f-f", "bogus-f", "base-f-k2"])
def test_trim_variants_refuses_an_unknown_variant_before_the_set_up(tmp_path, variant):
    done = subprocess.run(["bash", str(GPU / "trim_variants.sh")], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "VARIANTS": variant, "RESULTS": str(tmp_path / "r")})
    assert done.returncode == 2 and f"unknown variant {variant}" in done.stdout


def _three(tmp_path, mps_control: bool, **env):
    """three_side_by_side.sh with a Python that records its arguments and the MPS pipe it would use, and
    (with `mps_control`) an nvidia-cuda-mps-control that records what it was asked."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    calls = tmp_path / "calls.txt"
    python = bin_dir / "python"
    python.write_text('#!/bin/bash\nprintf "PIPE=%%s %%s\\n" "${CUDA_MPS_PIPE_DIRECTORY:-none}" "$*" >> "%s"\n' % calls)
    python.chmod(0o755)
    if mps_control:
        control = bin_dir / "nvidia-cuda-mps-control"
        control.write_text('#!/bin/bash\nprintf "control %%s stdin=%%s\\n" "$*" "$( [ "$1" = -d ] || cat)" >> "%s"\n' % calls)
        control.chmod(0o755)
    done = subprocess.run(["bash", str(GPU / "three_side_by_side.sh")], capture_output=True, text=True, timeout=60,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHON": str(python), "RESULTS": str(tmp_path / "r"),
                               "WORK": str(tmp_path / "w"), "BUNDLE": str(tmp_path / "none"),
                               "MPS_DIR": str(tmp_path / "mps"), **env})
    return done, calls.read_text().splitlines() if calls.exists() else []


def test_three_side_by_side_runs_its_processes_as_clients_of_its_own_mps_server_and_quits_it(tmp_path):
    done, calls = _three(tmp_path, mps_control=True, MPS="1", TAG="mps")
    assert done.returncode == 0, done.stdout + done.stderr
    runs = [c for c in calls if "--stage grpo" in c]
    assert len(runs) == 3 and all(c.startswith(f"PIPE={tmp_path / 'mps' / 'pipe'} ") for c in runs)
    assert all(any(f"/mps_{i} " in c for c in runs) for i in (1, 2, 3))  # the round's own folders
    control = [i for i, c in enumerate(calls) if c.startswith("control")]
    first_run, last_run = calls.index(runs[0]), calls.index(runs[-1])
    assert calls[control[0]].startswith("control -d") and control[0] < first_run  # the daemon first
    assert calls[control[-1]].endswith("stdin=quit") and control[-1] > last_run  # quit after the runs
    report = [c for c in calls if "bench_grpo_gpu.py report" in c]
    assert report and report[0].startswith("PIPE=none ")  # the server is gone before the report
    assert "MPS server up" in (tmp_path / "r" / "window.log").read_text()


def test_three_side_by_side_without_mps_or_where_mps_is_missing(tmp_path):
    done, calls = _three(tmp_path / "plain", mps_control=True, TAG="plain")
    assert done.returncode == 0, done.stdout + done.stderr
    runs = [c for c in calls if "--stage grpo" in c]
    assert len(runs) == 3 and all(c.startswith("PIPE=none ") for c in runs)
    assert not any(c.startswith("control") for c in calls)
    done, calls = _three(tmp_path / "missing", mps_control=False, MPS="1")
    assert done.returncode == 3 and not any("--stage grpo" in c for c in calls)  # no silent plain round
    assert "MPS unavailable" in (tmp_path / "missing" / "r" / "window.log").read_text()


def test_multihop_write_runs_the_writer_under_its_share_until_its_minutes_and_keeps_everything_in_results(tmp_path):
    calls = tmp_path / "calls.txt"
    python = tmp_path / "python"
    python.write_text('#!/bin/bash\nprintf "CAP=%%s %%s\\n" "$COURSE_CUDA_MEMORY_FRACTION" "$*" >> "%s"\n'
                      'case "$*" in *"multihop write"*) echo \'{"chains": 3, "kept": 2}\' ;;\n'
                      '  *"multihop solve"*) echo \'{"questions": 5, "left": 0}\' ;; esac\n' % calls)
    python.chmod(0o755)
    results = tmp_path / "r"
    done = subprocess.run(["bash", str(GPU / "multihop_write.sh")], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHON": str(python), "RESULTS": str(results),
                               "BUNDLE": str(tmp_path / "none"), "MINUTES": "5", "CAP": "0.05"})
    assert done.returncode == 0, done.stdout + done.stderr
    [write] = [c for c in calls.read_text().splitlines() if "-m helpers.multihop write" in c]
    args = write.split()
    assert args[0] == "CAP=0.05" and args[args.index("--model") + 1] == "qwen2.5-0.5b"
    assert all(args[args.index(flag) + 1] == str(results / name) for flag, name in (
        ("--out", "written.jsonl"), ("--verdicts", "verdicts.jsonl"), ("--progress", "written_progress.jsonl")))
    assert len(args[args.index("--until") + 1]) == 5  # HH:MM, the minutes from now
    # the solvers judge the questions without a verdict first, into a copy of the committed verdicts
    lines = calls.read_text().splitlines()
    [solve] = [i for i, c in enumerate(lines) if "-m helpers.multihop solve" in c]
    assert solve < lines.index(write) and f"--out {results / 'verdicts.jsonl'}" in lines[solve]
    assert (results / "verdicts.jsonl").read_bytes() == (GPU.parents[1] / "helpers/multihop/verdicts.jsonl").read_bytes()
    log = (results / "window.log").read_text()
    assert 'multihop write exited 0' in log and '"kept": 2' in log and "all done" in log
    assert 'multihop solve exited 0' in log and '"left": 0' in log


def test_watch_memory_appends_the_gpu_samples_of_two_scripts_into_one_folder_and_stops_with_each(tmp_path):
    import time

    bin_dir, results = tmp_path / "bin", tmp_path / "results"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"  # one line a call, naming the round that asked
    smi.write_text('#!/bin/bash\necho "$(date +%T), $ROUND, 552 MiB"\n')
    smi.chmod(0o755)
    script = f"source {GPU / 'common.sh'}; watch_memory; watch_memory; sleep 1.2"
    for round_ in ("plain", "mps"):
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "RESULTS": str(results), "MEMORY_EVERY": "0.2",
               "HOME": str(tmp_path), "ROUND": round_}
        done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
    time.sleep(1.0)
    lines = (results / "gpu_memory.csv").read_text().splitlines()
    time.sleep(1.0)
    assert (results / "gpu_memory.csv").read_text().splitlines() == lines  # both samplers stopped
    rounds = [line.split(", ")[1] for line in lines]
    assert rounds == sorted(rounds, key=("plain", "mps").index)  # the first round's lines kept, then the second's
    for round_ in ("plain", "mps"):  # one sampler a script though watch_memory ran twice
        assert 3 <= rounds.count(round_) <= 1.2 / 0.2 + 3


def test_watch_memory_samples_the_hosts_memory_until_its_script_ends(tmp_path):
    import time

    results = tmp_path / "results"
    script = (f"source {GPU / 'common.sh'}; python3 -c 'import time; time.sleep(3)' >/dev/null 2>&1 & "
              "watch_memory; watch_memory; sleep 1.5; echo finished")
    env = {"PATH": "/usr/bin:/bin", "RESULTS": str(results), "MEMORY_EVERY": "0.2", "HOME": str(tmp_path)}
    # read through a pipe, as a caller capturing a script's output does: the sampler must not hold it open
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout.strip() == "finished"
    time.sleep(1.0)  # the sampler notices its script has ended at its next sample (slower on a loaded machine)
    lines = (results / "host_memory.csv").read_text().splitlines()
    time.sleep(1.0)
    assert (results / "host_memory.csv").read_text().splitlines() == lines  # and then writes nothing more
    assert lines[0] == "time,used_mib,available_mib,python_rss_mib,python_processes"
    samples = [line.split(",") for line in lines[1:]]
    assert len(samples) >= 3  # one line every 0.2 s, from one sampler though watch_memory ran twice
    assert len(samples) <= 1.5 / 0.2 + 3
    for time_of_day, used, available, rss, processes in samples:
        assert time_of_day.count(":") == 2 and int(used) > 0 and int(available) > 0
        assert int(processes) >= 1 and int(rss) > 0  # the sleeping python3 at least
    assert not (results / "gpu_memory.csv").exists()  # no nvidia-smi on this PATH: no GPU file


def _bundle(tmp_path, pieces: dict[str, bytes], arrived: dict[str, bytes]):
    """A bundle folder as bundle.sh lays it out there: the pieces' checksums, and the pieces that came."""
    import hashlib

    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "pieces.sha256").write_text(
        "".join(f"{hashlib.sha256(data).hexdigest()}  {name}\n" for name, data in pieces.items()))
    for name, data in arrived.items():
        (bundle / name).write_bytes(data)
    return bundle


def _setup(tmp_path, bundle):
    """setup_window with a Python that records whether the set-up ran."""
    python, _ = _recording_python(tmp_path)
    results = tmp_path / "results"
    done = subprocess.run(["bash", "-c", f'source "{GPU}/common.sh"; setup_window'], capture_output=True, text=True,
                          timeout=30, env={"PATH": "/usr/bin:/bin", "PYTHON": str(python), "BUNDLE": str(bundle),
                                           "RESULTS": str(results)})
    calls = (tmp_path / "calls.txt").read_text() if (tmp_path / "calls.txt").exists() else ""
    return done, (results / "window.log").read_text(), calls


def test_setup_names_the_pieces_that_did_not_arrive_and_their_folders_before_joining_anything(tmp_path):
    pieces = {f"q.{i:02d}": bytes([i]) * 100 for i in range(4)}
    arrived = {"q.00": pieces["q.00"], "q.02": b"cut short"}  # q.01 and q.03 never came, q.02 is damaged
    done, log, calls = _setup(tmp_path, _bundle(tmp_path, pieces, arrived))
    assert done.returncode == 1 and "setup failed" in log
    assert "q.01 q.02 q.03" in log and ".device/c02 .device/c03 .device/c04" in log
    assert calls == "" and not (tmp_path / "b" / "q.gguf").exists()  # nothing joined or provisioned


def test_setup_joins_the_pieces_when_every_one_arrived_whole(tmp_path):
    pieces = {f"q.{i:02d}": bytes([i]) * 100 for i in range(3)}
    done, log, calls = _setup(tmp_path, _bundle(tmp_path, pieces, pieces))
    assert done.returncode == 0 and "setup done" in log and "missing" not in log
    assert (tmp_path / "b" / "q.gguf").read_bytes() == b"".join(pieces.values())
    assert "helpers setup" in calls


def test_wait_and_pack_returns_at_once_when_the_set_up_failed(tmp_path):
    import time

    results, out = tmp_path / "results", tmp_path / "out"
    results.mkdir()
    out.mkdir()
    (results / "window.log").write_text("09:00:02 start\n09:00:42 setup failed\n")
    start = time.monotonic()
    done = subprocess.run(["bash", str(GPU / "wait_and_pack.sh"), "20"], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "RESULTS": str(results), "OUT": str(out)})
    assert done.returncode == 0 and "setup failed" in done.stdout
    assert time.monotonic() - start < 10 and (out / "window.tgz").exists()


def test_trim_variants_answers_is_exact_match_on_trims_mix_and_takes_passages_and_the_filter(tmp_path):
    def sets(line):
        words = line.split()
        return [words[i + 1] for i, arg in enumerate(words) if arg == "--set"]

    lines = _trim_variants(tmp_path, VARIANTS="answers answers-k2-f", SEEDS="1", INIT="x/adapter")
    [plain] = [sets(c) for c in lines if "--stage grpo" in c and "/answers_s1 " in c + " "]
    assert "trim.reward=exact_match" in plain and "trim.reward_options={}" in plain
    assert not any(s.startswith(("trim.synthetic_share", "trim.search_topk", "trim.question_filter")) for s in plain)
    [filtered] = [sets(c) for c in lines if "--stage grpo" in c and "/answers-k2-f_s1 " in c + " "]
    assert "trim.reward=exact_match" in filtered and "trim.search_topk=2" in filtered
    assert any(s.startswith("trim.question_filter=") for s in filtered)
    [judged] = [sets(c) for c in lines if "-m helpers.question_filter " in c]
    assert "trim.reward=exact_match" in judged and "trim.search_topk=2" in judged


def test_draw_window_decodes_each_layer_with_both_draws_and_ends(tmp_path):
    python, calls = _recording_python(tmp_path)
    done = subprocess.run(["bash", str(GPU / "draw_window.sh")], capture_output=True, text=True, timeout=60,
                          cwd=GPU.parents[1], env={"PATH": "/usr/bin:/bin", "PYTHON": str(python), "ADAPTER": "a/adapter",
                                                  "RESULTS": str(tmp_path / "results"), "BUNDLE": str(tmp_path / "none")})
    assert done.returncode == 0, done.stdout + done.stderr
    decodes = [c for c in calls.read_text().splitlines() if c.startswith("benchmarks/bench_grpo_gpu.py decode")]
    assert [("--one-scan" in c) for c in decodes] == [False, True, False, True]
    assert all("--adapter a/adapter" in c and "--batch-sizes 64" in c for c in decodes)
    log = (tmp_path / "results" / "window.log").read_text()
    for name in ("decode_1", "decode_1_one_scan", "decode_merge_inductor", "decode_merge_inductor_one_scan"):
        assert f"{name} exited 0" in log
    assert log.rstrip().endswith("all done")
