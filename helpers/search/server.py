"""The offline index behind the Search-R1 retriever API, so any Search-R1 client can use it.

    POST /retrieve  {"queries": ["..."], "topk": 3, "return_scores": true}
    ->  {"result": [[{"document": {"id": "...", "contents": "\\"Title\\"\\ntext"}, "score": 12.3}, ...], ...]}

(without ``return_scores`` each inner list holds the documents themselves, as in Search-R1's
``retrieval_server.py``). ``GET /health`` answers ``{"status": "ok", "passages": N}``.

From Python:

    with RetrievalServer() as server:             # free port on 127.0.0.1, background thread
        client = create_search_client("retriever", url=server.url)

From the command line: ``python -m helpers.search.server --port 8000``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MAX_QUERIES = 512
MAX_TOPK = 100
MAX_BODY = 1 << 20


class _Handler(BaseHTTPRequestHandler):
    server_version = "search-r1-course-retriever/0.1"
    index = None  # set per server class
    default_topk = 3

    def log_message(self, format, *args):  # quiet by default; queries are not logged
        pass

    def _send(self, status: int, payload) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.rstrip("/") in {"/health", ""}:
            self._send(200, {"status": "ok", "passages": len(self.index)})
        else:
            self._send(404, {"detail": "not found; use POST /retrieve"})

    def do_POST(self):
        if self.path.rstrip("/") != "/retrieve":
            self._send(404, {"detail": "not found; use POST /retrieve"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length <= 0 or length > MAX_BODY:
            self._send(400 if length <= 0 else 413, {"detail": "send a JSON body of at most 1 MiB"})
            return
        try:
            request = json.loads(self.rfile.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError):
            self._send(400, {"detail": "body is not JSON"})
            return
        error = _validate(request)
        if error:
            self._send(422, {"detail": error})
            return
        topk = request.get("topk") or self.default_topk
        with_scores = bool(request.get("return_scores", False))
        result = []
        for query in request["queries"]:
            hits = self.index.search(query, k=topk)
            docs = [{"id": p.id, "contents": p.contents} for p in hits]
            if with_scores:
                result.append([{"document": d, "score": p.score} for d, p in zip(docs, hits)])
            else:
                result.append(docs)
        self._send(200, {"result": result})


def _validate(request) -> str | None:
    if not isinstance(request, dict):
        return "body must be a JSON object"
    queries = request.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        return "'queries' must be a list of strings"
    if len(queries) > MAX_QUERIES:
        return f"at most {MAX_QUERIES} queries per request"
    topk = request.get("topk")
    if topk is not None and (not isinstance(topk, int) or isinstance(topk, bool) or not 1 <= topk <= MAX_TOPK):
        return f"'topk' must be an integer from 1 to {MAX_TOPK}"
    return None


class RetrievalServer:
    """A Search-R1-compatible retrieval server on a background thread (a context manager)."""

    def __init__(self, index=None, *, host: str = "127.0.0.1", port: int = 0, topk: int = 3,
                 index_dir: str | Path | None = None):
        if index is None:
            from helpers.search.local import get_index

            index = get_index(index_dir)
        handler = type("Handler", (_Handler,), {"index": index, "default_topk": topk})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.host, self.port = self.httpd.server_address[:2]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/retrieve"

    def start(self) -> "RetrievalServer":
        if self._thread is None:
            self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                            name="retrieval-server", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self.httpd.server_close()

    def serve_forever(self) -> None:
        try:
            self.httpd.serve_forever()
        finally:
            self.httpd.server_close()

    def __enter__(self) -> "RetrievalServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"RetrievalServer(url={self.url!r})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.search.server",
                                     description="Serve the offline BM25 index with the Search-R1 retriever API.")
    parser.add_argument("--host", default="127.0.0.1", help="use 0.0.0.0 to accept other machines")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--topk", type=int, default=3, help="default when a request gives no topk")
    parser.add_argument("--index-dir", default=None)
    args = parser.parse_args(argv)
    server = RetrievalServer(host=args.host, port=args.port, topk=args.topk, index_dir=args.index_dir)
    print(f"serving {len(server.httpd.RequestHandlerClass.index):,} passages at {server.url} (Ctrl-C stops)",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
