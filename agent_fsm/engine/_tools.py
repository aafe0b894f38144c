"""
Tool contracts: what a tool promises to accept, checked before anything runs; calls and their one digest.

Whether a tool's handler fits its schema: checked once, when the ToolSpec is built.

A valid call must never end as a ``TypeError`` inside the handler (the run
would end as a handler bug for something the contract allowed). So a schema
that declares an argument the handler cannot take, or a handler argument
that a valid call may leave out, is refused at definition; and an open
schema's extra arguments reach only a handler that takes ``**kwargs``.


[tools]
Tool contracts: what a tool promises to accept, checked before anything runs.

A proposal is *well formed* when it names a tool in the registry and its
arguments satisfy that tool's JSON Schema. Whether it is *permitted* is a
different question, answered later by the gate; keeping the two apart is what
lets each be tested on its own.
"""

from __future__ import annotations

import builtins
import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Union

import attrs

from agent_fsm.engine._errors import RunError, ToolDefinitionError, ToolError
from agent_fsm.engine._json import argument_problem
from agent_fsm.engine._limits import DEFAULT_LIMITS, Limits
from agent_fsm.engine._schema import compile_checker, make_validator, schema_problem

__all__ = [
    "ASKED",
    "measure",
    "contract_digest",
    "call_fingerprint",
    "NO_ANSWER",
    "OpenQuestion",
    "PersonAnswers",
    "QuestionReply",
    "Registry",
    "Subrun",
    "person_tool",
    "TOOL_NAME",
    "ToolCall",
    "ToolSpec",
    "check_registry",
    "declaration_tokens",
    "function_declarations",
    "handler_arguments",
    "reads_context",
    "validate_call",
]


# --- handlers ---

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


_SIGNATURES: dict[tuple[Any, ...], inspect.Signature] = {}
_SIGNATURES_KEPT = 4096
"""Signatures read, by code: a bound on the cache (cleared whole when full; the code of a program is finite)."""


def _signature(handler: Callable[..., Any]) -> inspect.Signature:
    """
    ``inspect.signature(handler)``, read once per code for plain functions.

    A world built again for every example makes its handlers anew (new
    closures over a new effect log), and reading a signature cost about half
    of building a tool. Only what the code and the presence of defaults
    decide is read from it (names, kinds, whether a default exists), so
    functions of the same code with as many defaults share one.
    """
    if (
        type(handler) is not types.FunctionType
        or "__wrapped__" in handler.__dict__
        or "__signature__" in handler.__dict__
    ):
        return inspect.signature(handler)
    key = (handler.__code__, len(handler.__defaults__ or ()), frozenset(handler.__kwdefaults__ or ()))
    found = _SIGNATURES.get(key)
    if found is None:
        if len(_SIGNATURES) >= _SIGNATURES_KEPT:
            _SIGNATURES.clear()
        found = _SIGNATURES[key] = inspect.signature(handler)
    return found


def handler_arguments(handler: Callable[..., Any], schema: Mapping[str, Any]) -> frozenset[str] | None:
    """
    The argument names ``handler`` takes, to pass it only those; ``None`` when it takes any (``**kwargs``).

    Refuses, at definition, a handler that a valid call would make raise ``TypeError``.
    """
    try:
        parameters = list(_signature(handler).parameters.values())
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
        _check_typed(handler, by_name, schema)
    return names


# The JSON types a value of each readable annotation may arrive as (an int is a fine float).
_ACCEPTS: dict[Any, frozenset[str]] = {
    str: frozenset({"string"}),
    bool: frozenset({"boolean"}),
    int: frozenset({"integer"}),
    float: frozenset({"number", "integer"}),
    list: frozenset({"array"}),
    tuple: frozenset({"array"}),
    dict: frozenset({"object"}),
    type(None): frozenset({"null"}),
    None: frozenset({"null"}),
}
_ANY_JSON = frozenset({"string", "boolean", "integer", "number", "array", "object", "null"})
# The commonest annotations written as text, read without compiling them (a tool is defined per test example).
_PLAIN_NAMES: dict[str, Any] = {t.__name__: t for t in (str, bool, int, float, list, tuple, dict)} | {"None": None}


def _namespace(handler: Callable[..., Any]) -> dict[str, Any]:
    """Where the handler's annotations written as text are read: its module's globals."""
    function = inspect.unwrap(getattr(handler, "__func__", handler))
    return getattr(function, "__globals__", None) or {"__builtins__": builtins}


