"""The preference model's goals: held-out pair accuracy and position bias, one-order vs symmetrised.

    .venv/bin/python benchmarks/bench_preference.py                          # the profile's backbone
    .venv/bin/python benchmarks/bench_preference.py --model smollm2-135m --examples 48
    .venv/bin/python benchmarks/bench_preference.py --json results/preference_bench.json

Trains both models from the same start on the same rule-labelled pairs (the preferred reply shown
first in `--shown-first` of them), then reads held-out pairs and ties in both orders. Goals:
held-out accuracy (P-bar) >= 0.85; |P-bar(a,b) + P-bar(b,a) - 1| <= 0.01 on every held-out pair
after symmetrising (P-bar(b,a) read from the swapped pair on its own). The one-order reading's bias,
mean of P(a,b) + P(b,a) - 1 with P = sigma(Delta), is printed beside it for both models. Prints the seconds of each stage and the load average (timings on a shared machine
are only comparable within one run). Results go in benchmarks/RESULTS.md, preference section.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from helpers import config
from helpers import preference as pref
from helpers.data import load_examples

ACCURACY_GOAL = 0.85
BIAS_GOAL = 0.01


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="backbone (default: the profile's)")
    parser.add_argument("--examples", type=int, default=60, help="training questions, 2/3 train, 1/3 held out")
    parser.add_argument("--ties", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lora-layers", type=int, default=2)
    parser.add_argument("--shown-first", type=float, default=0.8)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    pairs = pref.make_pairs(load_examples("train", limit=args.examples), seed=0, shown_first=args.shown_first)
    train, held_out = pref.split_pairs(pairs, held_out=1 / 3, seed=0)
    ties = pref.make_ties(load_examples("validation", limit=args.ties), seed=1)
    out = {"model": args.model or config.default_model(), "train_pairs": len(train), "held_out": len(held_out),
           "ties": len(ties), "cpus": os.cpu_count(), "load_start": os.getloadavg()[0], "models": {}}
    shared = None
    for name, symmetrise in (("one_order", False), ("symmetrised", True)):
        t0 = time.perf_counter()
        model = pref.Preference(pref.PreferenceConfig(model=args.model, symmetrise=symmetrise, epochs=args.epochs,
                                                      lora_layers=args.lora_layers))
        if shared is not None:
            model.share_frozen_states(shared)
        model.fit(train)
        fit_s = time.perf_counter() - t0
        held, tied = model.evaluate(held_out, progress=True), model.evaluate(ties, progress=True)
        out["models"][name] = {"fit_seconds": fit_s, "eval_seconds": time.perf_counter() - t0 - fit_s,
                               "held_out": held, "ties": tied}
        shared = model
        print(f"{name:12s} accuracy {held['accuracy']:.3f} (one order read {held['accuracy_one_order']:.3f}) | "
              f"bias held-out {held['position_bias']:+.4f} (per pair {held['position_bias_abs']:.4f}), "
              f"ties {tied['position_bias']:+.4f} | P-bar bias {held['p_bar_bias']:.1e} | "
              f"fit {fit_s:.0f} s")
    sym = out["models"]["symmetrised"]["held_out"]
    out["goals"] = {"accuracy >= 0.85": sym["accuracy"] >= ACCURACY_GOAL,
                    "|P-bar bias| <= 0.01 after symmetrising": sym["p_bar_bias"] <= BIAS_GOAL}
    out["seconds"], out["load_end"] = time.perf_counter() - started, os.getloadavg()[0]
    print(f"goals: {out['goals']} | {out['seconds']:.0f} s, load {out['load_start']:.1f} -> {out['load_end']:.1f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(out, handle, indent=2)
    return out


if __name__ == "__main__":
    main()
