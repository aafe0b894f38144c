"""
Values generated from a tool's JSON Schema: ones it accepts and ones it must refuse.

Rationale: ``hypothesis-jsonschema`` generates only *valid* instances of a
full JSON Schema draft. Testing an effect boundary needs the other half as
well (a wrong type, a missing required field, an extra field, a number past
its bound, a string off its pattern), each produced on purpose and shrinking
to a readable example. The subset tools use is small, so it is written here
against that subset, and every value is checked by the engine's own
validator (:meth:`agent_fsm.ToolSpec.errors`) rather than trusted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from hypothesis import strategies as st

from agent_fsm.engine import compile_pattern
from agent_fsm.testing._formats import (
    FORMATS,
    format_values,
    is_format,
    mostly,
    pattern_values,
    string_lengths,
)
from agent_fsm.testing._sums import integer_bounds, summed_lists

__all__ = ["UnsupportedSchema", "schema_values", "schema_violations"]

Constants = tuple[Any, ...]

_SUPPORTED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "enum",
        "const",
        "pattern",
        "format",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "items",
        "minItems",
        "maxItems",
        "description",
        "title",
        "default",
        "examples",
        "$schema",
        "enumNames",  # the labels of an enum's values (MCP's legacy titled enum): an annotation
    }
)

_JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(max_size=8),
)
_ANY_JSON = st.recursive(
    _JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


class UnsupportedSchema(ValueError):
    """A schema uses a keyword this generator does not understand (it would guess otherwise)."""


def _titled(schema: Mapping[str, Any]) -> Mapping[str, Any]:
    """
    A ``oneOf``/``anyOf`` of titled constants (``{"const": v, "title": ...}``, as MCP forms write a choice) as an enum.

    Any other ``oneOf``/``anyOf`` is left as it is, for :func:`_check_supported` to refuse.
    """
    for key in ("oneOf", "anyOf"):
        choices = schema.get(key)
        if not isinstance(choices, list) or not choices:
            continue
        titled = all(isinstance(c, Mapping) and "const" in c for c in choices)
        if titled and all(set(c) <= {"const", "title", "description"} for c in choices):
            rest = {k: v for k, v in schema.items() if k != key}
            return {**rest, "enum": [c["const"] for c in choices]}
    return schema


def _check_supported(schema: Mapping[str, Any]) -> None:
    unknown = sorted(set(schema) - _SUPPORTED)
    if unknown:
        raise UnsupportedSchema(
            f"cannot generate values for schema keywords {unknown}; supported: {sorted(_SUPPORTED)}"
        )
    kind = schema.get("format")
    if kind is not None and kind not in FORMATS:
        raise UnsupportedSchema(f"cannot generate values of format {kind!r}; supported formats: {sorted(FORMATS)}")


def _in_range(value: float, low: float | None, high: float | None) -> bool:
    return (low is None or value >= low) and (high is None or value <= high)


def _integers(schema: Mapping[str, Any], constants: Constants = ()) -> st.SearchStrategy[int]:
    low, high = integer_bounds(schema)
    # The bounds, one step inside them, and the constants a gate compares
    # against are where off-by-one bugs live: offer them directly, as often as anything else.
    edges = sorted(
        {b + step for b in (low, high) if b is not None for step in (-1, 0, 1) if _in_range(b + step, low, high)}
    )
    known = [c for c in constants if type(c) is int and _in_range(c, low, high)]
    options = [st.sampled_from(known)] if known else []
    options += [st.sampled_from(edges)] if edges else []
    return st.one_of(*options, st.integers(min_value=low, max_value=high))


def _numbers(schema: Mapping[str, Any], constants: Constants = ()) -> st.SearchStrategy[float | int]:
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    exclude_low, exclude_high = "exclusiveMinimum" in schema, "exclusiveMaximum" in schema
    floats = st.floats(
        min_value=low,
        max_value=high,
        exclude_min=exclude_low,
        exclude_max=exclude_high,
        allow_nan=False,
        allow_infinity=False,
    )

    def inside(value: float) -> bool:
        above = low is None or (value > low if exclude_low else value >= low)
        below = high is None or (value < high if exclude_high else value <= high)
        return above and below

    # Each bound and the nearest floats either side of it: a gate writing
    # ``>=`` for ``>`` differs from the right one only there.
    edges = [
        float(near)
        for bound in (low, high)
        if bound is not None
        for near in (math.nextafter(bound, -math.inf), bound, math.nextafter(bound, math.inf))
    ]
    known = [c for c in constants if type(c) in (int, float)] + edges
    chosen = sorted({c for c in known if inside(c)})
    options = [st.sampled_from(chosen)] if chosen else []
    return st.one_of(*options, _integers(schema, constants), floats)


def _strings(schema: Mapping[str, Any], constants: Constants = ()) -> st.SearchStrategy[str]:
    low = schema.get("minLength", 0)
    high = schema.get("maxLength")
    pattern = schema.get("pattern")
    kind = schema.get("format")
    # Kept only if the engine's own pattern engine agrees (JSON Schema's ASCII \d, "$" at the very end).
    search = compile_pattern(pattern) if pattern is not None else None

    def fits(text: str) -> bool:
        return _in_range(len(text), low, high) and (search is None or search(text))

    known = [c for c in constants if isinstance(c, str) and fits(c) and (kind is None or is_format(kind, c))]
    if kind is not None:
        base = format_values(kind, [c for c in known if kind == "date"]).filter(fits)
    elif pattern is not None:
        base = pattern_values(pattern).filter(fits)
    else:
        # Lengths at the gate's thresholds (``len(note) > 140``), at the bounds, then any text.
        bounds = [low, low + 1] + ([high - 1, high] if high is not None else [])
        thresholds = [c for c in constants if type(c) is int and c >= 0]
        exact = string_lengths(low, high, bounds)
        if any(_in_range(n, low, high) for n in thresholds):
            exact = mostly(string_lengths(low, high, thresholds), exact)
        base = mostly(exact, st.text(min_size=low, max_size=high if high is not None else max(low, 12)))
    return st.one_of(st.sampled_from(known), base) if known else base


def _objects(schema: Mapping[str, Any], constants: Constants = ()) -> st.SearchStrategy[dict[str, Any]]:
    properties: Mapping[str, Any] = schema.get("properties", {})
    required = [p for p in schema.get("required", []) if p in properties]
    optional = {k: schema_values(v, constants) for k, v in properties.items() if k not in required}
    fixed = st.fixed_dictionaries({k: schema_values(properties[k], constants) for k in required}, optional=optional)
    extra = schema.get("additionalProperties", True)
    if extra is False:
        return fixed
    extra_values = _ANY_JSON if extra is True else schema_values(extra, constants)
    spare = st.dictionaries(
        st.text(min_size=1, max_size=6).filter(lambda k: k not in properties), extra_values, max_size=2
    )
    return st.tuples(fixed, spare).map(lambda pair: {**pair[1], **pair[0]})


def _arrays(schema: Mapping[str, Any], constants: Constants = ()) -> st.SearchStrategy[list[Any]]:
    items = schema.get("items", {})
    values = schema_values(items, constants) if items else _ANY_JSON
    low, high = schema.get("minItems", 0), schema.get("maxItems")
    lists = st.lists(values, min_size=low, max_size=high if high is not None else max(low, 4))
    # As for strings, the sizes at the gate's thresholds (``len(items) > 5``); not
    # the bounds: a list held at its maximum size could not shrink to a shorter counterexample.
    sizes = sorted(
        {n for n in constants if type(n) is int} & set(range(low, (high if high is not None else low + 8) + 1))
    )
    if not sizes:
        return lists
    exact = st.sampled_from(sizes).flatmap(lambda n: st.lists(values, min_size=n, max_size=n))
    return st.one_of(lists, exact, *summed_lists(schema, constants, values))


_BY_TYPE: dict[str, Callable[[Mapping[str, Any], tuple[Any, ...]], st.SearchStrategy[Any]]] = {
    "object": _objects,
    "string": _strings,
    "integer": _integers,
    "number": _numbers,
    "boolean": lambda _, __: st.booleans(),
    "null": lambda _, __: st.none(),
    "array": _arrays,
}


def schema_values(schema: Mapping[str, Any], constants: Iterable[Any] = ()) -> st.SearchStrategy[Any]:
    """
    Values that satisfy ``schema`` (within the supported subset of JSON Schema).

    ``constants`` are values worth trying wherever they fit (for example the
    thresholds a gate compares against, see :func:`constants_of`).

    Raises:
        UnsupportedSchema: ``schema`` uses a keyword outside the subset.
    """
    schema = _titled(schema)
    _check_supported(schema)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(list(schema["enum"]))
    kind = schema.get("type")
    if kind is None:
        return _ANY_JSON
    constants = tuple(constants)
    if isinstance(kind, list):
        return st.one_of([schema_values({**schema, "type": k}, constants) for k in kind])
    if kind not in _BY_TYPE:
        raise UnsupportedSchema(f"cannot generate values of type {kind!r}; supported: {sorted(_BY_TYPE)}")
    return _BY_TYPE[kind](schema, constants)


def _wrong_type(schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    kind = schema.get("type")
    wrong = {
        "string": st.integers() | st.booleans() | st.none(),
        # agent_fsm accepts only real integers, so an integral float is a wrong type too
        "integer": st.text(max_size=5) | st.floats(allow_nan=False, allow_infinity=False) | st.booleans(),
        "number": st.text(max_size=5) | st.booleans() | st.none(),
        "boolean": st.integers() | st.text(max_size=5),
        "object": st.lists(st.integers(), max_size=2) | st.text(max_size=5),
        "array": st.integers() | st.text(max_size=5) | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        "null": st.integers() | st.text(max_size=3),
    }
    return wrong.get(kind, st.nothing()) if isinstance(kind, str) else st.nothing()


def _out_of_range(schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    options: list[st.SearchStrategy[Any]] = []
    if schema.get("type") in ("integer", "number"):
        if "minimum" in schema:
            options.append(st.integers(max_value=math.ceil(schema["minimum"]) - 1))
        if "maximum" in schema:
            options.append(st.integers(min_value=math.floor(schema["maximum"]) + 1))
    if schema.get("type") == "string":
        if schema.get("minLength", 0) > 0:
            options.append(st.text(max_size=schema["minLength"] - 1))
        if "maxLength" in schema:
            options.append(st.text(min_size=schema["maxLength"] + 1, max_size=schema["maxLength"] + 4))
        if "pattern" in schema:
            options.append(st.text(max_size=8))  # filtered by the validator below
            # A match with its ASCII digits swapped for another script's: Python's
            # ``\d`` takes them, JSON Schema's does not.
            options.append(
                pattern_values(schema["pattern"]).map(_foreign_digits).filter(lambda s: s.isascii() is False)
            )
        if "format" in schema:
            options.append(st.sampled_from(_NOT_FORMATTED))
    if "enum" in schema:
        options.append(st.text(max_size=8).filter(lambda s: s not in schema["enum"]))
    return st.one_of(options) if options else st.nothing()


# Strings no supported format accepts: impossible dates, a date in another script, junk.
_NOT_FORMATTED = (
    "",
    "2024-02-30",
    "2023-13-01",
    "15/03/2024",
    "\u0662\u0660\u0662\u0664-\u0660\u0661-\u0660\u0661",
    "not a value",
)
_FOREIGN = str.maketrans("0123456789", "\u0660\u0661\u0662\u0663\u0664\u0665\u0666\u0667\u0668\u0669")


def _foreign_digits(text: str) -> str:
    return text.translate(_FOREIGN)


def _object_violations(schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    properties: Mapping[str, Any] = schema.get("properties", {})
    valid = _objects(schema)
    options: list[st.SearchStrategy[Any]] = []
    required = [p for p in schema.get("required", []) if p in properties]
    if required:
        options.append(
            st.tuples(valid, st.sampled_from(required)).map(
                lambda pair: {k: v for k, v in pair[0].items() if k != pair[1]}
            )
        )
    if schema.get("additionalProperties") is False:
        options.append(
            st.tuples(valid, st.text(min_size=1, max_size=6).filter(lambda k: k not in properties), _JSON_SCALARS).map(
                lambda t: {**t[0], t[1]: t[2]}
            )
        )
    for name, sub in properties.items():
        options.append(st.tuples(valid, schema_violations(sub)).map(_with_value(name)))
    return st.one_of(options) if options else st.nothing()


def _with_value(name: str) -> Callable[[tuple[dict[str, Any], Any]], dict[str, Any]]:
    """Put a value (a violation) under ``name`` in a valid object."""

    def put(pair: tuple[dict[str, Any], Any]) -> dict[str, Any]:
        return {**pair[0], name: pair[1]}

    return put


def schema_violations(schema: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    """
    Values that ``schema`` should refuse: a wrong type, a missing required or
    an extra field, a bound or pattern broken, one field at a time in nested objects.

    Candidates are not all guaranteed invalid (a random text may match a
    pattern); callers holding the tool filter with the real validator.
    """
    schema = _titled(schema)
    _check_supported(schema)
    options = [_wrong_type(schema), _out_of_range(schema)]
    if schema.get("type") == "object":
        options.append(_object_violations(schema))
    if schema.get("type") == "array" and schema.get("items"):
        options.append(st.tuples(_arrays(schema), schema_violations(schema["items"])).map(lambda p: [*p[0], p[1]]))
    return st.one_of(options)
