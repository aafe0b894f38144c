"""The shape every test world shares: a registry and the effect log its handlers write."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from agent_fsm import ToolSpec


@attrs.define
class World:
    """A user's world: tools and the log of what their effectful handlers did."""

    tools: dict[str, ToolSpec]
    effects: list[dict[str, Any]]


def effect_recorder(effects: list[dict[str, Any]], name: str) -> Callable[..., dict[str, Any]]:
    """A handler that records its arguments as one effect and returns them as its receipt."""

    def handler(**arguments: Any) -> dict[str, Any]:
        receipt = {"tool": name, **arguments}
        effects.append(receipt)
        return receipt

    return handler


def lookup(**arguments: Any) -> dict[str, Any]:
    """An effect-free handler: it only answers."""
    return {"found": arguments}