def _annotation(namespace: dict[str, Any], parameter: inspect.Parameter) -> Any:
    """The parameter's annotation as an object (a string one resolved in ``namespace``), or ``None``."""
    annotation = parameter.annotation
    if isinstance(annotation, str):  # ``from __future__ import annotations``
        plain = _PLAIN_NAMES.get(annotation, parameter.empty)
        if plain is not parameter.empty and annotation not in namespace:  # a builtin's name, not shadowed
            return plain
        try:
            annotation = eval(annotation, namespace)  # the handler author's own annotation text, in its module
        except Exception:  # a name only its scope knows: not a type the engine can read
            return None
    return None if annotation is parameter.empty else annotation


def _accepted(annotation: Any) -> frozenset[str] | None:
    """The JSON types a handler annotated ``annotation`` can take; ``None``: the engine cannot tell (not judged)."""
    if annotation is Any:
        return None
    try:
        if annotation in _ACCEPTS:
            return _ACCEPTS[annotation]
    except TypeError:  # an unhashable annotation
        return None
    origin = typing.get_origin(annotation)
    if origin in (list, tuple, dict):
        return _ACCEPTS[origin]
    if origin is Literal:
        return frozenset(_json_type(value) for value in typing.get_args(annotation))
    if origin in (Union, types.UnionType):
        parts = [_accepted(arg) for arg in typing.get_args(annotation)]
        return None if any(part is None for part in parts) else frozenset().union(*parts)  # type: ignore[arg-type]
    return None


def _json_type(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return "null" if value is None else "boolean"
    for kind, name in ((int, "integer"), (float, "number"), (str, "string"), (list, "array"), (dict, "object")):
        if isinstance(value, kind):
            return name
    return "object"


def _declared(prop: Any) -> frozenset[str] | None:
    """The JSON types a property's schema admits (all of them when it sets none); ``None``: composed, not judged."""
    if not isinstance(prop, Mapping):
        return _ANY_JSON if prop is True else None
    kind = prop.get("type")
    if isinstance(kind, str):
        return frozenset({kind}) | (frozenset({"integer"}) if kind == "number" else frozenset())
    if isinstance(kind, list):
        return frozenset(kind) | (frozenset({"integer"}) if "number" in kind else frozenset())
    if "const" in prop:
        return frozenset({_json_type(prop["const"])})
    if isinstance(prop.get("enum"), list):
        return frozenset(_json_type(value) for value in prop["enum"])
    return None if _COMPOSING & prop.keys() else _ANY_JSON


def _check_typed(handler: Callable[..., Any], parameters: list[inspect.Parameter], schema: Mapping[str, Any]) -> None:
    """
    Refuse a handler parameter a valid call could fill with a value its annotation does not take.

    Rationale: the schema is what is enforced before the handler runs; a
    parameter it does not type (absent from ``properties`` where a call may
    still carry it, or typed otherwise than a readable annotation) would let
    the model's raw value through to the handler.
    """
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    # An open object lets a call carry any undeclared argument, untyped (a schema or patterns would type it).
    extras_untyped = schema.get("additionalProperties", True) is True and "patternProperties" not in schema
    namespace = _namespace(handler)
    for parameter in parameters:
        annotation = _annotation(namespace, parameter)
        accepted = _accepted(annotation) if annotation is not None else None
        if parameter.name not in properties:
            if parameter.name in required or extras_untyped:
                wanted = json.dumps(sorted(accepted)[0] if accepted else "string")
                raise ToolDefinitionError(
                    f"handler parameter {parameter.name!r} is not typed by the schema (it is not in 'properties'),"
                    f" so a call could pass it any JSON value; declare it, e.g."
                    f' "properties": {{"{parameter.name}": {{"type": {wanted}}}}}'
                )
            continue
        declared = _declared(properties[parameter.name])
        if accepted is None or declared is None or declared <= accepted:
            continue
        shown = getattr(annotation, "__name__", None) or repr(annotation)
        wanted = json.dumps(sorted(accepted)[0])
        untyped = declared == _ANY_JSON
        lets = "does not type it (no type, enum or const)" if untyped else f"lets it be {sorted(declared - accepted)}"
        raise ToolDefinitionError(
            f"handler parameter {parameter.name!r} is annotated {shown} but its schema {lets}:"
            f' a valid call would hand the handler a value it does not take; write "type": {wanted}'
            f" (JSON types it takes: {sorted(accepted)})"
        )


def reads_context(handler: Callable[..., Any]) -> bool:
    """Whether ``handler`` names a ``context`` parameter, to be given the call's ToolContext."""
    try:
        parameters = _signature(handler).parameters
    except (TypeError, ValueError):  # some builtins have no readable signature: they take no context
        return False
    parameter = parameters.get("context")
    return parameter is not None and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)


