"""Schemas compiled once: the fast checker agrees with jsonschema, results are copied without a JSON round trip,
and declarations are rendered once per tool and registry content."""

from __future__ import annotations

import functools
import gc
import json
import weakref
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_fsm import (
    ScriptedModel,
    ToolSpec,
    allow_all,
    answer_message,
    estimate_tokens,
    function_declarations,
    run,
    tool_call_message,
)
from agent_fsm.engine import to_json_data
from agent_fsm.engine._json import storable
from agent_fsm.engine._schema import _meta_problem, _plainly_valid, compile_checker, make_validator
from agent_fsm.engine._tools import declaration_tokens
from tests.strategies import CREDIT_SCHEMA

SCHEMAS: dict[str, dict[str, Any]] = {
    "shorthand": ToolSpec("d", {"sku": str, "qty": int, "rush": bool}, lambda sku, qty, rush: 1).json_schema,
    "credit": CREDIT_SCHEMA,
    "bounds": {
        "type": "object",
        "properties": {
            "n": {"type": ["integer", "null"], "minimum": -3, "exclusiveMaximum": 7},
            "x": {"type": "number", "exclusiveMinimum": 0.5, "maximum": 10},
            "s": {"type": "string", "minLength": 1, "maxLength": 3, "pattern": "^[a-c]+$"},
            "when": {"type": "string", "format": "date"},
            "tags": {"type": "array", "items": {"enum": ["a", 1, True, None]}, "minItems": 1, "maxItems": 3},
            "fixed": {"const": [1, {"k": False}]},
        },
        "additionalProperties": {"type": "integer"},
    },
    "untyped": {"type": "object", "properties": {"any": {}, "never": False, "always": True}, "required": ["any"]},
}

_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-10, 12),
        st.floats(-12, 12, allow_nan=False),
        st.sampled_from(["a", "abc", "abcd", "", "z", "2024-02-29", "2023-02-30", "C001", "damaged", "T-0001"]),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(["k", "n", "x", "s", "tags", "any", "sku", "qty", "extra"]), inner, max_size=4),
    ),
    max_leaves=12,
)


def _constants(schema: Any) -> list[Any]:
    # Every number, string and list in the schema, and numbers either side of each bound:
    # the values on which a checker that forgot a keyword would disagree.
    found: list[Any] = []
    stack = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            found.append(item)
            stack.extend(item)
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            found.extend([item, item - 1, item + 1, item - 0.5, item + 0.5, float(item)])
        elif isinstance(item, str):
            found.extend([item, item * 2, item[:1]])
    return found


_SAMPLES = [None, True, False, 0, 1, -1, 2.5, "", "a", "abc", "C001", "T-0001", "2024-02-29", [], [1], {}, {"k": 1}]


@functools.cache
def _near_valid_of(name: str) -> st.SearchStrategy[dict[str, Any]]:
    return _near_valid(SCHEMAS[name])


