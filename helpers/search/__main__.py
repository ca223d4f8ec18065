"""Try a backend from the shell: ``python -m helpers.search "who wrote hamlet" --backend local``."""

from __future__ import annotations

import argparse
import json
import sys

from helpers.search import BACKENDS, SEARCH_TOPK, create_search_client, format_results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.search")
    parser.add_argument("query", nargs="+")
    parser.add_argument("--backend", default="local", choices=BACKENDS)
    parser.add_argument("--topk", type=int, default=SEARCH_TOPK)
    parser.add_argument("--url", help="retriever backend: the server's /retrieve URL")
    args = parser.parse_args(argv)
    kwargs = {"url": args.url} if args.backend == "retriever" and args.url else {}
    try:
        client = create_search_client(args.backend, topk=args.topk, **kwargs)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result = client.search(" ".join(args.query))
    print(format_results(result))
    print(f"\n-- {args.backend}: ok={result.ok} latency={result.latency * 1000:.1f} ms "
          f"stats={json.dumps(client.stats.as_dict())}", file=sys.stderr)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
