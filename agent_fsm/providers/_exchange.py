"""
The exchange every adapter shares: one JSON POST, bounded retries, the reply read whole or as a stream.

It runs on ``httpx.Client`` (:func:`post`) and on ``httpx.AsyncClient``
(:func:`apost`) with the same rules, kept in one place (:class:`_Call`): what
is retried, how long to wait, how the body is bounded, how failures are named.
Only the waiting differs: ``sleep`` blocks the thread, while under ``apost`` the
default waits with ``asyncio.sleep`` and an injected ``sleep`` is awaited when
it returns an awaitable.

A streamed reply is fed, chunk by chunk, to the adapter's assembler, and each
text fragment goes to ``on_delta`` as it arrives (awaited under ``apost`` when
it returns an awaitable). A stream that broke off after a fragment was
reported is never retried, even with ``retry_unknown_outcome``: the listener
has shown that text, and a second generation would tell another story.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from agent_fsm.engine import ProviderFailure
from agent_fsm.providers._deadline import deadline
from agent_fsm.providers._http import HttpSettings, display_url, join_url, json_or_none, noted
from agent_fsm.providers._retry import retry_after
from agent_fsm.providers._sse import StreamAssembler, StreamBroken

__all__ = ["apost", "post"]

_RETRY_STATUSES = frozenset({408, 429})
# Failures after the request went out: the server may have served (and billed) it.
_UNKNOWN_OUTCOME = frozenset({"timeout", "disconnected", "truncated", "transport", "stream_error"})

Outcome = tuple[Any, float | None]
"""``((status, data), None)`` for a reply, ``(failure, wait)`` for a failure worth retrying."""


class _Call:
    """One logical call (all its attempts): what is sent, how each answer is judged, the last failure."""

    def __init__(
        self,
        http: HttpSettings,
        path: str,
        body: Mapping[str, Any],
        headers: Mapping[str, str],
        accept_error: Callable[[int, Any], bool] | None,
        stream: Callable[[], StreamAssembler] | None,
    ) -> None:
        self.http = http
        self.url = join_url(http.base_url, path)
        self.where = f"POST {display_url(self.url)}"
        self.content = json.dumps(body).encode()
        self.headers = {"content-type": "application/json", **headers}
        self.accept_error = accept_error
        self.stream = stream
        self.failure: ProviderFailure | None = None
        self.delivered = False  # a fragment reached the listener: no retry from here on

    def claim(self) -> None:
        """Count the next attempt, or end the call when ``max_requests`` are spent."""
        if self.http.claim_request():
            return
        limit = self.http.max_requests
        if self.failure is None:
            raise self.http.failure(f"request limit reached: {limit} requests already made", kind="request_limit")
        raise noted(self.failure, f"not retried: the limit of {limit} requests is spent")

    def request(self, client: httpx.Client | httpx.AsyncClient) -> httpx.Request:
        return client.build_request(
            "POST", self.url, content=self.content, headers=self.headers, timeout=self.http.timeout
        )

    def backoff(self, attempt: int) -> float:
        return min(float(self.http.backoff) * 2.0 ** (attempt - 1), float(self.http.max_retry_wait))

    def wait_before_retry(self, failure: ProviderFailure, wait: float, attempt: int) -> float:
        """How long to wait before the next attempt; raise when the retries are spent."""
        self.failure = failure
        if attempt > self.http.max_retries:
            raise failure if attempt == 1 else noted(failure, f"gave up after {attempt} attempts")
        return wait

    def send_failed(self, exc: httpx.HTTPError, backoff: float) -> Outcome:
        failure = self.http.translate(exc, self.where, body_started=False)
        if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
            return failure, backoff  # nothing reached the server: always safe to try again
        return self.after_sending(failure, backoff)

    def read_failed(self, exc: httpx.HTTPError, status: int, backoff: float) -> Outcome:
        return self.after_sending(self.http.translate(exc, self.where, body_started=True, status=status), backoff)

    def after_sending(self, failure: ProviderFailure, backoff: float) -> Outcome:
        """Retry a failure after the request went out only if the caller accepts a possible repeat."""
        if self.http.retry_unknown_outcome and failure.kind in _UNKNOWN_OUTCOME and not self.delivered:
            return failure, backoff
        raise failure

    def broken(self, exc: StreamBroken, status: int, backoff: float) -> Outcome:
        failure = self.http.failure(f"{self.where}: {exc.what}", kind=exc.kind, status=status)
        failure.__cause__ = exc
        if exc.kind in _UNKNOWN_OUTCOME:
            return self.after_sending(failure, backoff)
        raise failure

    def overdue(self, started: float, status: int | None = None) -> ProviderFailure | None:
        """The ``timeout`` failure once the exchange begun at ``started`` has outlasted ``total_timeout``."""
        total = self.http.total_timeout
        if total is None or time.monotonic() - started < total:
            return None
        return self.http.failure(
            f"{self.where} timed out: the reply took longer than total_timeout={total:g}s",
            kind="timeout",
            status=status,
        )

    def count(self, size: int, started: float, status: int) -> int:
        """Bound the body read so far (``size`` bytes) by ``total_timeout`` and ``max_response_bytes``."""
        # Each read is bounded by read_timeout, and (default client) by the time left;
        # with a client or transport of the caller's, a trickling body is stopped here.
        late = self.overdue(started, status)
        if late is not None:
            raise late
        if size > self.http.max_response_bytes:
            raise self.http.failure(
                f"{self.where}: the reply exceeds max_response_bytes={self.http.max_response_bytes}",
                kind="bad_response",
                status=status,
            )
        return size

    def streamed(self, response: httpx.Response) -> bool:
        """Whether to read this response as a stream (a server that ignored ``stream`` sends plain JSON)."""
        kind = response.headers.get("content-type", "")
        return self.stream is not None and 200 <= response.status_code < 300 and not kind.startswith("application/json")

    def judge(self, response: httpx.Response, raw: bytes, backoff: float) -> Outcome:
        """A whole body: the reply, a failure to retry (429, 408, 5xx), or raise."""
        status = response.status_code
        http = self.http
        if 200 <= status < 300:
            return (status, http.parse(raw, self.where, status)), None
        if self.accept_error is not None:
            data = json_or_none(raw)
            if data is not None and self.accept_error(status, data):
                return (status, data), None
        said = http.server_said(raw)
        failure = http.failure(f"{self.where} answered HTTP {status}{said}", kind="http", status=status)
        if status in _RETRY_STATUSES or status >= 500:
            asked = retry_after(response.headers)
            if asked is not None and asked > http.max_retry_wait:
                raise http.failure(
                    f"{self.where} answered HTTP {status}{said}; the server asked to wait {asked:g}s, "
                    f"above max_retry_wait={http.max_retry_wait:g}s, so it was not retried",
                    kind="http",
                    status=status,
                )
            return failure, backoff if asked is None else asked
        raise failure


def _hear(call: _Call, on_delta: Callable[[str], object] | None, fragments: list[str]) -> None:
    """Pass the fragments to the listener; once one is heard, the call is never retried."""
    if on_delta is None:
        return
    for fragment in fragments:
        if fragment:
            call.delivered = True
            on_delta(fragment)


async def _ahear(call: _Call, on_delta: Callable[[str], object] | None, fragments: list[str]) -> None:
    """:func:`_hear`, awaiting the listener's result when it is awaitable."""
    if on_delta is None:
        return
    for fragment in fragments:
        if fragment:
            call.delivered = True
            heard = on_delta(fragment)
            if inspect.isawaitable(heard):
                await heard