def _near_valid(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Valid documents with at most one property swapped for any value: where a forgotten keyword shows."""
    pool = _constants(schema) + _SAMPLES
    properties = schema.get("properties", {})
    valid = {
        name: [v for v in pool if make_validator({"$defs": {}, **sub}).is_valid(v)] if isinstance(sub, dict) else pool
        for name, sub in properties.items()
    }
    required = set(schema.get("required", ()))
    usable = {name: values for name, values in valid.items() if values}

    @st.composite
    def build(draw: Any) -> dict[str, Any]:
        chosen = [n for n in usable if n in required or draw(st.booleans())]
        document = {n: draw(st.sampled_from(usable[n])) for n in chosen}
        swap = draw(st.sampled_from(["extra", *properties]))
        near = _constants(properties.get(swap, {})) or pool  # a bound's neighbours break a forgotten bound
        document[swap] = draw(st.one_of(st.sampled_from(near), st.sampled_from(pool)))
        return document

    return build()


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@given(data=st.data())
def test_the_compiled_checker_agrees_with_jsonschema(name, data):
    """On any JSON document, valid for the compiled predicate exactly when jsonschema finds no error."""
    schema = SCHEMAS[name]
    checker = compile_checker(schema)
    assert checker is not None
    validator = make_validator(schema)
    near = _near_valid_of(name)
    instance = data.draw(st.one_of(near, near, _values))
    assert checker(instance) is validator.is_valid(instance)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_the_compiled_checker_agrees_on_every_boundary(name):
    """Exhaustively: a valid document with each property set to each value near the schema's constants."""
    schema = SCHEMAS[name]
    checker = compile_checker(schema)
    validator = make_validator(schema)
    properties = schema.get("properties", {})
    base = {}
    for prop in schema.get("required", ()):
        sub = properties[prop]
        base[prop] = next(v for v in _constants(schema) + _SAMPLES if make_validator({"$defs": {}, **sub}).is_valid(v))
    assert checker is not None and validator.is_valid(base)
    disagreements = []
    for prop in [*properties, "extra"]:
        for value in _constants(properties.get(prop, {})) + _constants(schema) + _SAMPLES:
            document = {**base, prop: value}
            if checker(document) is not validator.is_valid(document):
                disagreements.append(document)
    assert disagreements == []


def test_a_contract_is_checked_by_one_function_call():
    """Every field of a compiled contract is tested in one function: a valid call costs one Python call."""
    import sys

    checker = compile_checker(SCHEMAS["credit"])
    assert checker is not None
    valid = {
        "customer_id": "C001",
        "amount_cents": 5,
        "reason": "damaged",
        "approval": {"ticket": "T-0001", "approver": "ann"},
    }
    assert make_validator(SCHEMAS["credit"]).is_valid(valid)
    frames: list[str] = []
    sys.setprofile(lambda frame, event, arg: frames.append(frame.f_code.co_name) if event == "call" else None)
    try:
        assert checker(valid) is True
    finally:
        sys.setprofile(None)
    assert frames == ["check", "search", "search"]  # the contract, and the linear-time engine for its two patterns


def test_a_schema_nested_past_one_function_still_agrees_with_jsonschema():
    """Deeply nested arrays and maps are compiled in pieces (Python limits nesting in one function), checked alike."""
    schema: dict[str, Any] = {"type": "integer", "minimum": 0}
    for depth in range(40):
        schema = {"type": "array", "items": schema} if depth % 2 else {"type": "object", "additionalProperties": schema}
    checker = compile_checker(schema)
    assert checker is not None
    validator = make_validator(schema)
    good: Any = 1
    for depth in range(40):
        good = [good] if depth % 2 else {"k": good}
    bad = json.loads(json.dumps(good).replace("1", "-1"))
    for instance in (good, bad, [], {}, [[{}]], "x"):
        assert checker(instance) is validator.is_valid(instance)


def test_schemas_with_other_keywords_fall_back_to_jsonschema():
    """Keywords the compiler does not know are left to jsonschema, never ignored."""
    for schema in ({"anyOf": [{"type": "string"}]}, {"$ref": "#"}, {"prefixItems": [True]}, {"multipleOf": 2}):
        assert compile_checker(schema) is None
    spec = ToolSpec("d", {"type": "object", "properties": {"n": {"multipleOf": 2}}}, lambda n=0: n)
    assert spec.errors({"n": 3}) == ["n: 3 is not a multiple of 2"]


# Schemas of the keywords a contract commonly uses, every value one the meta-schema accepts; a test then
# puts a wrong value (a wrong type, a negative count, a duplicate, a pattern RE2 refuses...) in one place.
_TYPES = ["array", "boolean", "integer", "null", "number", "object", "string"]
_ANY = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=3)), st.lists, max_leaves=4)
_NUMBER = st.one_of(st.integers(-5, 5), st.floats(-5, 5, allow_nan=False))
_COUNT = st.integers(0, 5)
_TEXT = st.text(max_size=3)
_RIGHT: dict[str, st.SearchStrategy[Any]] = {
    "type": st.one_of(st.sampled_from(_TYPES), st.lists(st.sampled_from(_TYPES), min_size=1, max_size=3, unique=True)),
    "required": st.lists(st.sampled_from(["a", "b", "c"]), unique=True, max_size=3),
    **dict.fromkeys(["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"], _NUMBER),
    **dict.fromkeys(["minLength", "maxLength", "minItems", "maxItems"], _COUNT),
    "pattern": st.sampled_from(["^[a-c]+$", "x", "[0-9]{2}", ""]),
    **dict.fromkeys(["format", "title", "description", "$comment", "$schema"], _TEXT),
    **dict.fromkeys(["enum", "examples"], st.lists(_ANY, max_size=3)),
    **dict.fromkeys(["const", "default"], _ANY),
}
# For each keyword, values the meta-schema refuses there (and 1.0 as a count, which it accepts: left to it).
_WRONG: dict[str, list[Any]] = {
    "type": ["int", [], ["string", "string"], ["string", 1], 3],
    "required": ["a", ["a", "a"], ["a", 1], [None]],
    **{key: ["1", None, True, [1]] for key in ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]},
    **{key: [-1, 1.5, 1.0, True, "2", None] for key in ["minLength", "maxLength", "minItems", "maxItems"]},
    "pattern": ["(?=x)", "(", "a{1001}", 3, None],
    **{key: [3, None, [], True] for key in ["format", "title", "description", "$comment", "$schema"]},
    **{key: ["a", 1, {}, None] for key in ["enum", "examples"]},
    **{key: [None, [1, {"a": True}]] for key in ["const", "default"]},  # anything goes there
    "properties": [[], "x", {"a": 3}, {"a": {"type": "int"}}],
    **{key: [1, "x", [True], {"type": "int"}, {"minLength": -1}] for key in ["items", "additionalProperties"]},
}
_keywords = st.lists(st.sampled_from(sorted(_RIGHT)), unique=True, min_size=1, max_size=4).flatmap(
    lambda keys: st.fixed_dictionaries({k: _RIGHT[k] for k in keys})
)
_schemas = st.recursive(
    st.one_of(st.booleans(), _keywords),
    lambda inner: st.tuples(
        _keywords,
        st.fixed_dictionaries(
            {},
            optional={
                "properties": st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
                "items": inner,
                "additionalProperties": inner,
            },
        ),
    ).map(lambda pair: {**pair[0], **pair[1]}),
    max_leaves=8,
)


