"""
Recorded provider exchanges (``fixtures/``), loaded and served from the loopback server.

Each fixture holds real request/response pairs copied from public repositories'
recorded test data (origins in ``fixtures/SOURCES.md``): the response bodies are
replayed byte for byte as JSON, so the adapters meet exactly what the servers sent.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import attrs

from agent_fsm import ToolSpec

from .loopback import Reply

FIXTURES = Path(__file__).parent / "fixtures"
ADAPTERS = ("openai", "anthropic", "ollama")


@attrs.frozen
class Recording:
    """One recorded exchange: which adapter speaks it, the host it came from, its request/response pairs."""

    adapter: str
    name: str
    host: str
    origin: dict[str, str]
    interactions: list[dict[str, Any]] = attrs.field(repr=False)

    @property
    def id(self) -> str:
        return f"{self.adapter}/{self.name}"

    def reply(self, index: int) -> Reply:
        """The ``index``-th recorded response, as the server sent it."""
        response = self.interactions[index]["response"]
        body = response["body"]
        raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        return Reply(response["status"], raw, (("content-type", response.get("content_type") or "application/json"),))

    def replies(self) -> list[Reply]:
        return [self.reply(i) for i in range(len(self.interactions))]

    def request(self, index: int) -> dict[str, Any] | None:
        """The ``index``-th recorded request body (``None`` when only the response was recorded)."""
        request = self.interactions[index].get("request")
        return request.get("body") if request else None

    def response(self, index: int) -> Any:
        return self.interactions[index]["response"]["body"]

    def declarations(self) -> list[dict[str, Any]]:
        """The first request's function tools as OpenAI declarations (server tools left out)."""
        body = self.request(0) or {}
        out = []
        for tool in body.get("tools") or []:
            if "function" in tool:
                function = tool["function"]
                out.append({"name": function["name"], "parameters": function.get("parameters") or {}})
            elif "input_schema" in tool:
                out.append({"name": tool["name"], "parameters": tool["input_schema"]})
        return [
            {"type": "function", "function": {"name": d["name"], "description": "", "parameters": d["parameters"]}}
            for d in out
        ]

    def registry(self, calls: list[dict[str, Any]]) -> dict[str, ToolSpec]:
        """Tools under the recorded names, each echoing its arguments (schemas loosened to what the engine takes)."""

        def echo(**arguments: Any) -> dict[str, Any]:
            return {"echo": arguments}

        tools = {}
        for declaration in self.declarations():
            function = declaration["function"]
            schema = dict(function["parameters"]) or {"type": "object", "properties": {}}
            schema.setdefault("type", "object")
            try:
                tools[function["name"]] = ToolSpec(f"recorded tool {function['name']}", schema, echo)
            except TypeError:
                tools[function["name"]] = ToolSpec(f"recorded tool {function['name']}", {"type": "object"}, echo)
        return tools


def load_recordings(root: Path = FIXTURES, adapters: tuple[str, ...] = ADAPTERS) -> list[Recording]:
    """Every fixture under ``root`` for ``adapters``, in a stable order."""
    found = []
    for adapter in adapters:
        for path in sorted((root / adapter).glob("*.json")):
            data = json.loads(path.read_text())
            found.append(Recording(adapter, path.stem, data["host"], data["origin"], data["interactions"]))
    return found


RECORDINGS = load_recordings()
STREAMS = load_recordings(FIXTURES / "streams")
"""Recorded streamed replies (``stream: true``): SSE from OpenAI-compatible hosts and Anthropic, NDJSON from Ollama."""
NATIVE = ("responses", "gemini")
"""The wire formats of OpenAI's Responses API and Gemini's generateContent, recorded apart."""
NATIVE_RECORDINGS = load_recordings(FIXTURES, NATIVE) + load_recordings(FIXTURES / "streams", NATIVE)


def is_stream(recording: Recording, index: int) -> bool:
    """Whether the ``index``-th recorded response is a stream (SSE or JSON lines) rather than one JSON body."""
    kind = recording.interactions[index]["response"].get("content_type") or ""
    return kind.startswith(("text/event-stream", "application/x-ndjson"))
