"""
The tool results this project has recorded, as one corpus: what the shipped screens' false positives are counted on.

Two sources, each read as it is stored, every distinct result once:

* the provider recordings (tests/providers/fixtures): every tool result sent
  to or returned by a real provider: OpenAI-style ``tool`` messages,
  Anthropic ``tool_result`` blocks and its server tools' results (web
  search result lists, code execution output), Ollama ``tool`` messages;
* the examples' tool results: the observations of every scenario in specs/
  (the support desk, the doc lookup, the ticket, git and retrieval desks,
  the handoff), run as the scenario runner runs them.

None of it was written to attack a model, so every result a screen flags is
a false positive.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _results_in(value: Any) -> Iterator[Any]:
    """The tool results held anywhere in one recorded exchange (JSON text inside strings is read too)."""
    if isinstance(value, dict):
        kind = value.get("type")
        if value.get("role") == "tool" or (isinstance(kind, str) and kind.endswith("tool_result")):
            yield value.get("content")
        for item in value.values():
            yield from _results_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from _results_in(item)
    elif isinstance(value, str) and value[:1] in "{[":
        try:
            parsed = json.loads(value)
        except ValueError:
            return
        yield from _results_in(parsed)


def _distinct(items: Iterator[Any]) -> list[Any]:
    seen: dict[str, Any] = {}
    for item in items:
        if item is None:
            continue
        seen.setdefault(json.dumps(item, sort_keys=True), item)
    return list(seen.values())


def provider_tool_results() -> list[Any]:
    """Every distinct tool result in the provider recordings."""
    found: list[Any] = []
    for path in sorted((ROOT / "tests" / "providers" / "fixtures").rglob("*.json")):
        found.extend(_results_in(json.loads(path.read_text(encoding="utf-8"))))
    return _distinct(iter(found))


def example_tool_results() -> list[Any]:
    """Every distinct result or error content the examples' tools returned in the scenarios of specs/."""
    from agent_fsm.scenarios import discover, load_scenario, run_scenario

    found: list[Any] = []
    for path in discover(ROOT / "specs"):
        scenario = load_scenario(path)
        if getattr(scenario, "mcp", None):
            continue  # a spec that starts an MCP server: its tools are the server's, not an example's
        result = run_scenario(scenario).result
        found.extend(o.content for o in result.state.observations if o.kind in ("result", "error"))
    return _distinct(iter(found))