def _places(schema: Any) -> list[tuple[dict[str, Any], str]]:
    """Every keyword of ``schema`` and of the schemas in it, as (the schema holding it, the keyword)."""
    if not isinstance(schema, dict):
        return []
    found = [(schema, keyword) for keyword in schema]
    for keyword in ("items", "additionalProperties"):
        found += _places(schema.get(keyword))
    for sub in schema.get("properties", {}).values():
        found += _places(sub)
    return found


@settings(max_examples=500)  # a check of about a millisecond: enough examples to reach each keyword made wrong
@given(schema=_schemas, data=st.data())
def test_a_schema_read_as_plainly_valid_passes_the_meta_schema(schema, data):
    """What is found valid without loading jsonschema, the meta-schema, the $ref resolver and RE2 accept too."""
    places = _places(schema)
    if places and data.draw(st.integers(0, 3)):  # one value made wrong (or not: a few of _WRONG fit some keywords)
        holder, keyword = data.draw(st.sampled_from(places))
        holder[keyword] = data.draw(st.sampled_from(_WRONG[keyword]))
    schema = json.loads(json.dumps(schema))  # what schema_problem reads: the schema as JSON
    if _plainly_valid(schema):
        assert _meta_problem(schema) is None


def test_the_direct_reading_leaves_every_doubt_to_the_meta_schema():
    """Not vacuous: the contracts above read as valid; each kind of breakage is left to jsonschema, which words it."""
    for name, schema in SCHEMAS.items():
        assert _plainly_valid(schema), name
    base = {"type": "object", "properties": {"s": {"type": "string"}}}
    for broken in (
        {"type": "int"},
        {"type": ["string", "string"]},
        {"type": []},
        {"required": ["a", "a"]},
        {"minLength": -1},
        {"maxItems": 1.5},
        {"minimum": "1"},
        {"pattern": "(?=x)"},
        {"enum": "a"},
        {"description": 3},
        {"properties": []},
    ):
        for schema in ({**base, **broken}, {**base, "properties": {"s": broken}}):
            assert not _plainly_valid(schema), schema
            assert _meta_problem(schema) is not None, schema
    # Valid, but not read directly: left to the full check, which accepts it.
    for schema in ({"minLength": 1.0}, {"uniqueItems": True}, {"$ref": "#"}, {"items": {"multipleOf": 2}}):
        assert not _plainly_valid(schema) and _meta_problem(schema) is None, schema


