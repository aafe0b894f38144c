"""
A streamed Gemini reply (``streamGenerateContent?alt=sse``) assembled into the reply ``generateContent`` gives.

Each event is a whole ``GenerateContentResponse`` holding the next parts of
the candidate: text parts are joined to the text part before them (unless a
signature or a thought flag sets one apart), other parts (calls, signed parts)
are kept in order. The last event carries ``finishReason``; ``usageMetadata``
is cumulative, so the last one counts. A prompt blocked for safety arrives as
one event with ``promptFeedback.blockReason`` and no candidate.

An event with an ``error`` ends the reply as a ``stream_error``; a stream
that stops before a ``finishReason`` (or a block) is ``truncated``.
"""

from __future__ import annotations

import copy
from typing import Any

from agent_fsm.providers._sse import ServerSentEvents, StreamBroken, fragments_of, parse_json, read_to_end

__all__ = ["GeminiStream"]

_SET_APART = ("thoughtSignature", "thought", "functionCall")


class GeminiStream:
    """Assembles Gemini's streamed chunks into one ``GenerateContentResponse``."""

    def __init__(self) -> None:
        self._events = ServerSentEvents()
        self._whole: dict[str, Any] = {}
        self._parts: list[dict[str, Any]] = []
        self._candidate: dict[str, Any] = {}
        self._ended = False

    def feed(self, chunk: bytes) -> list[str]:
        """Answer text fragments completed by ``chunk`` (thought summaries are not heard)."""
        return fragments_of(self._read, self._events.feed(chunk))

    def finish(self) -> tuple[int, Any]:
        """The assembled reply, once a ``finishReason`` (or a prompt block) came; else ``truncated``."""
        read_to_end(self._read, self._events.close)
        if not self._whole and not self._parts and not self._candidate:
            raise StreamBroken("the reply holds no Gemini chunks (not an event stream)")
        if not self._ended:
            raise StreamBroken("the stream ended before a finishReason", kind="truncated")
        whole = self._whole
        if self._candidate or self._parts:
            candidate = {**self._candidate, "content": {"role": "model", "parts": self._parts}}
            whole["candidates"] = [candidate]
        return 200, whole

    def _read(self, events: list[tuple[str, str]], fragments: list[str]) -> None:
        for _name, data in events:
            chunk = parse_json(data, "a streamed chunk")
            if not isinstance(chunk, dict):
                raise StreamBroken(f"a streamed chunk is not a JSON object: {data[:120]!r}")
            error = chunk.get("error")
            if error is not None:
                what = error.get("message") or error.get("status") if isinstance(error, dict) else error
                raise StreamBroken(f"the server reported an error mid-stream: {str(what)[:200]}", kind="stream_error")
            if self._ended:
                raise StreamBroken("a chunk came after the reply's finishReason")
            for key, value in chunk.items():
                if key != "candidates":
                    self._whole[key] = copy.deepcopy(value)  # usage, model version: the last one stands
            if (chunk.get("promptFeedback") or {}).get("blockReason"):
                self._ended = True
            candidates = chunk.get("candidates")
            if candidates is None:
                continue
            if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
                raise StreamBroken(f"a streamed chunk's candidates are not a list of objects: {data[:120]!r}")
            fragments.extend(self._add(candidates[0]))

    def _add(self, candidate: dict[str, Any]) -> list[str]:
        heard: list[str] = []
        for key, value in candidate.items():
            if key != "content":
                self._candidate[key] = copy.deepcopy(value)
        if candidate.get("finishReason"):
            self._ended = True
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else []:
            if not isinstance(part, dict):
                raise StreamBroken(f"a streamed part is not a JSON object: {str(part)[:120]!r}")
            text = part.get("text")
            last = self._parts[-1] if self._parts else None
            joins = (
                isinstance(text, str)
                and last is not None
                and isinstance(last.get("text"), str)
                and not any(k in part for k in _SET_APART)
                and not last.get("thought")
            )
            if joins:
                assert last is not None and isinstance(text, str)
                last["text"] += text
            elif text != "" or any(k in part for k in _SET_APART):
                self._parts.append(copy.deepcopy(part))
            if isinstance(text, str) and text and not part.get("thought"):
                heard.append(text)
        return heard
