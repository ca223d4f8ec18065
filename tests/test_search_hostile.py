"""Online backends against hostile or broken services: redirects, echoes, bombs, drips, stalls.

Every service here is a FakeService on 127.0.0.1; each hostile mode ends by itself (bounded
payloads, bounded stalls) and when the service closes.
"""

from __future__ import annotations

import json
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "search"))
from fake_service import FakeService, gzip_bomb  # noqa: E402

from helpers.search import create_search_client, format_results  # noqa: E402
from helpers.search.deepseek import DeepSeekSearchClient  # noqa: E402
from helpers.search.http import MAX_RESPONSE_BYTES, RetryPolicy, valid_unicode  # noqa: E402
from helpers.search.wikipedia import WikipediaSearchClient  # noqa: E402
from helpers.search.zhihu import ZhihuSearchClient  # noqa: E402

KEY = "zk-SECRET-aaaa-1111"
DEEPSEEK_KEY = "sk-SECRET-deepseek-9999"
BOMB = 64 << 20  # inflates to 64 MiB; about 64 kB on the wire


class Sleeps(list):
    def __call__(self, seconds):
        self.append(seconds)


def wiki_answer(extract="an extract"):
    return {"query": {"pages": [{"pageid": 1, "title": "T", "index": 1, "extract": extract,
                                 "fullurl": "https://en.wikipedia.org/wiki/T"}]}}


def zhihu_answer(text="some answer text"):
    return {"Code": 0, "Data": {"Items": [{"Title": "Q", "ContentText": text, "Url": "https://www.zhihu.com/q/1"}]}}


def deepseek_answer(text):
    return {"stop_reason": "end_turn", "content": [{"type": "text", "text": text}]}


def wiki(svc, timeout=2.0, sleeps=None, max_retries=2):
    return WikipediaSearchClient(endpoint=svc.url_for("/w/api.php"), timeout=timeout, limiter=None,
                                 retry=RetryPolicy(max_retries=max_retries, backoff=0.01,
                                                   sleep=sleeps if sleeps is not None else Sleeps()))


def zhihu(svc, keys=(KEY,)):
    return ZhihuSearchClient(list(keys), endpoint=svc.url_for("/api/v1/content/global_search"), timeout=2,
                             retry=RetryPolicy(max_retries=0, sleep=Sleeps()))


def deepseek(svc):
    return DeepSeekSearchClient(DEEPSEEK_KEY, base_url=svc.url_for("/anthropic"), timeout=2,
                                retry=RetryPolicy(max_retries=0, sleep=Sleeps()))


# ---------------------------------------------------------------- keys


@pytest.mark.parametrize("backend,status", [("zhihu", 301), ("zhihu", 302), ("zhihu", 307),
                                            ("deepseek", 302), ("deepseek", 303)])
def test_a_key_never_follows_a_redirect_to_another_host(backend, status):
    secret = KEY if backend == "zhihu" else DEEPSEEK_KEY
    echo = zhihu_answer("saw {authorization}") if backend == "zhihu" else deepseek_answer(
        "[1] Source: Echo | https://echo.example\nEvidence: saw {authorization}")
    with FakeService() as svc, FakeService() as other:
        svc.push(redirect=other.url_for("/echo"), status=status)
        other.push(json=echo, template=True)
        client = zhihu(svc) if backend == "zhihu" else deepseek(svc)
        result = client.search("q")
    assert svc.requests[0].headers["authorization"] == f"Bearer {secret}"
    assert len(other.requests) == 1 and "authorization" not in other.requests[0].headers
    assert secret not in repr(result) and secret not in format_results(result)


def test_a_redirect_within_the_same_service_keeps_the_key():
    with FakeService() as svc:
        svc.push(redirect=svc.url_for("/moved"), status=301).push(json=zhihu_answer())
        result = zhihu(svc).search("q")
    assert result.ok and [r.path for r in svc.requests] == ["/api/v1/content/global_search", "/moved"]
    assert svc.requests[1].headers["authorization"] == f"Bearer {KEY}"


def test_a_redirect_loop_ends():
    with FakeService() as svc:
        loop = svc.url_for("/loop")
        for _ in range(10):
            svc.push(redirect=loop)
        result = wiki(svc).search("q")
    assert not result.ok and result.status in (301, 302) and len(svc.requests) <= 5


@pytest.mark.parametrize("backend", ["zhihu", "deepseek"])
def test_a_key_echoed_into_a_successful_answer_is_masked(backend):
    secret = KEY if backend == "zhihu" else DEEPSEEK_KEY
    answer = zhihu_answer("the server saw {authorization}") if backend == "zhihu" else deepseek_answer(
        "[1] Source: {authorization} | https://a.example/{authorization}\nEvidence: saw {authorization}")
    with FakeService() as svc:
        svc.push(json=answer, template=True)
        client = zhihu(svc) if backend == "zhihu" else deepseek(svc)
        result = client.search("q")
    assert result.ok and result.items and "***" in result.items[0].content
    assert secret not in repr(result) and secret not in format_results(result)


@pytest.mark.parametrize("bad", ["sk-SECRET-9999\nzq42", "sk-SECRET 9999", "sk-SECRET-9999\r", "sk-SÉCRET-9999",
                                 "sk-1"])
