"""
A scriptable HTTP server on 127.0.0.1 that plays a provider, one scripted reply per request.

It is a real socket server (stdlib ``http.server`` in a thread), so the
adapters' real httpx stack meets real status lines, headers, timeouts,
truncated bodies and dropped connections. Reply builders for each provider's
wire format sit at the bottom.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs


class _Server(ThreadingHTTPServer):
    # Room for many simultaneous connections (concurrent ``achat`` calls); the stdlib's 5 drops some.
    request_queue_size = 128


@attrs.frozen
class Reply:
    """One scripted server action: a response, a slow one, a truncated one, or a dropped connection."""

    status: int = 200
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    # Declared Content-Length minus the bytes actually sent (0: an honest body).
    missing_bytes: int = 0
    delay: float = 0.0
    drop: bool = False
    # Seconds to stall after sending the headers and half the body.
    body_delay: float = 0.0
    # Seconds between the body's pieces when it is trickled out a few bytes at a time.
    trickle: float = 0.0


def json_reply(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    """A JSON response."""
    return Reply(status, json.dumps(data).encode(), (("content-type", "application/json"), *(headers or {}).items()))


def text_reply(text: str, status: int = 200) -> Reply:
    """A response whose body is not JSON."""
    return Reply(status, text.encode(), (("content-type", "text/html"),))


def slow(reply: Reply, seconds: float) -> Reply:
    """``reply``, sent only after ``seconds`` (released early when the server stops)."""
    return attrs.evolve(reply, delay=seconds)


def stalled(reply: Reply, seconds: float) -> Reply:
    """``reply`` whose body stops half-way for ``seconds`` after the headers went out."""
    return attrs.evolve(reply, body_delay=seconds)


def trickled(reply: Reply, seconds: float) -> Reply:
    """``reply`` whose body leaves in eight pieces, ``seconds`` apart: every read is quick, the whole is slow."""
    return attrs.evolve(reply, trickle=seconds)


def truncated(reply: Reply, missing_bytes: int = 50) -> Reply:
    """``reply`` with a Content-Length ``missing_bytes`` larger than the body, then the connection closed."""
    return attrs.evolve(reply, missing_bytes=missing_bytes)


DROP = Reply(drop=True)
"""Read the request, then close the connection without a byte of response."""


@attrs.frozen
class Received:
    """A request as the server saw it."""

    path: str
    headers: dict[str, str]
    body: Any


class LoopbackServer:
    """
    Plays the scripted replies in order; records every request.

    A request beyond the script gets HTTP 418 so a test that asked the
    model more often than planned fails visibly.
    """

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[Received] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def script(self, *replies: Reply) -> LoopbackServer:
        """Queue replies for the next requests."""
        with self._lock:
            self.replies.extend(replies)
        return self

    def start(self) -> LoopbackServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _next(self, received: Received) -> Reply:
        with self._lock:
            self.requests.append(received)
            if self.replies:
                return self.replies.pop(0)
        return text_reply("the loopback script is spent", status=418)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as real providers speak

            def setup(self) -> None:
                super().setup()
                # Headers and body leave in separate writes; without this, Nagle's
                # algorithm meets the client's delayed ACK and each reply stalls ~40 ms.
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: tests read ``requests``, not a log."""

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                reply = server._next(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                if reply.delay:
                    server._stopping.wait(reply.delay)
                if reply.drop:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                try:
                    self.send_response(reply.status)
                    for name, value in reply.headers:
                        self.send_header(name, value)
                    self.send_header("content-length", str(len(reply.body) + reply.missing_bytes))
                    if reply.missing_bytes:
                        self.send_header("connection", "close")
                        self.close_connection = True
                    self.end_headers()
                    if reply.trickle:
                        step = max(len(reply.body) // 8, 1)
                        for start in range(0, len(reply.body), step):
                            self.wfile.write(reply.body[start : start + step])
                            self.wfile.flush()
                            if server._stopping.wait(reply.trickle):
                                break
                    elif reply.body_delay:
                        half = len(reply.body) // 2
                        self.wfile.write(reply.body[:half])
                        self.wfile.flush()
                        server._stopping.wait(reply.body_delay)
                        self.wfile.write(reply.body[half:])
                    else:
                        self.wfile.write(reply.body)
                    self.wfile.flush()
                except OSError:
                    self.close_connection = True  # the client gave up (e.g. its read timeout); nothing to answer

        return Handler


def free_port_refusing() -> str:
    """A loopback URL on which nothing listens, so connecting is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


# --- replies in each provider's wire format -----------------------------------------


def openai_answer(text: str, prompt_tokens: int = 120) -> Reply:
    """A chat completion that answers in plain text."""
    return json_reply(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 9, "total_tokens": prompt_tokens + 9},
        }
    )


def openai_tool_call(call_id: str, name: str, arguments: str, prompt_tokens: int = 100) -> Reply:
    """A chat completion proposing one call; ``arguments`` is the raw JSON string the model wrote."""
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}],
    }
    return json_reply(
        {
            "id": "chatcmpl-2",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 12, "total_tokens": prompt_tokens + 12},
        }
    )


def anthropic_reply(*blocks: dict[str, Any], input_tokens: int = 90, stop_reason: str = "end_turn") -> Reply:
    """A Messages API reply with these content blocks."""
    return json_reply(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-test",
            "content": list(blocks),
            "stop_reason": stop_reason,
            "usage": {"input_tokens": input_tokens, "output_tokens": 15},
        }
    )


def ollama_reply(message: dict[str, Any], prompt_eval_count: int = 80) -> Reply:
    """A non-streaming ``/api/chat`` reply carrying ``message``."""
    return json_reply(
        {
            "model": "llama3.2",
            "created_at": "2026-01-01T00:00:00Z",
            "message": {"role": "assistant", "content": "", **message},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": prompt_eval_count,
            "eval_count": 20,
        }
    )
