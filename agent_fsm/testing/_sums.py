"""
Sums over line items: lists whose integer parts add up to a gate's constant.

Rationale: ``sum(line["cents"] for line in lines) > LIMIT`` compares a total
that random lists almost never make exactly, and when each line is capped
below the limit no single item's value can reach it. The constant has to be
split into parts each within the item's bounds; the random search and the
enumeration both do it here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from hypothesis import strategies as st

__all__ = ["integer_bounds", "split_sum", "summed_fields", "summed_lists"]

Constants = tuple[Any, ...]

_SUM_BOUND = 10**12
"""Stands in for a missing bound when a sum is split into parts."""


def summed_fields(items: Mapping[str, Any]) -> list[str | None]:
    """
    The integer parts of an array's items a gate may add up: ``None`` for the
    items themselves, else each integer property of object items (``line["cents"]``).
    """
    if items.get("type") in ("integer", "number") and "enum" not in items and "const" not in items:
        return [None]
    properties = items.get("properties", {}) if items.get("type") == "object" else {}
    return [
        name
        for name, sub in properties.items()
        if isinstance(sub, Mapping) and sub.get("type") in ("integer", "number") and "enum" not in sub
    ]


def integer_bounds(schema: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """The inclusive integer bounds of a numeric schema (``None`` where it has none)."""
    low = schema.get("minimum")
    high = schema.get("maximum")
    if "exclusiveMinimum" in schema:
        low = math.floor(schema["exclusiveMinimum"]) + 1
    if "exclusiveMaximum" in schema:
        high = math.ceil(schema["exclusiveMaximum"]) - 1
    return (None if low is None else math.ceil(low)), (None if high is None else math.floor(high))


def split_sum(target: int, count: int, low: int | None, high: int | None) -> list[int] | None:
    """``target`` as ``count`` parts each within the bounds, as even as possible (``None`` if it cannot be)."""
    base, extra = divmod(target, count)
    parts = [base + 1] * extra + [base] * (count - extra)
    if (low is not None and min(parts) < low) or (high is not None and max(parts) > high):
        return None
    return parts


def summed_lists(
    schema: Mapping[str, Any], constants: Constants, item_values: st.SearchStrategy[Any]
) -> list[st.SearchStrategy[list[Any]]]:
    """
    Lists of two or more items (drawn from ``item_values``) whose integer
    parts add up to one of the constants: ``sum(line["cents"] for line in
    lines) > LIMIT`` is a boundary no single item reaches when each item is
    capped below it. One strategy per summable part; none without integer constants.
    """
    items = schema.get("items", {})
    targets = sorted({c for c in constants if type(c) is int})
    if not isinstance(items, Mapping) or not items or not targets:
        return []
    low_count = max(2, schema.get("minItems", 0))
    high_count = min(schema.get("maxItems", low_count + 3), low_count + 3)
    if high_count < low_count:
        return []
    found = []
    for field in summed_fields(items):
        part_schema = items if field is None else items["properties"][field]
        low, high = integer_bounds(part_schema)
        feasible = [
            t for t in targets if any(split_sum(t, n, low, high) is not None for n in range(low_count, high_count + 1))
        ]
        if feasible:
            found.append(_summing(item_values, field, feasible, low_count, high_count, low, high))
    return found


@st.composite
def _summing(
    draw: st.DrawFn,
    item_values: st.SearchStrategy[Any],
    field: str | None,
    targets: list[int],
    low_count: int,
    high_count: int,
    low: int | None,
    high: int | None,
) -> list[Any]:
    target = draw(st.sampled_from(targets))
    counts = [n for n in range(low_count, high_count + 1) if split_sum(target, n, low, high) is not None]
    count = draw(st.sampled_from(counts))
    floor = low if low is not None else -_SUM_BOUND
    ceiling = high if high is not None else _SUM_BOUND
    parts: list[int] = []
    remaining = target
    for index in range(count - 1):
        left = count - 1 - index
        # each part leaves the rest reachable by the parts after it
        parts.append(draw(st.integers(max(floor, remaining - left * ceiling), min(ceiling, remaining - left * floor))))
        remaining -= parts[-1]
    parts.append(remaining)
    if field is None:
        return parts
    bases = draw(st.lists(item_values, min_size=count, max_size=count))
    return [{**base, field: part} for base, part in zip(bases, parts, strict=True)]
