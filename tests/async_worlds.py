"""The same world made asynchronous: a model with achat, an async gate, async handlers (each yields to the loop)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from agent_fsm import ToolCall, ToolSpec


class AsyncModel:
    """Answers as ``inner`` would, from ``achat``, after giving the event loop a turn (or ``delay`` seconds)."""

    def __init__(self, inner: Any, delay: float = 0.0) -> None:
        self.inner = inner
        self.delay = delay
        self.calls = 0

    async def achat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        self.calls += 1
        await asyncio.sleep(self.delay)
        return self.inner.chat(messages, tools)


def async_gate(gate: Callable[[ToolCall], Any]) -> Callable[[ToolCall], Any]:
    """``gate``'s verdicts, given from an ``async def``."""

    async def gate_async(call: ToolCall) -> Any:
        await asyncio.sleep(0)
        return gate(call)

    return gate_async


def _async_handler(handler: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(handler)  # the signature the engine reads stays the handler's own
    async def handler_async(**arguments: Any) -> Any:
        await asyncio.sleep(0)
        return handler(**arguments)

    return handler_async


def async_tools(tools: Mapping[str, ToolSpec]) -> dict[str, ToolSpec]:
    """The registry with every handler made ``async def`` (same schemas, flags and results)."""
    return {name: attrs.evolve(spec, handler=_async_handler(spec.handler)) for name, spec in tools.items()}
