"""
Oracles for the Responses and Gemini recordings: what a recorded body says, read without the adapters.

``expected`` reads a recorded reply (whole, or the stream the server sent)
into text, calls, finish and usage by the providers' documented meaning;
``explode`` turns a recorded whole reply into the stream the provider sends
for it, its text and arguments cut wherever the caller says.
"""

from __future__ import annotations

import json
from typing import Any

from agent_fsm.providers import GeminiGenerate, OpenAIResponses

from .loopback import Reply
from .recordings import Recording
from .streaming import pieces, sse
from .test_recorded import recorded_settings

_GEMINI_FINISH = {"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter"}


def make_native(recording: Recording, url: str, **options: Any) -> OpenAIResponses | GeminiGenerate:
    """The adapter that speaks ``recording``'s wire format, pointed at ``url``."""
    settings = recorded_settings(**options)
    if recording.adapter == "responses":
        return OpenAIResponses(base_url=url + "/v1", **settings)
    return GeminiGenerate(base_url=url + "/v1beta", **settings)


def streamed(recording: Recording, index: int) -> bool:
    """Whether the ``index``-th recorded reply is a stream."""
    return isinstance(recording.response(index), str)


def _events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and "{" in line]


def whole_body(recording: Recording, index: int) -> dict[str, Any]:
    """The reply a recorded stream stands for: the Responses ending's response; Gemini's chunks joined."""
    body = recording.response(index)
    if not isinstance(body, str):
        return dict(body)
    events = _events(body)
    if recording.adapter == "responses":
        return next(e["response"] for e in events if e.get("type") == "response.completed")
    parts = [p for e in events for c in e.get("candidates", [])[:1] for p in c.get("content", {}).get("parts", [])]
    parts = [p for p in parts if p != {"text": ""}]  # an empty text part says nothing
    last = events[-1]
    candidate = {"content": {"parts": parts}, "finishReason": last["candidates"][0].get("finishReason")}
    return {**last, "candidates": [candidate]}


def expected(recording: Recording, index: int) -> dict[str, Any] | None:
    """Text, call names, finish and usage of the recorded reply (``None``: an HTTP failure)."""
    if recording.interactions[index]["response"]["status"] >= 400:
        return None
    body = whole_body(recording, index)
    if recording.adapter == "responses":
        output = body["output"]
        texts = [
            p["text"] for i in output if i["type"] == "message" for p in i["content"] if p["type"] == "output_text"
        ]
        calls = [(i["call_id"], i["name"]) for i in output if i["type"] == "function_call"]
        usage = body["usage"]
        finish = "length" if body["status"] == "incomplete" else ("tool_calls" if calls else "stop")
        return {
            "text": "".join(texts) or None,
            "calls": [name for _, name in calls],
            "ids": [ident for ident, _ in calls],
            "finish": finish,
            "prompt": usage["input_tokens"],
            "cached": usage["input_tokens_details"]["cached_tokens"],
            "reasoning": usage["output_tokens_details"]["reasoning_tokens"],
            "reasoning_items": [i for i in output if i["type"] == "reasoning"],
        }
    if not body.get("candidates"):  # the prompt was blocked: no candidate at all
        assert body["promptFeedback"]["blockReason"]
        prompt = body.get("usageMetadata", {}).get("promptTokenCount")
        return {
            "text": None,
            "calls": [],
            "finish": "content_filter",
            "prompt": prompt,
            "reasoning": None,
            "signed": [],
        }
    candidate = body["candidates"][0]
    parts = candidate.get("content", {}).get("parts", [])
    texts = [p["text"] for p in parts if "text" in p and not p.get("thought")]
    calls = [p["functionCall"]["name"] for p in parts if "functionCall" in p]
    finish = _GEMINI_FINISH[candidate["finishReason"]]
    usage = body["usageMetadata"]
    return {
        "text": "".join(texts) or None,
        "calls": calls,
        "finish": "tool_calls" if calls and finish == "stop" else finish,
        "prompt": usage["promptTokenCount"],
        "reasoning": usage.get("thoughtsTokenCount"),
        "signed": [p for p in parts if p.get("thoughtSignature")],
    }


def streamed_replies(recording: Recording) -> list[Reply]:
    """The recording's replies as streams: a whole reply exploded into the provider's events, an error as it was."""
    out = []
    for index, reply in enumerate(recording.replies()):
        if expected(recording, index) is None or streamed(recording, index):
            out.append(reply)
        else:
            body = explode(recording.adapter, whole_body(recording, index), [3, 11])
            out.append(Reply(200, body, (("content-type", "text/event-stream"),)))
    return out


def explode(adapter: str, body: dict[str, Any], cuts: list[int]) -> bytes:
    """The stream that carries the whole reply ``body``, every text and argument string cut at ``cuts``."""
    if adapter == "responses":
        return sse([(e["type"], e) for e in _responses_events(body, cuts)])
    return sse([(None, chunk) for chunk in _gemini_chunks(body, cuts)])


def _responses_events(body: dict[str, Any], cuts: list[int]) -> list[dict[str, Any]]:
    opened = {**body, "status": "in_progress", "output": [], "usage": None}
    events: list[dict[str, Any]] = [{"type": "response.created", "response": opened}]
    for index, item in enumerate(body["output"]):
        if item["type"] == "message":
            events.append(
                {"type": "response.output_item.added", "output_index": index, "item": {**item, "content": []}}
            )
            for part_index, part in enumerate(item["content"]):
                for piece in pieces(part.get("text", ""), cuts):
                    delta = {"type": "response.output_text.delta", "output_index": index, "delta": piece}
                    events.append({**delta, "content_index": part_index})
        elif item["type"] == "function_call":
            events.append(
                {"type": "response.output_item.added", "output_index": index, "item": {**item, "arguments": ""}}
            )
            for piece in pieces(item["arguments"], cuts):
                events.append({"type": "response.function_call_arguments.delta", "output_index": index, "delta": piece})
        else:
            events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    ending = "response.incomplete" if body["status"] == "incomplete" else "response.completed"
    events.append({"type": ending, "response": body})
    return events


def _gemini_chunks(body: dict[str, Any], cuts: list[int]) -> list[dict[str, Any]]:
    if not body.get("candidates"):
        return [body]  # a blocked prompt arrives as one chunk with its promptFeedback
    candidate = body["candidates"][0]
    head = {k: v for k, v in body.items() if k != "candidates"}
    chunks = []
    for part in candidate.get("content", {}).get("parts", []):
        if "text" in part and not part.get("thoughtSignature") and not part.get("thought"):
            for piece in pieces(part["text"], cuts):
                chunks.append({**head, "candidates": [{"content": {"role": "model", "parts": [{"text": piece}]}}]})
        else:
            chunks.append({**head, "candidates": [{"content": {"role": "model", "parts": [part]}}]})
    last = {k: v for k, v in candidate.items() if k != "content"}
    chunks.append({**head, "candidates": [{**last, "content": {"role": "model", "parts": []}}]})
    return chunks
