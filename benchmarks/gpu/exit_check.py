"""Does a process that trained and sampled with the engine exit with status 0?

    python benchmarks/gpu/exit_check.py --model qwen2.5-0.5b              # as every command runs
    python benchmarks/gpu/exit_check.py --model qwen2.5-0.5b --keep-worker  # without stopping the worker at exit

One LoRA training step and one sample on the engine's worker thread, then the interpreter exits.
The shell reads the status; stderr shows a C++ abort at teardown, if any.
"""

from __future__ import annotations

import argparse
import atexit
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="qwen2.5-0.5b")
    parser.add_argument("--keep-worker", action="store_true", help="leave the worker thread running at exit")
    args = parser.parse_args()
    import pytrio as trio

    from helpers.engine import connect
    from helpers.engine import host as engine_host

    if args.keep_worker:
        atexit.unregister(engine_host.shutdown_hosts)
    service = connect("local")
    training = service.create_lora_training_client(args.model, rank=8, seed=0)
    ids = list(range(100, 164))
    datum = trio.Datum(model_input=trio.ModelInput.from_ints(ids[:-1]), loss_fn_inputs={
        "target_tokens": ids[1:], "logprobs": [-3.0] * 63, "advantages": [0.5] * 63})
    training.forward_backward([datum], loss_fn="importance_sampling").result()
    training.optim_step(trio.AdamParams(learning_rate=1e-5)).result()
    sampler = training.save_weights_and_get_sampling_client()
    out = sampler.sample(prompt=trio.ModelInput.from_ints(ids[:16]), num_samples=4,
                         sampling_params=trio.SamplingParams(max_tokens=16, temperature=1.0, seed=1)).result()
    print(f"trained one step and sampled {sum(len(s.tokens) for s in out.sequences)} tokens; exiting", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
