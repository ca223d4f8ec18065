"""The offline index behind the Search-R1 retriever API, so any Search-R1 client can use it.

    POST /retrieve  {"queries": ["..."], "topk": 3, "return_scores": true}
    ->  {"result": [[{"document": {"id": "...", "contents": "\\"Title\\"\\ntext"}, "score": 12.3}, ...], ...]}

(without ``return_scores`` each inner list holds the documents themselves, as in Search-R1's
``retrieval_server.py``). ``GET /health`` answers ``{"status": "ok", "passages": N}``.

From Python:

    with RetrievalServer() as server:             # free port on 127.0.0.1, background thread
        client = create_search_client("retriever", url=server.url)

From the command line: ``python -m helpers.search.server --port 8000``.

Limits, so that one client cannot take the server from the others: a request body of at most
1 MiB (a larger one gets its 413 once it has been read and dropped, up to 16 MiB, so the client
can read the answer), at most 512 queries and 4,096 documents per request, an answer of at most
8 MiB, a connection silent for ``request_timeout`` seconds is closed, and a fixed pool of worker
threads with a bounded queue serves the connections (past it a connection gets 503 at once).
Malformed requests (a bad ``Content-Length``, JSON that is not JSON or nests too deeply) get 400.
"""

from __future__ import annotations

import argparse
import json
import queue
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from helpers.search.http import valid_unicode
from helpers.search.local import get_index
from helpers.search.types import SEARCH_TOPK

MAX_QUERIES = 512
MAX_TOPK = 100
MAX_BODY = 1 << 20
MAX_DOCUMENTS = 4096  # queries x topk in one request
MAX_RESPONSE = 8 << 20
MAX_DRAIN = 16 << 20  # a too-large body is read and dropped up to this size before the 413 is final
REQUEST_TIMEOUT = 10.0
WORKERS = 16
BACKLOG = 64  # accepted connections waiting for a worker


class _Handler(BaseHTTPRequestHandler):
    server_version = "search-r1-course-retriever/0.1"
    index = None  # set per server class
    default_topk = 3
    timeout = REQUEST_TIMEOUT  # socket timeout of every read and write on the connection

    def log_message(self, format, *args):  # quiet by default; queries are not logged
        pass

    def _send(self, status: int, payload, close: bool = False) -> None:
        body = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.rstrip("/") in {"/health", ""}:
            self._send(200, {"status": "ok", "passages": len(self.index)})
        else:
            self._send(404, {"detail": "not found; use POST /retrieve"})

    def _read_body(self, length: int) -> bytes | None:
        """The body, or None once a 408 went out: the whole read shares one deadline."""
        deadline = time.monotonic() + self.timeout
        chunks, left = [], length
        try:
            while left:
                chunk = self.rfile.read1(min(left, 65536))
                if not chunk:  # the client went away
                    self.close_connection = True
                    return None
                if time.monotonic() > deadline:
                    raise TimeoutError
                chunks.append(chunk)
                left -= len(chunk)
        except (TimeoutError, socket.timeout):
            self._send(408, {"detail": f"the body did not arrive within {self.timeout:g}s"}, close=True)
            return None
        return b"".join(chunks)

    def _drain(self, length: int) -> None:
        """Read and drop a rejected body, so the client gets to read the answer (bounded)."""
        deadline = time.monotonic() + self.timeout
        try:
            while length > 0 and time.monotonic() < deadline:
                chunk = self.rfile.read1(min(length, 65536))
                if not chunk:
                    return
                length -= len(chunk)
        except OSError:
            pass

    def do_POST(self):
        if self.path.rstrip("/") != "/retrieve":
            self._send(404, {"detail": "not found; use POST /retrieve"}, close=True)
            return
        declared = (self.headers.get("Content-Length") or "").strip()
        if not declared.isdigit() or int(declared) == 0:
            self._send(400, {"detail": "send a JSON body with a valid Content-Length"}, close=True)
            return
        length = int(declared)
        if length > MAX_BODY:
            self._send(413, {"detail": "send a JSON body of at most 1 MiB"}, close=True)
            if length <= MAX_DRAIN:
                self._drain(length)
            return
        raw = self._read_body(length)
        if raw is None:
            return
        try:
            request = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            self._send(400, {"detail": "body is not JSON"})
            return
        except RecursionError:
            self._send(400, {"detail": "body nests too deeply"})
            return
        error = _validate(request, self.default_topk)
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
        body = {"result": result}
        if len(json.dumps(body, ensure_ascii=False).encode("utf-8")) > MAX_RESPONSE:
            self._send(422, {"detail": f"the answer would exceed {MAX_RESPONSE >> 20} MiB; "
                                       "send fewer queries or a smaller topk"})
            return
        self._send(200, body)


