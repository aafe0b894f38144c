"""
The HTTP exchange every adapter shares: one JSON POST, bounded retries, typed failures.

Each adapter only builds a request body and reads a response body; sending,
counting, retrying and translating httpx's exceptions into
:class:`agent_fsm.ProviderFailure` happen here, once. The failure kinds::

    transport       could not connect (refused, DNS, TLS); the request was not sent
    timeout         connect, pool, write or read timeout, or the whole reply took longer than total_timeout
    disconnected    the connection dropped after the request went out, before a reply
    truncated       the reply's body ended early or broke off mid-way
    http            the server answered with a non-success status (``status`` kept)
    bad_response    the body is not JSON, too large, or not shaped as the provider's reply
    request_limit   the adapter's ``max_requests`` were spent
    invalid_request the request cannot be sent as built (a tool name the provider refuses); nothing was sent

Rationale: a retry is safe only when the server cannot have acted on the
request (it was never sent) or told us it did not (429, 408, 5xx). A read
timeout or a dropped connection leaves the outcome unknown; the provider may
already have generated (and billed) the reply, so those are retried only when
the caller opts in with ``retry_unknown_outcome=True``.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import httpx

from agent_fsm.engine.errors import AgentFSMError, ProviderFailure
from agent_fsm.providers._retry import retry_after
from agent_fsm.providers._secrets import echo_pieces, redact

__all__ = ["FAILURE_KINDS", "HttpSettings", "ProviderConfigError", "join_url"]

FAILURE_KINDS: dict[str, str] = {
    "transport": "could not connect (refused, DNS, TLS); the request was not sent",
    "timeout": "a connect, pool, write or read timeout, or the reply outlasted total_timeout (the message says which)",
    "disconnected": "the connection dropped after the request went out, before a reply",
    "truncated": "the reply's body ended early or broke off mid-way",
    "http": "the server answered with a non-success status; status is kept",
    "bad_response": "the body is not JSON, too large, or not shaped as the provider's reply",
    "request_limit": "the adapter's max_requests were spent",
    "invalid_request": "the request cannot be sent as built (a tool name the provider refuses); nothing was sent",
}
"""Every ``ProviderFailure.kind`` an adapter raises, with what it means."""

_EXCERPT = 200
_RETRY_STATUSES = frozenset({408, 429})
# Failures after the request went out: the server may have served it.
_UNKNOWN_OUTCOME = frozenset({"timeout", "disconnected", "truncated", "transport"})


class ProviderConfigError(AgentFSMError, ValueError):
    """An adapter was configured wrongly (no model name, unusable base URL, unknown provider).

    Raised when the adapter is built, before any run: it is a set-up mistake,
    not a provider outage, so it never becomes a ``provider_error`` ending.
    """


def join_url(base_url: str, path: str) -> str:
    """``path`` appended to the base URL's path, its query string (Azure's ``api-version``) kept."""
    parts = urlsplit(base_url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + path, parts.query, ""))


def display_url(url: str) -> str:
    """``url`` without user info and query string: what may appear in a message."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def check_base_url(url: str, source: str) -> str:
    """The base URL without a trailing slash (its query kept), or :class:`ProviderConfigError` saying what is wrong."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProviderConfigError(f"{source} must be an http:// or https:// URL with a host, got {display_url(url)!r}")
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), parts.query, ""))


def _positive(name: str, value: float | None, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise ProviderConfigError(f"{name} must be a positive number of seconds, got {value!r}")


def _count(name: str, value: int | None, *, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ProviderConfigError(f"{name} must be a non-negative integer, got {value!r}")


class HttpSettings:
    """
    How one adapter talks HTTP: endpoint, secret, timeouts, retry budget and request limit.

    Counting and retrying live here so every adapter obeys the same rules.
    The API key is held privately and removed from every message this class
    builds; it never appears in a repr.
    """

    def __init__(
        self,
        *,
        name: str,
        base_url: str,
        api_key: str | None,
        connect_timeout: float,
        read_timeout: float,
        total_timeout: float | None,
        max_retries: int,
        retry_unknown_outcome: bool,
        backoff: float,
        max_retry_wait: float,
        max_requests: int | None,
        max_response_bytes: int,
        transport: httpx.BaseTransport | None,
        client: httpx.Client | None,
        sleep: Callable[[float], None],
    ) -> None:
        _positive("connect_timeout", connect_timeout)
        _positive("read_timeout", read_timeout)
        _positive("total_timeout", total_timeout, allow_none=True)
        _positive("backoff", backoff)
        _positive("max_retry_wait", max_retry_wait)
        _count("max_retries", max_retries)
        _count("max_requests", max_requests, allow_none=True)
        _count("max_response_bytes", max_response_bytes)
        if transport is not None and client is not None:
            raise ProviderConfigError("pass either transport or client, not both (a client brings its own transport)")
        if isinstance(api_key, str) and any(not "\x21" <= ch <= "\x7e" for ch in api_key.strip()):
            raise ProviderConfigError(
                f"{name}: the API key holds a space, a control or a non-ASCII character, which no HTTP header can "
                "carry; check how it was pasted (the key itself is not shown)"
            )
        self.name = name
        self.base_url = base_url
        # A key pasted with a trailing newline is still the key; the newline
        # would only make the header illegal and the error message quote it.
        self._api_key = api_key.strip() if isinstance(api_key, str) and api_key.strip() else None
        self._echoes = echo_pieces(self._api_key)
        # Connect is usually quick and safe to retry; reading waits for the whole
        # generation, so it gets its own (longer) limit. Writes and the pool share it.
        # The read limit bounds each read; total_timeout bounds the whole reply.
        read = read_timeout if total_timeout is None else min(read_timeout, total_timeout)
        self.timeout = httpx.Timeout(read, connect=connect_timeout)
        self.total_timeout = total_timeout
        self.max_retries = max_retries
        self.retry_unknown_outcome = retry_unknown_outcome
        self.backoff = backoff
        self.max_retry_wait = max_retry_wait
        self.max_requests = max_requests
        self.max_response_bytes = max_response_bytes
        self.sleep = sleep
        self._owns_client = client is None
        self.client = client if client is not None else httpx.Client(transport=transport, timeout=self.timeout)
        self._lock = threading.Lock()
        self.requests_made = 0

    @property
    def api_key(self) -> str | None:
        """The secret, for building headers only."""
        return self._api_key

    def close(self) -> None:
        """Close the HTTP client if this adapter created it."""
        if self._owns_client:
            self.client.close()

    # --- messages ----------------------------------------------------------------

    def redact(self, text: str) -> str:
        """``text`` with the API key blanked out, wherever and however partly it appears (see ``redact``)."""
        return redact(text, self._api_key, self._echoes)

    def failure(self, what: str, *, kind: str, status: int | None = None) -> ProviderFailure:
        """A :class:`ProviderFailure` whose message names the adapter, never the secret."""
        return ProviderFailure(self.redact(f"{self.name}: {what}"), kind=kind, status=status)

    # --- the exchange --------------------------------------------------------------

    def _claim_request(self) -> bool:
        with self._lock:
            if self.max_requests is not None and self.requests_made >= self.max_requests:
                return False
            self.requests_made += 1
            return True

    def post_json(
        self,
        path: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        *,
        accept_error: Callable[[int, Any], bool] | None = None,
    ) -> tuple[int, Any]:
        """
        POST ``body`` as JSON to ``base_url + path``; return the status and the parsed JSON reply.

        Retries what is clearly transient within ``max_retries``; every
        attempt counts toward ``max_requests``. ``accept_error(status, data)``
        may claim an error reply the adapter reads as a reply (Groq's
        ``tool_use_failed``); it is then returned instead of raised.

        Raises:
            ProviderFailure: the reply could not be obtained; ``kind`` says why.
        """
        url = join_url(self.base_url, path)
        where = f"POST {display_url(url)}"
        content = json.dumps(body).encode()
        failure: ProviderFailure | None = None
        for attempt in itertools.count(1):
            if not self._claim_request():
                if failure is None:
                    raise self.failure(
                        f"request limit reached: {self.max_requests} requests already made", kind="request_limit"
                    )
                raise _noted(failure, f"not retried: the limit of {self.max_requests} requests is spent")
            outcome, wait = self._attempt(url, where, content, headers, attempt, accept_error)
            if wait is None:
                return cast("tuple[int, Any]", outcome)
            failure = outcome
            if attempt > self.max_retries:
                raise failure if attempt == 1 else _noted(failure, f"gave up after {attempt} attempts")
            self.sleep(wait)
        raise AssertionError("unreachable")  # pragma: no cover

    def _attempt(
        self,
        url: str,
        where: str,
        content: bytes,
        headers: Mapping[str, str],
        attempt: int,
        accept_error: Callable[[int, Any], bool] | None = None,
    ) -> tuple[Any, float | None]:
        """One request: ``((status, data), None)`` on success, ``(failure, wait)`` to retry, or raise."""
        backoff = min(self.backoff * 2 ** (attempt - 1), self.max_retry_wait)
        request = self.client.build_request(
            "POST", url, content=content, headers={"content-type": "application/json", **headers}, timeout=self.timeout
        )
        started = time.monotonic()
        try:
            response = self.client.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            # Nothing reached the server: always safe to try again.
            return self._translate(exc, where, body_started=False), backoff
        except httpx.HTTPError as exc:
            return self._after_sending(self._translate(exc, where, body_started=False), backoff)
        try:
            raw = self._read_body(response, where, started)
        except httpx.HTTPError as exc:
            return self._after_sending(
                self._translate(exc, where, body_started=True, status=response.status_code), backoff
            )
        finally:
            response.close()
        status = response.status_code
        if 200 <= status < 300:
            return (status, self._parse(raw, where, status)), None
        if accept_error is not None:
            data = _json_or_none(raw)
            if data is not None and accept_error(status, data):
                return (status, data), None
        failure = self.failure(f"{where} answered HTTP {status}{self._server_said(raw)}", kind="http", status=status)
        if status in _RETRY_STATUSES or status >= 500:
            asked = retry_after(response.headers)
            if asked is not None and asked > self.max_retry_wait:
                raise self.failure(
                    f"{where} answered HTTP {status}{self._server_said(raw)}; the server asked to wait "
                    f"{asked:g}s, above max_retry_wait={self.max_retry_wait:g}s, so it was not retried",
                    kind="http",
                    status=status,
                )
            return failure, backoff if asked is None else asked
        raise failure

    def _after_sending(self, failure: ProviderFailure, backoff: float) -> tuple[ProviderFailure, float]:
        """Retry a failure after the request went out only if the caller accepts a possible repeat."""
        if self.retry_unknown_outcome and failure.kind in _UNKNOWN_OUTCOME:
            return failure, backoff
        raise failure

    def _read_body(self, response: httpx.Response, where: str, started: float | None = None) -> bytes:
        chunks: list[bytes] = []
        size = 0
        total = self.total_timeout
        for chunk in response.iter_bytes():
            # Each read is bounded by read_timeout; a server trickling bytes is
            # stopped here, at most one read past the deadline.
            if total is not None and started is not None and time.monotonic() - started > total:
                raise self.failure(
                    f"{where} timed out: the reply took longer than total_timeout={total:g}s",
                    kind="timeout",
                    status=response.status_code,
                )
            size += len(chunk)
            if size > self.max_response_bytes:
                raise self.failure(
                    f"{where}: the reply exceeds max_response_bytes={self.max_response_bytes}",
                    kind="bad_response",
                    status=response.status_code,
                )
            chunks.append(chunk)
        return b"".join(chunks)

    def _translate(
        self, exc: httpx.HTTPError, where: str, *, body_started: bool, status: int | None = None
    ) -> ProviderFailure:
        """Map an httpx exception to the most specific failure kind (the chain keeps the original)."""
        detail = str(exc) or type(exc).__name__
        if isinstance(exc, httpx.TimeoutException):
            phase = {
                httpx.ConnectTimeout: "connecting",
                httpx.PoolTimeout: "waiting for a free connection",
                httpx.WriteTimeout: "sending the request",
            }.get(type(exc), "reading the reply body" if body_started else "waiting for the reply")
            limit = self.timeout.connect if isinstance(exc, httpx.ConnectTimeout) else self.timeout.read
            failure = self.failure(f"{where} timed out {phase} (limit {limit:g}s)", kind="timeout", status=status)
        elif isinstance(exc, httpx.ConnectError):
            failure = self.failure(f"{where}: could not connect ({detail})", kind="transport")
        elif body_started and isinstance(exc, httpx.TransportError):
            failure = self.failure(f"{where}: the reply body broke off ({detail})", kind="truncated", status=status)
        elif isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
            failure = self.failure(f"{where}: the connection dropped before a reply ({detail})", kind="disconnected")
        elif isinstance(exc, httpx.DecodingError):
            failure = self.failure(
                f"{where}: the reply could not be decoded ({detail})", kind="bad_response", status=status
            )
        else:
            failure = self.failure(f"{where} failed: {type(exc).__name__} ({detail})", kind="transport", status=status)
        failure.__cause__ = exc
        return failure

    def _parse(self, raw: bytes, where: str, status: int) -> Any:
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise self.failure(
                f"{where} answered HTTP {status} with a body that is not JSON: {_excerpt(raw)!r}",
                kind="bad_response",
                status=status,
            ) from exc

    def _server_said(self, raw: bytes) -> str:
        """The server's own error message (OpenAI, Anthropic and Ollama shapes), briefly."""
        try:
            data = json.loads(raw)
        except (ValueError, RecursionError):
            text = _excerpt(raw)
            return f": {text!r}" if text else ""
        error = data.get("error") if isinstance(data, dict) else None
        if isinstance(error, dict):
            error = error.get("message") or error.get("type")
        text = str(error if error is not None else data)[:_EXCERPT]
        return f": {text}"

    def bad_response(self, what: str, status: int) -> ProviderFailure:
        """A well-delivered reply that does not have the provider's shape."""
        return self.failure(f"POST {display_url(self.base_url)}: {what}", kind="bad_response", status=status)


def _json_or_none(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _excerpt(raw: bytes) -> str:
    return raw[:_EXCERPT].decode("utf-8", "replace").strip()


def _noted(failure: ProviderFailure, note: str) -> ProviderFailure:
    """The same failure with ``note`` appended, chained to what caused the original."""
    noted = ProviderFailure(f"{failure.message} ({note})", kind=failure.kind, status=failure.status)
    noted.__cause__ = failure.__cause__ or failure
    return noted
