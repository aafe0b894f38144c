r"""
A tool's JSON Schema: checked once when the tool is defined, compiled once into a checker.

The sections below: linear-time ``pattern`` matching, the ``format`` values
checked, and the schema checks and compiler.

Regular expressions for JSON Schema ``pattern``: linear time, with JSON Schema's meaning.

A tool schema's ``pattern`` runs on text the model wrote. Python's ``re``
backtracks: ``^(a+)+$`` takes seconds on forty characters, so a pattern is a
way for hostile input to stall the engine. Patterns here run on RE2, whose
matching time is linear in the input; a pattern that needs backtracking
(look-around, back-references) is refused when the tool is defined.

JSON Schema patterns are ECMA-262 regular expressions, where ``\d`` and ``\w``
are ASCII (Python's ``re`` would let ``"٣"`` pass ``^\d+$``) and ``$`` ends the
text (Python's would also accept a trailing newline). RE2 agrees on those;
the translation below covers where it does not: ``\s`` (ECMA's includes
Unicode spaces), ``.`` (ECMA's stops at ``\r``, U+2028 and U+2029 too) and
``\uXXXX`` escapes.

RE2 is loaded with the first pattern compiled, so importing the engine does not load it.


[formats]
The ``format`` values agent_fsm checks, and how.

JSON Schema 2020-12 makes ``format`` an annotation unless a validator opts in;
agent_fsm opts in for the formats below, because a tool that declares
``"format": "date"`` means it, and a model that sends ``"next Tuesday"``
should hear so before the handler runs. Formats not listed are annotations
only (not checked). Every check is a bounded scan of a string; none
backtracks, and none consults the network.


[schema]
A tool's schema, checked once when the tool is defined and compiled once into a checker.

Checking at definition: the schema must pass its meta-schema, every ``$ref``
must resolve *inside* it (nothing is ever fetched: the registry has no
retrieval), and every ``pattern`` must compile on the linear-time engine
(RE2, :func:`compile_pattern`). A tool that would fail at its first call
fails here instead, with :class:`~agent_fsm.ToolDefinitionError`.

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

[output]
Typed output: what a final answer must be, as one JSON Schema, and how the answer becomes a value.

``output=`` names the contract: a JSON Schema (a dict), a dataclass, an
attrs class, a ``TypedDict``, or a pydantic model (recognised by its
``model_json_schema``/``model_validate`` methods, so pydantic is never
imported here). :func:`output_spec` turns it into an :class:`OutputSpec`
once: the schema (checked by the same hostile-schema rules as a tool's:
meta-schema, ``$ref`` only inside, linear-time patterns) and the function
that builds the value from validated JSON.

A final answer is then held to it as a tool call's arguments are held to
theirs: the text must parse as strict JSON (no ``NaN``), within
``Limits.max_argument_chars`` characters and ``Limits.max_argument_depth``
levels, and validate. :meth:`OutputSpec.read` never raises on model text:
it answers the value or a reason written for the model to fix its answer.
"""

from __future__ import annotations

import enum
import functools
import json
import re
import types
import typing
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

# datetime, ipaddress, urllib.parse, uuid and dataclasses are imported by the format checks and the typed
# output that use them: a run on tools in the shorthand needs none of them.
import attrs

from agent_fsm.engine._errors import OutputDefinitionError
from agent_fsm.engine._json import DEPTH_CEILING, argument_problem

if TYPE_CHECKING:
    import jsonschema

    from agent_fsm.engine._limits import Limits

__all__ = [
    "OUTPUT_INVALID",
    "Checker",
    "OutputSpec",
    "FORMAT_CHECKS",
    "PatternError",
    "checked_formats",
    "compile_checker",
    "compile_pattern",
    "format_error",
    "make_validator",
    "output_spec",
    "schema_problem",
    "translate",
]


# --- regexes ---

# ECMA-262 WhiteSpace and LineTerminator, the members of \s.
_ECMA_SPACE = r"\t\n\x{0b}\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff}"
_ECMA_DOT = r"[^\n\r\x{2028}\x{2029}]"
_HEX = frozenset("0123456789abcdefABCDEF")


class PatternError(ValueError):
    """A pattern that RE2 cannot run (a syntax error, or a feature that needs backtracking)."""


