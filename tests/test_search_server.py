"""The Search-R1 retriever API served from the local index, and the `retriever` backend."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from helpers.search import create_search_client, format_results
from helpers.search import local
from helpers.search.http import RetryPolicy
from helpers.search.retriever import RetrieverSearchClient
from helpers.search.server import RetrievalServer

FIXTURES = Path(__file__).parent / "fixtures" / "search"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def index():
    rows = [json.loads(line) for line in (FIXTURES / "corpus.jsonl").read_text().splitlines() if line.strip()]
    return local.LocalIndex.from_rows(rows)


def post(url, payload):
    request = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_retrieve_answers_in_the_search_r1_shape(index):
    with RetrievalServer(index) as server:
        status, body = post(server.url, {"queries": ["eiffel tower in paris", "hamlet"], "topk": 2, "return_scores": True})
        assert status == 200 and len(body["result"]) == 2
        first = body["result"][0]
        assert len(first) == 2 and set(first[0]) == {"document", "score"}
        assert first[0]["document"]["id"] == "wfix00000002"
        assert first[0]["document"]["contents"].startswith('"Eiffel Tower"\n')
        assert first[0]["score"] >= first[1]["score"] > 0
        assert body["result"][1][0]["document"]["id"] == "wfix00000004"
        # without scores: the documents themselves; default topk
        status, plain = post(server.url, {"queries": ["river"]})
        assert status == 200 and set(plain["result"][0][0]) == {"id", "contents"}
        with urllib.request.urlopen(server.url.replace("/retrieve", "/health"), timeout=5) as response:
            assert json.loads(response.read()) == {"status": "ok", "passages": len(index)}


@pytest.mark.parametrize("payload", [{"queries": "not a list"}, {"queries": [1, 2]}, {"queries": ["q"], "topk": 0},
                                     {"queries": ["q"], "topk": "3"}, ["q"]])
def test_invalid_requests_are_rejected(index, payload):
    with RetrievalServer(index) as server:
        status, body = post(server.url, payload)
    assert status == 422 and "detail" in body


def test_server_stops_and_frees_the_port(index):
    server = RetrievalServer(index).start()
    port = server.port
    server.stop()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free again


def test_retriever_client_matches_the_local_client(index):
    with RetrievalServer(index) as server:
        remote = create_search_client("retriever", url=server.url)
        local_client = local.LocalSearchClient(index)
        for query in ("first nobel prize physics", "river flows through paris", "rock band"):
            got, want = remote.search(query), local_client.search(query)
            assert got.ok and [i.title for i in got.items] == [i.title for i in want.items]
            assert [i.content for i in got.items] == [i.content for i in want.items]
        assert remote.stats.successes == 3
        assert "Title: Nobel Prize in Physics" in format_results(remote.search("first nobel prize physics"))


def test_retriever_client_reads_bare_lists_and_title_text_documents():
    import importlib
    import sys as _sys

    _sys.path.insert(0, str(FIXTURES))
    fake_service = importlib.import_module("fake_service")
    with fake_service.FakeService() as svc:
        svc.push(json=[[{"document": {"id": 7, "title": "T", "text": "body"}, "score": 1.0}]])
        svc.push(json={"result": []})
        client = RetrieverSearchClient(svc.url_for("/retrieve"), retry=RetryPolicy(max_retries=0))
        ok, bad = client.search("q"), client.search("q")
    assert ok.ok and (ok.items[0].title, ok.items[0].content) == ("T", "body")
    assert not bad.ok and "bad response" in bad.error
    assert svc.requests[0].body == {"queries": ["q"], "topk": 3, "return_scores": True}


def test_retriever_client_when_nothing_listens():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    client = RetrieverSearchClient(f"http://127.0.0.1:{port}/retrieve", timeout=1,
                                   retry=RetryPolicy(max_retries=0))
    result = client.search("q")
    assert not result.ok and client.stats.errors == 1


def test_command_line_server(tmp_path):
    index_dir = tmp_path / "index"
    local.build_index(FIXTURES / "corpus.jsonl", index_dir, show_progress=False)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "helpers.search.server", "--port", str(port),
                             "--index-dir", str(index_dir)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}/retrieve"
        deadline = time.monotonic() + 30
        while True:
            try:
                status, body = post(url, {"queries": ["hamlet"], "topk": 1, "return_scores": True})
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        assert status == 200 and body["result"][0][0]["document"]["id"] == "wfix00000004"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert "serving 9 passages" in proc.stdout.read()


def test_search_command_line(index, capsys, monkeypatch):
    from helpers.search import __main__ as cli

    with RetrievalServer(index) as server:
        assert cli.main(["river", "through", "paris", "--backend", "retriever", "--url", server.url]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("[1] Title: Paris") and "ok=True" in err
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    monkeypatch.setattr("helpers.search.deepseek.env_value", lambda name, env_path=None: None)
    assert cli.main(["q", "--backend", "deepseek"]) == 2
    assert "DEEPSEEK_API_KEY" in capsys.readouterr().err


# ---------------------------------------------------------------- hostile clients


def raw_exchange(port, data: bytes, timeout=5.0) -> bytes:
    """Send raw bytes, half-close, and read the whole answer (b'' when the server hangs up)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/"), answer[:80]
    return int(answer.split(b" ", 2)[1])