# --- tools ---

TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
"""What a tool may be called: the names every provider's API accepts."""

_PY_TO_JSON: dict[type, str] = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    list: "array",
    dict: "object",
    type(None): "null",
}
_SUPPORTED = ", ".join(t.__name__ for t in _PY_TO_JSON)
# Canonical JSON for fingerprints; one encoder, built once (json.dumps with options builds one per call).
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)


def _is_type_like(value: Any) -> bool:
    # A Python type or a typing construct (list[int], int | None, Optional[str], Any): shorthand intent.
    return isinstance(value, (type, types.GenericAlias, types.UnionType)) or (
        type(value).__module__ == "typing" and not isinstance(value, (str, bytes))
    )


def _shorthand_to_schema(shorthand: Mapping[str, Any]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for arg, kind in shorthand.items():
        if not (isinstance(kind, type) and kind in _PY_TO_JSON):
            raise ToolDefinitionError(
                f"argument {arg!r} has type {kind!r}; the shorthand schema accepts only the plain types"
                f" {_SUPPORTED} (write a JSON Schema for anything richer, such as list[int] or optional values)"
            )
        properties[arg] = {"type": _PY_TO_JSON[kind]}
    return {
        "type": "object",
        "properties": properties,
        "required": sorted(properties),
        "additionalProperties": False,
    }


# Type names written where a JSON Schema wants its own: the JSON name to write instead.
_JSON_NAME = {
    "str": "string",
    "int": "integer",
    "float": "number",
    "bool": "boolean",
    "list": "array",
    "tuple": "array",
    "dict": "object",
    "None": "null",
    "NoneType": "null",
}
_PY_NAME = {json_name: py for py, json_name in _JSON_NAME.items() if py not in ("tuple", "NoneType")}


def _names_for_types(schema: Mapping[str, Any]) -> str | None:
    """
    What to write instead, when ``schema`` is a shorthand written with type *names* (``{"account": "string"}``).

    Rationale: it is the commonest first mistake, and read as a JSON Schema
    it only says "not an object", which points nowhere near the fix.
    """
    if "type" in schema or "properties" in schema or not schema:
        return None
    named = {name: kind for name, kind in schema.items() if isinstance(kind, str)}
    if len(named) != len(schema) or not all(kind in _JSON_NAME or kind in _PY_NAME for kind in named.values()):
        return None
    first, kind = next(iter(named.items()))
    json_kind = _JSON_NAME.get(kind, kind)
    return (
        f"property {first!r} is given as the string {kind!r}, a type's name: the shorthand takes Python types,"
        f" {{{first!r}: {_PY_NAME.get(json_kind, 'str')}}}, and a JSON Schema describes an object:"
        f' {{"type": "object", "properties": {{"{first}": {{"type": "{json_kind}"}}}}, "required": ["{first}"]}}'
    )


def _python_type_name(schema: Any, where: str = "") -> str | None:
    """Where ``schema`` gives a ``type`` as a Python name (``"int"``), and the JSON name to write; or ``None``."""
    if isinstance(schema, Mapping):
        kind = schema.get("type")
        for name in [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []:
            if isinstance(name, str) and name in _JSON_NAME:
                return f"at {where + 'type'}: {name!r} is Python's name; JSON Schema's is \"{_JSON_NAME[name]}\""
        for key in ("properties", "$defs", "patternProperties"):
            for name, inner in (schema.get(key) or {}).items() if isinstance(schema.get(key), Mapping) else ():
                found = _python_type_name(inner, f"{where}{key}/{name}/")
                if found:
                    return found
        if "items" in schema:
            return _python_type_name(schema["items"], f"{where}items/")
    return None


def _normalise_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(schema, Mapping):
        raise ToolDefinitionError(f"schema must be a mapping, got {type(schema).__name__}")
    if not schema or any(_is_type_like(v) for v in schema.values()):
        return _shorthand_to_schema(schema)
    confused = _names_for_types(schema)
    if confused is not None:
        raise ToolDefinitionError(confused)
    json_schema = dict(schema)
    problem = schema_problem(json_schema)
    if problem is not None:
        raise ToolDefinitionError(f"invalid JSON Schema: {_python_type_name(json_schema) or problem}")
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


def _check_max_calls(value: Any) -> None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise ToolDefinitionError(f"max_calls must be a whole number >= 0 or None, got {value!r}")


@attrs.frozen
class ToolSpec:
    """
    One tool the engine may execute on the model's behalf.

    ``schema`` is what the tool accepts: the model is shown it, and the
    engine holds every call to it before the handler may run. It is either a ``{argument: python_type}``
    shorthand (every argument required, no others allowed) or a JSON Schema
    object (Draft 2020-12; ``$ref`` only inside the schema, ``pattern`` on a
    linear-time engine, the formats of :func:`agent_fsm.checked_formats` checked).
    The handler is called with the arguments its signature names; extra
    arguments an open schema allows reach only a handler taking ``**kwargs``.
    ``effectful`` flags tools with side effects outside the run; the secure
    default gate refuses them. ``idempotent`` declares that running the same
    call twice under one idempotency key has the effect of running it once:
    only such a tool is re-run after a crash or retried (``retries``).
    The handler may be ``async def`` (the async driver awaits it; the sync
    driver refuses it). ``blocking=True`` marks a plain handler that waits
    on I/O: the async driver runs it in a worker thread so other runs go on.
    ``max_calls`` caps how many calls of this tool a run executes: a call
    past it is refused (``denied``, with a reason the model reads) and counted
    like any refusal, so a model that keeps asking ends ``no_progress``.
    ``parallel=True`` lets calls of this effect-free tool run concurrently
    with the effect-free calls beside them in one reply (as
    ``Agent(parallel_calls=True)`` does for every effect-free tool); an
    effectful tool always runs alone, in order.

    Raises:
        ToolDefinitionError: the schema is not usable, or a valid call would not fit the handler.
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
    blocking: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    max_calls: int | None = attrs.field(default=None, validator=lambda _, __, value: _check_max_calls(value))
    parallel: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))
    # The schema compiled once into a predicate (None: jsonschema decides), and the names
    # the handler is given (None: all of them).
    _checker: Any = attrs.field(init=False, repr=False, eq=False, alias="_checker")
    _accepts: frozenset[str] | None = attrs.field(init=False, repr=False, eq=False, alias="_accepts")
    _rendered: dict[str, Any] = attrs.field(init=False, repr=False, eq=False, factory=dict, alias="_rendered")
    # The handler names a ``context`` parameter: it is given the call's ToolContext (read once, at definition).
    takes_context: bool = attrs.field(init=False, repr=False, eq=False)
    # What the model is shown of this tool, as text: equal declarations share one rendering (see _rendering).
    _shown: str | None = attrs.field(init=False, repr=False, eq=False, alias="_shown")

    def __attrs_post_init__(self) -> None:
        if not callable(self.handler):
            raise ToolDefinitionError(f"handler must be callable, got {self.handler!r}")
        if self.parallel and self.effectful:
            raise ToolDefinitionError(
                "parallel=True on an effectful tool: its effects must happen one at a time, each gated just before"
                " it runs; drop parallel (effect-free calls beside it still run together)"
            )
        json_schema = _normalise_schema(self.schema)
        object.__setattr__(self, "json_schema", json_schema)
        object.__setattr__(self, "_validator", None)  # built on the first failed call: jsonschema loads lazily
        object.__setattr__(self, "_checker", compile_checker(json_schema))
        object.__setattr__(self, "_accepts", handler_arguments(self.handler, json_schema))
        object.__setattr__(self, "takes_context", reads_context(self.handler))
        try:
            # In the schema's own key order: a tool shares only a rendering that reads exactly as its own would.
            shown = json.dumps([self.description, json_schema], allow_nan=False)
        except (TypeError, ValueError):  # not plain JSON (a schema built from other objects): rendered per spec
            shown = None
        object.__setattr__(self, "_shown", shown)

    @classmethod
    def person(
        cls, description: str, schema: Mapping[str, Any], *, result: Mapping[str, Any], max_calls: int | None = None
    ) -> ToolSpec:
        """
        A tool whose result a person gives: no handler, every call pauses for the person's answer.

        ``schema`` is the question (what the model passes, validated like any
        call's arguments); ``result`` the JSON Schema the answer must meet. The
        gate judges each call before the person is asked; an answer that breaks
        ``result`` is refused to the person and never reaches the model.
        """
        return cls(description, schema, PersonAnswers(result), max_calls=max_calls)

    def errors(self, arguments: Any) -> list[str]:
        """Every way ``arguments`` breaks the contract, as readable lines (empty when valid)."""
        if self._checker is not None and self._checker(arguments):
            return []
        validator = self._validator
        if validator is None:
            validator = make_validator(self.json_schema)
            object.__setattr__(self, "_validator", validator)
        found = []
        for error in sorted(validator.iter_errors(arguments), key=lambda e: list(map(str, e.path))):
            where = "/".join(str(p) for p in error.path)
            found.append(f"{where}: {error.message}" if where else error.message)
        return found

    def handler_arguments(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The part of valid ``arguments`` the handler takes (an open schema may allow more)."""
        accepts = self._accepts
        if accepts is None or accepts.issuperset(arguments):
            return dict(arguments)
        return {k: v for k, v in arguments.items() if k in accepts}

    def declaration(self, name: str) -> dict[str, Any]:
        """This tool as an OpenAI-compatible function declaration."""
        return {
            "type": "function",
            "function": {"name": name, "description": self.description, "parameters": self.json_schema},
        }


Registry = Mapping[str, ToolSpec]
"""A registry maps tool names to contracts. No other name is ever resolved."""


class _NoAnswer:
    """The absence of a person's answer (``None`` is an answer a schema may allow)."""

    def __repr__(self) -> str:
        return "NO_ANSWER"


NO_ANSWER: Any = _NoAnswer()
"""No answer given: the default of every ``answer=`` parameter."""


class PersonAnswers:
    """
    The handler of a tool whose result a person gives (see :meth:`ToolSpec.person`): it never runs.

    Every call to such a tool pauses the run once the gate has judged it;
    the person's answer, checked against ``result`` (a JSON Schema), becomes
    the call's ``result`` observation. Called as a plain function it refuses:
    only a person can answer.
    """

    approvable = False  # an approval with no answer is refused: the result is the person's to give

    def __init__(self, result: Mapping[str, Any]) -> None:
        if not isinstance(result, Mapping):
            raise ToolDefinitionError(f"result must be a JSON Schema mapping, got {type(result).__name__}")
        schema = dict(result)
        problem = schema_problem(schema)
        if problem is not None:
            raise ToolDefinitionError(f"invalid result schema: {problem}")
        self.result = schema
        self._validator: Any = None

    def __call__(self, **arguments: Any) -> Any:
        raise ToolError("a person answers this tool: resume the paused run with answer=")

    def __repr__(self) -> str:
        return f"PersonAnswers({self.result!r})"

    def errors(self, answer: Any) -> list[str]:
        """Every way ``answer`` breaks the result schema, as readable lines (empty when valid)."""
        if self._validator is None:
            self._validator = make_validator(self.result)
        found = []
        for error in sorted(self._validator.iter_errors(answer), key=lambda e: list(map(str, e.path))):
            where = "/".join(str(p) for p in error.path)
            found.append(f"{where}: {error.message}" if where else error.message)
        return found


ASKED = "asked during its call"
"""What the reason of a pause on an open question says (a decision elsewhere finds the call no longer open)."""


class OpenQuestion(PersonAnswers):
    """
    A question a call asked a person while it runs (an MCP server's elicitation): the call waits, open, in this process.

    The run rests paused on the call (its outcome is pending, not unknown).
    The person's decision goes back to the call, which then completes: an
    answer checked against ``result`` (the schema the call asked for), a
    rejection (the person declines), or an approval with no answer (the
    person lets the call go on without one: cancel). The handler that asked
    offers it through a method ``asking(idempotency_key)``, the key its call
    was given (derived from the run's secret nonce, the call's place and its
    fingerprint: a state that is not the run's own, or a changed call, reaches
    no question), and says it may with a true ``asks_mid_call``
    attribute (a Temporal worker refuses such a tool: its calls run in
    activities, which cannot stay open); only the process holding the call
    open can offer the question, so a saved state never carries one. Subclasses say how a reply reaches the
    call (:meth:`hold`) and how the call is told none will come (:meth:`withdraw`).

    .. versionadded:: 0.4
    """

    approvable = True  # approved blank: the call goes on without an answer

    def __init__(self, result: Mapping[str, Any], question: str) -> None:
        super().__init__(result)
        self.question = question

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.question[:60]!r}>"

    def hold(self, reply: QuestionReply) -> None:
        """Keep ``reply`` for the call: its handler, run again under the approval, hands it over."""
        raise NotImplementedError

    def withdraw(self) -> None:
        """Tell the call no reply will come (the gate refused it afresh): it is cancelled."""
        raise NotImplementedError


@attrs.frozen
class QuestionReply:
    """A person's decision on an :class:`OpenQuestion`: ``answer`` (with ``value``), ``decline`` or ``cancel``."""

    question: OpenQuestion = attrs.field(eq=False)
    kind: Literal["answer", "decline", "cancel"]
    value: Any = None


def person_tool(spec: ToolSpec | None) -> PersonAnswers | None:
    """The person who answers ``spec``'s calls, or ``None`` for a tool with a handler of its own."""
    handler = None if spec is None else spec.handler
    return handler if isinstance(handler, PersonAnswers) else None


class Subrun:
    """
    A handler that is a whole run of another agent: the run drives it as steps of its own.

    The run machine does not call it: it asks :meth:`steps` for the call's
    observation (see :mod:`agent_fsm.engine._nesting`), so the child's model
    calls, gates and handlers are requests of the parent's driver, its budgets
    are bounded by the parent's, and its pause is the parent's pause. Called
    as a plain function (outside a run) it refuses, as an ``error``: there is
    no run for it to nest in.
    """

    hands_over = False  # the run ends as the agent it runs ends (a handoff)

    def __call__(self, **arguments: Any) -> Any:
        raise ToolError(f"{self!r} runs an agent inside a run; it cannot be called on its own")

    def steps(self, run: Any, call: ToolCall) -> Any:
        """The call's observation as driver steps (``None``: the child paused, and the parent with it)."""
        raise NotImplementedError

    def contracts(self) -> str:
        """A digest of the contracts of what it runs: part of the digest of the registry holding it."""
        raise NotImplementedError


@attrs.frozen
class ToolCall:
    """
    A parsed proposal to run one tool. It carries no authority by itself.

    ``arguments`` is ``None`` when the model's argument text did not parse
    as a JSON object; ``raw_arguments`` keeps that text so a denial can quote
    it and the no-progress detector can fingerprint it. ``original_id`` is
    the id the model sent when the engine had to rename it (a duplicate, or a
    clash with an id already in the transcript); ``None`` when it was kept.
    """

    call_id: str
    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str | None = attrs.field(default=None, eq=False, repr=False)
    original_id: str | None = attrs.field(default=None, eq=False, repr=False, kw_only=True)

    def fingerprint(self) -> str:
        """Tool name and canonical arguments: equal for proposals that mean the same."""
        if self.arguments is not None:
            try:
                return f"{self.name}:{_CANONICAL.encode(self.arguments)}"
            except (TypeError, ValueError, RecursionError):
                pass  # not JSON data (it will be refused as such); its text stands in
        return f"{self.name}:<unparsed>{self.raw_arguments}"


def call_fingerprint(call: ToolCall) -> str:
    """
    A digest of the call id, tool name and canonical arguments: equal exactly for the same call.

    Canonical means sorted keys and no whitespace, so key order in the
    model's text does not matter; the call id is included so an approval of
    one call never covers an identical proposal made later.
    """
    arguments = call.arguments if call.arguments is not None else {"<unparsed>": call.raw_arguments}
    item = [call.call_id, call.name, arguments]
    try:
        text = "".join(_encode_digested(item, 0))
    except RecursionError:  # a cycle (or nesting too deep): the checking encoder says which
        text = _DIGESTED.encode(item)
    import hashlib  # loaded by the first digest: a plain run takes none

    return hashlib.sha256(text.encode()).hexdigest()


_DIGESTED = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=repr)
# The same encoding, built once rather than per call as JSONEncoder.encode does;
# without cycle markers, so it holds no state between calls or threads.
_C_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)  # CPython's; absent in a pure-Python json
_encode_digested: Callable[[object, int], Sequence[str]] = (
    _C_ENCODER(None, repr, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, True)
    if _C_ENCODER is not None
    else lambda item, _level: [_DIGESTED.encode(item)]
)


