"""
A deadline on the whole of a sync exchange: every socket read and write gets at most the time left.

httpx bounds each read (``read_timeout``), not the reply: a server that sends
its status line or headers a byte at a time, or ``100 Continue`` after
``100 Continue``, keeps every read short and the call open for as long as it
likes. The async path bounds the exchange with ``asyncio.timeout``; a thread
cannot be interrupted that way, so the default sync client talks through the
network backend here, which reads the deadline :func:`deadline` set for the
current exchange (a context variable: one per thread) before each socket call.
"""

from __future__ import annotations

import contextlib
import contextvars
import ssl
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpcore
import httpx

__all__ = ["deadline", "deadline_transport"]

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar("agent_fsm_exchange_deadline", default=None)


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Bound every socket operation of the exchange made inside by ``seconds`` from now in all (``None``: no bound)."""
    token = _DEADLINE.set(None if seconds is None else time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _left(timeout: float | None, timed_out: type[Exception]) -> float | None:
    """``timeout`` shortened to the time left before the deadline; raise ``timed_out`` once it has passed."""
    until = _DEADLINE.get()
    if until is None:
        return timeout
    left = until - time.monotonic()
    if left <= 0:
        raise timed_out("the exchange outlasted its total_timeout")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return _Stream(self._stream.start_tls(ssl_context, server_hostname, _left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._backend.connect_tcp(host, port, left, local_address, socket_options))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._backend.connect_unix_socket(path, left, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def deadline_transport() -> httpx.HTTPTransport:
    """
    httpx's default transport (same TLS, limits and HTTP/1.1), its sockets under :func:`deadline`.

    httpx takes no network backend of its own, so the transport's connection
    pool is replaced by one built with the same settings and this backend.
    """
    transport = httpx.HTTPTransport()
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=5.0)  # httpx's own
    transport._pool = httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=_Backend(),
    )
    return transport
