"""
Tool contracts: what a tool promises to accept, checked before anything runs.

A proposal is *well formed* when it names a tool in the registry and its
arguments satisfy that tool's JSON Schema. Whether it is *permitted* is a
different question, answered later by the gate; keeping the two apart is what
lets each be tested on its own.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import jsonschema
from jsonschema.validators import Draft202012Validator, extend

from agent_fsm.engine.errors import ToolDefinitionError

__all__ = [
    "Registry",
    "ToolCall",
    "ToolSpec",
    "function_declarations",
    "validate_call",
]

_PY_TO_JSON: dict[type, str] = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    list: "array",
    dict: "object",
    type(None): "null",
}


def _is_strict_integer(checker: Any, instance: Any) -> bool:
    # JSON Schema calls 4999.0 an integer. A handler declared to take an int
    # would then receive a float, so agent_fsm accepts only real integers.
    return isinstance(instance, int) and not isinstance(instance, bool)


_Validator = extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_strict_integer),
)


def _shorthand_to_schema(shorthand: Mapping[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for arg, kind in shorthand.items():
        if kind not in _PY_TO_JSON:
            raise ToolDefinitionError(
                f"argument {arg!r} has type {kind!r}; the shorthand schema accepts "
                f"{sorted(t.__name__ for t in _PY_TO_JSON)} (use a JSON Schema for anything richer)"
            )
        properties[arg] = {"type": _PY_TO_JSON[kind]}
    return {
        "type": "object",
        "properties": properties,
        "required": sorted(properties),
        "additionalProperties": False,
    }


@functools.lru_cache(maxsize=1024)
def _schema_problem(schema_text: str) -> str | None:
    # Checking a schema against the meta-schema costs milliseconds; worlds are
    # rebuilt per test example, so each distinct schema is checked once.
    try:
        _Validator.check_schema(json.loads(schema_text))
    except jsonschema.SchemaError as exc:
        return exc.message
    return None


def _normalise_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(schema, Mapping):
        raise ToolDefinitionError(f"schema must be a mapping, got {type(schema).__name__}")
    if schema and all(isinstance(v, type) for v in schema.values()):
        return _shorthand_to_schema(schema)
    if not schema:
        return _shorthand_to_schema({})
    json_schema = dict(schema)
    problem = _schema_problem(json.dumps(json_schema, sort_keys=True, default=repr))
    if problem is not None:
        raise ToolDefinitionError(f"invalid JSON Schema: {problem}")
    if json_schema.get("type") != "object":
        raise ToolDefinitionError(
            f'a tool\'s schema must describe an object ("type": "object"), got {json_schema.get("type")!r}'
        )
    return json_schema


def _check_retries(spec: Any, retries: Any) -> None:
    if not isinstance(retries, int) or isinstance(retries, bool) or retries < 0:
        raise ToolDefinitionError(f"retries must be a whole number >= 0, got {retries!r}")
    if retries and not spec.idempotent:
        raise ToolDefinitionError(
            f"retries={retries} on a tool that is not idempotent: running it again could repeat its effect"
            " (declare ToolSpec(idempotent=True) only if the handler is safe to repeat under the same key)"
        )


@attrs.frozen
class ToolSpec:
    """
    One tool the engine may execute on the model's behalf.

    ``schema`` is what the tool accepts: the model is shown it, and the
    engine holds every call to it before the handler may run. It is either a ``{argument: python_type}``
    shorthand (every argument required, no others allowed) or a JSON Schema
    object. ``effectful`` flags tools with side effects outside the run; the secure
    default gate refuses them. ``idempotent`` declares that running the same
    call twice under one idempotency key has the effect of running it once:
    only such a tool is re-run after a crash or retried (``retries``).

    Raises:
        ToolDefinitionError: the schema is not usable.
    """

    description: str
    schema: Mapping[str, Any]
    handler: Callable[..., Any] = attrs.field(repr=False)
    effectful: bool = False
    json_schema: dict[str, Any] = attrs.field(init=False, repr=False, eq=False)
    _validator: Any = attrs.field(init=False, repr=False, eq=False, alias="_validator")
    # Durable runs (see agent_fsm.store): an idempotent tool may be run again
    # under the same idempotency key, after a crash or on a failure; only such
    # a tool is retried, up to ``retries`` times, ``backoff`` seconds doubling.
    idempotent: bool = False
    retries: int = attrs.field(default=0, validator=lambda spec, _, value: _check_retries(spec, value))
    backoff: float = 0.1

    def __attrs_post_init__(self) -> None:
        if not callable(self.handler):
            raise ToolDefinitionError(f"handler must be callable, got {self.handler!r}")
        json_schema = _normalise_schema(self.schema)
        object.__setattr__(self, "json_schema", json_schema)
        object.__setattr__(self, "_validator", _Validator(json_schema))

    def errors(self, arguments: Any) -> list[str]:
        """Every way ``arguments`` breaks the contract, as readable lines (empty when valid)."""
        found = []
        for error in sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.path)):
            where = "/".join(str(p) for p in error.path)
            found.append(f"{where}: {error.message}" if where else error.message)
        return found

    def declaration(self, name: str) -> dict[str, Any]:
        """This tool as an OpenAI-compatible function declaration."""
        return {
            "type": "function",
            "function": {"name": name, "description": self.description, "parameters": self.json_schema},
        }


Registry = Mapping[str, ToolSpec]
"""A registry maps tool names to contracts. No other name is ever resolved."""


@attrs.frozen
class ToolCall:
    """
    A parsed proposal to run one tool. It carries no authority by itself.

    ``arguments`` is ``None`` when the model's argument text did not parse
    as a JSON object; ``raw_arguments`` keeps that text so a denial can quote
    it and the no-progress detector can fingerprint it.
    """

    call_id: str
    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str | None = attrs.field(default=None, eq=False, repr=False)

    def fingerprint(self) -> str:
        """Tool name and canonical arguments: equal for proposals that mean the same."""
        if self.arguments is None:
            return f"{self.name}:<unparsed>{self.raw_arguments}"
        return f"{self.name}:{json.dumps(self.arguments, sort_keys=True, separators=(',', ':'))}"


def validate_call(call: ToolCall, tools: Registry) -> str | None:
    """
    Hold a proposal up against the contract its tool declares in the registry.

    Returns:
        ``None`` if the proposal names a known tool with valid arguments;
        otherwise a reason written so the model can fix its call. Permission is not
        judged here at all; the gate decides that separately.
    """
    if call.arguments is None:
        return f"arguments for {call.name or '(no name)'} were not a JSON object: {call.raw_arguments!r}"
    tool = tools.get(call.name) if isinstance(call.name, str) else None
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return f"unknown tool: {call.name!r} (available: {known})"
    problems = tool.errors(call.arguments)
    if problems:
        return f"{call.name} arguments rejected: " + "; ".join(problems)
    return None


def function_declarations(tools: Registry) -> list[dict[str, Any]]:
    """Render a registry as OpenAI-compatible ``tools`` entries, in registry order."""
    return [spec.declaration(name) for name, spec in tools.items()]