def _quote(text: str | None, limit: int = 200) -> str:
    if text is None or len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text):,} characters)"


def _unparsed_reason(call: ToolCall, limits: Limits) -> str:
    # Only the failure path gets here, so reading the text again to say why costs nothing on valid calls.
    raw = call.raw_arguments
    prefix = f"arguments for {call.name or '(no name)'} were not a JSON object"
    if raw is None:
        return f"{prefix}: none were sent"
    if len(raw) > limits.max_argument_chars:
        return f"{prefix} within the size limit: {len(raw):,} characters (at most {limits.max_argument_chars:,})"
    try:
        parsed = json.loads(raw)
    except RecursionError:
        return f"{prefix}: they nest too deeply to read"
    except ValueError as exc:
        return f"{prefix} ({exc}): {_quote(raw)}"
    if isinstance(parsed, dict):  # parsed, but not kept as data: NaN, or nested past DEPTH_CEILING
        return f"{call.name} arguments rejected: {argument_problem(parsed, max_depth=limits.max_argument_depth)}"
    return f"{prefix}: got a JSON {type(parsed).__name__}: {_quote(raw)}"


def validate_call(call: ToolCall, tools: Registry, *, limits: Limits | None = None) -> str | None:
    """
    Hold a proposal up against the contract its tool declares in the registry.

    Before the schema, the arguments must be plain JSON data within
    ``limits`` (:attr:`Limits.max_argument_depth`, :attr:`Limits.max_argument_chars`;
    the defaults when ``None``): no ``NaN`` or ``Infinity``, no deeper
    nesting, no longer text.

    Returns:
        ``None`` if the proposal names a known tool with valid arguments;
        otherwise a reason written so the model can fix its call. Permission is not
        judged here at all; the gate decides that separately.
    """
    limits = DEFAULT_LIMITS if limits is None else limits
    if call.arguments is None:
        return _unparsed_reason(call, limits)
    name = call.name
    if not isinstance(name, str) or not name:  # never looked up: a registry cannot hold a tool named ""
        known = ", ".join(sorted(tools)) or "none"
        return f"unknown tool: the call names no tool (available: {known})"
    tool = tools.get(name)
    if tool is None:
        known = ", ".join(sorted(tools)) or "none"
        return f"unknown tool: {name!r} (available: {known})"
    problem = argument_problem(call.arguments, max_depth=limits.max_argument_depth)
    if problem is None:
        text = call.raw_arguments
        size = len(text) if text is not None else len(_CANONICAL.encode(call.arguments))
        if size > limits.max_argument_chars:
            problem = f"{size:,} characters of arguments (at most {limits.max_argument_chars:,})"
    if problem is not None:
        return f"{name} arguments rejected: {problem}"
    checker = tool._checker if type(tool) is ToolSpec else None  # a subclass's own errors() is always asked
    try:  # the compiled schema decides a valid call in one call; only a failure asks for the errors
        problems = [] if checker is not None and checker(call.arguments) else tool.errors(call.arguments)
    except RecursionError:  # a recursive schema walked by jsonschema, on a stack already deep
        problems = ["the arguments nest too deeply to check against this schema"]
    if problems:
        # jsonschema quotes the offending value whole; a hostile one may be 100,000 characters.
        return f"{name} arguments rejected: " + "; ".join(p if len(p) <= 500 else f"{p[:500]}..." for p in problems)
    return None


