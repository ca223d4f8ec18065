"""What every online backend shares: one HTTP call, rate limit, retries, stats, secrets.

``OnlineSearchClient.search`` is Happy-LLM §8.3.2's outer ``search()``: it waits for a start slot of the
rate limiter, calls the backend's ``_request``, retries 429 and 5xx answers a bounded number of
times (honouring ``Retry-After``), counts everything in ``stats`` and never raises: a failure is
``SearchResult(ok=False, error=...)``, with any API key scrubbed from the error text.

What a hostile or broken service cannot do to a search:

- keep it longer than ``timeout``: the timeout is one deadline for the whole search (connect,
  every read, every retry and every back-off), enforced by a watchdog that closes the socket of a
  server that drips its answer byte by byte;
- fill memory: at most ``MAX_RESPONSE_BYTES`` are read and at most as many are inflated (a gzip
  bomb fails the search, and an error body is read only as far as its first few hundred bytes);
- collect a key: a redirect to another origin (scheme, host, port) is followed without the
  credential headers, and keys are scrubbed from result text as well as from errors.
"""

from __future__ import annotations

import email.utils
import functools
import http.client
import json
import logging
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dotenv import dotenv_values

from helpers import config

from helpers.search.types import SearchResult, SearchStats

log = logging.getLogger("helpers.search")
USER_AGENT = "search-r1-course/0.1 (teaching project; https://github.com/PeterGriffinJin/Search-R1)"
# Three extracts of 1,200 characters are a few kB; 4 MiB leaves room for verbose JSON and no more.
MAX_RESPONSE_BYTES = 4 << 20
MAX_ERROR_BODY_BYTES = 4096  # an error answer is read (and inflated) only this far
MAX_REDIRECTS = 3
CREDENTIAL_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "x-api-key"})
_READ_CHUNK = 64 << 10
_KEY_SHAPE = re.compile(r"[\x21-\x7e]{8,512}")  # printable ASCII, no spaces: safe in a header


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


class ResponseTooLarge(BadResponse):
    """The answer (as sent, or once inflated) is larger than a search result can be."""


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


class Deadline:
    """One clock for a whole search: every connect, read, retry and back-off draws on it."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic):
        self.seconds = seconds
        self._clock = clock
        self.expires = None if seconds is None else clock() + seconds

    def remaining(self) -> float | None:
        """Seconds left (never negative), or None for no deadline."""
        return None if self.expires is None else max(0.0, self.expires - self._clock())

    @property
    def expired(self) -> bool:
        return self.expires is not None and self._clock() >= self.expires

    def describe(self) -> str:
        return f"the {self.seconds:g}s deadline for the whole search"


def check_key(key: str, setting: str, position: str = "") -> str:
    """``key`` if it can travel in an HTTP header; else ValueError that never shows the key."""
    if not isinstance(key, str) or not _KEY_SHAPE.fullmatch(key):
        raise ValueError(
            f"{setting}: the key{position} is malformed (an API key is 8-512 printable ASCII characters "
            "without spaces, quotes or line breaks); fix it in .env")
    return key


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


def inflate(body: bytes, encoding: str | None, limit: int = MAX_RESPONSE_BYTES) -> bytes:
    """The decoded body, inflating at most ``limit`` bytes (ResponseTooLarge past that)."""
    encoding = (encoding or "").lower()
    if encoding == "gzip" or body[:2] == b"\x1f\x8b":
        wbits = 16 + zlib.MAX_WBITS
    elif encoding == "deflate":
        wbits = zlib.MAX_WBITS
    else:
        if len(body) > limit:
            raise ResponseTooLarge(f"answer larger than {limit:,} bytes")
        return body
    out, rest = bytearray(), body
    while rest:  # a gzip stream may hold several members
        inflater = zlib.decompressobj(wbits)
        try:
            out += inflater.decompress(rest, limit + 1 - len(out))
        except zlib.error as exc:
            raise BadResponse(f"corrupt compressed body: {exc}") from None
        if len(out) > limit or inflater.unconsumed_tail:
            raise ResponseTooLarge(f"compressed answer inflates past {limit:,} bytes")
        if not inflater.eof:
            raise BadResponse("corrupt compressed body: truncated stream")
        rest = inflater.unused_data
    return bytes(out)


def with_params(url: str, params: dict | None = None) -> str:
    """``url`` with ``params`` URL-encoded onto its query string: the URL ``http_call`` requests."""
    if params:
        url = f"{url}{'&' if '?' in url else '?'}{urllib.parse.urlencode(params)}"
    return url


# Zero-width characters (Unicode format characters such as U+200B) are invisible and search nothing.
_EDGE_BLANKS = re.compile(r"^[\s\u200b-\u200f\u2060-\u2064\ufeff\u00ad\u180e]+|[\s\u200b-\u200f\u2060-\u2064\ufeff\u00ad\u180e]+$")


def clean_query(query: Any) -> str:
    """The query text a search sends: ``str(query)`` without surrounding whitespace or zero-width
    characters, so a query made only of them is empty."""
    return _EDGE_BLANKS.sub("", str(query))


def valid_unicode(text: str) -> bool:
    """False when ``text`` cannot be encoded as UTF-8: it holds a lone surrogate (e.g. from a JSON
    escape such as ``"\\ud83d"``), which no writer, URL or tokenizer can take."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_SURROGATE = re.compile("[\ud800-\udfff]")


