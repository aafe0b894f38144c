"""
A streamed chat completion (``stream: true``) assembled into the completion the server would have sent whole.

Each ``chat.completion.chunk`` carries a ``delta`` of the message: text and
reasoning strings are appended, a tool call's pieces are merged by their
``index`` (its id, type and name arrive once, its ``arguments`` a fragment at a
time), and the last chunk carries ``usage`` when ``stream_options.include_usage``
was asked. The result goes through the same ``read_reply`` as a non-streamed
reply, so both paths give the same message, finish and token count.

An ``error`` (an ``event: error``, or a chunk with an ``error`` object) ends
the reply: a Groq ``tool_use_failed`` is read as the failed call, exactly as
its non-streamed HTTP 400 is, and anything else is a ``stream_error``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from agent_fsm.providers._sse import ServerSentEvents, StreamBroken, fragments_of, parse_json, read_to_end

__all__ = ["OpenAIStream", "content_text", "merge_content", "merge_delta"]

# Keys that name a part rather than carry its text: a repeat replaces, never appends.
_IDENTITY = frozenset({"index", "type", "id", "role"})


def _parts(value: Any) -> list[Any]:
    """Content as a list of parts (a string is one text part; an empty one, none)."""
    if isinstance(value, str):
        return [{"type": "text", "text": value}] if value else []
    return list(value) if isinstance(value, list) else []


def merge_content(old: Any, new: Any) -> Any:
    """
    Content so far plus a content delta: strings append; parts (Mistral's ``thinking`` then ``text``) join.

    A part continues the previous one when both are ``text`` (their text
    appended) or both ``thinking`` (their inner text parts joined the same way),
    which is how the whole reply carries them.
    """
    if old is None:
        old = ""
    if isinstance(old, str) and isinstance(new, str):
        return old + new
    merged: list[Any] = []
    for part in [*_parts(old), *_parts(new)]:
        part = copy.deepcopy(part)
        last = merged[-1] if merged else None
        if isinstance(part, dict) and isinstance(last, dict) and part.get("type") == last.get("type"):
            if part.get("type") == "text" and isinstance(part.get("text"), str) and isinstance(last.get("text"), str):
                last["text"] += part["text"]
                continue
            if part.get("type") == "thinking" and isinstance(part.get("thinking"), list):
                last["thinking"] = merge_content(last.get("thinking") or [], part["thinking"])
                continue
        merged.append(part)
    return merged


def content_text(delta: Any) -> str:
    """The answer text in a content delta: the string, or its ``text`` parts (never ``thinking``)."""
    if isinstance(delta, str):
        return delta
    parts = delta if isinstance(delta, list) else []
    return "".join(
        p["text"] for p in parts if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
    )


def _indexed(value: Any) -> bool:
    return isinstance(value, list) and any(isinstance(item, dict) and "index" in item for item in value)


def merge_delta(into: dict[str, Any], delta: dict[str, Any]) -> None:
    """
    Fold one ``delta`` into the message built so far.

    Strings are appended, objects merged key by key, lists of indexed parts
    (``tool_calls``, OpenRouter's ``reasoning_details``) merged part by part on
    their ``index``, other lists extended; ``null`` says nothing and is skipped.
    """
    for key, value in delta.items():
        if value is None:
            continue
        old = into.get(key)
        if old is None:
            if _indexed(value):
                into[key] = []
                _merge_parts(into[key], value)
            else:
                into[key] = copy.deepcopy(value)
        elif key in _IDENTITY:
            into[key] = value
        elif isinstance(old, str) and isinstance(value, str):
            into[key] = old + value
        elif isinstance(old, dict) and isinstance(value, dict):
            merge_delta(old, value)
        elif isinstance(old, list) and isinstance(value, list):
            if _indexed(value) or _indexed(old):
                _merge_parts(old, value)
            else:
                old.extend(copy.deepcopy(value))
        else:
            into[key] = copy.deepcopy(value)


def _same_part(part: Any, delta: dict[str, Any]) -> bool:
    """Whether ``delta`` continues ``part``: the same index, and the same type when both name one.

    OpenRouter numbers a reasoning summary and its encrypted twin both ``0``; their types tell them apart.
    """
    if not isinstance(part, dict) or part.get("index") != delta["index"]:
        return False
    return part.get("type") is None or delta.get("type") is None or part["type"] == delta["type"]


def _merge_parts(parts: list[Any], deltas: list[Any]) -> None:
    for delta in deltas:
        if not isinstance(delta, dict) or not isinstance(delta.get("index"), int):
            raise StreamBroken(f"a streamed list part carries no integer index: {str(delta)[:120]!r}")
        match = next((p for p in parts if _same_part(p, delta)), None)
        if match is None:
            parts.append(copy.deepcopy(delta))
        else:
            merge_delta(match, delta)


class OpenAIStream:
    """
    Assembles ``chat.completion.chunk`` events into a ``chat.completion`` body.

    Args:
        accept_error: the adapter's test for an error it reads as a reply (Groq's ``tool_use_failed``).
    """

    def __init__(self, accept_error: Callable[[int, Any], bool]) -> None:
        self._events = ServerSentEvents()
        self._accept_error = accept_error
        self._choices: dict[int, dict[str, Any]] = {}
        self._usage: Any = None
        self._model: Any = None  # the answering model, as each chunk names it (it prices the call)
        self._done = False
        self._error: tuple[int, Any] | None = None

    def feed(self, chunk: bytes) -> list[str]:
        """Text fragments of choice 0 completed by ``chunk``."""
        return fragments_of(self._read, self._events.feed(chunk))

    def finish(self) -> tuple[int, Any]:
        """The assembled completion (status 200), or the error reply the adapter reads (Groq's status kept)."""
        read_to_end(self._read, self._events.close)
        if self._error is not None:
            return self._error
        if not self._done and not any(c.get("finish_reason") for c in self._choices.values()):
            raise StreamBroken("the stream ended before its last chunk (no finish_reason, no [DONE])", kind="truncated")
        choices = []
        for index in sorted(self._choices):
            choice = self._choices[index]
            message = choice["message"]
            calls = message.get("tool_calls")
            if isinstance(calls, list):
                # The index only orders the parts of a stream; a whole reply's calls carry none.
                message["tool_calls"] = [
                    {k: v for k, v in c.items() if k != "index"} if isinstance(c, dict) else c for c in calls
                ]
            choices.append({"index": index, "message": message, "finish_reason": choice.get("finish_reason")})
        whole = {"object": "chat.completion", "choices": choices, "usage": self._usage}
        if self._model is not None:
            whole["model"] = self._model
        return 200, whole

    def _read(self, events: list[tuple[str, str]], fragments: list[str]) -> None:
        for name, data in events:
            if self._error is not None:
                break  # nothing after an error is part of the reply
            if data.strip() == "[DONE]":
                self._done = True
                continue
            chunk = parse_json(data, "a streamed chunk")
            if name == "error" or (isinstance(chunk, dict) and chunk.get("error") is not None):
                self._fail(chunk)
                continue
            if not isinstance(chunk, dict):
                raise StreamBroken(f"a streamed chunk is not a JSON object: {data[:120]!r}")
            if chunk.get("usage") is not None:
                self._usage = chunk["usage"]
            if self._model is None and chunk.get("model") is not None:
                self._model = chunk["model"]
            choices = chunk.get("choices")
            for choice in choices if isinstance(choices, list) else []:
                fragment = self._add(choice)
                if fragment:
                    fragments.append(fragment)

    def _add(self, choice: Any) -> str | None:
        if not isinstance(choice, dict):
            raise StreamBroken(f"a streamed choice is not a JSON object: {str(choice)[:120]!r}")
        index = choice.get("index", 0)
        if not isinstance(index, int):
            raise StreamBroken(f"a streamed choice has index {index!r}")
        slot = self._choices.setdefault(index, {"message": {}})
        delta = choice.get("delta")
        text = None
        if isinstance(delta, dict):
            content = delta.get("content")
            if content is not None:
                message = slot["message"]
                message["content"] = merge_content(message.get("content"), content)
                text = content_text(content)
            merge_delta(slot["message"], {k: v for k, v in delta.items() if k != "content"})
        if isinstance(choice.get("finish_reason"), str):
            slot["finish_reason"] = choice["finish_reason"]
        return text if index == 0 else None

    def _fail(self, chunk: Any) -> None:
        error = chunk.get("error", chunk) if isinstance(chunk, dict) else chunk
        status = error.get("status_code") if isinstance(error, dict) else None
        status = status if isinstance(status, int) and 400 <= status < 600 else 400
        if self._accept_error(status, {"error": error}):
            self._error = (status, {"error": error})
            return
        message = error.get("message") if isinstance(error, dict) else error
        raise StreamBroken(f"the server reported an error mid-stream: {str(message)[:200]}", kind="stream_error")
