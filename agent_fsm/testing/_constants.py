"""
The constants a gate compares against: where a boundary bug lives, so where the kit's values go.

A boundary such as ``hours > 3`` or ``due < CLOSING_DAY`` is read from the
gate's code, the globals it names and the values it closes over; random
values almost never land on it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from agent_fsm.engine import Registry
from agent_fsm.testing._formats import is_format

__all__ = ["constants_of", "gate_constants"]


def constants_of(*functions: Any) -> tuple[Any, ...]:
    """
    The numbers, strings and dates a gate or predicate compares against, with
    each integer's and each date's neighbours.

    Read from the functions' code (nested functions included, docstrings
    left out), the globals they name and the values they close over (sets,
    tuples and lists of such values too); for a callable object, its
    ``__call__``. A boundary such as ``amount > LIMIT`` is where an
    off-by-one lives, and random integers almost never land on it. Dates come
    back as ISO strings, the form a tool's ``format: date`` argument takes.
    """
    found: list[Any] = []

    def extend(candidates: Iterable[Any]) -> None:
        found.extend(c for c in candidates if not any(c == f and type(c) is type(f) for f in found))

    def add(value: Any, depth: int = 0) -> None:
        if type(value) is int:
            extend([value, value - 1, value + 1])
        elif type(value) is float:
            extend([value])
        elif type(value) is str:
            extend([value])
            if is_format("date", value):
                add(dt.date.fromisoformat(value))
        elif type(value) is dt.date:
            extend([(value + dt.timedelta(days=d)).isoformat() for d in (0, -1, 1) if value.year > 1 or d >= 0])
        elif type(value) is dt.datetime:
            extend([value.isoformat()])
            add(value.date())
        elif isinstance(value, (set, frozenset, tuple, list)) and depth == 0 and len(value) <= 64:
            for member in sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value:
                add(member, depth + 1)

    def visit_code(code: Any, namespace: Mapping[str, Any]) -> None:
        # A function's first constant is its docstring (or None): prose, not a threshold.
        for index, const in enumerate(code.co_consts):
            if hasattr(const, "co_consts"):
                visit_code(const, namespace)
            elif index > 0 or not isinstance(const, str):
                add(const)
        for name in code.co_names:
            add(namespace.get(name))

    for function in functions:
        if function is None:
            continue
        target = function if hasattr(function, "__code__") else type(function).__call__
        code = getattr(target, "__code__", None)
        if code is None:
            continue
        visit_code(code, getattr(target, "__globals__", {}))
        for cell in getattr(target, "__closure__", None) or ():
            try:
                contents = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            add(contents)
            if hasattr(contents, "__code__"):
                extend(constants_of(contents))
    return tuple(found)


def _property_names(schema: Any) -> set[str]:
    if isinstance(schema, Mapping):
        found = set(schema.get("properties", {})) if isinstance(schema.get("properties"), Mapping) else set()
        for value in schema.values():
            found |= _property_names(value)
        return found
    if isinstance(schema, list):
        return set().union(*map(_property_names, schema)) if schema else set()
    return set()


def gate_constants(tools: Registry, *functions: Any) -> tuple[Any, ...]:
    """
    :func:`constants_of` the functions, less the argument names the registry
    declares: ``call.arguments["due"]`` reads a key, it does not compare against ``"due"``.
    """
    names = {n for tool in tools.values() for n in _property_names(tool.json_schema)} | set(tools)
    return tuple(c for c in constants_of(*functions) if not (isinstance(c, str) and c in names))