# --- registries ------------------------------------------------------------------


class _Rendered:
    """One tool rendered under one name: its declaration and, per estimator, what it adds to a prompt."""

    __slots__ = ("declaration", "tokens")

    def __init__(self, declaration: dict[str, Any]) -> None:
        self.declaration = declaration
        self.tokens: dict[Any, int] = {}


def check_registry(tools: Any) -> None:
    """
    Refuse a registry the engine could not use: not a mapping, a bad tool name, a value that is not a ToolSpec.

    Raises:
        TypeError: ``tools`` is not a mapping (a list of ToolSpecs, say).
        ToolDefinitionError: a name does not match :data:`TOOL_NAME`, or a value is not a ToolSpec.
    """
    for name, spec in _entries(tools):
        _rendering(name, spec)


def _entries(tools: Any) -> Any:
    if type(tools) is not dict and not isinstance(tools, Mapping):  # a dict, the common registry, skips the ABC
        raise TypeError(
            f"tools must be a mapping of tool name to ToolSpec, such as {{'lookup': ToolSpec(...)}}"
            f" (got {type(tools).__name__}: {_quote(repr(tools), 80)})"
        )
    return tools.items()


# Renderings shared by equal declarations: a program that builds its tools afresh for every run
# (a new world per run, as property tests do) renders and measures each declaration once. Keyed by
# name and the declaration's text, so it holds no handler (no world is kept alive); bounded.
_SHARED: dict[tuple[str, str], _Rendered] = {}
_SHARED_BOUND = 1024