def translate(pattern: str) -> str:
    """
    ``pattern`` (ECMA-262, as JSON Schema writes it) rewritten in RE2 syntax with the same meaning.

    Raises:
        PatternError: an escape this translation cannot carry over (``\\S`` inside a class).
    """
    out: list[str] = []
    in_class = False
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            if nxt == "s":
                out.append(_ECMA_SPACE if in_class else f"[{_ECMA_SPACE}]")
            elif nxt == "S":
                if in_class:
                    raise PatternError(f"\\S inside a character class is not supported: {pattern!r}")
                out.append(f"[^{_ECMA_SPACE}]")
            elif nxt == "u" and pattern[i + 2 : i + 3] == "{":
                end = pattern.find("}", i + 3)
                if end < 0:
                    raise PatternError(f"unterminated \\u{{...}} escape in {pattern!r}")
                out.append(f"\\x{{{pattern[i + 3 : end]}}}")
                i = end + 1
                continue
            elif nxt == "u" and len(pattern) >= i + 6 and set(pattern[i + 2 : i + 6]) <= _HEX:
                out.append(f"\\x{{{pattern[i + 2 : i + 6]}}}")
                i += 6
                continue
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if char == "]":
                in_class = False
        elif char == "[":
            in_class = True
            opening = "[^" if pattern[i + 1 : i + 2] == "^" else "["
            if pattern[i + len(opening) : i + len(opening) + 1] == "]":
                # ECMA-262 reads "[]" as matching nothing and "[^]" as anything; RE2 reads a literal "]".
                raise PatternError(f"an empty character class ({opening}]) is not supported: {pattern!r}")
            out.append(opening)
            i += len(opening)
            continue
        elif char == ".":
            out.append(_ECMA_DOT)
            i += 1
            continue
        out.append(char)
        i += 1
    return "".join(out)


@functools.cache
def _engine() -> tuple[Any, Any, Any]:
    # (RE2's constructor, its options, the unanchored mode), loaded with the first pattern.
    from re2 import _re2

    options = _re2.RE2.Options()
    options.log_errors = False  # RE2 would print every refused pattern to stderr
    options.never_capture = True  # only "does it match" is asked; no group offsets to track
    return _re2.RE2, options, _re2.RE2.Anchor.UNANCHORED


@functools.lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> Callable[[str], bool]:
    """
    A predicate ``search(text) -> bool`` for ``pattern``, as JSON Schema's ``pattern`` applies it.

    The match is unanchored (``pattern`` finds its match anywhere unless it
    anchors itself) and takes time linear in ``len(text)``.

    Raises:
        PatternError: RE2 cannot compile it; the message says why.
    """
    re2, options, unanchored = _engine()
    regexp = re2(translate(pattern).encode("utf-8"), options)
    if not regexp.ok():
        why = regexp.error().decode("utf-8", "replace")
        raise PatternError(
            f"pattern {pattern!r} is refused by the linear-time regex engine: {why}"
            " (look-around and back-references need backtracking, so they are not supported)"
        )

    def search(text: str) -> bool:
        try:
            data = text.encode()
        except UnicodeEncodeError:  # a lone surrogate, as JSON's "\ud800" makes; RE2 sees its bytes
            data = text.encode("utf-8", "surrogatepass")
        return bool(regexp.Match(unanchored, data, 0, len(data))[0][0] >= 0)

    return search


# --- formats ---

# Fixed-width pieces only (no nested quantifiers), so these run in linear time.
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})", re.ASCII)
_TIME = re.compile(r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-](\d{2}):(\d{2}))", re.ASCII)
_DOT_ATOM = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*", re.ASCII)
_LABEL = re.compile(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?", re.ASCII)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*", re.ASCII)
_URI_CHARS = re.compile(r"([A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*", re.ASCII)
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", re.ASCII)
_OCTET = re.compile(r"0|[1-9][0-9]{0,2}", re.ASCII)


def _is_date(text: str) -> bool:
    import datetime

    # RFC 3339 full-date; date.fromisoformat alone would also take "20240101" and week dates.
    match = _DATE.fullmatch(text)
    if match is None:
        return False
    try:
        datetime.date(int(match[1]), int(match[2]), int(match[3]))
    except ValueError:
        return False
    return True


def _is_time(text: str) -> bool:
    # RFC 3339 full-time: the offset is required; a leap second is only 23:59:60 in UTC.
    match = _TIME.fullmatch(text)
    if match is None:
        return False
    hour, minute, second = int(match[1]), int(match[2]), int(match[3])
    if hour > 23 or minute > 59 or second > 60:
        return False
    offset_hour, offset_minute = (int(match[6]), int(match[7])) if match[6] is not None else (0, 0)
    if offset_hour > 23 or offset_minute > 59:
        return False
    if second == 60:
        sign = -1 if match[5].startswith("-") else 1
        utc = (hour * 60 + minute - sign * (offset_hour * 60 + offset_minute)) % (24 * 60)
        return utc == 23 * 60 + 59
    return True


def _is_date_time(text: str) -> bool:
    if len(text) < 11 or text[10] not in "Tt":
        return False
    return _is_date(text[:10]) and _is_time(text[11:])


def _is_hostname(text: str) -> bool:
    labels = text.split(".")
    return len(text) <= 253 and all(_LABEL.fullmatch(label) for label in labels)


