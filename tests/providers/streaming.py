"""
Oracles for the streaming tests: what a recorded stream says the whole reply is, read without the adapters.

``sdk_whole`` asks the official SDK (openai, anthropic: both in the ``test``
extra) to read the recorded stream from the loopback server and returns the
message it assembled, as the body a non-streamed call would have received.
``explode`` goes the other way: it turns a recorded whole reply into the
stream the provider sends for it, its text and tool arguments split wherever
the caller says.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

from .loopback import LoopbackServer
from .recordings import Recording


def sdk_whole(recording: Recording, index: int, server: LoopbackServer) -> dict[str, Any]:
    """The whole reply the official SDK assembles from the ``index``-th recorded stream (served by ``server``)."""
    server.script(recording.reply(index))
    asked = [{"role": "user", "content": "recorded"}]
    if recording.adapter == "openai":
        import openai

        client = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=0)
        with client, client.chat.completions.stream(model="recorded-model", messages=asked) as stream:  # type: ignore[arg-type]
            for _ in stream:
                pass
            body = stream.get_final_completion().to_dict(mode="json")
        for choice in body["choices"]:
            message = choice["message"]
            # The SDK's own additions, and its concatenation of a repeated role, are not the wire's.
            message.pop("parsed", None)
            message["role"] = "assistant"
            for call in message.get("tool_calls") or []:
                call.pop("index", None)
                call["function"].pop("parsed_arguments", None)
        # The SDK keeps the last chunk's usage even when it is null (OpenAI's moderation chunk
        # follows the usage chunk); the whole reply carries the usage that was reported.
        reported = [c["usage"] for c in _chunks(recording.response(index)) if c.get("usage") is not None]
        body["usage"] = reported[-1] if reported else None
        return body
    if recording.adapter == "anthropic":
        import anthropic

        client = anthropic.Anthropic(base_url=server.url, api_key="sk-ant-test", max_retries=0)
        with client, client.messages.stream(model="recorded-model", max_tokens=16, messages=asked) as stream:  # type: ignore[arg-type]
            return stream.get_final_message().to_dict(mode="json")
    raise ValueError(f"no SDK oracle for {recording.adapter}")


def _chunks(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]


def ollama_whole(recording: Recording, index: int) -> dict[str, Any]:
    """The ``done`` line with the parts' message joined: Ollama's documented meaning of a streamed reply."""
    lines = [json.loads(line) for line in recording.response(index).splitlines() if line.strip()]
    message: dict[str, Any] = {"role": "assistant", "content": ""}
    for line in lines:
        part = line.get("message") or {}
        message["content"] += part.get("content") or ""
        if part.get("thinking"):
            message["thinking"] = message.get("thinking", "") + part["thinking"]
        message.setdefault("tool_calls", []).extend(part.get("tool_calls") or [])
    if not message["tool_calls"]:
        del message["tool_calls"]
    return {**lines[-1], "message": message}


def pieces(text: str, cuts: list[int]) -> list[str]:
    """``text`` cut at the given offsets (taken modulo its length, duplicates ignored)."""
    if not text:
        return [text]
    points = sorted({c % len(text) for c in cuts} - {0})
    return [text[a:b] for a, b in zip([0, *points], [*points, len(text)])]


def sse(events: list[tuple[str | None, Any]]) -> bytes:
    """Events as ``text/event-stream`` bytes (``data`` JSON-encoded unless it is ``[DONE]``)."""
    out = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        out.append(f"{head}data: {data if data == '[DONE]' else json.dumps(data)}\n\n")
    return "".join(out).encode()


def explode(adapter: str, body: dict[str, Any], cuts: list[int]) -> bytes:
    """The stream that carries the whole reply ``body``, every text and argument string cut at ``cuts``."""
    if adapter == "openai":
        return sse([(None, chunk) for chunk in _openai_chunks(body, cuts)] + [(None, "[DONE]")])
    if adapter == "anthropic":
        return sse([(event["type"], event) for event in _anthropic_events(body, cuts)])
    return "".join(json.dumps(line) + "\n" for line in _ollama_lines(body, cuts)).encode()


def _openai_chunks(body: dict[str, Any], cuts: list[int]) -> Iterator[dict[str, Any]]:
    choice = body["choices"][0]
    message = choice["message"]

    named = {"model": body["model"]} if "model" in body else {}  # as the wire does: each chunk names the model

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choices = [{"index": 0, "delta": delta, "finish_reason": finish}]
        return {"object": "chat.completion.chunk", **named, "choices": choices}

    yield chunk({"role": "assistant"})
    for key in ("content", "refusal", "reasoning_content", "reasoning"):
        if isinstance(message.get(key), str):
            for piece in pieces(message[key], cuts):
                yield chunk({key: piece})
    for key in ("name", "reasoning_details", "extra_content"):
        if message.get(key) is not None:
            yield chunk({key: message[key]})
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") or {}
        head = {k: v for k, v in call.items() if k != "function"}
        first = {"index": index, **head, "function": {k: v for k, v in function.items() if k != "arguments"}}
        yield chunk({"tool_calls": [first]})
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            for piece in pieces(arguments, cuts):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
        elif arguments is not None:
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})
    yield chunk({}, choice.get("finish_reason"))
    if body.get("usage") is not None:
        yield {"object": "chat.completion.chunk", **named, "choices": [], "usage": body["usage"]}


def _anthropic_events(body: dict[str, Any], cuts: list[int]) -> Iterator[dict[str, Any]]:
    start = {k: v for k, v in body.items() if k not in ("content", "stop_reason", "stop_sequence")}
    yield {"type": "message_start", "message": {**start, "content": [], "stop_reason": None, "stop_sequence": None}}
    yield {"type": "ping"}
    for index, block in enumerate(body["content"]):
        kind = block.get("type")
        if kind == "text":
            opened = {**block, "text": ""}
            if "citations" in block and block["citations"] is not None:
                opened["citations"] = []
            yield {"type": "content_block_start", "index": index, "content_block": opened}
            for piece in pieces(block["text"], cuts):
                yield {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}
            for citation in block.get("citations") or []:
                delta = {"type": "citations_delta", "citation": citation}
                yield {"type": "content_block_delta", "index": index, "delta": delta}
        elif kind == "thinking":
            yield {
                "type": "content_block_start",
                "index": index,
                "content_block": {**block, "thinking": "", "signature": ""},
            }
            for piece in pieces(block["thinking"], cuts):
                delta = {"type": "thinking_delta", "thinking": piece}
                yield {"type": "content_block_delta", "index": index, "delta": delta}
            delta = {"type": "signature_delta", "signature": block["signature"]}
            yield {"type": "content_block_delta", "index": index, "delta": delta}
        elif kind in ("tool_use", "server_tool_use", "mcp_tool_use"):
            yield {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}}
            for piece in pieces(json.dumps(block["input"]), cuts):
                delta = {"type": "input_json_delta", "partial_json": piece}
                yield {"type": "content_block_delta", "index": index, "delta": delta}
        else:  # results and redacted thinking arrive whole in their start event
            yield {"type": "content_block_start", "index": index, "content_block": copy.deepcopy(block)}
        yield {"type": "content_block_stop", "index": index}
    delta = {"stop_reason": body.get("stop_reason"), "stop_sequence": body.get("stop_sequence")}
    yield {"type": "message_delta", "delta": delta, "usage": body.get("usage") or {}}
    yield {"type": "message_stop"}


def _ollama_lines(body: dict[str, Any], cuts: list[int]) -> Iterator[dict[str, Any]]:
    message = body["message"]
    head = {k: body[k] for k in ("model", "created_at") if k in body}
    for piece in pieces(message.get("thinking") or "", cuts):
        if piece:
            yield {**head, "message": {"role": "assistant", "content": "", "thinking": piece}, "done": False}
    for piece in pieces(message.get("content") or "", cuts):
        yield {**head, "message": {"role": "assistant", "content": piece}, "done": False}
    if message.get("tool_calls"):
        yield {
            **head,
            "message": {"role": "assistant", "content": "", "tool_calls": message["tool_calls"]},
            "done": False,
        }
    yield {**body, "message": {"role": "assistant", "content": ""}}
