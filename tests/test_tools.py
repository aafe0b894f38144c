"""Tool contracts: schemas, validation messages and OpenAI declarations."""

from __future__ import annotations

import pytest

from agent_fsm import (
    ToolCall,
    ToolDefinitionError,
    ToolSpec,
    function_declarations,
    validate_call,
)
from tests.warehouse import make_warehouse, ship_args


def noop(**kwargs):
    """A handler that does nothing."""
    return kwargs


def test_shorthand_schema_becomes_a_strict_json_schema():
    """`{name: type}` means: these fields, all required, no others, with these JSON types."""
    spec = ToolSpec("d", {"name": str, "count": int, "ratio": float, "on": bool}, noop)
    assert spec.json_schema == {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "on": {"type": "boolean"},
        },
        "required": ["count", "name", "on", "ratio"],
        "additionalProperties": False,
    }


def test_empty_schema_takes_no_arguments():
    """A tool declared with `{}` accepts exactly `{}`."""
    spec = ToolSpec("d", {}, noop)
    assert spec.errors({}) == []
    assert spec.errors({"x": 1}) != []


def test_bool_is_not_an_integer():
    """True is refused where an integer is declared, as JSON Schema requires."""
    spec = ToolSpec("d", {"n": int}, noop)
    assert spec.errors({"n": True}) == ["n: True is not of type 'integer'"]


def test_every_violation_is_reported():
    """All problems are listed, not just the first, so the model can fix them in one go."""
    tools, _ = make_warehouse()
    problems = tools["ship"].errors({"sku": "X", "qty": 0, "address": {}})
    assert len(problems) == 3
    assert any(p.startswith("address:") for p in problems)
    assert any(p.startswith("qty: 0 is less than the minimum of 1") for p in problems)


@pytest.mark.parametrize(
    ("schema", "fragment"),
    [
        ({"type": "array"}, "must describe an object"),
        ({"type": "object", "properties": {"a": {"type": "no-such-type"}}}, "invalid JSON Schema"),
        ({"n": complex}, "shorthand schema accepts"),
        ("not a mapping", "schema must be a mapping"),
    ],
)
def test_unusable_schemas_are_refused_at_definition(schema, fragment):
    """A broken contract is a set-up error raised when the tool is declared, not during a run."""
    with pytest.raises(ToolDefinitionError, match=fragment):
        ToolSpec("d", schema, noop)


def test_handler_must_be_callable():
    """A ToolSpec without a callable handler is refused."""
    with pytest.raises(ToolDefinitionError, match="callable"):
        ToolSpec("d", {}, "not callable")


def test_tool_definition_error_is_a_type_error():
    """Callers that catch TypeError for bad set-up catch it too."""
    assert issubclass(ToolDefinitionError, TypeError)


def test_validate_call_orders_its_questions():
    """Unparsed arguments, then unknown names, then contract violations; valid calls give None."""
    tools, _ = make_warehouse()
    assert validate_call(ToolCall("c", "ship", ship_args()), tools) is None
    assert "not a JSON object" in validate_call(ToolCall("c", "ship", None, "{oops"), tools)
    assert "'{oops'" in validate_call(ToolCall("c", "ship", None, "{oops"), tools)
    assert "unknown tool" in validate_call(ToolCall("c", "teleport", {}), tools)
    assert "ship arguments rejected" in validate_call(ToolCall("c", "ship", {}), tools)


def test_declarations_are_openai_function_tools():
    """The registry renders as OpenAI `tools` entries carrying the JSON Schema as parameters."""
    tools, _ = make_warehouse()
    declarations = function_declarations(tools)
    assert [d["function"]["name"] for d in declarations] == list(tools)
    ship = declarations[1]
    assert ship["type"] == "function"
    assert ship["function"]["parameters"]["properties"]["qty"] == {"type": "integer", "minimum": 1, "maximum": 10}
    assert ship["function"]["description"] == tools["ship"].description


def test_fingerprint_is_canonical():
    """Argument order and id do not change a proposal's fingerprint; values and names do."""
    a = ToolCall("1", "ship", {"qty": 1, "sku": "B"})
    b = ToolCall("2", "ship", {"sku": "B", "qty": 1})
    assert a.fingerprint() == b.fingerprint()
    assert a.fingerprint() != ToolCall("1", "ship", {"qty": 2, "sku": "B"}).fingerprint()
    assert ToolCall("1", "x", None, "{a").fingerprint() != ToolCall("1", "x", None, "{b").fingerprint()


# --- the handler and its schema agree both ways --------------------------------------

