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