def _is_email(text: str) -> bool:
    import ipaddress

    # RFC 5321 mailbox, ASCII (idn-email is a different format): dot-atom local part,
    # then a host name or a bracketed IP address literal.
    local, at, domain = text.rpartition("@")
    if not at or not local or len(local) > 64 or _DOT_ATOM.fullmatch(local) is None:
        return False
    if domain.startswith("[") and domain.endswith("]"):
        literal = domain[1:-1]
        try:
            if literal.lower().startswith("ipv6:"):
                ipaddress.IPv6Address(literal[5:])
            else:
                ipaddress.IPv4Address(literal)
        except ValueError:
            return False
        return True
    return _is_hostname(domain)


def _is_uri(text: str) -> bool:
    import ipaddress
    from urllib.parse import urlsplit

    # RFC 3986 URI: a scheme, then only the characters the grammar allows (non-ASCII must be
    # percent-encoded), with brackets only around an IP literal host.
    scheme, colon, _rest = text.partition(":")
    if not colon or _SCHEME.fullmatch(scheme) is None or _URI_CHARS.fullmatch(text) is None:
        return False
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018  (raises ValueError on a port that is not a number in range)
    except ValueError:
        return False
    host = parts.netloc.rpartition("@")[2]
    brackets = text.count("[") + text.count("]")
    if brackets == 0:
        return True
    if brackets != 2 or not host.startswith("[") or "]" not in host:
        return False
    try:
        ipaddress.IPv6Address(host[1 : host.index("]")])
    except ValueError:
        return False
    return True


def _is_uuid(text: str) -> bool:
    import uuid

    if _UUID.fullmatch(text) is None:
        return False
    uuid.UUID(text)
    return True


def _is_ipv4(text: str) -> bool:
    # Dotted quad, decimal, no leading zeros (an octal reading is how "010" surprises people).
    octets = text.split(".")
    return len(octets) == 4 and all(_OCTET.fullmatch(o) is not None and int(o) <= 255 for o in octets)


FORMAT_CHECKS: dict[str, Callable[[str], bool]] = {
    "date": _is_date,
    "date-time": _is_date_time,
    "time": _is_time,
    "email": _is_email,
    "uri": _is_uri,
    "uuid": _is_uuid,
    "ipv4": _is_ipv4,
}
"""Each checked format's predicate over a string (non-strings are not this keyword's business)."""


def checked_formats() -> frozenset[str]:
    """
    The ``format`` values a tool schema's arguments are checked against.

    Any other ``format`` is an annotation: shown to the model, not enforced.
    Generators of valid arguments (such as ``agent_fsm.testing``) ask this.
    """
    return frozenset(FORMAT_CHECKS)


def format_error(format_name: str, value: object) -> str | None:
    """Why ``value`` is not a ``format_name``, or ``None`` if it is (or the format is not checked)."""
    check = FORMAT_CHECKS.get(format_name)
    if check is None or not isinstance(value, str) or check(value):
        return None
    return f"{value!r} is not a {format_name!r}"


# --- schema ---

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


# The keywords a contract commonly uses, each with what the Draft 2020-12 meta-schema asks of its value, read
# directly: a schema of only these is found valid without loading jsonschema (tens of milliseconds at a
# process's first tool). Anything else, or any doubt, is left to the meta-schema check itself.
_SIMPLE_TYPES = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})
_SUBSCHEMA_KEYWORDS = frozenset({"items", "additionalProperties"})
_NUMBER_KEYWORDS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
_COUNT_KEYWORDS = frozenset({"minLength", "maxLength", "minItems", "maxItems"})
_TEXT_KEYWORDS = frozenset({"title", "description", "$comment", "format", "$schema"})
_FREE_KEYWORDS = frozenset({"const", "default"})


def _plainly_valid(schema: Any, depth: int = 0) -> bool:
    """
    Whether ``schema`` is certainly a valid Draft 2020-12 schema, read without the meta-schema.

    ``True`` only for a schema (or boolean) made of the keywords above, each
    holding what the meta-schema requires, and whose patterns RE2 compiles;
    ``False`` means only "not shown here": the full check decides, and words it.
    """
    if type(schema) is bool:
        return True
    if type(schema) is not dict or depth > DEPTH_CEILING:
        return False
    for keyword, value in schema.items():
        kind = type(value)
        if keyword in _SUBSCHEMA_KEYWORDS:
            if not _plainly_valid(value, depth + 1):
                return False
        elif keyword == "properties":
            if kind is not dict or not all(_plainly_valid(v, depth + 1) for v in value.values()):
                return False
        elif keyword == "type":
            names = value if kind is list else [value]
            if not names or any(type(n) is not str or n not in _SIMPLE_TYPES for n in names):
                return False
            if len(set(names)) != len(names):
                return False
        elif keyword == "required":
            if kind is not list or any(type(n) is not str for n in value) or len(set(value)) != len(value):
                return False
        elif keyword in _NUMBER_KEYWORDS:
            if kind is not int and kind is not float:
                return False
        elif keyword in _COUNT_KEYWORDS:
            if kind is not int or value < 0:
                return False
        elif keyword == "pattern":
            if kind is not str:
                return False
            try:
                compile_pattern(value)
            except PatternError:
                return False
        elif keyword in _TEXT_KEYWORDS:
            if kind is not str:
                return False
        elif keyword == "enum" or keyword == "examples":
            if kind is not list:
                return False
        elif keyword not in _FREE_KEYWORDS:
            return False
    return True


