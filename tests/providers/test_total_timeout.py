"""
``total_timeout`` against a real server on 127.0.0.1 that trickles the head of its reply a byte at a time.

Every read gets a byte well within ``read_timeout``, so only a bound on the
whole exchange (connect to last byte: status line, headers, ``100 Continue``
included) can end the call; it must end ``timeout`` at about ``total_timeout``.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from agent_fsm import ProviderFailure
from agent_fsm.providers import OpenAIChat

HELLO = [{"role": "user", "content": "hi"}]
STEP = 0.4  # seconds between two bytes
TOTAL = 2.0

# Each head is cut after 40 bytes (16 s at STEP) and the connection closed: long past TOTAL, yet finite,
# so a call that is not bounded fails its assertions instead of hanging the suite.
HEADS = {
    # The status line itself, trickled.
    "status-line": b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n",
    # A status line at once, then headers a byte at a time.
    "headers": b"x-pad: " + b"a" * 100,
    # Interim responses, each whole and harmless, that never give way to the reply.
    "continue": b"HTTP/1.1 100 Continue\r\n\r\n" * 4,
}
AT_ONCE = {"headers": b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"}
CUT = 40


class Trickler:
    """A socket server that reads a request, then sends ``head`` one byte every ``STEP`` seconds until told to stop."""

    def __init__(self, head: bytes, at_once: bytes = b"") -> None:
        self.head = head[:CUT]
        self.at_once = at_once
        self.stopping = threading.Event()
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                connection, _ = self.sock.accept()
            except TimeoutError:
                continue
            threading.Thread(target=self._trickle, args=(connection,), daemon=True).start()

    def _trickle(self, connection: socket.socket) -> None:
        with connection:
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection.recv(65536)  # the request (small: it arrives in one piece on loopback)
            if self.at_once:
                connection.sendall(self.at_once)
            for index in range(len(self.head)):
                try:
                    connection.sendall(self.head[index : index + 1])
                except OSError:
                    return  # the client gave up, as it should
                if self.stopping.wait(STEP):
                    return


@pytest.fixture(params=sorted(HEADS))
def trickler(request: pytest.FixtureRequest) -> Iterator[Trickler]:
    """A trickling server for each way of holding a reply's head open."""
    server = Trickler(HEADS[request.param], AT_ONCE.get(request.param, b""))
    server.thread.start()
    yield server
    server.stopping.set()
    server.thread.join(timeout=5)
    server.sock.close()


def _model(url: str) -> OpenAIChat:
    return OpenAIChat(base_url=url, model="m", read_timeout=5.0, total_timeout=TOTAL, max_retries=0)


def test_total_timeout_bounds_the_head_of_the_reply(trickler: Trickler) -> None:
    """chat(): the typed timeout at about total_timeout, however slowly the status line and headers come."""
    started = time.monotonic()
    with pytest.raises(ProviderFailure) as caught:
        _model(trickler.url).chat(HELLO)
    took = time.monotonic() - started
    assert caught.value.kind == "timeout" and "total_timeout=2s" in caught.value.message
    assert took < TOTAL + 1.5, took


def test_total_timeout_bounds_the_head_of_the_reply_async(trickler: Trickler) -> None:
    """achat(): the same bound under asyncio."""

    async def call() -> None:
        model = _model(trickler.url)
        try:
            await model.achat(HELLO)
        finally:
            await model.aclose()

    started = time.monotonic()
    with pytest.raises(ProviderFailure) as caught:
        asyncio.run(call())
    took = time.monotonic() - started
    assert caught.value.kind == "timeout" and "total_timeout=2s" in caught.value.message
    assert took < TOTAL + 1.5, took
