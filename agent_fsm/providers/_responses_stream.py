"""
A streamed Responses reply (``stream: true``) assembled into the response the API would have sent whole.

The event stream: ``response.created`` and ``response.in_progress`` (the
response, no output yet); per output item ``response.output_item.added``, its
pieces (``response.output_text.delta``, ``response.refusal.delta``,
``response.function_call_arguments.delta``, reasoning summary deltas) and
``response.output_item.done`` with the finished item; then one ending,
``response.completed``, ``response.incomplete`` or ``response.failed``, that
carries the whole response with its ``usage``. The ending's response is the
reply; its items are the ones the stream built when it lists none.

An ``error`` event or ``response.failed`` ends the reply as a ``stream_error``;
a stream that stops before its ending is ``truncated``.
"""

from __future__ import annotations

import copy
from typing import Any

from agent_fsm.providers._sse import ServerSentEvents, StreamBroken, fragments_of, parse_json, read_to_end

__all__ = ["ResponsesStream"]

_ENDINGS = frozenset({"response.completed", "response.incomplete"})


class ResponsesStream:
    """Assembles a Responses event stream into a Responses reply body."""

    def __init__(self) -> None:
        self._events = ServerSentEvents()
        self._started = False
        self._items: dict[int, dict[str, Any]] = {}
        self._whole: dict[str, Any] | None = None

    def feed(self, chunk: bytes) -> list[str]:
        """Text fragments (``output_text`` deltas) completed by ``chunk``."""
        return fragments_of(self._read, self._events.feed(chunk))

    def finish(self) -> tuple[int, Any]:
        """The ending's response, once it came; else the stream was cut (``truncated``)."""
        read_to_end(self._read, self._events.close)
        if not self._started and self._whole is None:
            raise StreamBroken("the reply holds no Responses events (not an event stream)")
        if self._whole is None:
            raise StreamBroken("the stream ended before response.completed", kind="truncated")
        whole = self._whole
        if not whole.get("output"):
            whole["output"] = [self._items[i] for i in sorted(self._items)]
        return 200, whole

    def _read(self, events: list[tuple[str, str]], fragments: list[str]) -> None:
        for _name, data in events:
            if data.strip() == "[DONE]":
                continue
            event = parse_json(data, "a streamed event")
            if not isinstance(event, dict):
                raise StreamBroken(f"a streamed event is not a JSON object: {data[:120]!r}")
            kind = event.get("type")
            if kind in ("error", "response.failed"):
                raise StreamBroken(f"the server reported an error mid-stream: {_reason(event)}", kind="stream_error")
            if self._whole is not None:
                raise StreamBroken(f"a {kind!r} event came after the response ended")
            if kind in ("response.created", "response.in_progress"):
                self._started = True
                continue
            if not self._started:
                raise StreamBroken(f"a {kind!r} event came before response.created")
            fragment = self._apply(kind, event)
            if fragment:
                fragments.append(fragment)

    def _apply(self, kind: Any, event: dict[str, Any]) -> str | None:
        if kind in _ENDINGS:
            response = event.get("response")
            if not isinstance(response, dict):
                raise StreamBroken(f"{kind} carries no response object")
            self._whole = copy.deepcopy(response)
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = event.get("item")
            if not isinstance(item, dict):
                raise StreamBroken(f"{kind} carries no item object")
            self._items[self._index(event)] = copy.deepcopy(item)
        elif kind == "response.output_text.delta":
            return self._append(event, "output_text", "text")
        elif kind == "response.refusal.delta":
            self._append(event, "refusal", "refusal")
        elif kind == "response.function_call_arguments.delta":
            item = self._item(event)
            delta = event.get("delta")
            if isinstance(delta, str):
                item["arguments"] = str(item.get("arguments") or "") + delta
        return None

    def _index(self, event: dict[str, Any]) -> int:
        index = event.get("output_index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise StreamBroken(f"a {event.get('type')!r} event has output_index {index!r}")
        return index

    def _item(self, event: dict[str, Any]) -> dict[str, Any]:
        index = self._index(event)
        item = self._items.get(index)
        if item is None:
            raise StreamBroken(f"a {event.get('type')!r} event for output item {index}, which was never added")
        return item

    def _append(self, event: dict[str, Any], part_type: str, field: str) -> str | None:
        """Append a text delta to its content part (made on first use); the delta itself."""
        item = self._item(event)
        delta = event.get("delta")
        if not isinstance(delta, str):
            return None
        parts = item.setdefault("content", [])
        if not isinstance(parts, list):
            raise StreamBroken(f"output item {self._index(event)} has content {parts!r}")
        index = event.get("content_index", 0)
        index = index if isinstance(index, int) and not isinstance(index, bool) and index >= 0 else 0
        while len(parts) <= index:
            parts.append({"type": part_type, field: ""})
        part = parts[index] if isinstance(parts[index], dict) else {"type": part_type, field: ""}
        part[field] = str(part.get(field) or "") + delta
        parts[index] = part
        return delta


def _reason(event: dict[str, Any]) -> str:
    """What an ``error`` or ``response.failed`` event says went wrong."""
    error = event.get("error")
    if error is None and isinstance(event.get("response"), dict):
        error = event["response"].get("error")
    if isinstance(error, dict):
        error = error.get("message") or error.get("code")
    if error is None:
        error = event.get("message") or event.get("code")
    return str(error)[:200]