@functools.lru_cache(maxsize=1024)
def _problem_of(schema_text: str) -> str | None:
    # The meta-schema check costs milliseconds; test worlds are rebuilt per
    # example, so each distinct schema is checked once.
    schema = json.loads(schema_text)
    return None if _plainly_valid(schema) else _meta_problem(schema)


def _meta_problem(schema: Any) -> str | None:
    """What the 2020-12 meta-schema, the ``$ref`` resolver and RE2 find wrong with ``schema``, in their words."""
    import jsonschema

    try:
        # format_checker=None: the meta-schema's "regex" format would compile patterns with
        # Python's re, whose dialect is not JSON Schema's; RE2 compiles them below instead.
        _jsonschema()[0].check_schema(schema, format_checker=None)
    except jsonschema.SchemaError as exc:
        where = "/".join(map(str, exc.absolute_path))
        return f"at {where}: {exc.message}" if where else exc.message
    return next(_ref_problems(schema), None)


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """What makes ``schema`` unusable as a tool contract, or ``None``."""
    return _problem_of(json.dumps(schema, sort_keys=True, default=repr))


# --- the compiled checker ---------------------------------------------------------

# What each JSON type's test reads as, on the value named {v}.
_TYPE_TEST: dict[str, str] = {
    "string": "isinstance({v}, str)",
    "integer": "(isinstance({v}, int) and not isinstance({v}, bool))",
    "number": "(isinstance({v}, (int, float)) and not isinstance({v}, bool))",
    "boolean": "isinstance({v}, bool)",
    "null": "{v} is None",
    "array": "isinstance({v}, list)",
    "object": "isinstance({v}, dict)",
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
# The bounds, each as the comparison that must hold of a number, of a string's length, of an array's length.
_BOUNDS = (("minimum", ">="), ("maximum", "<="), ("exclusiveMinimum", ">"), ("exclusiveMaximum", "<"))
_LENGTHS = (("minLength", ">="), ("maxLength", "<="))
_COUNTS = (("minItems", ">="), ("maxItems", "<="))
# Sub-schemas nested deeper than this in one function are compiled as functions of their own
# (Python refuses more than 20 nested loops in one function, and deep indentation).
_INLINE_DEPTH = 6


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


def _one_of(value: Any, options: Sequence[Any]) -> bool:
    return any(_equal(value, option) for option in options)


class _NotCompiled(Exception):
    """A keyword the compiler does not know: the whole schema is left to jsonschema."""


class _Writer:
    """
    One schema written out as the body of one Python function: each keyword a test that returns ``False``.

    Constants (bounds, enums, patterns, property names that are not plain
    strings) are names in the function's globals, never text in its source,
    so nothing a schema holds is ever read as code.
    """

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {"_equal": _equal, "_one_of": _one_of}
        self.count = 0

    def constant(self, value: Any) -> str:
        self.count += 1
        name = f"_k{self.count}"
        self.names[name] = value
        return name

    def local(self) -> str:
        self.count += 1
        return f"v{self.count}"

    def key(self, name: Any) -> str:
        return repr(name) if type(name) is str else self.constant(name)

    def fail_unless(self, test: str, pad: str) -> None:
        self.lines.append(f"{pad}if not ({test}):")
        self.lines.append(f"{pad}    return False")

    def write(self, schema: Any, v: str, pad: str, depth: int) -> None:
        """The tests of ``schema`` on the value named ``v``, indented by ``pad``."""
        if schema is True:
            return
        if schema is False:
            self.lines.append(f"{pad}return False")
            return
        if not isinstance(schema, Mapping) or _ASSERTING & schema.keys():
            raise _NotCompiled
        if depth > _INLINE_DEPTH:  # a function of its own, called from here
            checker = compile_checker(schema)
            if checker is None:
                raise _NotCompiled
            self.fail_unless(f"{self.constant(checker)}({v})", pad)
            return
        kind = None  # the one JSON type the value is known to have past the type test
        if "type" in schema:
            kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
            self.fail_unless(" or ".join(_TYPE_TEST[k].format(v=v) for k in kinds), pad)
            if len(kinds) == 1:
                kind = kinds[0]
        if "enum" in schema:
            options = list(schema["enum"])
            if options and all(type(o) is str for o in options):  # JSON equality with a string is plain equality
                self.fail_unless(f"isinstance({v}, str) and {v} in {self.constant(frozenset(options))}", pad)
            else:
                self.fail_unless(f"_one_of({v}, {self.constant(options)})", pad)
        if "const" in schema:
            const = schema["const"]
            if type(const) is str:
                self.fail_unless(f"{v} == {self.constant(const)}", pad)
            else:
                self.fail_unless(f"_equal({v}, {self.constant(const)})", pad)
        # Each group of keywords applies to one type only: its tests are guarded by a test of that type,
        # written without the guard when the type test above settled it, and left out when it ruled it out.
        self._numbers(schema, v, self._guard(kind, ("integer", "number"), "number", v, pad))
        self._strings(schema, v, self._guard(kind, ("string",), "string", v, pad))
        self._arrays(schema, v, self._guard(kind, ("array",), "array", v, pad), depth)
        self._objects(schema, v, self._guard(kind, ("object",), "object", v, pad), depth)

    def _guard(self, kind: str | None, settled: tuple[str, ...], test: str, v: str, pad: str) -> Any:
        """How a group of tests is written: under an ``if`` of its type, as they are, or not at all."""
        if kind is None:
            return lambda write: self._block(f"if {_TYPE_TEST[test].format(v=v)}", pad, write)
        if kind in settled:
            return lambda write: write(pad)
        return lambda write: None

    def _block(self, header: str, pad: str, write: Callable[[str], None]) -> None:
        """``write`` the tests under ``header:`` (an ``if`` or a ``for``), or nothing when it writes none."""
        start = len(self.lines)
        write(pad + "    ")
        if len(self.lines) > start:
            self.lines.insert(start, f"{pad}{header}:")

    def _read(self, schema: Any, value: str, source: str, pad: str, depth: int) -> None:
        """The tests of ``schema`` on ``source``, read into ``value`` first (or nothing when there are none)."""
        start = len(self.lines)
        self.write(schema, value, pad, depth)
        if len(self.lines) > start:
            self.lines.insert(start, f"{pad}{value} = {source}")

    def _bounded(self, schema: Mapping[str, Any], measured: str, bounds: tuple[tuple[str, str], ...], pad: str) -> None:
        """A test per bound ``schema`` sets, each comparing ``measured`` (the value, or its length) with it."""
        for keyword, holds in bounds:
            if keyword in schema:
                self.fail_unless(f"{measured} {holds} {self.constant(schema[keyword])}", pad)

    def _numbers(self, schema: Mapping[str, Any], v: str, place: Any) -> None:
        place(lambda inner: self._bounded(schema, v, _BOUNDS, inner))

    def _strings(self, schema: Mapping[str, Any], v: str, place: Any) -> None:
        def tests(inner: str) -> None:
            self._bounded(schema, f"len({v})", _LENGTHS, inner)
            if "pattern" in schema:
                self.fail_unless(f"{self.constant(compile_pattern(schema['pattern']))}({v})", inner)
            if schema.get("format") in FORMAT_CHECKS:
                self.fail_unless(f"{self.constant(FORMAT_CHECKS[schema['format']])}({v})", inner)

        place(tests)

    def _arrays(self, schema: Mapping[str, Any], v: str, place: Any, depth: int) -> None:
        def tests(inner: str) -> None:
            self._bounded(schema, f"len({v})", _COUNTS, inner)
            if "items" in schema:
                item = self.local()
                self._block(f"for {item} in {v}", inner, lambda pad: self.write(schema["items"], item, pad, depth + 1))

        place(tests)

    def _objects(self, schema: Mapping[str, Any], v: str, place: Any, depth: int) -> None:
        properties = schema.get("properties", {})
        required = list(schema.get("required", ()))
        extra: Any = schema.get("additionalProperties", True)

        def tests(inner: str) -> None:
            for name in required:
                self.fail_unless(f"{self.key(name)} in {v}", inner)
            for name, sub in properties.items():
                key = self.key(name)
                read = functools.partial(self._read, sub, self.local(), f"{v}[{key}]", depth=depth + 1)
                if name in required:  # known to be there: read at once
                    read(inner)
                else:
                    self._block(f"if {key} in {v}", inner, read)
            if extra is False:
                self.fail_unless(f"{self.constant(frozenset(properties))}.issuperset({v})", inner)
            elif extra is not True:
                known, key, value = self.constant(frozenset(properties)), self.local(), self.local()

                def each(pad: str) -> None:
                    self._block(f"if {key} not in {known}", pad, lambda pad: self.write(extra, value, pad, depth + 1))

                self._block(f"for {key}, {value} in {v}.items()", inner, each)

        place(tests)


@functools.lru_cache(maxsize=1024)
def _compiled(schema_text: str) -> Checker | None:
    return _compile(json.loads(schema_text))


def _compile(schema: Any) -> Checker | None:
    writer = _Writer()
    try:
        writer.write(schema, "v", "    ", 0)
    except _NotCompiled:
        return None
    source = "\n".join(["def check(v):", *writer.lines, "    return True"])
    exec(compile(source, "<compiled schema>", "exec"), writer.names)  # the source holds no text of the schema
    checker: Checker = writer.names["check"]
    return checker


def compile_checker(schema: Any) -> Checker | None:
    """
    ``schema`` as one Python function, or ``None`` if it uses a keyword that is not compiled.

    Every keyword becomes a test written out in the function's body (a
    property's tests where the property is read), so a call is checked by
    one function call, whatever the number of fields. The function is meant
    for JSON data that :func:`~agent_fsm.engine._json.argument_problem`
    accepted; on such data it agrees with :func:`make_validator` exactly.
    Equal schemas share one function.
    """
    try:
        text = json.dumps(schema, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):  # not plain JSON: compiled for itself
        return _compile(schema)
    return _compiled(text)


# --- output ---

OUTPUT_INVALID = "output_invalid"
"""The code of a run whose final answers kept failing the output contract until ``Limits.output_retries`` ran out."""

Build = Callable[[Any], Any]


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


# Strict JSON: Python's json would read NaN and Infinity, which no schema bound can hold.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def _unfenced(text: str) -> str:
    """``text`` without one surrounding Markdown code fence (```json ... ```), as models often wrap JSON."""
    stripped = text.strip()
    if stripped.startswith("```") and stripped.endswith("```") and len(stripped) >= 6:
        inner = stripped[3:-3]
        first, newline, rest = inner.partition("\n")
        if newline and (not first.strip() or first.strip().isidentifier()):  # ```json on a line of its own
            inner = rest
        return inner.strip()
    return stripped


@attrs.frozen(eq=False)
class OutputSpec:
    """
    The final answer's contract: a JSON Schema, its name, and how validated JSON becomes the caller's value.

    ``kind`` says what ``output=`` was (``schema``, ``dataclass``, ``attrs``,
    ``typeddict`` or ``pydantic``); ``strict`` whether the schema meets
    OpenAI's strict structured-output rules (every object closed, every
    property required), so an adapter may ask for strict decoding.
    """

    schema: dict[str, Any]
    name: str
    kind: str
    _build: Build = attrs.field(repr=False, alias="_build")
    _checker: Any = attrs.field(init=False, repr=False, alias="_checker")
    _validator: Any = attrs.field(init=False, repr=False, default=None, alias="_validator")

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_checker", compile_checker(self.schema))

    @property
    def strict(self) -> bool:
        """Whether every object in the schema is closed and requires all its properties (OpenAI's strict mode)."""
        return _strict(self.schema)

    @property
    def instruction(self) -> str:
        """What the system prompt says of the answer, so a model asked without native structured output knows."""
        return (
            "Your final answer must be only a JSON value, with no other text, that validates against this"
            f" JSON Schema ({self.name}): {json.dumps(self.schema, separators=(',', ':'))}"
        )

    def errors(self, value: Any) -> list[str]:
        """Every way ``value`` (plain JSON data) breaks the schema, as readable lines (empty when valid)."""
        if self._checker is not None and self._checker(value):
            return []
        validator = self._validator
        if validator is None:
            validator = make_validator(self.schema)
            object.__setattr__(self, "_validator", validator)
        try:
            found = sorted(validator.iter_errors(value), key=lambda e: list(map(str, e.path)))
        except RecursionError:
            return ["the answer nests too deeply to check against this schema"]
        lines = []
        for error in found:
            where = "/".join(str(p) for p in error.path)
            line = f"{where}: {error.message}" if where else error.message
            lines.append(line if len(line) <= 500 else f"{line[:500]}...")
        return lines

    def read(self, text: str, limits: Limits) -> tuple[Any, str | None]:
        """
        ``(value, None)`` when ``text`` is valid output, else ``(None, what failed)``, never raising.

        ``value`` is the parsed JSON (what a saved state keeps); :meth:`build` makes the caller's value of it.
        """
        body = _unfenced(text)
        prefix = "the answer is not valid output" if self.kind == "schema" else f"the answer is not a valid {self.name}"
        if len(body) > limits.max_argument_chars:
            return None, f"{prefix}: {len(body):,} characters of JSON (at most {limits.max_argument_chars:,})"
        try:
            value = _DECODER.decode(body)
        except RecursionError:
            return None, f"{prefix}: the JSON nests too deeply to read"
        except ValueError as exc:
            shown = body if len(body) <= 200 else f"{body[:200]}... ({len(body):,} characters)"
            return None, f"{prefix}: it is not JSON ({exc}): {shown!r}"
        problem = argument_problem(value, max_depth=limits.max_argument_depth)
        if problem is not None:
            return None, f"{prefix}: {problem.replace('arguments nest', 'the JSON nests')}"
        problems = self.errors(value)
        if problems:
            return None, f"{prefix}: " + "; ".join(problems)
        try:
            self._build(value)
        except Exception as exc:  # the class's own checks (a validator, a pydantic model) refused it
            return None, f"{prefix}: {type(exc).__name__}: {str(exc)[:500]}"
        return value, None

    def build(self, value: Any) -> Any:
        """The caller's value of validated JSON ``value``: a dict for a schema, an instance for a class."""
        return self._build(value)


def _strict(schema: Any) -> bool:
    stack = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            if node.get("type") == "object" or "properties" in node:
                properties = node.get("properties", {})
                if node.get("additionalProperties") is not False or set(node.get("required", ())) != set(properties):
                    return False
            stack.extend(node.values())
    return True


# --- from a type to a schema and a builder ---

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def _same(value: Any) -> Any:
    return value


def _typed(tp: Any, seen: tuple[Any, ...]) -> tuple[dict[str, Any], Build]:
    """The JSON Schema of type ``tp`` and the builder of its value; ``seen`` holds the classes being converted."""
    import dataclasses

    if tp is Any or tp is object:
        return {}, _same
    if tp in _SCALARS:
        schema: dict[str, Any] = {"type": _SCALARS[tp]}
        return schema, (float if tp is float else _same)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _typed(args[0], seen)
    if origin is typing.Literal:
        if not all(a is None or type(a) in (str, int, bool) for a in args):
            raise OutputDefinitionError(f"Literal{list(args)!r}: only str, int, bool and None literals are JSON")
        return {"enum": list(args)}, _same
    if origin in (typing.Union, types.UnionType):
        return _union(args, seen)
    if origin in (list, Sequence, tuple) or tp in (list, tuple):
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            raise OutputDefinitionError(f"{tp!r}: a tuple is read as tuple[T, ...] (fixed-length tuples are not)")
        item_schema, item_build = _typed(args[0], seen) if args else ({}, _same)
        wrap: Build = tuple if origin is tuple else list
        return {"type": "array", "items": item_schema}, lambda v: wrap(item_build(x) for x in v)
    if origin in (dict, Mapping) or tp is dict:
        if args and args[0] is not str:
            raise OutputDefinitionError(f"{tp!r}: JSON object keys are strings, so a mapping must be dict[str, ...]")
        value_schema, value_build = _typed(args[1], seen) if args else ({}, _same)
        return {"type": "object", "additionalProperties": value_schema}, lambda v: {
            k: value_build(x) for k, x in v.items()
        }
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [m.value for m in tp]
        if not all(v is None or type(v) in (str, int, float, bool) for v in values):
            raise OutputDefinitionError(f"enum {tp.__name__}: only members with JSON scalar values have a JSON form")
        return {"enum": values, "title": tp.__name__}, tp
    if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or attrs.has(tp) or typing.is_typeddict(tp)):
        return _record(tp, seen)
    if isinstance(tp, type) and _is_pydantic(tp):
        raise OutputDefinitionError(
            f"{tp.__name__} is a pydantic model inside another type; use a pydantic model only as output= itself"
        )
    raise OutputDefinitionError(
        f"{tp!r} has no JSON form agent_fsm can check (use str, int, float, bool, None, list, dict[str, ...],"
        " Literal, an Enum, a dataclass, an attrs class or a TypedDict)"
    )


