"""
Whether a tool's handler fits its schema: checked once, when the ToolSpec is built.

A valid call must never end as a ``TypeError`` inside the handler (the run
would end as a handler bug for something the contract allowed). So a schema
that declares an argument the handler cannot take, or a handler argument
that a valid call may leave out, is refused at definition; and an open
schema's extra arguments reach only a handler that takes ``**kwargs``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from agent_fsm.engine.errors import ToolDefinitionError

__all__ = ["handler_arguments", "reads_context"]

# Keywords that can require or declare arguments away from the top level.
_COMPOSING = frozenset(
    {
        "allOf",
        "anyOf",
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "$ref",
        "$dynamicRef",
        "dependentRequired",
        "dependentSchemas",
    }
)


def handler_arguments(handler: Callable[..., Any], schema: Mapping[str, Any]) -> frozenset[str] | None:
    """
    The argument names ``handler`` takes, to pass it only those; ``None`` when it takes any (``**kwargs``).

    Refuses, at definition, a handler that a valid call would make raise ``TypeError``.
    """
    try:
        parameters = list(inspect.signature(handler).parameters.values())
    except (TypeError, ValueError):  # some builtins have no signature to read; pass them everything
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    # ``context`` is the engine's to give (see boundary.execute), never a model's argument.
    by_name = [p for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "context"]
    positional = [p.name for p in parameters if p.kind is p.POSITIONAL_ONLY and p.default is p.empty]
    if positional:
        raise ToolDefinitionError(f"handler takes positional-only {positional}; arguments are passed by name")
    names = frozenset(p.name for p in by_name)
    declared = set(schema.get("properties", {})) | set(schema.get("required", []))
    unknown = sorted(declared - names)
    if unknown:
        raise ToolDefinitionError(
            f"the schema declares {unknown} but the handler takes no such parameter (it takes {sorted(names)})"
        )
    if not (_COMPOSING & schema.keys()):
        needed = sorted(p.name for p in by_name if p.default is p.empty and p.name not in schema.get("required", []))
        if needed:
            raise ToolDefinitionError(
                f"handler parameters {needed} have no default, but the schema does not require them:"
                " a valid call could leave them out"
            )
    return names


def reads_context(handler: Callable[..., Any]) -> bool:
    """Whether ``handler`` names a ``context`` parameter, to be given the call's ToolContext."""
    try:
        parameters = inspect.signature(handler).parameters
    except (TypeError, ValueError):  # some builtins have no readable signature: they take no context
        return False
    parameter = parameters.get("context")
    return parameter is not None and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