def test_a_failing_call_is_worded_by_jsonschema_as_before():
    """The fast path only decides; messages keep jsonschema's wording, in path order."""
    spec = ToolSpec("d", CREDIT_SCHEMA, lambda customer_id, amount_cents, reason, tier=None, approval=None: 1)
    assert spec.errors({"customer_id": "X", "amount_cents": 0, "reason": "late", "approval": {"ticket": "T-1"}}) == [
        "amount_cents: 0 is less than the minimum of 1",
        "approval: 'approver' is a required property",
        "approval/ticket: 'T-1' does not match '^T-[0-9]{4}$'",
        "customer_id: 'X' does not match '^C[0-9]{3}$'",
    ]


# --- results without a JSON round trip ----------------------------------------------------

_plain = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text()),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=4), inner, max_size=4)),
    max_leaves=15,
)
_convertible = st.recursive(
    st.one_of(_plain, st.sampled_from([(1, 2), ("a",), frozenset({1})])),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers(), st.booleans(), st.none()), inner, max_size=3),
    ),
    max_leaves=10,
)


@given(value=st.one_of(_plain, _convertible))
def test_results_are_stored_exactly_as_the_json_round_trip_stored_them(value):
    """Byte for byte what json.loads(json.dumps(value, default=str)) gave, without the round trip."""
    before = json.loads(json.dumps(value, default=str))
    assert json.dumps(to_json_data(value)) == json.dumps(before)


@given(value=_plain)
def test_plain_results_are_not_marked_as_text(value):
    """Only a stand-in text sets the flag; plain data is copied, and the copy is not the original."""
    data, text_form = storable(value)
    assert data == value and not text_form
    if isinstance(value, (dict, list)):
        assert data is not value


# --- declarations rendered once ----------------------------------------------------------


def test_declarations_are_rendered_once_and_follow_registry_changes():
    """The same tool renders to the same object; adding or replacing a tool is seen at once."""
    first = ToolSpec("First.", {}, lambda: 1)
    tools: dict[str, ToolSpec] = {"first": first}
    once = function_declarations(tools)
    assert function_declarations(tools)[0] is once[0]
    tokens = declaration_tokens(tools, estimate_tokens)
    assert tokens == sum(estimate_tokens(d) for d in once)
    tools["second"] = ToolSpec("Second.", {"n": int}, lambda n: n)
    assert [d["function"]["name"] for d in function_declarations(tools)] == ["first", "second"]
    assert declaration_tokens(tools, estimate_tokens) > tokens
    tools["first"] = ToolSpec("Replaced, with a longer description.", {}, lambda: 2)
    assert function_declarations(tools)[0]["function"]["description"].startswith("Replaced")
    del tools["second"]
    assert declaration_tokens(tools, lambda d: 1) == 1  # another estimator is counted on its own