@pytest.mark.parametrize("length", ["abc", "-5", "1e3", " "])
def test_a_bad_content_length_gets_400(index, length):
    with RetrievalServer(index) as server:
        answer = raw_exchange(server.port, f"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n{{}}".encode())
    assert status_of(answer) == 400


def test_deeply_nested_json_gets_400(index):
    body = b"[" * 100_000
    with RetrievalServer(index) as server:
        answer = raw_exchange(server.port, b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: "
                              + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert status_of(answer) == 400 and b"nests too deeply" in answer


def test_a_too_large_body_gets_413_that_the_client_can_read(index):
    payload = {"queries": ["x" * (10 << 20)]}
    with RetrievalServer(index) as server:
        status, body = post(server.url, payload)
    assert status == 413 and "1 MiB" in body["detail"]


def test_the_answer_is_bounded(index, monkeypatch):
    from helpers.search import server as server_module

    with RetrievalServer(index) as server:
        status, body = post(server.url, {"queries": ["river"] * 512, "topk": 100})
        assert status == 422 and "4096 documents" in body["detail"]
        status, body = post(server.url, {"queries": ["river"] * 40, "topk": 100})
        assert status == 200 and len(body["result"]) == 40
        monkeypatch.setattr(server_module, "MAX_RESPONSE", 2000)  # as if the passages were long
        status, body = post(server.url, {"queries": ["river"] * 40, "topk": 100})
        assert status == 422 and "answer would exceed" in body["detail"]


def test_stalled_connections_hold_a_bounded_number_of_threads_and_are_closed(index):
    import threading

    before = threading.active_count()
    with RetrievalServer(index, request_timeout=0.5, workers=4, backlog=8) as server:
        stalled = []
        for _ in range(150):  # headers promise a body that never comes
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n")
            stalled.append(sock)
        time.sleep(0.2)
        threads_while_stalled = threading.active_count() - before
        answers = []
        for sock in stalled:  # every one is answered (408 or 503) or closed by the server
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
            answers.append(b"".join(chunks))
            sock.close()
        status, body = post(server.url, {"queries": ["hamlet"], "topk": 1})
    assert threads_while_stalled <= 4 + 2
    assert {status_of(a) for a in answers} <= {408, 503} and any(status_of(a) == 408 for a in answers)
    assert status == 200 and body["result"][0]


def test_a_query_that_is_not_valid_unicode_gets_422(index):
    with RetrievalServer(index) as server:
        status, body = post(server.url, {"queries": ["paris", "\ud83d tower"]})
    assert status == 422 and "lone surrogate" in body["detail"]
