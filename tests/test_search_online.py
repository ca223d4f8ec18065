"""Online backends against a local fake service that answers in each service's shape and injects faults."""

from __future__ import annotations

import logging
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "fixtures" / "search"))
from fake_service import Answer, FakeService  # noqa: E402

from helpers.search import create_search_client, format_results  # noqa: E402
from helpers.search.deepseek import DeepSeekSearchClient, split_evidence  # noqa: E402
from helpers.search.http import RateLimiter, RetryPolicy, parse_retry_after  # noqa: E402
from helpers.search.wikipedia import WikipediaSearchClient  # noqa: E402
from helpers.search.zhihu import ZhihuSearchClient, parse_keys  # noqa: E402

KEY_A = "zk-SECRET-aaaa-1111"
KEY_B = "zk-SECRET-bbbb-2222"
DEEPSEEK_KEY = "sk-SECRET-deepseek-9999"


class Sleeps(list):
    """A RetryPolicy sleep that records instead of sleeping."""

    def __call__(self, seconds):
        self.append(seconds)


def wiki_page(index, title, extract):
    return {"pageid": index, "ns": 0, "title": title, "index": index, "extract": extract,
            "fullurl": f"https://en.wikipedia.org/wiki/{title.replace(' ', '_')}"}


WIKI_OK = {"batchcomplete": True, "query": {"pages": [
    wiki_page(3, "Third", "third extract"),
    wiki_page(1, "First", "first extract"),
    wiki_page(2, "Empty", ""),
]}}


def wiki_client(svc, sleeps=None, timeout=2.0, max_retries=2):
    return WikipediaSearchClient(endpoint=svc.url_for("/w/api.php"), timeout=timeout, limiter=None,
                                 retry=RetryPolicy(max_retries=max_retries, backoff=0.01, sleep=sleeps if sleeps is not None else Sleeps()))


# ---------------------------------------------------------------- wikipedia


def test_wikipedia_request_matches_the_seed_and_orders_by_index():
    with FakeService() as svc:
        svc.push(json=WIKI_OK)
        client = wiki_client(svc)
        result = client.search("  first nobel prize  ")
    assert result.ok and result.status == 200
    assert [i.title for i in result.items] == ["First", "Third"]  # by index, empty extract dropped
    assert result.items[0].source == "Wikipedia" and result.items[0].url.endswith("/First")
    seen = svc.requests[0]
    assert seen.params == {"action": "query", "format": "json", "formatversion": "2", "generator": "search",
                           "gsrsearch": "first nobel prize", "gsrlimit": "3", "prop": "extracts|info",
                           "explaintext": "1", "exintro": "1", "exchars": "1200", "inprop": "url",
                           "redirects": "1", "utf8": "1"}
    assert "search-r1-course" in seen.headers["user-agent"]
    assert seen.headers["accept-encoding"] == "gzip"
    assert client.stats.as_dict()["successes"] == 1 and client.stats.results == 2


WIKI_PARAM_KEYS = {"action", "format", "formatversion", "generator", "gsrsearch", "gsrlimit", "prop",
                   "explaintext", "exintro", "exchars", "inprop", "redirects", "utf8"}


@pytest.mark.parametrize("query", [
    "first nobel prize",
    '  "The Little Prince" author\'s  birthplace  ',
    "Antoine de Saint-Exupéry — Lyon? 東京 & \"q=1+1%\" #frag",
])
def test_wikipedia_request_url_is_exactly_what_search_requests(query):
    with FakeService(default=Answer(json=WIKI_OK)) as svc:
        client = wiki_client(svc)
        url = client.request_url(query)
        assert svc.requests == []  # request_url only builds the URL, it sends nothing
        assert client.search(query).ok
    assert len(svc.requests) == 1
    seen = svc.requests[0]
    parts = urllib.parse.urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}" == svc.url_for("")
    assert parts.path == seen.path == "/w/api.php" and not parts.fragment
    sent = urllib.parse.urlsplit(seen.target)
    assert urllib.parse.parse_qsl(parts.query, strict_parsing=True) == urllib.parse.parse_qsl(sent.query, strict_parsing=True)
    assert dict(urllib.parse.parse_qsl(parts.query)) == seen.params
    assert seen.params["gsrsearch"] == query.strip()  # stripped like search() strips it, then encoded
    assert f"{parts.path}?{parts.query}" == seen.target  # the same bytes on the wire
    assert parts.query.isascii() and " " not in parts.query and '"' not in parts.query
    # only the MediaWiki parameters: no header (User-Agent) and nothing key-like rides in the URL
    assert set(seen.params) == WIKI_PARAM_KEYS and "search-r1-course" not in url


