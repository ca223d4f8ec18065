"""What every online backend shares: one HTTP call, rate limit, retries, stats, secrets.

``OnlineSearchClient.search`` is Happy-LLM §8.3.2's outer ``search()``: it waits for a start slot of the
rate limiter, calls the backend's ``_request``, retries 429 and 5xx answers a bounded number of
times (honouring ``Retry-After``), counts everything in ``stats`` and never raises: a failure is
``SearchResult(ok=False, error=...)``, with any API key scrubbed from the error text.
"""

from __future__ import annotations

import email.utils
import gzip
import json
import logging
import os
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.search.types import SearchResult, SearchStats

log = logging.getLogger("helpers.search")
USER_AGENT = "search-r1-course/0.1 (teaching project; https://github.com/PeterGriffinJin/Search-R1)"


class HTTPStatusError(Exception):
    def __init__(self, status: int, retry_after: float | None = None, body: str = ""):
        super().__init__(f"HTTP {status}")
        self.status = status
        self.retry_after = retry_after
        self.body = body


class SearchTimeout(Exception):
    pass


class BadResponse(ValueError):
    """The service answered 2xx but not in the shape we expect."""


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadResponse(f"malformed JSON: {exc}") from exc


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (now if now is not None else time.time()))


def _decode(body: bytes, encoding: str | None) -> bytes:
    encoding = (encoding or "").lower()
    if encoding == "gzip" or body[:2] == b"\x1f\x8b":
        return gzip.decompress(body)
    if encoding == "deflate":
        return zlib.decompress(body)
    return body


def with_params(url: str, params: dict | None = None) -> str:
    """``url`` with ``params`` URL-encoded onto its query string: the URL ``http_call`` requests."""
    if params:
        url = f"{url}{'&' if '?' in url else '?'}{urllib.parse.urlencode(params)}"
    return url


def clean_query(query: Any) -> str:
    """The query text a search sends: ``str(query)`` without surrounding whitespace."""
    return str(query).strip()


def http_call(url: str, *, method: str = "GET", params: dict | None = None, json_body: Any = None,
              headers: dict[str, str] | None = None, timeout: float | None = 10.0) -> Response:
    """One HTTP exchange; raises HTTPStatusError (>= 400), SearchTimeout, or OSError."""
    url = with_params(url, params)
    data = None
    all_headers = {"Accept": "application/json", "Accept-Encoding": "gzip", "User-Agent": USER_AGENT}
    all_headers.update(headers or {})
    if json_body is not None:
        data = json.dumps(json_body).encode("utf-8")
        all_headers["Content-Type"] = "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers=all_headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = _decode(response.read(), response.headers.get("Content-Encoding"))
            return Response(response.status, dict(response.headers.items()), body)
    except urllib.error.HTTPError as exc:
        try:
            raw = _decode(exc.read(), exc.headers.get("Content-Encoding") if exc.headers else None)
        except Exception:  # an unreadable error body is still an HTTP error
            raw = b""
        retry_after = parse_retry_after(exc.headers.get("Retry-After") if exc.headers else None)
        raise HTTPStatusError(exc.code, retry_after, raw[:300].decode("utf-8", "replace")) from None
    except (TimeoutError, socket.timeout) as exc:
        raise SearchTimeout(f"no answer within {timeout}s") from exc
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, (TimeoutError, socket.timeout)):
            raise SearchTimeout(f"no answer within {timeout}s") from exc
        raise OSError(f"connection failed: {exc.reason}") from None
    except (gzip.BadGzipFile, zlib.error, EOFError) as exc:
        raise BadResponse(f"corrupt compressed body: {exc}") from exc


