"""
Reading a streamed reply incrementally: server-sent events (OpenAI, Anthropic) and JSON lines (Ollama).

Both decoders are push-based and do no I/O: the exchange feeds them the bytes
as they arrive (from ``httpx.Client`` or ``httpx.AsyncClient`` alike) and gets
back whole events. A stream assembler turns those events into the reply body
the provider would have sent without streaming, and reports each text fragment
on the way; it raises :class:`StreamBroken` when the stream is not one the
provider could have sent, and the exchange turns that into a typed
``ProviderFailure``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["JsonLines", "ServerSentEvents", "StreamAssembler", "StreamBroken", "parse_json"]

_EXCERPT = 120


class StreamBroken(Exception):
    """A streamed reply that cannot be read as the provider's reply; ``kind`` is the failure kind to report."""

    def __init__(self, what: str, *, kind: str = "bad_response") -> None:
        super().__init__(what)
        self.what = what
        self.kind = kind
        # Text fragments the same bytes completed before the breakage: still heard, as they came first.
        self.heard: list[str] = []


class StreamAssembler(Protocol):
    """Builds the non-streaming reply body from a stream's bytes, reporting text fragments as they come."""

    def feed(self, chunk: bytes) -> list[str]:
        """Take the next bytes; return the text fragments they completed (possibly none)."""

    def finish(self) -> tuple[int, Any]:
        """The stream ended: the status and body the provider would have answered without streaming."""


def fragments_of(read: Callable[[Any, list[str]], None], items: Any) -> list[str]:
    """
    The text fragments ``read(items, fragments)`` collects; on a breakage they go with it (``heard``),
    since they arrived before it.
    """
    fragments: list[str] = []
    try:
        read(items, fragments)
    except StreamBroken as exc:
        exc.heard = fragments
        raise
    return fragments


def read_to_end(read: Callable[[Any, list[str]], None], close: Callable[[], Any]) -> None:
    """
    Read what the framing still holds when the stream ends (its fragments come too late to hear);
    an event cut short there means the stream was ``truncated``.
    """
    try:
        fragments_of(read, close())
    except StreamBroken as exc:
        raise StreamBroken(f"the stream ended mid-event ({exc.what})", kind="truncated") from exc


def parse_json(text: str, what: str) -> Any:
    """``text`` as JSON, or :class:`StreamBroken` quoting the start of it."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise StreamBroken(f"{what} is not JSON: {text[:_EXCERPT]!r}") from exc


class _Lines:
    """Bytes in, complete lines out (LF or CRLF endings), with an incomplete line kept until its end arrives."""

    def __init__(self) -> None:
        self._pending = b""

    def feed(self, chunk: bytes) -> list[str]:
        data = self._pending + chunk
        *lines, self._pending = data.split(b"\n")
        return [_text(line.removesuffix(b"\r")) for line in lines]

    def rest(self) -> list[str]:
        pending, self._pending = self._pending, b""
        return [_text(pending.removesuffix(b"\r"))] if pending else []


def _text(line: bytes) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StreamBroken(f"a streamed line is not UTF-8: {line[:_EXCERPT]!r}") from exc


class ServerSentEvents:
    """
    The ``text/event-stream`` format: ``event:`` and ``data:`` fields, an empty line ending each event.

    Comments (``: OPENROUTER PROCESSING``), ``id:`` and ``retry:`` are skipped;
    several ``data:`` lines join with newlines. An event left without its
    closing empty line when the stream ends is still delivered: whether the
    reply is complete is for the assembler to say (``[DONE]``, ``message_stop``).
    """

    def __init__(self) -> None:
        self._lines = _Lines()
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        """Events (name, data) completed by ``chunk``; the name is ``""`` when the server gave none."""
        return self._read(self._lines.feed(chunk))

    def close(self) -> list[tuple[str, str]]:
        """The event still open when the stream ended, if any."""
        events = self._read(self._lines.rest())
        if self._data:
            events.append((self._event, "\n".join(self._data)))
        self._event, self._data = "", []
        return events

    def _read(self, lines: list[str]) -> list[tuple[str, str]]:
        events = []
        for line in lines:
            if not line:
                if self._data:
                    events.append((self._event, "\n".join(self._data)))
                self._event, self._data = "", []
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "data":
                self._data.append(value)
            elif field == "event":
                self._event = value
        return events


class JsonLines:
    """Newline-delimited JSON (``application/x-ndjson``): one object per line, blank lines skipped."""

    def __init__(self) -> None:
        self._lines = _Lines()

    def feed(self, chunk: bytes) -> list[Any]:
        """The objects on the lines ``chunk`` completed."""
        return [parse_json(line, "a streamed line") for line in self._lines.feed(chunk) if line.strip()]

    def close(self) -> list[Any]:
        """The object on a last line that had no newline after it."""
        return [parse_json(line, "a streamed line") for line in self._lines.rest() if line.strip()]