def test_wikipedia_request_url_of_the_default_endpoint_and_blank_query():
    url = WikipediaSearchClient().request_url("Antoine de Saint-Exupéry birthplace")
    assert url.startswith("https://en.wikipedia.org/w/api.php?action=query&")
    assert "gsrsearch=Antoine+de+Saint-Exup%C3%A9ry+birthplace" in url
    with pytest.raises(ValueError):
        WikipediaSearchClient().request_url("   ")


def test_wikipedia_gzip_body():
    with FakeService() as svc:
        svc.push(json=WIKI_OK, gzip=True)
        result = wiki_client(svc).search("q")
    assert result.ok and [i.title for i in result.items] == ["First", "Third"]


def test_429_with_retry_after_is_honoured():
    sleeps = Sleeps()
    with FakeService() as svc:
        svc.push(status=429, headers={"Retry-After": "7"}).push(json=WIKI_OK)
        client = wiki_client(svc, sleeps, timeout=30.0)
        result = client.search("q")
    assert result.ok and sleeps == [7.0]
    stats = client.stats.as_dict()
    assert stats["rate_limited"] == 1 and stats["retries"] == 1 and stats["successes"] == 1 and stats["errors"] == 0


def test_429_without_retry_after_backs_off_exponentially_then_gives_up():
    sleeps = Sleeps()
    with FakeService(default=__import__("fake_service").Answer(status=429)) as svc:
        client = wiki_client(svc, sleeps, max_retries=2)
        result = client.search("q")
    assert not result.ok and result.status == 429 and "rate limited" in result.error
    assert sleeps == [0.01, 0.02]
    assert len(svc.requests) == 3
    stats = client.stats.as_dict()
    assert stats["rate_limited"] == 3 and stats["errors"] == 1 and stats["retries"] == 2 and stats["timeouts"] == 0


@pytest.mark.parametrize("status", [500, 503])
def test_5xx_is_retried_and_can_recover(status):
    sleeps = Sleeps()
    with FakeService() as svc:
        svc.push(status=status).push(json=WIKI_OK)
        client = wiki_client(svc, sleeps)
        result = client.search("q")
    assert result.ok and len(sleeps) == 1
    assert client.stats.retries == 1 and client.stats.rate_limited == 0 and client.stats.errors == 0


def test_persistent_503_fails_with_status_and_error_observation():
    with FakeService() as svc:
        svc.push(status=503).push(status=503).push(status=503)
        client = wiki_client(svc)
        result = client.search("q")
    assert not result.ok and result.status == 503
    assert format_results(result).startswith("Search failed: wikipedia: HTTP 503")
    assert client.stats.errors == 1 and client.stats.requests == 1


def test_4xx_other_than_429_is_not_retried():
    with FakeService() as svc:
        svc.push(status=400).push(json=WIKI_OK)
        client = wiki_client(svc)
        result = client.search("q")
    assert not result.ok and result.status == 400 and len(svc.requests) == 1


def test_slow_answer_past_timeout_counts_as_timeout():
    with FakeService() as svc:
        svc.push(json=WIKI_OK, delay=1.0)
        client = wiki_client(svc, timeout=0.2)
        result = client.search("q")
    assert not result.ok and "timeout" in result.error
    assert result.latency < 0.9
    stats = client.stats.as_dict()
    assert stats["timeouts"] == 1 and stats["errors"] == 0


