"""
Ollama's native ``/api/chat``: arguments travel as objects and calls carry no ids.

Ids are what correlate a result with its call, so the adapter makes them:
``ollama_<n>_<i>`` for the ``i``-th call of the reply that follows ``n``
assistant messages. The name depends only on the transcript, so replaying or
resuming the same run gives the same ids. On the way back a tool message is
sent with ``tool_name``, looked up from the call it answers, and an
assistant message with the ``thinking`` the model returned.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from agent_fsm.engine import ModelReply, assistant_text, has_parts
from agent_fsm.providers._adapter import (
    HttpModel,
    arguments_object,
    check_parts,
    check_tool_names,
    media_after_results,
    model_of,
    object_of,
    prompt_tokens,
    usage_count,
)
from agent_fsm.providers._http import ProviderConfigError
from agent_fsm.providers._sse import JsonLines, StreamBroken, fragments_of, read_to_end

__all__ = ["OllamaChat"]


def _to_ollama_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    names: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        entry: dict[str, Any] = {"role": role, "content": assistant_text(message) or ""}
        if has_parts(message):  # images as bytes, beside the text (check_parts)
            entry["images"] = [p["data"] for p in message["content"] if p.get("type") == "image"]
        if role == "assistant" and isinstance(message.get("tool_calls"), list):
            calls = []
            for call in message["tool_calls"]:
                call = object_of(call) or {}
                function = object_of(call.get("function")) or {}
                name = str(function.get("name", ""))
                names[str(call.get("id", ""))] = name
                calls.append({"function": {"name": name, "arguments": arguments_object(function.get("arguments"))}})
            entry["tool_calls"] = calls
        if role == "assistant" and isinstance(message.get("thinking"), str):
            entry["thinking"] = message["thinking"]
        elif role == "tool":
            entry["tool_name"] = names.get(str(message.get("tool_call_id", "")), "")
        out.append(entry)
    return out


class OllamaChat(HttpModel):
    """
    A model behind Ollama's ``POST {base_url}/api/chat`` (streamed as JSON lines with ``stream=True``).

    Environment: ``OLLAMA_HOST`` (default ``http://127.0.0.1:11434``; a bare ``host``
    or ``host:port`` means http and port 11434, as Ollama itself reads it), ``OLLAMA_MODEL``,
    ``OLLAMA_API_KEY`` (a bearer token, for servers behind a proxy).
    ``options`` is Ollama's own options object (``num_ctx``, ``seed``, ...);
    ``seed`` and ``temperature`` go into it. Ollama has no ``tool_choice`` or
    ``parallel_tool_calls``, so setting them is refused when the adapter is built.
    See :class:`HttpModel` for the transport options.
    """

    provider = "ollama"
    base_url_env = "OLLAMA_HOST"
    default_base_url = "http://127.0.0.1:11434"
    model_env = "OLLAMA_MODEL"
    api_key_env = "OLLAMA_API_KEY"
    path = "/api/chat"

    def __init__(self, *, options: Mapping[str, Any] | None = None, **settings: Any) -> None:
        super().__init__(**settings)
        if self.tool_choice is not None or self.parallel_tool_calls is not None:
            raise ProviderConfigError("Ollama's /api/chat takes neither tool_choice nor parallel_tool_calls")
        self.options = dict(options or {})

    @staticmethod
    def _normalise_base_url(url: str) -> str:
        # As Ollama reads OLLAMA_HOST: a bare host means http and port 11434; an
        # explicit scheme keeps that scheme's default port.
        if "://" in url:
            return url
        parts = urlsplit("http://" + url)
        return f"http://{url}" if parts.port is not None else f"http://{parts.netloc}:11434{parts.path}"

    def request_body(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], output: Any = None
    ) -> dict[str, Any]:
        """
        Messages with object arguments and ``tool_name``; ``stream`` as set; temperature inside ``options``.

        Typed ``output`` is asked for as Ollama's ``format`` (the JSON Schema itself).
        Images go as base64 in the message's ``images`` (a tool result's, in a user message after it).

        Raises:
            ProviderFailure: ``invalid_request`` for a file, an image by URL (Ollama
                reads neither), or an image outside a user message.
        """
        check_tool_names(self, tools)
        messages = media_after_results(messages)  # a tool message takes text: its images follow it
        check_parts(self, messages, "Ollama", kinds=("image",), by_url=())
        body: dict[str, Any] = {"model": self.model, "messages": _to_ollama_messages(messages), "stream": self.streams}
        if tools:
            body["tools"] = [dict(t) for t in tools]
        options = dict(self.options)
        if self.temperature is not None:
            options["temperature"] = self.temperature
        if self.seed is not None:
            options["seed"] = self.seed
        if options:
            body["options"] = options
        if output is not None:
            body["format"] = output.schema
        body.update(self.extra_body)
        return body

    def read_reply(self, data: Any, status: int = 200, *, turn: int = 0) -> ModelReply:
        """``message`` with ids made for its calls and arguments as JSON strings; ``prompt_eval_count``."""
        reply = object_of(data)
        if reply is None:
            raise self._bad(f"expected a JSON object with 'message', got {type(data).__name__}", status)
        message = object_of(reply.get("message"))
        if message is None:
            raise self._bad(f"the reply has no message object (keys: {sorted(reply)})", status)
        out: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
        calls = message.get("tool_calls")
        done = reply.get("done_reason")
        if done in ("load", "unload"):
            raise self._bad(f"the server only {done}ed the model and generated nothing (done_reason={done!r})", status)
        finish = "length" if done == "length" else ("tool_calls" if calls else "stop")
        if out["content"] is None and not calls and finish != "length":
            raise self._bad(f"the message has neither content nor tool_calls (done_reason={done!r})", status)
        if isinstance(calls, list):
            out["tool_calls"] = [_with_id(call, turn, index) for index, call in enumerate(calls)]
        elif calls:
            out["tool_calls"] = calls
        if isinstance(message.get("thinking"), str) and message["thinking"]:
            out["thinking"] = message["thinking"]
        # With a warm cache Ollama counts only the prompt tokens it evaluated anew;
        # the engine ignores a count that implausibly small.
        return ModelReply(
            out,
            prompt_tokens=prompt_tokens(reply.get("prompt_eval_count")),
            finish=finish,
            output_tokens=usage_count(reply.get("eval_count")),
            model=model_of(reply),
        )

    def _capped(self, body: dict[str, Any], cap: int | None) -> dict[str, Any]:
        """Ollama caps the reply with ``options.num_predict``."""
        if cap is not None:
            options = body.setdefault("options", {})
            given = options.get("num_predict")
            options["num_predict"] = min(given, cap) if isinstance(given, int) and given > 0 else cap
        return body

    def stream_assembler(self) -> OllamaStream:
        """An NDJSON assembler (``done: false`` parts, then the ``done: true`` summary)."""
        return OllamaStream()

    def _reply_to(self, messages: Sequence[Mapping[str, Any]], data: Any, status: int) -> ModelReply:
        """Number the reply's calls by the assistant messages before it."""
        return self.read_reply(data, status, turn=sum(1 for m in messages if m.get("role") == "assistant"))