def post(
    http: HttpSettings,
    path: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    *,
    accept_error: Callable[[int, Any], bool] | None = None,
    stream: Callable[[], StreamAssembler] | None = None,
    on_delta: Callable[[str], object] | None = None,
) -> tuple[int, Any]:
    """
    POST ``body`` as JSON to ``base_url + path``; return the status and the reply's JSON (assembled, when streamed).

    Retries what is clearly transient within ``max_retries``; every attempt
    counts toward ``max_requests``. ``accept_error(status, data)`` may claim an
    error reply the adapter reads as a reply (Groq's ``tool_use_failed``).
    ``stream`` makes the assembler for a streamed reply; ``on_delta`` receives its text fragments.

    Raises:
        ProviderFailure: the reply could not be obtained; ``kind`` says why.
    """
    call = _Call(http, path, body, headers, accept_error, stream)
    for attempt in itertools.count(1):
        call.claim()
        outcome, wait = _attempt(call, attempt, on_delta)
        if wait is None:
            return outcome  # type: ignore[no-any-return]
        http.sleep(call.wait_before_retry(outcome, wait, attempt))
    raise AssertionError("unreachable")  # pragma: no cover


def _attempt(call: _Call, attempt: int, on_delta: Callable[[str], object] | None) -> Outcome:
    started = time.monotonic()
    try:
        with deadline(call.http.total_timeout):  # every socket read and write of the exchange, under one bound
            return _exchange(call, attempt, on_delta, started)
    except httpx.TimeoutException as exc:
        late = call.overdue(started)
        if late is None:
            raise
        raise late from exc