def test_equal_tools_built_afresh_share_one_rendering_and_keep_no_world_alive():
    """A world rebuilt for every run renders each declaration once; what differs, or is renamed, renders anew."""
    import gc
    import weakref

    def desk(description: str = "Look an order up.") -> dict[str, ToolSpec]:
        world: list[str] = []
        return {"lookup": ToolSpec(description, {"order_id": str}, lambda order_id: world.append(order_id))}

    first, second = desk(), desk()
    assert function_declarations(first)[0] is function_declarations(second)[0]
    counted: list[Any] = []

    def counting(declaration: Any) -> int:
        counted.append(declaration)
        return 7

    assert declaration_tokens(first, counting) == declaration_tokens(second, counting) == 7
    assert len(counted) == 1  # measured once for both registries
    other = desk("Look an order up, by its id.")
    assert function_declarations(other)[0] is not function_declarations(first)[0]
    assert function_declarations(other)[0]["function"]["description"] == "Look an order up, by its id."
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    reordered = {"required": ["n"], "type": "object", "properties": {"n": {"type": "integer"}}}
    one = function_declarations({"t": ToolSpec("T.", schema, lambda n: n)})[0]
    other = function_declarations({"t": ToolSpec("T.", reordered, lambda n: n)})[0]
    assert list(other["function"]["parameters"]) == list(reordered)  # shown as written, not as another tool's
    assert one is not other
    renamed = {"find": first["lookup"]}
    assert function_declarations(renamed)[0]["function"]["name"] == "find"
    spec = weakref.ref(first["lookup"])
    del first, renamed
    gc.collect()
    assert spec() is None  # the shared rendering holds no handler, so no world


def test_the_shared_renderings_are_bounded():
    """Tools generated without end (a property test drawing descriptions) cannot grow the cache past its bound."""
    from agent_fsm.engine import _tools as tools_module

    for n in range(tools_module._SHARED_BOUND + 50):
        function_declarations({"t": ToolSpec(f"Tool number {n}.", {}, lambda: 1)})
    assert len(tools_module._SHARED) <= tools_module._SHARED_BOUND


def test_a_run_is_shown_the_registry_as_it_is_now():
    """A tool added to a registry between runs reaches the model's declarations."""
    shown: list[list[str]] = []

    class Recorder(ScriptedModel):
        def chat(self, messages: Any, tools: Any = ()) -> Any:
            shown.append([t["function"]["name"] for t in tools])
            return super().chat(messages, tools)

    tools = {"a": ToolSpec("A.", {}, lambda: 1)}
    run("t", Recorder([answer_message("x")]), tools)
    tools["b"] = ToolSpec("B.", {}, lambda: 2)
    run("t", Recorder([answer_message("x")]), tools)
    assert shown == [["a"], ["a", "b"]]


def test_the_compiler_knows_every_draft_2020_12_keyword() -> None:
    """The keyword list that decides what is compiled (kept so importing needs no jsonschema) is jsonschema's own."""
    from jsonschema.validators import Draft202012Validator

    from agent_fsm.engine._schema import _DRAFT_2020_12

    assert frozenset(Draft202012Validator.VALIDATORS) == _DRAFT_2020_12


class _World:
    def __init__(self) -> None:
        self.orders = {"A-1": "shipped"}


def _run_in_a_world() -> tuple[weakref.ref[_World], str | None]:
    world = _World()

    def lookup(order_id: str, context: Any = None) -> str:
        return world.orders[order_id]

    tools = {"lookup": ToolSpec("Look an order up.", {"order_id": str}, lookup)}
    model = ScriptedModel([tool_call_message("c1", "lookup", {"order_id": "A-1"}), answer_message("Shipped.")])
    result = run("Where is A-1?", model, tools, gate=allow_all)
    assert result.state.observations[0].content == "shipped"
    return weakref.ref(world), result.answer


def test_the_engine_keeps_no_handler_alive_after_its_tools_are_gone() -> None:
    """No per-handler cache pins a handler (and the world its closure holds) once the user drops the tools."""
    alive, answer = _run_in_a_world()
    gc.collect()
    assert answer == "Shipped."
    assert alive() is None
