"""`python -m helpers setup`: everything the course needs, idempotent, with progress.

Each stage is owned by its module and skips itself when its output is already there.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time

from helpers import config, data, models as model_store, multihop
from helpers.search import local


def _stage(title: str, fn) -> None:
    started = time.perf_counter()
    print(f"==> {title}", flush=True)
    fn()
    print(f"    done in {time.perf_counter() - started:.1f}s", flush=True)


def setup(models: list[str]) -> None:
    for name in models:
        _stage(f"model {name}", lambda name=name: model_store.provision(name))
    _stage("data: NQ + HotpotQA splits", data.prepare_data)
    _stage("search index: BM25 over the Wikipedia passages", local.build_index)
    _stage("data: verified multi-hop questions (synthetic split)", multihop.prepare_synthetic)
    print(f"Ready. Profile: {config.profile()}, default model: {config.default_model()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers")
    sub = parser.add_subparsers(dest="command", required=True)
    p_setup = sub.add_parser("setup", help="provision models, data and the search index")
    p_setup.add_argument("--models", nargs="*", default=list(config.MODELS), choices=config.MODELS)
    sub.add_parser("clean", help="delete cached models and indexes")
    args = parser.parse_args(argv)
    if args.command == "setup":
        setup(args.models)
    elif args.command == "clean":
        shutil.rmtree(config.cache_dir(), ignore_errors=True)
        print(f"removed {config.cache_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