def _validate(request, default_topk: int = SEARCH_TOPK) -> str | None:
    if not isinstance(request, dict):
        return "body must be a JSON object"
    queries = request.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        return "'queries' must be a list of strings"
    if len(queries) > MAX_QUERIES:
        return f"at most {MAX_QUERIES} queries per request"
    if not all(valid_unicode(q) for q in queries):
        return "a query holds text that is not valid Unicode (a lone surrogate)"
    topk = request.get("topk")
    if topk is not None and (not isinstance(topk, int) or isinstance(topk, bool) or not 1 <= topk <= MAX_TOPK):
        return f"'topk' must be an integer from 1 to {MAX_TOPK}"
    if len(queries) * (topk or default_topk) > MAX_DOCUMENTS:
        return f"at most {MAX_DOCUMENTS} documents (queries x topk) per request"
    return None


class _PooledHTTPServer(HTTPServer):
    """HTTPServer whose connections are served by a fixed pool of daemon threads.

    Accepted connections wait in a queue of ``backlog``; past it a connection is answered 503
    at once, so a flood of stalled clients costs at most ``workers`` threads.
    """

    request_queue_size = 128

    def __init__(self, address, handler, *, workers: int = WORKERS, backlog: int = BACKLOG):
        super().__init__(address, handler)
        self._waiting: queue.Queue = queue.Queue(maxsize=backlog)
        self._workers = [threading.Thread(target=self._work, name=f"retrieve-{i}", daemon=True)
                         for i in range(workers)]
        for worker in self._workers:
            worker.start()

    def process_request(self, request, client_address):
        try:
            self._waiting.put_nowait((request, client_address))
        except queue.Full:
            self._refuse(request)

    def _work(self) -> None:
        while True:
            job = self._waiting.get()
            if job is None:
                return
            request, client_address = job
            try:
                self.finish_request(request, client_address)
            except Exception:
                self.handle_error(request, client_address)
            finally:
                self.shutdown_request(request)

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # a client that hung up is no server error
            super().handle_error(request, client_address)

    def _refuse(self, request) -> None:
        body = b'{"detail": "the server is busy; retry in a moment"}'
        head = (b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
                b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n")
        try:
            request.settimeout(1.0)
            request.sendall(head + body)
        except OSError:
            pass
        self.shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        for _ in self._workers:
            try:
                self._waiting.put_nowait(None)
            except queue.Full:
                break  # daemon threads: they end with the process


class RetrievalServer:
    """A Search-R1-compatible retrieval server on a background thread (a context manager)."""

    def __init__(self, index=None, *, host: str = "127.0.0.1", port: int = 0, topk: int = SEARCH_TOPK,
                 index_dir: str | Path | None = None, request_timeout: float = REQUEST_TIMEOUT,
                 workers: int = WORKERS, backlog: int = BACKLOG):
        if index is None:
            index = get_index(index_dir)
        handler = type("Handler", (_Handler,), {"index": index, "default_topk": topk, "timeout": request_timeout})
        self.httpd = _PooledHTTPServer((host, port), handler, workers=workers, backlog=backlog)
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
    parser.add_argument("--topk", type=int, default=SEARCH_TOPK, help="default when a request gives no topk")
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