def replace_lone_surrogates(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, so any writer or tokenizer takes it."""
    return text if valid_unicode(text) else _SURROGATE.sub("\ufffd", text)


# -- one HTTP exchange ------------------------------------------------------------------------


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


class _Watchdog:
    """Shuts the sockets of one exchange down when the deadline passes, whatever they are doing."""

    def __init__(self, deadline: Deadline):
        self.fired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        remaining = deadline.remaining()
        self._timer = None if remaining is None else threading.Timer(remaining, self.fire)
        if self._timer is not None:
            self._timer.daemon = True
            self._timer.start()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            fired = self.fired
        if fired:
            _shutdown(sock)

    def fire(self) -> None:
        with self._lock:
            self.fired = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


class _Watched:
    """A connection whose socket the search's watchdog can close when the deadline passes."""

    def __init__(self, *args, watchdog: _Watchdog, **kwargs):
        super().__init__(*args, **kwargs)
        self._watchdog = watchdog

    def connect(self):
        super().connect()
        self._watchdog.watch(self.sock)


class _WatchedHTTPConnection(_Watched, http.client.HTTPConnection):
    pass


class _WatchedHTTPSConnection(_Watched, http.client.HTTPSConnection):
    pass


class _WatchedHTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, watchdog: _Watchdog):
        super().__init__()
        self._watchdog = watchdog

    def http_open(self, req):
        return self.do_open(functools.partial(_WatchedHTTPConnection, watchdog=self._watchdog), req)


class _WatchedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, watchdog: _Watchdog):
        super().__init__()
        self._watchdog = watchdog

    def do_open(self, http_class, req, **kwargs):
        return super().do_open(functools.partial(_WatchedHTTPSConnection, watchdog=self._watchdog), req, **kwargs)


class _CredentialSafeRedirects(urllib.request.HTTPRedirectHandler):
    """Follows at most MAX_REDIRECTS redirects; credentials never go to another origin."""

    max_redirections = MAX_REDIRECTS

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urllib.parse.urlsplit(newurl).scheme.lower() not in ("http", "https"):
            raise urllib.error.HTTPError(req.full_url, code, "redirect to a non-HTTP URL refused", headers, fp)
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(new.full_url) != _origin(req.full_url):
            for store in (new.headers, new.unredirected_hdrs):
                for name in [n for n in store if n.lower() in CREDENTIAL_HEADERS]:
                    del store[name]
        return new


def _opener(watchdog: _Watchdog) -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(_WatchedHTTPHandler(watchdog), _WatchedHTTPSHandler(watchdog),
                                       _CredentialSafeRedirects())


def _read_capped(response, limit: int) -> bytes:
    declared = response.headers.get("Content-Length")
    if declared and declared.strip().isdigit() and int(declared) > limit:
        raise ResponseTooLarge(f"answer of {int(declared):,} bytes is larger than {limit:,}")
    chunks, size = [], 0
    while True:
        chunk = response.read1(_READ_CHUNK)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise ResponseTooLarge(f"answer larger than {limit:,} bytes")
        chunks.append(chunk)