def _with_id(call: Any, turn: int, index: int) -> Any:
    """The call in OpenAI shape: an id (kept if Ollama sent one), arguments as a JSON string."""
    if not isinstance(call, dict):
        return call  # malformed: the engine turns it into an invalid observation
    function = object_of(call.get("function"))
    if function is not None and isinstance(function.get("arguments"), dict):
        function = {**function, "arguments": json.dumps(function["arguments"])}
    elif function is not None and function.get("arguments") is None:
        function = {**function, "arguments": "{}"}
    call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else f"ollama_{turn}_{index}"
    return {"id": call_id, "type": "function", "function": function if function is not None else call.get("function")}


class OllamaStream:
    """
    Assembles ``/api/chat`` JSON lines into the reply Ollama sends with ``stream: false``.

    Each ``done: false`` line carries a piece of the message (``content`` and
    ``thinking`` appended, ``tool_calls`` whole, added in order); the
    ``done: true`` line carries ``done_reason`` and the counts. A line with
    ``error`` ends the reply as a ``stream_error``.
    """

    def __init__(self) -> None:
        self._lines = JsonLines()
        self._message: dict[str, Any] = {}
        self._last: dict[str, Any] | None = None

    def feed(self, chunk: bytes) -> list[str]:
        """Text fragments completed by ``chunk``."""
        return fragments_of(self._read, self._lines.feed(chunk))

    def finish(self) -> tuple[int, Any]:
        """The reply, once the ``done: true`` line came; else the stream was cut (``truncated``)."""
        read_to_end(self._read, self._lines.close)
        if self._last is None:
            raise StreamBroken("the stream ended before its done line", kind="truncated")
        return 200, {**self._last, "message": self._message}

    def _read(self, parts: list[Any], fragments: list[str]) -> None:
        for part in parts:
            if not isinstance(part, dict):
                raise StreamBroken(f"a streamed line is not a JSON object: {str(part)[:120]!r}")
            if part.get("error") is not None:
                raise StreamBroken(
                    f"the server reported an error mid-stream: {str(part['error'])[:200]}", kind="stream_error"
                )
            if self._last is not None:
                raise StreamBroken("a line came after the done line")
            message = part.get("message")
            for key, value in (message if isinstance(message, dict) else {}).items():
                if key in ("content", "thinking") and isinstance(value, str):
                    self._message[key] = str(self._message.get(key) or "") + value
                elif key == "tool_calls" and isinstance(value, list):
                    self._message.setdefault("tool_calls", []).extend(value)
                elif value is not None:
                    self._message[key] = value
            text = message.get("content") if isinstance(message, dict) else None
            if isinstance(text, str) and text:
                fragments.append(text)
            if part.get("done") is True:
                self._last = part
