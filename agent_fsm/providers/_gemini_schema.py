"""
JSON Schema in Gemini's schema dialect: the OpenAPI 3.0 subset of ``functionDeclarations`` and ``responseSchema``.

The dialect has ``type`` (one of them: a second type is written ``nullable``),
``format``, ``description``, ``title``, ``default``, ``enum`` (of strings),
``properties``, ``required``, ``items``, ``minItems``/``maxItems``,
``minProperties``/``maxProperties``, ``minLength``/``maxLength``, ``pattern``,
``minimum``/``maximum`` and ``anyOf``. Everything else a contract may say
cannot be written there, and the model would be asked for something looser than
the tool accepts; so it is refused, naming the keyword and where it is, before
any request: recursive references, ``oneOf``/``allOf``/``not``,
conditionals, ``const`` of a non-string, open objects (``additionalProperties``
other than ``false``), tuples, ``uniqueItems``, ``multipleOf``, exclusive bounds.
Annotations that constrain nothing (``$schema``, ``$id``, ``$comment``,
``examples``) are dropped, and so is ``additionalProperties: false``: Gemini
only ever writes the declared properties. A ``$ref`` to the schema's own
``$defs`` (how pydantic writes a nested model) is written out in place.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_fsm.providers._http import ProviderConfigError

__all__ = ["GEMINI_TYPES", "gemini_schema"]

GEMINI_TYPES = {"string": "STRING", "number": "NUMBER", "integer": "INTEGER", "boolean": "BOOLEAN",
                "array": "ARRAY", "object": "OBJECT"}  # fmt: skip
"""JSON Schema's types and the names Gemini gives them (``null`` has none: it is ``nullable``)."""

_COPIED = ("format", "description", "title", "default", "pattern", "minItems", "maxItems", "minLength", "maxLength",
           "minProperties", "maxProperties", "minimum", "maximum")  # fmt: skip
_DROPPED = frozenset({"$schema", "$id", "$comment", "examples", "$defs", "definitions"})
_HANDLED = frozenset({"type", "enum", "const", "properties", "required", "items", "anyOf", "additionalProperties"})


def _refuse(path: str, what: str) -> ProviderConfigError:
    return ProviderConfigError(f"Gemini's schema dialect cannot express {what} (at {path or 'the root'})")


def gemini_schema(schema: Any) -> dict[str, Any]:
    """
    ``schema`` written in Gemini's dialect.

    Raises:
        ProviderConfigError: the schema says something the dialect cannot (the message names it and where).
    """
    defs: dict[str, Any] = {}
    if isinstance(schema, Mapping):
        for key in ("definitions", "$defs"):
            found = schema.get(key)
            if isinstance(found, Mapping):
                defs.update({f"#/{key}/{name}": sub for name, sub in found.items()})
    return _write(schema, "", defs, ())


def _write(schema: Any, path: str, defs: Mapping[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(schema, Mapping):
        raise _refused_value(path, schema)
    if "$ref" in schema:
        ref = schema["$ref"]
        if ref in seen:
            raise _refuse(path, f"a recursive schema ('$ref': {ref!r})")
        if ref not in defs or len(schema) > 1:
            raise _refuse(path, f"the keyword '$ref' ({ref!r}, not one of the schema's own $defs alone)")
        return _write(defs[ref], path, defs, (*seen, ref))
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DROPPED or key in _HANDLED:
            continue
        if key not in _COPIED:
            raise _refuse(path, f"the keyword {key!r}")
        out[key] = value
    _type(schema, path, out)
    if "const" in schema:
        if not isinstance(schema["const"], str):
            raise _refuse(path, f"'const' of a non-string ({schema['const']!r})")
        out["enum"] = [schema["const"]]
        out.setdefault("type", "STRING")
    if "enum" in schema:
        values = schema["enum"]
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values if v is not None):
            raise _refuse(path, f"an 'enum' with non-string values ({values!r})")
        if None in values:
            out["nullable"] = True
        out["enum"] = [v for v in values if v is not None]
        out.setdefault("type", "STRING")
    extra = schema.get("additionalProperties", False)
    if extra is not False:
        raise _refuse(path, f"an open object ('additionalProperties': {extra!r})")
    properties = schema.get("properties")
    if properties is not None:
        if not isinstance(properties, Mapping):
            raise _refuse(path, f"'properties' that is not an object ({properties!r})")
        out["properties"] = {name: _write(sub, f"{path}.{name}", defs, seen) for name, sub in properties.items()}
        if len(properties) > 1:
            out["propertyOrdering"] = list(properties)  # Gemini writes keys alphabetically unless told
    if "required" in schema:
        out["required"] = list(schema["required"])
    if "items" in schema:
        if not isinstance(schema["items"], Mapping):
            raise _refuse(path, "'items' that is not one schema (a tuple)")
        out["items"] = _write(schema["items"], f"{path}[]", defs, seen)
    if "anyOf" in schema:
        options = schema["anyOf"]
        if not isinstance(options, list) or not options:
            raise _refuse(path, f"an 'anyOf' that is not a list of schemas ({options!r})")
        kept = [o for o in options if not (isinstance(o, Mapping) and o.get("type") == "null" and len(o) == 1)]
        if len(kept) < len(options):
            out["nullable"] = True
        written = [_write(o, f"{path}.anyOf[{i}]", defs, seen) for i, o in enumerate(kept)]
        if len(written) == 1:
            out.update(written[0])
        else:
            out["anyOf"] = written
    if "type" not in out and "anyOf" not in out:
        raise _refuse(path, "a value of any type (a schema without 'type')")
    return out


def _type(schema: Mapping[str, Any], path: str, out: dict[str, Any]) -> None:
    """``type`` as Gemini names it; ``["x", "null"]`` is ``x`` and ``nullable``."""
    kind = schema.get("type")
    if kind is None:
        return
    kinds = list(kind) if isinstance(kind, list) else [kind]
    if "null" in kinds:
        out["nullable"] = True
        kinds = [k for k in kinds if k != "null"]
    if len(kinds) != 1 or kinds[0] not in GEMINI_TYPES:
        raise _refuse(path, f"the type {kind!r} (one of {', '.join(GEMINI_TYPES)}, or it and 'null')")
    out["type"] = GEMINI_TYPES[kinds[0]]


def _refused_value(path: str, schema: Any) -> ProviderConfigError:
    return _refuse(path, f"a schema that is not an object ({schema!r:.60})")