def _rendering(name: Any, spec: Any) -> _Rendered:
    # The cache lives on the (frozen) ToolSpec, keyed by the name it is registered under: a registry
    # is read afresh on every call, so adding, removing or replacing a tool is always seen.
    if not isinstance(spec, ToolSpec):
        raise ToolDefinitionError(f"tool {name!r} must be a ToolSpec, got {type(spec).__name__}")
    hit: _Rendered | None = spec._rendered.get(name)
    if hit is None:
        if not isinstance(name, str) or TOOL_NAME.fullmatch(name) is None:
            raise ToolDefinitionError(
                f"tool name {name!r} must match ^[a-zA-Z0-9_-]{{1,64}}$ (what the providers' APIs accept)"
            )
        shown = spec._shown
        hit = _SHARED.get((name, shown)) if shown is not None else None
        if hit is None:
            hit = _Rendered(spec.declaration(name))
            if shown is not None:
                if len(_SHARED) >= _SHARED_BOUND:
                    del _SHARED[next(iter(_SHARED))]
                _SHARED[(name, shown)] = hit
        spec._rendered[name] = hit
    return hit


def function_declarations(tools: Registry) -> list[dict[str, Any]]:
    """
    Render a registry as OpenAI-compatible ``tools`` entries, in registry order.

    Each tool is rendered (and its name checked, see :func:`check_registry`)
    once; the entries are shared between runs, so treat them as read-only.
    """
    return [_rendering(name, spec).declaration for name, spec in _entries(tools)]