@pytest.mark.parametrize("raw", [b"{not json", b"\xff\xfe", b'{"query": {"pages": {"1": {}}}}', b'[1, 2]',
                                 b'{"query": {"pages": ["x"]}}'])
def test_malformed_answers_are_errors_not_exceptions(raw):
    with FakeService() as svc:
        svc.push(raw=raw)
        client = wiki_client(svc)
        result = client.search("q")
    assert not result.ok and "bad response" in result.error
    assert client.stats.errors == 1


def test_corrupt_gzip_is_an_error():
    with FakeService() as svc:
        svc.push(raw=b"\x1f\x8bnot really gzip", headers={"Content-Encoding": "gzip"})
        result = wiki_client(svc).search("q")
    assert not result.ok


def test_empty_results_are_ok_with_no_items():
    with FakeService() as svc:
        svc.push(json={"batchcomplete": True})
        client = wiki_client(svc)
        result = client.search("zzzz")
    assert result.ok and result.items == []
    assert format_results(result).startswith("No results")
    assert client.stats.successes == 1 and client.stats.results == 0


def test_unreachable_service_and_empty_query_never_raise():
    client = WikipediaSearchClient(endpoint="http://127.0.0.1:9/w/api.php", timeout=1, limiter=None,
                                   retry=RetryPolicy(max_retries=0, sleep=Sleeps()))
    result = client.search("q")
    assert not result.ok and result.error
    assert not client.search("   ").ok
    assert client.stats.errors == 2


def test_parse_retry_after():
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == pytest.approx(10.0)


def test_rate_limiter_spaces_starts():
    now = [0.0]
    waits = Sleeps()
    limiter = RateLimiter(per_minute=200, clock=lambda: now[0], sleep=waits)
    for _ in range(3):
        limiter.acquire()
    assert waits == pytest.approx([0.3, 0.6])  # 60/200 s apart, reserved up front
    now[0] = 10.0
    assert limiter.acquire() == 0.0


