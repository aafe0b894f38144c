"""
A tool's schema, checked once when the tool is defined and compiled once into a checker.

Checking at definition: the schema must pass its meta-schema, every ``$ref``
must resolve *inside* it (nothing is ever fetched: the registry has no
retrieval), and every ``pattern`` must compile on the linear-time engine of
:mod:`agent_fsm.engine.regexes`. A tool that would fail at its first call
fails here instead, with :class:`~agent_fsm.engine.errors.ToolDefinitionError`.

Compiling: most tool schemas use a handful of keywords (``type``,
``properties``, ``required``, bounds, ``enum``, ``pattern``, ``format``).
Those compile to plain Python predicates, about twenty times faster than
walking the schema with ``jsonschema`` on every call. Schemas using anything
else (``$ref``, ``anyOf``, ``if``/``then`` ...) are checked by ``jsonschema``
(Draft 2020-12), with the same pattern engine and format checks. Either way,
when a call fails, ``jsonschema`` words the errors, so messages read the same
whichever checker decided.

``jsonschema`` (and its ``referencing`` stack) is imported on first use, by a
rich schema or a failed call: a run whose tools are all compiled never loads it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from agent_fsm.engine.formats import FORMAT_CHECKS
from agent_fsm.engine.regexes import PatternError, compile_pattern

if TYPE_CHECKING:
    import jsonschema

__all__ = ["Checker", "compile_checker", "make_validator", "schema_problem"]

Checker = Callable[[Any], bool]
"""A compiled schema: ``True`` when the instance is valid."""


def _is_strict_integer(checker: Any, instance: Any) -> bool:
    # JSON Schema calls 4999.0 an integer. A handler declared to take an int
    # would then receive a float, so agent_fsm accepts only real integers.
    return isinstance(instance, int) and not isinstance(instance, bool)


# --- jsonschema, with RE2 patterns (its own keywords call re.search) ------------


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[jsonschema.ValidationError]:
    if validator.is_type(instance, "string") and not compile_pattern(pattern)(instance):
        from jsonschema import ValidationError

        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[Any]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        search = compile_pattern(pattern)
        for key, value in instance.items():
            if search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional(instance: Mapping[str, Any], schema: Mapping[str, Any]) -> set[str]:
    properties = schema.get("properties", {})
    searches = [compile_pattern(p) for p in schema.get("patternProperties", {})]
    return {k for k in instance if k not in properties and not any(search(k) for search in searches)}


def _additional_properties(validator: Any, allowed: Any, instance: Any, schema: Any) -> Iterator[Any]:
    # jsonschema's own wording, with patternProperties matched by RE2.
    if not validator.is_type(instance, "object"):
        return
    extras = _additional(instance, schema)
    if validator.is_type(allowed, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], allowed, path=extra)
    elif not allowed and extras:
        from jsonschema import ValidationError

        if "patternProperties" in schema:
            verb = "does" if len(extras) == 1 else "do"
            joined = ", ".join(repr(each) for each in sorted(extras))
            patterns = ", ".join(repr(each) for each in sorted(schema["patternProperties"]))
            yield ValidationError(f"{joined} {verb} not match any of the regexes: {patterns}")
        else:
            names = sorted(extras, key=str)
            verb = "was" if len(names) == 1 else "were"
            listed = ", ".join(repr(extra) for extra in names)
            yield ValidationError(f"Additional properties are not allowed ({listed} {verb} unexpected)")


@functools.cache
def _jsonschema() -> tuple[Any, Any, Any]:
    # (validator class, registry, format checker), built once, on the first rich schema or failed call.
    import jsonschema
    import referencing
    from jsonschema.validators import Draft202012Validator, extend
    from jsonschema_specifications import REGISTRY as SPECIFICATIONS

    format_checker = jsonschema.FormatChecker(formats=())
    for name, check in FORMAT_CHECKS.items():
        format_checker.checks(name)(
            functools.partial(lambda check, value: not isinstance(value, str) or check(value), check)
        )
    validator = extend(  # type: ignore[no-untyped-call]
        Draft202012Validator,
        validators={
            "pattern": _pattern,
            "patternProperties": _pattern_properties,
            "additionalProperties": _additional_properties,
        },
        type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_strict_integer),
    )
    # Only the JSON Schema meta-schemas are known; with no ``retrieve``, any other URI is unresolvable.
    registry: referencing.Registry[Any] = referencing.Registry().combine(SPECIFICATIONS)
    return validator, registry, format_checker


def make_validator(schema: Mapping[str, Any]) -> Any:
    """A Draft 2020-12 ``jsonschema`` validator that fetches nothing and runs patterns on RE2."""
    validator, registry, format_checker = _jsonschema()
    return validator(schema, registry=registry, format_checker=format_checker)


# --- definition-time checks ---------------------------------------------------


def _ref_problems(schema: Mapping[str, Any]) -> Iterator[str]:
    import referencing.exceptions
    from referencing.jsonschema import DRAFT202012

    registry = _jsonschema()[1]
    root = DRAFT202012.create_resource(schema)
    stack = [(root, registry.resolver_with_root(root))]
    keywords: set[str] = set()
    while stack:
        resource, resolver = stack.pop()
        contents = resource.contents
        if isinstance(contents, Mapping):
            keywords.update(k for k in contents if isinstance(k, str))
            for keyword in ("$ref", "$dynamicRef"):
                ref = contents.get(keyword)
                if ref is None:
                    continue
                try:
                    resolver.lookup(ref)
                except referencing.exceptions.Unresolvable:
                    yield (
                        f"{keyword} {ref!r} does not resolve inside the schema (nothing is ever fetched:"
                        " put referenced schemas under $defs)"
                    )
            for pattern in [contents.get("pattern"), *contents.get("patternProperties", {})]:
                if isinstance(pattern, str):
                    try:
                        compile_pattern(pattern)
                    except PatternError as exc:
                        yield str(exc)
        for sub in resource.subresources():
            stack.append((sub, resolver.in_subresource(sub)))
    if {"unevaluatedProperties", "patternProperties"} <= keywords:
        # jsonschema matches patternProperties with Python's re while it evaluates unevaluatedProperties.
        yield "unevaluatedProperties together with patternProperties is not supported (that matching backtracks)"


@functools.lru_cache(maxsize=1024)
def _problem_of(schema_text: str) -> str | None:
    # The meta-schema check costs milliseconds; test worlds are rebuilt per
    # example, so each distinct schema is checked once.
    import jsonschema

    schema = json.loads(schema_text)
    try:
        # format_checker=None: the meta-schema's "regex" format would compile patterns with
        # Python's re, whose dialect is not JSON Schema's; RE2 compiles them below instead.
        _jsonschema()[0].check_schema(schema, format_checker=None)
    except jsonschema.SchemaError as exc:
        return exc.message
    return next(_ref_problems(schema), None)


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """What makes ``schema`` unusable as a tool contract, or ``None``."""
    return _problem_of(json.dumps(schema, sort_keys=True, default=repr))


# --- the compiled checker ---------------------------------------------------------

_IS_TYPE: dict[str, Checker] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}
_COMPILED = frozenset(
    {
        "type",
        "properties",
        "required",
        "additionalProperties",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "items",
        "minItems",
        "maxItems",
    }
)
# Keywords jsonschema knows but that assert nothing on their own (or only matter to $ref, which is not compiled).
_INERT = frozenset({"$schema", "$id", "$anchor", "$dynamicAnchor", "$defs", "$comment", "$vocabulary"})
# Draft 2020-12's asserting keywords (jsonschema's Draft202012Validator.VALIDATORS; a test keeps them equal).
_DRAFT_2020_12 = frozenset(
    {
        "$dynamicRef", "$ref", "additionalProperties", "allOf", "anyOf", "const", "contains",
        "dependentRequired", "dependentSchemas", "enum", "exclusiveMaximum", "exclusiveMinimum", "format", "if",
        "items", "maxItems", "maxLength", "maxProperties", "maximum", "minItems", "minLength", "minProperties",
        "minimum", "multipleOf", "not", "oneOf", "pattern", "patternProperties", "prefixItems", "properties",
        "propertyNames", "required", "type", "unevaluatedItems", "unevaluatedProperties", "uniqueItems",
    }
)  # fmt: skip
_ASSERTING = _DRAFT_2020_12 - _COMPILED - _INERT


def _equal(one: Any, two: Any) -> bool:
    # JSON equality as jsonschema has it: True is not 1, 1 is 1.0, containers compare deeply.
    if isinstance(one, str) or isinstance(two, str):
        return bool(one == two)
    if isinstance(one, list) and isinstance(two, list):
        return len(one) == len(two) and all(_equal(a, b) for a, b in zip(one, two, strict=True))
    if isinstance(one, dict) and isinstance(two, dict):
        return one.keys() == two.keys() and all(_equal(one[k], two[k]) for k in one)
    if isinstance(one, bool) or isinstance(two, bool):
        return type(one) is type(two) and one == two
    return bool(one == two)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _keyword_checks(schema: Mapping[str, Any]) -> list[Checker] | None:
    checks: list[Checker] = []
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        tests = [_IS_TYPE[k] for k in kinds]
        checks.append(tests[0] if len(tests) == 1 else lambda v: any(t(v) for t in tests))
    if "enum" in schema:
        options = list(schema["enum"])
        checks.append(lambda v: any(_equal(v, option) for option in options))
    if "const" in schema:
        const = schema["const"]
        checks.append(lambda v: _equal(v, const))
    for keyword, holds in (
        ("minimum", lambda v, bound: v >= bound),
        ("maximum", lambda v, bound: v <= bound),
        ("exclusiveMinimum", lambda v, bound: v > bound),
        ("exclusiveMaximum", lambda v, bound: v < bound),
    ):
        if keyword in schema:
            checks.append(
                functools.partial(lambda holds, bound, v: not _number(v) or holds(v, bound), holds, schema[keyword])
            )
    if "minLength" in schema:
        least = schema["minLength"]
        checks.append(lambda v: not isinstance(v, str) or len(v) >= least)
    if "maxLength" in schema:
        most = schema["maxLength"]
        checks.append(lambda v: not isinstance(v, str) or len(v) <= most)
    if "pattern" in schema:
        search = compile_pattern(schema["pattern"])
        checks.append(lambda v: not isinstance(v, str) or search(v))
    if schema.get("format") in FORMAT_CHECKS:
        check = FORMAT_CHECKS[schema["format"]]
        checks.append(lambda v: not isinstance(v, str) or check(v))
    if "minItems" in schema:
        fewest = schema["minItems"]
        checks.append(lambda v: not isinstance(v, list) or len(v) >= fewest)
    if "maxItems" in schema:
        most_items = schema["maxItems"]
        checks.append(lambda v: not isinstance(v, list) or len(v) <= most_items)
    if "items" in schema:
        item = compile_checker(schema["items"])
        if item is None:
            return None
        checks.append(lambda v: not isinstance(v, list) or all(item(x) for x in v))
    object_check = _object_check(schema)
    if object_check is _NOT_COMPILED:
        return None
    if object_check is not None:
        checks.append(object_check)
    return checks


def _not_compiled(v: Any) -> bool:
    raise AssertionError("a marker, never called")


_NOT_COMPILED: Checker = _not_compiled


def _object_check(schema: Mapping[str, Any]) -> Checker | None:
    properties: dict[str, Checker] = {}
    for name, sub in schema.get("properties", {}).items():
        compiled = compile_checker(sub)
        if compiled is None:
            return _NOT_COMPILED
        properties[name] = compiled
    required = tuple(schema.get("required", ()))
    extra: Any = schema.get("additionalProperties", True)
    extra_check = None if isinstance(extra, bool) else compile_checker(extra)
    if extra_check is None and not isinstance(extra, bool):
        return _NOT_COMPILED
    if not properties and not required and extra is True:
        return None
    closed = extra is False
    pairs = tuple(properties.items())

    def check(v: Any) -> bool:
        if not isinstance(v, dict):
            return True
        for name in required:
            if name not in v:
                return False
        for name, holds in pairs:
            if name in v and not holds(v[name]):
                return False
        if closed or extra_check is not None:
            for key in v:
                if key not in properties and (closed or not extra_check(v[key])):  # type: ignore[misc]
                    return False
        return True

    return check


def compile_checker(schema: Any) -> Checker | None:
    """
    ``schema`` as one Python predicate, or ``None`` if it uses a keyword that is not compiled.

    The predicate is meant for JSON data that :func:`~agent_fsm.engine.jsondata.argument_problem`
    accepted; on such data it agrees with :func:`make_validator` exactly.
    """
    if schema is True:
        return lambda v: True
    if schema is False:
        return lambda v: False
    if not isinstance(schema, Mapping) or _ASSERTING & schema.keys():
        return None
    checks = _keyword_checks(schema)
    if checks is None:
        return None
    if not checks:
        return lambda v: True
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        first, second = checks
        return lambda v: first(v) and second(v)
    every = tuple(checks)

    return lambda v: all(check(v) for check in every)