class RateLimiter:
    """Spaces request *starts* at least 60/per_minute seconds apart, across threads."""

    def __init__(self, per_minute: float = 200.0, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep):
        if per_minute <= 0:
            raise ValueError("per_minute must be positive")
        self.interval = 60.0 / per_minute
        self._clock = clock
        self._sleep = sleep
        self._next = 0.0
        self._lock = threading.Lock()

    def acquire(self) -> float:
        """Reserve the next start slot and sleep until it; returns the wait."""
        with self._lock:
            now = self._clock()
            start = max(now, self._next)
            self._next = start + self.interval
        wait = start - now
        if wait > 0:
            self._sleep(wait)
        return wait


@dataclass
class RetryPolicy:
    """Bounded retries: exponential backoff, or the server's Retry-After when it sends one."""

    max_retries: int = 2
    backoff: float = 1.0
    max_delay: float = 30.0
    sleep: Callable[[float], None] = time.sleep

    def delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_delay)
        return min(self.backoff * (2 ** attempt), self.max_delay)


def redact(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    return text


def env_value(name: str, env_path: str | Path | None = None) -> str | None:
    """A setting from the .env file (project root by default) or the environment; never logged."""
    from dotenv import dotenv_values

    from helpers import config

    path = Path(env_path) if env_path else config.PROJECT_ROOT / ".env"
    values = dotenv_values(path) if path.exists() else {}
    return values.get(name) or os.environ.get(name) or None


class OnlineSearchClient:
    """Base of the HTTP backends. Subclasses implement ``_request(query, started)``."""

    name = "online"
    retry_statuses = frozenset({429, 500, 502, 503, 504})

    def __init__(self, *, timeout: float | None = 10.0, retry: RetryPolicy | None = None,
                 limiter: RateLimiter | None = None):
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.limiter = limiter
        self.stats = SearchStats()

    def _secrets(self) -> list[str]:
        return []

    def _on_rate_limited(self) -> bool:
        """Called on a 429; True means 'switched key, retry now without counting a retry'."""
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(timeout={self.timeout})"

    def _fail(self, started: float, message: str, status: int | None = None) -> SearchResult:
        error = redact(message, self._secrets())
        return SearchResult(ok=False, items=[], latency=time.perf_counter() - started, status=status, error=error)

    def search(self, query: str) -> SearchResult:
        started = time.perf_counter()
        rate_limited = retries = failovers = 0
        timeout = False
        attempt = 0
        query = clean_query(query)
        if not query:
            result = self._fail(started, "empty query")
            self.stats.record(result)
            return result
        while True:
            if self.limiter is not None:
                self.limiter.acquire()
            try:
                result = self._request(query, started)
                break
            except HTTPStatusError as exc:
                if exc.status == 429:
                    rate_limited += 1
                    if self._on_rate_limited():
                        failovers += 1
                        continue
                if exc.status in self.retry_statuses and attempt < self.retry.max_retries:
                    delay = self.retry.delay(attempt, exc.retry_after)
                    log.info("%s: HTTP %s, retry in %.2fs", self.name, exc.status, delay)
                    self.retry.sleep(delay)
                    attempt += 1
                    retries += 1
                    continue
                label = "rate limited" if exc.status == 429 else "error"
                result = self._fail(started, f"{self.name}: HTTP {exc.status} {label}"
                                    + (f" after {attempt + 1} attempts" if attempt else ""), exc.status)
                break
            except SearchTimeout as exc:
                timeout = True
                result = self._fail(started, f"{self.name}: timeout ({exc})")
                break
            except (BadResponse, ValueError, TypeError, KeyError, AttributeError) as exc:
                result = self._fail(started, f"{self.name}: bad response ({type(exc).__name__}: {exc})")
                break
            except Exception as exc:  # network down, DNS, anything: never raise into a rollout
                result = self._fail(started, f"{self.name}: {type(exc).__name__}: {exc}")
                break
        self.stats.record(result, timeout=timeout, rate_limited=rate_limited, retries=retries,
                          failovers=failovers)
        if not result.ok:
            log.warning("%s search failed: %s", self.name, result.error)
        return result

    def _request(self, query: str, started: float) -> SearchResult:  # pragma: no cover - abstract
        raise NotImplementedError
