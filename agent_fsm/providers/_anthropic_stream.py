"""
A streamed Messages reply (``stream: true``) assembled into the message the API would have sent whole.

The event stream: ``message_start`` (the message, empty content), then per
content block a ``content_block_start`` (the block with empty text, thinking or
input), ``content_block_delta`` events (``text_delta``, ``thinking_delta``,
``signature_delta``, ``citations_delta``, and ``input_json_delta`` pieces of a
tool's input as JSON text) and ``content_block_stop``; ``message_delta`` brings
``stop_reason`` and the cumulative ``usage``; ``message_stop`` ends it. ``ping``
is nothing, an ``error`` event ends the reply as a ``stream_error``.

A tool input whose JSON text does not parse (a ``max_tokens`` cut mid-call) is
kept as that text, so the engine answers the call ``invalid`` quoting it; it is
never completed into an object the model did not write.
"""

from __future__ import annotations

import copy
from typing import Any

from agent_fsm.providers._sse import ServerSentEvents, StreamBroken, fragments_of, parse_json, read_to_end

__all__ = ["AnthropicStream"]

# Blocks whose ``input`` streams as JSON text (client tools, server tools, MCP tools).
_INPUT_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})


class AnthropicStream:
    """Assembles a Messages event stream into a Messages reply body."""

    def __init__(self) -> None:
        self._events = ServerSentEvents()
        self._message: dict[str, Any] | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        self._inputs: dict[int, str] = {}
        self._stopped = False

    def feed(self, chunk: bytes) -> list[str]:
        """Text fragments (of ``text`` blocks) completed by ``chunk``."""
        return fragments_of(self._read, self._events.feed(chunk))

    def finish(self) -> tuple[int, Any]:
        """The assembled message, once ``message_stop`` came; else the stream was cut (``truncated``)."""
        read_to_end(self._read, self._events.close)
        if self._message is None or not self._stopped:
            raise StreamBroken("the stream ended before message_stop", kind="truncated")
        for index in list(self._inputs):
            self._close_input(index)
        message = self._message
        message["content"] = [self._blocks[i] for i in sorted(self._blocks)]
        return 200, message

    def _read(self, events: list[tuple[str, str]], fragments: list[str]) -> None:
        for _name, data in events:
            event = parse_json(data, "a streamed event")
            if not isinstance(event, dict):
                raise StreamBroken(f"a streamed event is not a JSON object: {data[:120]!r}")
            kind = event.get("type")
            if kind == "error":
                error = event.get("error")
                what = error.get("message") or error.get("type") if isinstance(error, dict) else error
                raise StreamBroken(f"the server reported an error mid-stream: {str(what)[:200]}", kind="stream_error")
            if kind == "ping":
                continue
            if kind == "message_start":
                message = event.get("message")
                if not isinstance(message, dict):
                    raise StreamBroken("message_start carries no message object")
                self._message = copy.deepcopy(message)
                continue
            if self._message is None:
                raise StreamBroken(f"a {kind!r} event came before message_start")
            if self._stopped:
                raise StreamBroken(f"a {kind!r} event came after message_stop")
            fragment = self._apply(kind, event)
            if fragment:
                fragments.append(fragment)

    def _apply(self, kind: Any, event: dict[str, Any]) -> str | None:
        assert self._message is not None
        if kind == "content_block_start":
            block = event.get("content_block")
            index = self._index(event)
            if not isinstance(block, dict):
                raise StreamBroken(f"content_block_start {index} carries no block object")
            self._blocks[index] = copy.deepcopy(block)
            if block.get("type") in _INPUT_BLOCKS:
                self._inputs[index] = ""
        elif kind == "content_block_delta":
            return self._delta(self._index(event), event.get("delta"))
        elif kind == "content_block_stop":
            self._close_input(self._index(event))
        elif kind == "message_delta":
            delta = event.get("delta")
            for key, value in (delta if isinstance(delta, dict) else {}).items():
                if value is not None or key in ("stop_reason", "stop_sequence"):
                    self._message[key] = value
            usage = event.get("usage")
            counts = self._message.setdefault("usage", {})
            if isinstance(usage, dict) and isinstance(counts, dict):
                # Counts on message_delta are running totals: they replace, and an omitted one keeps its value.
                counts.update({k: v for k, v in usage.items() if v is not None})
        elif kind == "message_stop":
            self._stopped = True
        return None

    def _index(self, event: dict[str, Any]) -> int:
        index = event.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            raise StreamBroken(f"a {event.get('type')!r} event has index {index!r}")
        return index

    def _delta(self, index: int, delta: Any) -> str | None:
        block = self._blocks.get(index)
        if block is None or not isinstance(delta, dict):
            raise StreamBroken(f"a content_block_delta for block {index}, which never started")
        kind = delta.get("type")
        if kind == "text_delta" and isinstance(delta.get("text"), str):
            block["text"] = str(block.get("text") or "") + delta["text"]
            return str(delta["text"])
        if kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            if index not in self._inputs:
                raise StreamBroken(f"input_json_delta for block {index}, a {block.get('type')!r} block")
            self._inputs[index] += delta["partial_json"]
        elif kind == "thinking_delta" and isinstance(delta.get("thinking"), str):
            block["thinking"] = str(block.get("thinking") or "") + delta["thinking"]
        elif kind == "signature_delta":
            block["signature"] = delta.get("signature")
        elif kind == "citations_delta":
            cited = block.get("citations")
            block["citations"] = [*(cited if isinstance(cited, list) else []), delta.get("citation")]
        return None

    def _close_input(self, index: int) -> None:
        text = self._inputs.pop(index, None)
        if text is None or not text.strip():
            return  # no input deltas: the block's own (empty) input stands
        try:
            self._blocks[index]["input"] = parse_json(text, "a tool input")
        except StreamBroken:
            self._blocks[index]["input"] = text