def http_call(url: str, *, method: str = "GET", params: dict | None = None, json_body: Any = None,
              headers: dict[str, str] | None = None, timeout: float | None = 10.0,
              deadline: Deadline | None = None, max_bytes: int = MAX_RESPONSE_BYTES) -> Response:
    """One HTTP exchange; raises HTTPStatusError (>= 400), SearchTimeout, BadResponse, or OSError.

    ``deadline`` (default: ``timeout`` seconds from now) bounds the whole exchange, redirects and
    body included; at most ``max_bytes`` are read and at most as many inflated.
    """
    deadline = deadline or Deadline(timeout)
    url = with_params(url, params)
    data = None
    all_headers = {"Accept": "application/json", "Accept-Encoding": "gzip", "User-Agent": USER_AGENT}
    all_headers.update(headers or {})
    if json_body is not None:
        data = json.dumps(json_body).encode("utf-8")
        all_headers["Content-Type"] = "application/json"
    if deadline.expired:
        raise SearchTimeout(f"{deadline.describe()} passed before the request was sent")
    remaining = deadline.remaining()
    request = urllib.request.Request(url, data=data, method=method, headers=all_headers)
    watchdog = _Watchdog(deadline)
    try:
        with _opener(watchdog).open(request, timeout=remaining) as response:
            raw = _read_capped(response, max_bytes)
            if watchdog.fired:
                raise SearchTimeout(f"the answer was still arriving when {deadline.describe()} passed")
            return Response(response.status, dict(response.headers.items()),
                            inflate(raw, response.headers.get("Content-Encoding"), max_bytes))
    except urllib.error.HTTPError as exc:
        if watchdog.fired:
            raise SearchTimeout(f"no complete answer within {deadline.describe()}") from None
        try:  # only the start of an error body is read and inflated: it is shown, never parsed
            head = exc.read(MAX_ERROR_BODY_BYTES)
            encoding = exc.headers.get("Content-Encoding") if exc.headers else None
            text = _inflate_head(head, encoding).decode("utf-8", "replace")
        except Exception:  # an unreadable error body is still an HTTP error
            text = ""
        finally:
            exc.close()
        retry_after = parse_retry_after(exc.headers.get("Retry-After") if exc.headers else None)
        raise HTTPStatusError(exc.code, retry_after, text[:300]) from None
    except (TimeoutError, socket.timeout) as exc:
        raise SearchTimeout(f"no answer within {deadline.describe()}") from exc
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, (TimeoutError, socket.timeout)) or watchdog.fired:
            raise SearchTimeout(f"no answer within {deadline.describe()}") from exc
        raise OSError(f"connection failed: {exc.reason}") from None
    except (http.client.HTTPException, OSError) as exc:
        if watchdog.fired:
            raise SearchTimeout(f"the answer was still arriving when {deadline.describe()} passed") from exc
        raise
    finally:
        watchdog.stop()


def _inflate_head(head: bytes, encoding: str | None) -> bytes:
    """As much of the start of a (possibly compressed) body as inflates into MAX_ERROR_BODY_BYTES."""
    encoding = (encoding or "").lower()
    if encoding not in ("gzip", "deflate") and head[:2] != b"\x1f\x8b":
        return head
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS if encoding != "deflate" else zlib.MAX_WBITS)
    try:
        return inflater.decompress(head, MAX_ERROR_BODY_BYTES)
    except zlib.error:
        return b""


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
    path = Path(env_path) if env_path else config.PROJECT_ROOT / ".env"
    values = dotenv_values(path) if path.exists() else {}
    return values.get(name) or os.environ.get(name) or None


class OnlineSearchClient:
    """Base of the HTTP backends. Subclasses implement ``_request(query, started, deadline)``.

    ``timeout`` is a deadline for the whole search, counted from its first request: connects,
    reads, retries and their back-off all draw on it, and a back-off that would outlast it ends
    the search at once, as a timeout that says why.
    """

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

    def _scrub(self, result: SearchResult) -> SearchResult:
        """The result with every key masked in its text (a server can echo what it was sent) and
        every lone surrogate (a JSON escape such as ``"\\ud83d"``) replaced by U+FFFD: the text
        goes into an observation that a tokenizer must encode and a writer must store."""
        if not result.items:
            return result
        secrets = self._secrets()

        def clean(value):
            return redact(replace_lone_surrogates(value), secrets) if isinstance(value, str) else value

        items = [replace(item, **{name: clean(getattr(item, name)) for name in ("title", "content", "source", "url")})
                 for item in result.items]
        return replace(result, items=items)

    def search(self, query: str) -> SearchResult:
        started = time.perf_counter()
        rate_limited = retries = failovers = 0
        timeout = False
        attempt = 0
        deadline: Deadline | None = None
        query = clean_query(query)
        problem = "empty query" if not query else None if valid_unicode(query) else (
            "query is not valid Unicode (it holds a lone surrogate); nothing was sent")
        if problem:
            result = self._fail(started, problem)
            self.stats.record(result)
            return result
        while True:
            if self.limiter is not None:
                self.limiter.acquire()
            deadline = deadline or Deadline(self.timeout)  # from the first request on
            try:
                result = self._scrub(self._request(query, started, deadline))
                break
            except HTTPStatusError as exc:
                if exc.status == 429:
                    rate_limited += 1
                    if self._on_rate_limited():
                        failovers += 1
                        continue
                if exc.status in self.retry_statuses and attempt < self.retry.max_retries:
                    delay = self.retry.delay(attempt, exc.retry_after)
                    left = deadline.remaining()
                    if left is not None and delay >= left:
                        timeout = True
                        result = self._fail(started, f"{self.name}: timeout (HTTP {exc.status}; waiting "
                                            f"{delay:g}s to retry would outlast {deadline.describe()})", exc.status)
                        break
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

    def _request(self, query: str, started: float, deadline: Deadline) -> SearchResult:  # pragma: no cover
        raise NotImplementedError