def _union(args: tuple[Any, ...], seen: tuple[Any, ...]) -> tuple[dict[str, Any], Build]:
    branches = [_typed(a, seen) for a in args]
    schemas = [s for s, _ in branches]
    builders = [b for _, b in branches]
    if all(b is _same for b in builders):
        return {"anyOf": schemas}, _same
    checks = [make_validator(s).is_valid for s in schemas]

    def build(value: Any) -> Any:
        for check, make in zip(checks, builders, strict=True):
            if check(value):
                return make(value)
        return value  # unreachable for validated data: some branch accepted it

    return {"anyOf": schemas}, build


def _record(cls: type, seen: tuple[Any, ...]) -> tuple[dict[str, Any], Build]:
    """A dataclass, attrs class or TypedDict as a closed JSON object, and the builder of an instance."""
    import dataclasses

    if cls in seen:
        raise OutputDefinitionError(
            f"{cls.__name__} refers to itself; a recursive type has no finite JSON Schema here (write the schema)"
        )
    seen = (*seen, cls)
    try:
        hints = typing.get_type_hints(cls)
    except Exception as exc:
        raise OutputDefinitionError(f"the annotations of {cls.__name__} cannot be resolved: {exc}") from exc
    fields: list[tuple[str, str, bool]] = []  # JSON name, attribute hint name, required
    if typing.is_typeddict(cls):
        required_keys = getattr(cls, "__required_keys__", frozenset(hints))
        fields = [(name, name, name in required_keys) for name in hints]
    elif dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if f.init:
                missing = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                fields.append((f.name, f.name, missing))
    else:
        for a in attrs.fields(cls):
            if a.init:
                fields.append((a.alias or a.name, a.name, a.default is attrs.NOTHING))
    properties: dict[str, Any] = {}
    builders: dict[str, Build] = {}
    for key, hint_name, _required in fields:
        if hint_name not in hints:
            raise OutputDefinitionError(f"{cls.__name__}.{hint_name} has no type annotation")
        properties[key], builders[key] = _typed(hints[hint_name], seen)
    schema = {
        "type": "object",
        "title": cls.__name__,
        "properties": properties,
        "required": [key for key, _, required in fields if required],
        "additionalProperties": False,
    }
    typed_dict = typing.is_typeddict(cls)

    def build(value: Any) -> Any:
        made = {k: builders[k](v) for k, v in value.items()}
        return made if typed_dict else cls(**made)

    return schema, build