def test_rate_limiter_is_shared_across_threads():
    reserved = []
    lock = threading.Lock()
    limiter = RateLimiter(per_minute=60, clock=lambda: 0.0, sleep=lambda s: (lock.acquire(), reserved.append(s), lock.release()))
    threads = [threading.Thread(target=limiter.acquire) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(reserved) == pytest.approx([float(i) for i in range(1, 8)])  # one slot each, none shared


def test_wikipedia_clients_share_one_limiter_by_default():
    assert WikipediaSearchClient().limiter is WikipediaSearchClient().limiter is not None


# ---------------------------------------------------------------- zhihu


def zhihu_items(*titles, text="some answer text"):
    return {"Code": 0, "Message": "success", "Data": {"Items": [
        {"Title": t, "ContentText": text, "Url": f"https://www.zhihu.com/question/{i}",
         "ContentType": "answer", "AuthorName": "author"} for i, t in enumerate(titles)]}}


def zhihu_client(svc, keys=(KEY_A, KEY_B)):
    return ZhihuSearchClient(list(keys), endpoint=svc.url_for("/api/v1/content/global_search"),
                             retry=RetryPolicy(max_retries=1, backoff=0.01, sleep=Sleeps()))


def test_zhihu_request_shape_and_items():
    with FakeService() as svc:
        svc.push(json=zhihu_items("Q1", "Q2", text="x" * 3000))
        result = zhihu_client(svc).search("光速是多少")
    assert result.ok and [i.title for i in result.items] == ["Q1", "Q2"]
    assert len(result.items[0].content) <= 1200 and result.items[0].source == "Zhihu answer by author"
    seen = svc.requests[0]
    assert seen.path == "/api/v1/content/global_search"
    assert seen.params == {"Query": "光速是多少", "Count": "3", "SearchDB": "all"}
    assert seen.headers["authorization"] == f"Bearer {KEY_A}"
    assert seen.headers["x-request-timestamp"].isdigit()


def test_zhihu_round_robin_and_failover_on_429(caplog):
    with FakeService(default=__import__("fake_service").Answer(json=zhihu_items("ok"))) as svc:
        client = zhihu_client(svc)
        assert client.search("a").ok and client.search("b").ok
        svc.push(status=429)  # key A is rate limited on the third call
        assert client.search("c").ok
        assert client.search("d").ok and client.search("e").ok
    used = [r.headers["authorization"][-4:] for r in svc.requests]
    assert used == ["1111", "2222", "1111", "2222", "2222", "2222"]
    assert client.active_keys == 1
    stats = client.stats.as_dict()
    assert stats["failovers"] == 1 and stats["rate_limited"] == 1 and stats["successes"] == 5 and stats["retries"] == 0


def test_zhihu_all_keys_rate_limited(caplog):
    caplog.set_level(logging.DEBUG, logger="helpers.search")
    with FakeService() as svc:
        svc.push(status=429).push(status=429, echo_auth=True)
        client = zhihu_client(svc)
        result = client.search("q")
        again = client.search("q")
    assert not result.ok and result.status == 429
    assert not again.ok and "rate limited" in again.error
    assert client.stats.rate_limited == 2 and client.stats.failovers == 1 and client.stats.errors == 2
    for text in (result.error, again.error, repr(client), repr(result), caplog.text, str(client.stats.as_dict())):
        assert KEY_A not in text and KEY_B not in text


def test_zhihu_api_error_code_and_empty_items():
    with FakeService() as svc:
        svc.push(json={"Code": 40001, "Message": "invalid token"}).push(json={"Code": 0, "Data": {"Items": []}})
        client = zhihu_client(svc)
        bad, empty = client.search("q"), client.search("q")
    assert not bad.ok and "40001" in bad.error
    assert empty.ok and empty.items == []


def test_zhihu_keys_from_env_file(tmp_path, monkeypatch):
    monkeypatch.delenv("ZHIHU_SEARCH_KEYS", raising=False)
    env = tmp_path / ".env"
    env.write_text(f'ZHIHU_SEARCH_KEYS="{KEY_A},\n{KEY_B}, {KEY_A}"\n')
    assert parse_keys(f"{KEY_A}, {KEY_B}\n{KEY_A}") == [KEY_A, KEY_B]
    client = create_search_client("zhihu", env_path=env)
    assert client.active_keys == 2 and KEY_A not in repr(client)
    with pytest.raises(ValueError, match="ZHIHU_SEARCH_KEYS"):
        create_search_client("zhihu", env_path=tmp_path / "missing.env")


# ---------------------------------------------------------------- deepseek

EVIDENCE_TEXT = (
    "[1] Source: Nobel Prize in Physics | https://en.wikipedia.org/wiki/Nobel_Prize_in_Physics\n"
    "Evidence: The first Nobel Prize in Physics was awarded in 1901 to Wilhelm Röntgen.\n\n"
    "[2] Source: https://www.nobelprize.org/prizes/physics/1901/summary/\n"
    "Evidence: Wilhelm Conrad Röntgen, 1901,\n  for the discovery of X-rays.\n"
)


def deepseek_answer(text, stop="end_turn", citations=None):
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "deepseek-v4-flash",
            "stop_reason": stop, "content": [
                {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"query": "q"}},
                {"type": "web_search_tool_result", "tool_use_id": "srv_1",
                 "content": [{"type": "web_search_result", "url": "https://a.example", "title": "A"}]},
                {"type": "text", "text": text, "citations": citations or []},
            ]}


def deepseek_client(svc, sleeps=None):
    return DeepSeekSearchClient(DEEPSEEK_KEY, base_url=svc.url_for("/anthropic"), timeout=2,
                                retry=RetryPolicy(max_retries=2, backoff=0.01, sleep=sleeps if sleeps is not None else Sleeps()))


def test_split_evidence_blocks():
    items = split_evidence(EVIDENCE_TEXT)
    assert [i.title for i in items] == ["Nobel Prize in Physics", "www.nobelprize.org"]
    assert items[0].url == "https://en.wikipedia.org/wiki/Nobel_Prize_in_Physics"
    assert items[1].content == "Wilhelm Conrad Röntgen, 1901, for the discovery of X-rays."
    assert split_evidence("no blocks here") == []