PAY_REQUIRED_ONLY = {
    "type": "object",
    "properties": {"account": {"type": "string"}},
    "required": ["account", "cents"],
}


def _pay(account: str, cents: int) -> str:
    """A handler whose cents is an int: a schema must say so."""
    return f"{account} {cents}"


def test_a_handler_parameter_missing_from_properties_is_refused_by_name():
    """`cents` required but absent from `properties`: any JSON value would reach `cents: int`, so it is refused."""
    with pytest.raises(ToolDefinitionError, match=r"'cents'.*not typed.*\"type\": \"integer\""):
        ToolSpec("Pay.", PAY_REQUIRED_ONLY, _pay)


def test_an_optional_handler_parameter_an_open_schema_leaves_untyped_is_refused():
    """A defaulted parameter an open schema does not declare could still arrive as any value: refused."""

    def search(query: str, limit: int = 10) -> str:
        return query * limit

    open_schema = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    with pytest.raises(ToolDefinitionError, match="'limit'"):
        ToolSpec("Search.", open_schema, search)
    closed = {**open_schema, "additionalProperties": False}  # no valid call can carry limit: its default holds
    assert ToolSpec("Search.", closed, search).errors({"query": "x"}) == []


@pytest.mark.parametrize(
    ("declared", "annotation_word"),
    [
        ({"type": "string"}, "int"),
        ({"type": "number"}, "int"),
        ({"type": ["integer", "string"]}, "int"),
        ({"enum": ["a", "b"]}, "int"),
        ({"description": "how many"}, "int"),
    ],
)
def test_a_schema_type_the_handler_annotation_does_not_accept_is_refused(declared, annotation_word):
    """A property typed (or left untyped) other than the handler's readable annotation names the parameter."""
    schema = {"type": "object", "properties": {"account": {"type": "string"}, "cents": declared}}
    schema["required"] = ["account", "cents"]
    with pytest.raises(ToolDefinitionError, match=rf"'cents'.*{annotation_word}"):
        ToolSpec("Pay.", schema, _pay)


def test_annotations_the_schema_satisfies_are_accepted():
    """An int fits a float, None an optional, a string enum str; annotations the engine cannot read are not judged."""

    def tool(ratio: float, note: str | None, mode: str, tags: list[str], extra: dict, anything, custom: ToolCall):
        return ratio

    schema = {
        "type": "object",
        "properties": {
            "ratio": {"type": "integer"},
            "note": {"type": ["string", "null"]},
            "mode": {"enum": ["fast", "slow"]},
            "tags": {"type": "array", "items": {"type": "string"}},
            "extra": {"type": "object"},
            "anything": {},
            "custom": {"type": "object"},
        },
        "required": ["ratio", "note", "mode", "tags", "extra", "anything", "custom"],
        "additionalProperties": False,
    }
    assert ToolSpec("d", schema, tool).json_schema["required"] == schema["required"]
    assert ToolSpec("d", {"ratio": int, "note": str}, lambda ratio, note: 1).errors({"ratio": 1, "note": ""}) == []


# --- the common first mistakes get an answer that says what to write --------------------


def test_a_property_type_given_as_a_type_name_string_says_what_to_write():
    """`{"account": "string"}` is neither shorthand (types, not names) nor a JSON Schema: both forms are shown."""
    with pytest.raises(ToolDefinitionError, match=r"'account'.*\{'account': str\}.*\"properties\"") as caught:
        ToolSpec("d", {"account": "string", "cents": "int"}, noop)
    assert "got None" not in str(caught.value)


def test_a_python_type_name_in_a_json_schema_names_the_property_and_the_json_name():
    """`"type": "int"` names the property and says to write "integer"."""
    schema = {"type": "object", "properties": {"cents": {"type": "int"}}, "required": ["cents"]}
    with pytest.raises(ToolDefinitionError, match=r"properties/cents.*'int'.*\"integer\""):
        ToolSpec("d", schema, noop)
    nested = {"type": "object", "properties": {"to": {"type": "object", "properties": {"n": {"type": "str"}}}}}
    with pytest.raises(ToolDefinitionError, match=r"properties/to/properties/n.*\"string\""):
        ToolSpec("d", nested, noop)


def test_any_other_schema_problem_names_where_it_is():
    """A meta-schema error deeper in the schema says at which property it was found."""
    schema = {"type": "object", "properties": {"cents": {"type": "integer", "minimum": "one"}}}
    with pytest.raises(ToolDefinitionError, match=r"properties/cents/minimum"):
        ToolSpec("d", schema, noop)