def _exchange(call: _Call, attempt: int, on_delta: Callable[[str], object] | None, started: float) -> Outcome:
    http, backoff = call.http, call.backoff(attempt)
    try:
        response = http.client.send(call.request(http.client), stream=True)
    except httpx.HTTPError as exc:
        if isinstance(exc, httpx.TimeoutException) and call.overdue(started) is not None:
            raise
        return call.send_failed(exc, backoff)
    status = response.status_code
    try:
        if call.streamed(response):
            assert call.stream is not None
            assembler, size = call.stream(), 0
            try:
                for chunk in response.iter_bytes():
                    size = call.count(size + len(chunk), started, status)
                    _hear(call, on_delta, assembler.feed(chunk))
                return assembler.finish(), None
            except StreamBroken as exc:
                _hear(call, on_delta, exc.heard)
                return call.broken(exc, status, backoff)
        chunks, size = [], 0
        for chunk in response.iter_bytes():
            size = call.count(size + len(chunk), started, status)
            chunks.append(chunk)
    except httpx.HTTPError as exc:
        if isinstance(exc, httpx.TimeoutException) and call.overdue(started) is not None:
            raise
        return call.read_failed(exc, status, backoff)
    finally:
        response.close()
    return call.judge(response, b"".join(chunks), backoff)


async def apost(
    http: HttpSettings,
    path: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    *,
    accept_error: Callable[[int, Any], bool] | None = None,
    stream: Callable[[], StreamAssembler] | None = None,
    on_delta: Callable[[str], object] | None = None,
) -> tuple[int, Any]:
    """:func:`post` on ``httpx.AsyncClient``: the same rules, waits and ``on_delta`` awaited."""
    call = _Call(http, path, body, headers, accept_error, stream)
    client = http.async_client()
    for attempt in itertools.count(1):
        call.claim()
        outcome, wait = await _aattempt(call, client, attempt, on_delta)
        if wait is None:
            return outcome  # type: ignore[no-any-return]
        await _asleep(http, call.wait_before_retry(outcome, wait, attempt))
    raise AssertionError("unreachable")  # pragma: no cover


async def _asleep(http: HttpSettings, seconds: float) -> None:
    if http.sleep is time.sleep:
        await asyncio.sleep(seconds)
        return
    waited = http.sleep(seconds)
    if inspect.isawaitable(waited):
        await waited


async def _aattempt(
    call: _Call, client: httpx.AsyncClient, attempt: int, on_delta: Callable[[str], object] | None
) -> Outcome:
    started = time.monotonic()
    total = call.http.total_timeout
    try:
        # The whole exchange, connect to last byte (status line, headers, 100 Continue included), under one bound.
        async with asyncio.timeout(total):
            return await _aexchange(call, client, attempt, on_delta, started)
    except TimeoutError as exc:
        late = call.overdue(started)
        if late is None:
            raise
        raise late from exc


async def _aexchange(
    call: _Call, client: httpx.AsyncClient, attempt: int, on_delta: Callable[[str], object] | None, started: float
) -> Outcome:
    backoff = call.backoff(attempt)
    try:
        response = await client.send(call.request(client), stream=True)
    except httpx.HTTPError as exc:
        return call.send_failed(exc, backoff)
    status = response.status_code
    try:
        if call.streamed(response):
            assert call.stream is not None
            assembler, size = call.stream(), 0
            try:
                async for chunk in response.aiter_bytes():
                    size = call.count(size + len(chunk), started, status)
                    await _ahear(call, on_delta, assembler.feed(chunk))
                return assembler.finish(), None
            except StreamBroken as exc:
                await _ahear(call, on_delta, exc.heard)
                return call.broken(exc, status, backoff)
        chunks, size = [], 0
        async for chunk in response.aiter_bytes():
            size = call.count(size + len(chunk), started, status)
            chunks.append(chunk)
    except httpx.HTTPError as exc:
        return call.read_failed(exc, status, backoff)
    finally:
        await response.aclose()
    return call.judge(response, b"".join(chunks), backoff)