def test_a_malformed_key_is_refused_at_load_without_being_shown(bad, tmp_path, monkeypatch):
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    env = tmp_path / ".env"
    env.write_text(f"DEEPSEEK_API_KEY={json.dumps(bad, ensure_ascii=False)}\n", encoding="utf-8")

    def shows_the_key(message):
        return any(bad[i: i + 4] in message for i in range(len(bad) - 3))

    with pytest.raises(ValueError, match="DEEPSEEK_API_KEY") as caught:
        create_search_client("deepseek", env_path=env)
    assert not shows_the_key(str(caught.value))
    with pytest.raises(ValueError, match="ZHIHU_SEARCH_KEYS: the key at position 2 of 2") as caught:
        ZhihuSearchClient([KEY, bad])
    assert not shows_the_key(str(caught.value))


# ---------------------------------------------------------------- bounded size


def test_an_answer_past_the_size_cap_fails_the_search():
    with FakeService() as svc:
        svc.push(json=wiki_answer("x" * (MAX_RESPONSE_BYTES + 1000)))
        result = wiki(svc).search("q")
    assert not result.ok and "larger than" in result.error


def peak_bytes_during(fn):
    tracemalloc.start()
    try:
        value = fn()
        return value, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_gzip_bomb_is_not_inflated_past_the_cap():
    gzip_bomb(BOMB)  # built before measuring
    with FakeService() as svc:
        svc.push(bomb=BOMB)
        result, peak = peak_bytes_during(lambda: wiki(svc).search("q"))
    assert not result.ok and "inflates past" in result.error
    assert peak < 4 * MAX_RESPONSE_BYTES < BOMB


def test_a_bomb_in_an_error_body_is_not_inflated_on_any_retry():
    gzip_bomb(BOMB)
    with FakeService() as svc:
        for _ in range(3):
            svc.push(status=500, bomb=BOMB)
        result, peak = peak_bytes_during(lambda: wiki(svc).search("q"))
    assert not result.ok and result.status == 500 and len(svc.requests) == 3
    assert peak < MAX_RESPONSE_BYTES


# ---------------------------------------------------------------- one deadline per search


def test_a_dripping_server_cannot_hold_a_search_past_its_timeout():
    body = json.dumps(wiki_answer("y" * 400)).encode()
    with FakeService() as svc:
        svc.push(raw=body, drip=(16, 0.2))  # about 6 s to send in full
        client = wiki(svc, timeout=1.0)
        started = time.monotonic()
        result = client.search("q")
        took = time.monotonic() - started
    assert not result.ok and "timeout" in result.error and "still arriving" in result.error
    assert took < 2.5 and client.stats.timeouts == 1


def test_a_stalled_body_is_a_timeout():
    with FakeService() as svc:
        svc.push(json=wiki_answer(), stall=5.0)
        client = wiki(svc, timeout=0.5)
        result = client.search("q")
    assert not result.ok and "timeout" in result.error and result.latency < 2.0


def test_retries_share_the_deadline():
    with FakeService() as svc:
        for _ in range(3):
            svc.push(status=503, delay=0.6)
        client = wiki(svc, timeout=1.0)
        result = client.search("q")
    assert not result.ok and "timeout" in result.error and "1s deadline" in result.error
    assert result.latency < 1.5 and client.stats.timeouts == 1


def test_a_retry_after_past_the_deadline_ends_the_search_at_once():
    sleeps = Sleeps()
    with FakeService() as svc:
        svc.push(status=503, headers={"Retry-After": "10"}).push(json=wiki_answer())
        client = wiki(svc, timeout=2.0, sleeps=sleeps)
        result = client.search("q")
    assert not result.ok and result.status == 503 and sleeps == []
    assert "timeout" in result.error and "10s" in result.error and "2s deadline" in result.error
    assert len(svc.requests) == 1 and client.stats.timeouts == 1


# ---------------------------------------------------------------- queries


@pytest.mark.parametrize("query", ["\u200b", " \u200b\u200d \ufeff", "\u2060\u200c"])
def test_a_zero_width_query_is_empty_and_sends_nothing(query):
    with FakeService() as svc:
        client = wiki(svc)
        result = client.search(query)
    assert not result.ok and result.error == "empty query" and svc.requests == []


def test_a_query_with_a_lone_surrogate_is_refused_before_sending():
    with FakeService() as svc:
        client = wiki(svc)
        result = client.search("\ud83d x")
    assert not result.ok and "lone surrogate" in result.error and "bad response" not in result.error
    assert svc.requests == []


@pytest.mark.parametrize("backend", ["wikipedia", "zhihu"])
def test_a_lone_surrogate_in_an_answer_reaches_the_observation_as_a_replacement_character(backend):
    text = "Paris \ud83d is \udc00 big"  # the service sends them as JSON escapes
    with FakeService() as svc:
        svc.push(json=wiki_answer(text) if backend == "wikipedia" else zhihu_answer(text))
        result = (wiki(svc) if backend == "wikipedia" else zhihu(svc)).search("q")
    assert result.ok and result.items[0].content == "Paris \ufffd is \ufffd big"
    assert valid_unicode(format_results(result))  # a tokenizer can encode the observation
