"""
After the random search, every mined boundary is driven on purpose: the kit reaches what it finds.

Rationale: a bug behind a conjunction (a weekday date *and* at most two hours
*and* one room *and* exactly thirteen attendees) is found by a random search
only when every draw lands together, which at default settings is about
never; and enumerating the whole contract stops once its combinations pass
:data:`~agent_fsm.testing._enumeration.MAX_CASES`. Fixing one argument at one
boundary value leaves far fewer combinations of the others, each drawn from
what the gate can distinguish: enum members and booleans whole, a week of
real dates (so every weekday occurs), and for numbers the constants the gate
compares against first, then the contract's bounds. Each combination is put
to the gate and the policy directly (thousands a second); a call the gate
allows and the policy forbids is then confirmed by a real run. A boundary
value no random run reached is also driven by one real run, so the coverage
report counts it, and one that still cannot be reached says why.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from agent_fsm.engine import Gate, ToolCall, ToolSpec, as_verdict
from agent_fsm.testing._enumeration import _candidates, _plain
from agent_fsm.testing._sums import integer_bounds

__all__ = ["MAX_TARGETED", "Target", "targeted_arguments", "targets"]

MAX_TARGETED = 2_000
"""The most combinations of the other arguments tried for one boundary value."""

_WHOLE = 7
"""Lists this short (enums, booleans, a week of dates) are kept whole when the others are cut down."""

_MONDAY = dt.date(2024, 1, 1)
"""The first day of the week of dates a date argument is given: Monday to Sunday, every weekday once."""


_AT_NINE = "T09:00:00Z"
"""The time of day given to the week of moments a ``date-time`` argument is offered."""


def _week(schema: Mapping[str, Any]) -> list[str] | None:
    """Monday to Sunday as the string argument takes them (a date, or a moment at nine), or ``None``: no date."""
    if schema.get("type") != "string":
        return None
    days = [_MONDAY + dt.timedelta(days=d) for d in range(7)]
    dates = [day.isoformat() for day in days]
    moments = [day + _AT_NINE for day in dates]
    pattern = schema.get("pattern")
    for kind, week in (("date", dates), ("date-time", moments)):
        if schema.get("format") == kind:
            return week
        if isinstance(pattern, str) and re.search(pattern, week[0], re.ASCII) is not None:
            return week
    return None


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def _ordered(schema: Mapping[str, Any], constants: Sequence[Any]) -> list[Any] | None:
    """A field's values to try, the ones the gate can tell apart first (its constants, then the bounds)."""
    week = _week(schema)
    if week is not None:
        mined = [c for c in constants if isinstance(c, str) and _iso_date(c[:10]) and len(c) == len(week[0])]
        return list(dict.fromkeys([*week, *mined]))
    items = schema.get("items")
    if schema.get("type") == "array" and isinstance(items, Mapping):
        # One item of each kind first (a booking of exactly one room), then the contract's own cases (sums).
        single = schema.get("minItems", 0) <= 1 <= schema.get("maxItems", 1)
        ones = [[value] for value in (_ordered(items, constants) or [])[:_WHOLE]] if single else []
        found = {_key(v): v for v in [*ones, *(_candidates(schema, tuple(constants)) or [])]}
        return list(found.values())
    if schema.get("type") in ("integer", "number") and "enum" not in schema:
        low, high = integer_bounds(schema)
        fits = [
            c
            for c in constants
            if (type(c) is int or (schema.get("type") == "number" and type(c) is float))
            and (low is None or c >= low)
            and (high is None or c <= high)
        ]
        edges = [b for b in (low, high) if b is not None]
        values = list(dict.fromkeys([*fits, *edges]))
        if low is not None and high is not None and high - low < 16:
            values = list(dict.fromkeys([*values, *range(low, high + 1)]))
        return values or [_plain(schema)]
    if "enum" in schema:
        mined = [m for m in schema["enum"] if any(m == c and type(m) is type(c) for c in constants)]
        return list(dict.fromkeys([*mined, *schema["enum"]]))
    return _candidates(schema, tuple(constants))


def _iso_date(text: str) -> bool:
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _cut(choices: list[list[Any]], limit: int) -> list[list[Any]]:
    """Each list cut to its first ``k`` values for the largest ``k`` that fits; short lists stay whole if they can."""
    longest = max((len(c) for c in choices), default=0)
    for whole in (_WHOLE, 0):
        for k in range(longest, 0, -1):
            cut = [c if len(c) <= max(k, whole) else c[:k] for c in choices]
            if math.prod(len(c) for c in cut) <= limit:
                return cut
    return [c[:1] for c in choices]


def targeted_arguments(
    tool: ToolSpec, field: str, value: Any, constants: Sequence[Any], *, limit: int = MAX_TARGETED
) -> Iterator[dict[str, Any]]:
    """
    Arguments with ``field`` set to ``value`` and the other fields combined from their ordered values.

    Optional fields are left out (a boundary needs the required ones); at
    most ``limit`` combinations. Not yet checked against the contract.
    """
    schema = tool.json_schema
    properties: Mapping[str, Any] = schema.get("properties", {})
    required = [n for n in properties if n in set(schema.get("required", ())) and n != field]
    names, choices = [], []
    for name in required:
        values = _ordered(properties[name], constants)
        if not values:
            return
        names.append(name)
        choices.append(values)
    for combination in itertools.islice(itertools.product(*_cut(choices, limit)), limit):
        yield {field: value, **dict(zip(names, combination, strict=True))}


@attrs.frozen
class Target:
    """What targeting one boundary value found: arguments the contract accepts, or why there were none."""

    label: str
    value: Any
    accepted: dict[str, Any] | None
    counterexample: ToolCall | None = None
    tried: int = 0

    @property
    def why_unreachable(self) -> str:
        """Why no proposal can take this value, in words (empty when one can)."""
        if self.accepted is not None:
            return ""
        if not self.tried:
            return "another required argument has no values the kit can list (a type union, say): left to random search"
        return f"the contract refused all {self.tried} combinations of the other arguments tried with it"


def targets(
    tools: Mapping[str, ToolSpec],
    boundaries: Mapping[str, Sequence[Any]],
    constants: Sequence[Any],
    gate: Gate,
    forbidden: Callable[[ToolCall], bool],
) -> Iterator[Target]:
    """
    Each ``tool.field`` boundary value targeted in turn: the first accepted arguments, and a counterexample if any.

    A counterexample is a call the contract accepts, ``forbidden`` marks and
    ``gate`` allows; the search for one stops at the first found (the caller
    confirms it by a real run). Labels of sums over line items are not targeted here.
    """
    for label, values in boundaries.items():
        name, _, field = label.partition(".")
        tool = tools.get(name)
        if tool is None or label.startswith("sum(") or field not in tool.json_schema.get("properties", {}):
            continue
        for value in values:
            accepted: dict[str, Any] | None = None
            tried = 0
            for arguments in targeted_arguments(tool, field, value, constants):
                tried += 1
                call = ToolCall("call_0", name, arguments, json.dumps(arguments))
                try:
                    suspicious = forbidden(call) and as_verdict(gate(call)).kind == "allow"
                except Exception:  # a gate or policy failing on an argument is the random search's to report
                    continue
                if accepted is None or suspicious:
                    if tool.errors(arguments):
                        continue
                    accepted = accepted if accepted is not None else arguments
                if suspicious:
                    yield Target(label, value, accepted, call, tried)
                    return
            yield Target(label, value, accepted, None, tried)
