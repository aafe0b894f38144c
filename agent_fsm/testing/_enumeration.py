"""
The finite part of a contract, enumerated: every combination of enums, booleans, small ranges and boundaries.

Rationale: a bug that needs two things at once (``EUR`` *and* one cent above
the EUR limit, catering *and* exactly 13 guests) is found by a random search
only when both draws land together. When the contract's finite part is small
(enums times small integer ranges times the gate's constants, up to about
10,000 combinations), trying every combination costs less than one second of
random search and cannot miss. Each field contributes its enum members, both
booleans, a small range in full, or else its bounds and the constants that
fit it; a field with no finite part contributes one plain value (the simplest
value Hypothesis finds for it), and a list of line items contributes lists
whose integer parts add up to each constant.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping
from typing import Any

from hypothesis import HealthCheck, Phase, find
from hypothesis import settings as Settings

from agent_fsm.engine import NO_ANSWER, ToolSpec
from agent_fsm.testing._formats import is_format
from agent_fsm.testing._schema import schema_values
from agent_fsm.testing._sums import integer_bounds, split_sum, summed_fields

__all__ = ["MAX_CASES", "contract_cases", "plain_arguments"]

MAX_CASES = 10_000
"""The most combinations :func:`contract_cases` enumerates; a larger contract is left to random search."""

_SMALL_RANGE = 16
"""An integer range this wide or narrower is tried in full."""

_ABSENT = object()
"""An optional property left out."""

_PLAIN = Settings(
    database=None,
    derandomize=True,
    max_examples=20,
    phases=[Phase.generate, Phase.shrink],
    suppress_health_check=list(HealthCheck),
    deadline=None,
)


def _plain(schema: Mapping[str, Any]) -> Any:
    """The simplest value of ``schema`` (Hypothesis's shrunk first example): a deterministic representative."""
    return find(schema_values(schema), lambda value: True, settings=_PLAIN)


def _numbers(schema: Mapping[str, Any], constants: tuple[Any, ...]) -> list[Any]:
    low, high = integer_bounds(schema)
    if low is not None and high is not None and high - low < _SMALL_RANGE:
        values: list[Any] = list(range(low, high + 1))
    else:
        edges = [b + step for b in (low, high) if b is not None for step in (0, 1, -1)]
        values = edges + [
            c for c in constants if type(c) is int or (schema.get("type") == "number" and type(c) is float)
        ]
        values = [v for v in values if (low is None or v >= low) and (high is None or v <= high)]
    return list(dict.fromkeys(values)) or [_plain(schema)]


def _strings(schema: Mapping[str, Any], constants: tuple[Any, ...]) -> list[Any]:
    kind = schema.get("format")
    fitting = [
        c
        for c in constants
        if isinstance(c, str)
        and (kind is None or is_format(kind, c))
        and schema.get("minLength", 0) <= len(c) <= schema.get("maxLength", math.inf)
    ]
    # a string constant is a boundary only where the contract gives strings a meaning (a date, say)
    return list(dict.fromkeys([_plain(schema), *(fitting if kind is not None else [])]))


def _arrays(schema: Mapping[str, Any], constants: tuple[Any, ...]) -> list[Any]:
    plain = _plain(schema)
    items = schema.get("items")
    found = [plain]
    if not isinstance(items, Mapping) or not items:
        return found
    low_count, high_count = max(1, schema.get("minItems", 0)), schema.get("maxItems", 8)
    item = _plain(items)
    for field in summed_fields(items):
        low, high = integer_bounds(items if field is None else items["properties"][field])
        for target in dict.fromkeys(c for c in constants if type(c) is int):
            # the fewest items that can add up to the constant
            for count in range(low_count, high_count + 1):
                parts = split_sum(target, count, low, high)
                if parts is not None:
                    found.append(parts if field is None else [{**item, field: part} for part in parts])
                    break
    return found


def _candidates(schema: Mapping[str, Any], constants: tuple[Any, ...]) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    if "enum" in schema:
        return list(schema["enum"])
    kind = schema.get("type")
    if kind == "boolean":
        return [False, True]
    if kind == "null":
        return [None]
    if kind in ("integer", "number"):
        return _numbers(schema, constants)
    if kind == "string":
        return _strings(schema, constants)
    if kind == "array":
        return _arrays(schema, constants)
    if kind == "object":
        cases = list(itertools.islice(_objects(schema, constants), 64))
        return cases or None
    return None  # a type union or no type: left to random search


def _objects(schema: Mapping[str, Any], constants: tuple[Any, ...]) -> Iterator[dict[str, Any]]:
    properties: Mapping[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", ()))
    names: list[str] = []
    choices: list[list[Any]] = []
    for name, sub in properties.items():
        values = _candidates(sub, constants)
        if values is None:
            if name in required:
                values = [_plain(sub)]
            else:
                continue
        names.append(name)
        choices.append(values if name in required else [_ABSENT, *values])
    for combination in itertools.product(*choices):
        yield {n: v for n, v in zip(names, combination, strict=True) if v is not _ABSENT}


def contract_cases(tool: ToolSpec, constants: tuple[Any, ...] = (), *, limit: int = MAX_CASES) -> list[dict[str, Any]]:
    """
    Every combination of the finite part of ``tool``'s contract, as arguments it accepts.

    Empty when the contract has more than ``limit`` combinations (random
    search covers it then) or is not an object of known properties.
    """
    schema = tool.json_schema
    if schema.get("type") != "object" or not isinstance(schema.get("properties"), Mapping):
        return []
    cases = list(itertools.islice(_objects(schema, constants), limit + 1))
    if len(cases) > limit:
        return []
    return [case for case in cases if not tool.errors(case)]


def plain_answer(result: Mapping[str, Any]) -> Any:
    """The simplest answer a result schema accepts (:data:`~agent_fsm.engine.NO_ANSWER` if none is found)."""
    try:
        return _plain(result)
    except Exception:  # no value found, or a schema outside the supported subset
        return NO_ANSWER


def plain_arguments(tool: ToolSpec) -> dict[str, Any] | None:
    """The simplest arguments ``tool``'s contract accepts (``None`` if none are found)."""
    schema = tool.json_schema
    try:
        arguments = _plain(schema)
    except Exception:  # no value found, or a schema outside the supported subset
        return None
    return arguments if isinstance(arguments, dict) and not tool.errors(arguments) else None