def test_deepseek_request_shape_and_evidence_items():
    with FakeService() as svc:
        svc.push(json=deepseek_answer(EVIDENCE_TEXT))
        client = deepseek_client(svc)
        result = client.search("who won the first physics nobel")
    assert result.ok and len(result.items) == 2 and result.items[0].source == "DeepSeek web search"
    seen = svc.requests[0]
    assert seen.method == "POST" and seen.path == "/anthropic/v1/messages"
    assert seen.headers["authorization"] == f"Bearer {DEEPSEEK_KEY}" and "anthropic-version" in seen.headers
    body = seen.body
    assert body["model"] == "deepseek-v4-flash"
    assert body["messages"] == [{"role": "user", "content": "who won the first physics nobel"}]
    assert body["tools"][0]["name"] == "web_search" and body["tools"][0]["type"].startswith("web_search_")
    assert body["tool_choice"] == {"type": "tool", "name": "web_search"}
    assert "Evidence:" in body["system"]


def test_deepseek_pause_turn_is_continued():
    with FakeService() as svc:
        svc.push(json=deepseek_answer("", stop="pause_turn")).push(json=deepseek_answer(EVIDENCE_TEXT))
        result = deepseek_client(svc).search("q")
    assert result.ok and len(result.items) == 2
    second = svc.requests[1].body
    assert "tool_choice" not in second and second["messages"][-1]["role"] == "assistant"


def test_deepseek_falls_back_to_citations():
    citations = [{"type": "web_search_result_location", "url": "https://b.example", "title": "B",
                  "cited_text": "cited passage"},
                 {"type": "web_search_result_location", "url": "https://b.example", "title": "B", "cited_text": "dup"}]
    with FakeService() as svc:
        svc.push(json=deepseek_answer("Röntgen won it.", citations=citations))
        result = deepseek_client(svc).search("q")
    assert result.ok and [(i.title, i.content, i.url) for i in result.items] == [("B", "cited passage", "https://b.example")]


def test_deepseek_overloaded_and_malformed_and_key_hygiene(caplog):
    caplog.set_level(logging.DEBUG, logger="helpers.search")
    sleeps = Sleeps()
    with FakeService() as svc:
        svc.push(status=529).push(json=deepseek_answer(EVIDENCE_TEXT))
        svc.push(json={"content": "not a list"})
        svc.push(status=401, echo_auth=True)
        client = deepseek_client(svc, sleeps)
        recovered, malformed, denied = client.search("q"), client.search("q"), client.search("q")
    assert recovered.ok and len(sleeps) == 1
    assert not malformed.ok and "bad response" in malformed.error
    assert not denied.ok and denied.status == 401
    for text in (repr(client), repr(recovered), repr(denied), denied.error, caplog.text, format_results(denied)):
        assert DEEPSEEK_KEY not in text
    assert client.stats.errors == 2 and client.stats.successes == 1 and client.stats.retries == 1


def test_deepseek_key_from_env(tmp_path, monkeypatch):
    monkeypatch.delenv("DEEPSEEK_API_KEY", raising=False)
    env = tmp_path / ".env"
    env.write_text(f"DEEPSEEK_API_KEY={DEEPSEEK_KEY}\n")
    client = create_search_client("deepseek", env_path=env, model="deepseek-v4-pro")
    assert client.model == "deepseek-v4-pro" and DEEPSEEK_KEY not in repr(client)
    with pytest.raises(ValueError, match="DEEPSEEK_API_KEY"):
        create_search_client("deepseek", env_path=tmp_path / "none.env")


def test_concurrent_searches_count_exactly():
    from concurrent.futures import ThreadPoolExecutor

    with FakeService(default=__import__("fake_service").Answer(json=WIKI_OK)) as svc:
        client = wiki_client(svc)
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(client.search, [f"q{i}" for i in range(40)]))
    assert all(r.ok for r in results)
    assert client.stats.requests == 40 and client.stats.results == 80