def contract_digest(tools: Registry) -> str:
    """
    A digest of a registry's contracts: each tool's name, description, schema, and effect and idempotency flags.

    Equal for registries that offer the model the same tools under the same
    rules, whatever their handlers; built from each tool's declaration text,
    computed once when the tool was defined.
    """
    parts = []
    for name, spec in sorted(_entries(tools)):
        shown = spec._shown if spec._shown is not None else repr((spec.description, spec.json_schema))
        cap = "" if spec.max_calls is None else f"\x00max_calls={spec.max_calls}"  # a cap is a rule of the contract
        if isinstance(spec.handler, Subrun):  # the contracts of the agent it runs are part of this tool's
            cap += f"\x00runs={spec.handler.contracts()}"
        elif isinstance(spec.handler, PersonAnswers):  # what a person must answer is part of the contract
            cap += f"\x00answers={json.dumps(spec.handler.result, sort_keys=True, default=repr)}"
        parts.append(f"{name}\x00{shown}\x00{spec.effectful:d}{spec.idempotent:d}{cap}")
    import hashlib

    return hashlib.sha256("\x01".join(parts).encode()).hexdigest()


def measure(estimator: Callable[[Mapping[str, Any]], int], message: Mapping[str, Any]) -> int:
    """
    ``estimator(message)``, checked: every count the engine takes goes through here.

    A count is a whole number >= 0. One that raises, or answers ``2.5`` or a
    negative number, is a bug in the estimator: it would silence or break the
    token budget, so it is refused loudly (the caller attaches the run's state).

    Raises:
        RunError: the estimator raised or answered something else.
    """
    try:
        tokens = estimator(message)
    except Exception as exc:
        raise RunError(f"the token estimator raised {type(exc).__name__}: {exc}") from exc
    if type(tokens) is not int or tokens < 0:
        raise RunError(f"a token estimator must return a whole number >= 0; got {tokens!r}")
    return tokens


def declaration_tokens(tools: Registry, estimator: Callable[[Mapping[str, Any]], int]) -> int:
    """What the registry's declarations add to every prompt, by ``estimator``; each counted once."""
    return shown_to_model(tools, estimator)[1]


def shown_to_model(tools: Registry, estimator: Callable[[Mapping[str, Any]], int]) -> tuple[list[dict[str, Any]], int]:
    """:func:`function_declarations` and :func:`declaration_tokens` in one pass over the registry (once a run)."""
    declarations = []
    total = 0
    for name, spec in _entries(tools):
        # A tool rendered under this name already (every run after the first) is read in place.
        rendered = spec._rendered.get(name) if type(spec) is ToolSpec else None
        if rendered is None:
            rendered = _rendering(name, spec)
        declarations.append(rendered.declaration)
        tokens = rendered.tokens.get(estimator)
        if tokens is None:
            tokens = measure(estimator, rendered.declaration)
            if len(rendered.tokens) < 8:  # a handful of estimators per tool is all real code has
                rendered.tokens[estimator] = tokens
        total += tokens
    return declarations, total
