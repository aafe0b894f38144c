"""
How every adapter talks HTTP: its settings, its request budget, and typed failures.

Each adapter only builds a request body and reads a response body; sending,
counting, retrying (``_exchange``) and translating httpx's exceptions into
:class:`agent_fsm.ProviderFailure` (here) happen once for all. The failure kinds::

    transport       could not connect (refused, DNS, TLS); the request was not sent
    timeout         connect, pool, write or read timeout, or the whole reply took longer than total_timeout
    disconnected    the connection dropped after the request went out, before a reply
    truncated       the reply's body ended early or broke off mid-way
    http            the server answered with a non-success status (``status`` kept)
    bad_response    the body is not JSON, too large, or not shaped as the provider's reply
    stream_error    the server reported an error in the middle of a streamed reply
    request_limit   the adapter's ``max_requests`` were spent
    invalid_request the request cannot be sent as built (a tool name the provider refuses); nothing was sent

Rationale: a retry is safe only when the server cannot have acted on the
request (it was never sent) or told us it did not (429, 408, 5xx). A read
timeout or a dropped connection leaves the outcome unknown; the provider may
already have generated (and billed) the reply, so those are retried only when
the caller opts in with ``retry_unknown_outcome=True``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.request
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from agent_fsm.engine import AgentFSMError, ProviderFailure
from agent_fsm.providers._deadline import deadline_transport
from agent_fsm.providers._secrets import echo_pieces, redact

__all__ = ["FAILURE_KINDS", "HttpSettings", "ProviderConfigError", "join_url"]

FAILURE_KINDS: dict[str, str] = {
    "transport": "could not connect (refused, DNS, TLS); the request was not sent",
    "timeout": "a connect, pool, write or read timeout, or the reply outlasted total_timeout (the message says which)",
    "disconnected": "the connection dropped after the request went out, before a reply",
    "truncated": "the reply's body ended early or broke off mid-way",
    "http": "the server answered with a non-success status; status is kept",
    "bad_response": "the body is not JSON, too large, or not shaped as the provider's reply",
    "stream_error": "the server reported an error in the middle of a streamed reply",
    "request_limit": "the adapter's max_requests were spent",
    "invalid_request": "the request cannot be sent as built (a tool name the provider refuses); nothing was sent",
}
"""Every ``ProviderFailure.kind`` an adapter raises, with what it means."""

_EXCERPT = 200


class ProviderConfigError(AgentFSMError, ValueError):
    """An adapter was configured wrongly (no model name, unusable base URL, unknown provider).

    Raised when the adapter is built, before any run: it is a set-up mistake,
    not a provider outage, so it never becomes a ``provider_error`` ending.
    """


def join_url(base_url: str, path: str) -> str:
    """
    ``path`` appended to the base URL's path, its query string (Azure's ``api-version``) kept.

    A query in ``path`` (Gemini's ``?alt=sse``) joins the base URL's.
    """
    parts = urlsplit(base_url)
    path, _, query = path.partition("?")
    query = "&".join(q for q in (parts.query, query) if q)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + path, query, ""))


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
        sleep: Callable[[float], object],
        async_transport: httpx.AsyncBaseTransport | None = None,
        async_client: httpx.AsyncClient | None = None,
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
        if async_transport is not None and async_client is not None:
            raise ProviderConfigError(
                "pass either async_transport or async_client, not both (a client brings its own transport)"
            )
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
        self._sync_configured = transport is not None or client is not None
        proxied = set(urllib.request.getproxies()) - {"no"}  # NO_PROXY alone routes nothing through a proxy
        if client is None and transport is None and total_timeout is not None and not proxied:
            # Sockets under the exchange's deadline, so total_timeout bounds the status line and headers
            # too. (With proxies from the environment httpx's own transport is kept: it routes through them.)
            transport = deadline_transport()
        self.client = client if client is not None else httpx.Client(transport=transport, timeout=self.timeout)
        # The async client is made on first use, inside the event loop that uses it (an
        # httpx.AsyncClient's connections belong to one loop); one given by the caller is used as is.
        self._async_transport = async_transport
        self._async_given = async_client
        self._async: tuple[asyncio.AbstractEventLoop, httpx.AsyncClient] | None = None
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

    def async_client(self) -> httpx.AsyncClient:
        """
        The ``httpx.AsyncClient`` for ``achat``: the caller's, or one made for the running event loop.

        Raises:
            ProviderConfigError: ``transport=`` or ``client=`` was given for the sync path but nothing for
                the async one; a default client would silently bypass that configuration.
        """
        if self._async_given is not None:
            return self._async_given
        if self._async_transport is None and self._sync_configured:
            raise ProviderConfigError(
                f"{self.name}: achat needs async_transport= or async_client= when transport= or client= is given "
                "(the sync settings cannot be carried over to an httpx.AsyncClient)"
            )
        loop = asyncio.get_running_loop()
        if self._async is None or self._async[0] is not loop:
            self._async = (loop, httpx.AsyncClient(transport=self._async_transport, timeout=self.timeout))
        return self._async[1]

    async def aclose(self) -> None:
        """Close the async HTTP client if this adapter created it (the sync one too)."""
        self.close()
        made, self._async = self._async, None
        # A client made in an event loop that has since ended has lost its connections with it.
        if made is not None and made[0] is asyncio.get_running_loop():
            await made[1].aclose()

    # --- messages ----------------------------------------------------------------

    def redact(self, text: str) -> str:
        """``text`` with the API key blanked out, wherever and however partly it appears (see ``redact``)."""
        return redact(text, self._api_key, self._echoes)

    def failure(self, what: str, *, kind: str, status: int | None = None) -> ProviderFailure:
        """A :class:`ProviderFailure` whose message names the adapter, never the secret."""
        return ProviderFailure(self.redact(f"{self.name}: {what}"), kind=kind, status=status)

    # --- the parts of an exchange (``_exchange`` runs it) ---------

    def claim_request(self) -> bool:
        """Count one more request against ``max_requests``; ``False`` when they are spent."""
        with self._lock:
            if self.max_requests is not None and self.requests_made >= self.max_requests:
                return False
            self.requests_made += 1
            return True

    def translate(
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

    def parse(self, raw: bytes, where: str, status: int) -> Any:
        """A success body as JSON, or a ``bad_response`` failure quoting its start."""
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise self.failure(
                f"{where} answered HTTP {status} with a body that is not JSON: {_excerpt(raw)!r}",
                kind="bad_response",
                status=status,
            ) from exc

    def server_said(self, raw: bytes) -> str:
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


def json_or_none(raw: bytes) -> Any:
    """``raw`` parsed as JSON, or ``None`` when it is not JSON."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return None


def _excerpt(raw: bytes) -> str:
    return raw[:_EXCERPT].decode("utf-8", "replace").strip()


def noted(failure: ProviderFailure, note: str) -> ProviderFailure:
    """The same failure with ``note`` appended, chained to what caused the original."""
    noted = ProviderFailure(f"{failure.message} ({note})", kind=failure.kind, status=failure.status)
    noted.__cause__ = failure.__cause__ or failure
    return noted