def _is_pydantic(cls: type) -> bool:
    return callable(getattr(cls, "model_json_schema", None)) and callable(getattr(cls, "model_validate", None))


def _checked(schema: Any, what: str) -> dict[str, Any]:
    """``schema`` if the hostile-schema rules accept it as an answer's contract; else a typed refusal."""
    if not isinstance(schema, Mapping):
        raise OutputDefinitionError(f"{what}: a JSON Schema is a mapping, got {type(schema).__name__}")
    try:
        plain = json.loads(json.dumps(schema, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as exc:
        raise OutputDefinitionError(f"{what}: the schema is not plain JSON data ({exc})") from None
    problem = argument_problem(plain, max_depth=DEPTH_CEILING)
    if problem is None:
        problem = schema_problem(plain)
    if problem is not None:
        raise OutputDefinitionError(f"{what}: invalid JSON Schema for the answer: {problem}")
    return plain  # type: ignore[no-any-return]


@functools.lru_cache(maxsize=256)
def _of_schema(schema: str) -> OutputSpec:
    plain = _checked(json.loads(schema), "output schema")
    title = plain.get("title")
    name = title if isinstance(title, str) and title.isidentifier() else "final_result"
    return OutputSpec(plain, name, "schema", lambda v: v)


@functools.lru_cache(maxsize=256)
def _of_type(cls: type) -> OutputSpec:
    import dataclasses

    if _is_pydantic(cls):
        try:
            schema = cls.model_json_schema()  # type: ignore[attr-defined]
        except Exception as exc:
            raise OutputDefinitionError(f"{cls.__name__}.model_json_schema() failed: {exc}") from exc
        return OutputSpec(_checked(schema, cls.__name__), cls.__name__, "pydantic", cls.model_validate)  # type: ignore[attr-defined]
    if not (dataclasses.is_dataclass(cls) or attrs.has(cls) or typing.is_typeddict(cls)):
        raise OutputDefinitionError(
            f"output= takes a JSON Schema (dict), a dataclass, an attrs class, a TypedDict or a pydantic model;"
            f" got the class {cls.__name__}"
        )
    schema, build = _record(cls, ())
    kind = "typeddict" if typing.is_typeddict(cls) else "dataclass" if dataclasses.is_dataclass(cls) else "attrs"
    return OutputSpec(_checked(schema, cls.__name__), cls.__name__, kind, build)


def output_spec(output: Any) -> OutputSpec:
    """
    ``output=`` as an :class:`OutputSpec`, converted and checked once per distinct schema or class.

    Raises:
        OutputDefinitionError: the schema breaks the hostile-schema rules, or the class has no JSON form.
    """
    if isinstance(output, OutputSpec):
        return output
    if isinstance(output, Mapping):
        try:
            text = json.dumps(output, sort_keys=True, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise OutputDefinitionError(f"output schema: not plain JSON data ({exc})") from None
        return _of_schema(text)
    if isinstance(output, type):
        return _of_type(output)
    raise OutputDefinitionError(
        f"output= takes a JSON Schema (dict), a dataclass, an attrs class, a TypedDict or a pydantic model;"
        f" got {output!r} (a {type(output).__name__})"
    )
