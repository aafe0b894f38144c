"""Hostile input at the effect boundary: arguments, schemas, names, call ids and results nobody vouched for."""

from __future__ import annotations

import json
import math
import sys
import time
import urllib.request
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_fsm import (
    Limits,
    RunState,
    ScriptedModel,
    Stop,
    ToolCall,
    ToolDefinitionError,
    ToolSpec,
    Verdict,
    answer_message,
    ask_for_effects,
    check_run,
    checked_formats,
    run,
    tool_call_message,
    validate_call,
)
from agent_fsm.engine import normalise_reply
from agent_fsm.engine._messages import CallIds

AMOUNT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"amount": {"type": "number", "maximum": 20}, "note": {"type": "array"}},
    "required": ["amount"],
    "additionalProperties": False,
}


def _payments() -> tuple[dict[str, ToolSpec], list[Any]]:
    paid: list[Any] = []

    def pay(amount: float, note: Any = None) -> str:
        paid.append(amount)
        return "paid"

    return {"pay": ToolSpec("Pay an amount.", AMOUNT_SCHEMA, pay, effectful=True)}, paid


def _raw_call(name: str, text: str, call_id: str = "c1") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "function": {"name": name, "arguments": text}}],
    }


def _refuse(constant: str) -> Any:
    raise AssertionError(f"non-strict JSON constant {constant}")


def _gate_counting(seen: list[Any]) -> Any:
    def gate(call: ToolCall) -> Verdict:
        seen.append(call)
        amount = call.arguments["amount"] if call.arguments else 0
        return Verdict.deny("too much") if amount > 20 else Verdict.allow()

    return gate


# --- arguments ---------------------------------------------------------------------


@pytest.mark.parametrize("text", ['{"amount": NaN}', '{"amount": Infinity}', '{"amount": -Infinity}'])
def test_non_finite_numbers_in_json_text_never_reach_the_gate_or_handler(text):
    """Python's json reads NaN; a NaN passes `maximum` and `amount > 20` alike, so it is refused first."""
    tools, paid = _payments()
    seen: list[Any] = []
    result = run("t", ScriptedModel([_raw_call("pay", text), answer_message("done")]), tools, gate=_gate_counting(seen))
    observation = result.state.observations[0]
    assert observation.kind == "invalid" and "NaN and Infinity are refused" in observation.content
    assert seen == [] and paid == []
    json.loads(result.state.to_json(), parse_constant=_refuse)  # strict JSON: the NaN is only quoted text


def test_a_paused_run_whose_reply_holds_a_nan_call_saves_as_strict_json():
    """The NaN call waits behind the paused one as text only, so the saved state has no NaN to write."""
    tools, _ = _payments()
    reply = {
        "role": "assistant",
        "tool_calls": [
            {"id": "c1", "function": {"name": "pay", "arguments": '{"amount": 5}'}},
            {"id": "c2", "function": {"name": "pay", "arguments": '{"amount": NaN}'}},
        ],
    }
    paused = run("t", ScriptedModel([reply]), tools, gate=ask_for_effects(tools))
    assert paused.stop is Stop.AWAITING_APPROVAL and paused.state.pending[1].arguments is None
    json.loads(paused.state.to_json(), parse_constant=_refuse)
    assert "NaN and Infinity are refused" in validate_call(paused.state.pending[1], tools)


def test_non_finite_numbers_built_in_code_are_refused_too():
    """A ToolCall made by code (no JSON text) gets the same refusal, nested or not."""
    tools, _ = _payments()
    reason = validate_call(ToolCall("c", "pay", {"amount": 1, "note": [1, [float("nan")]]}), tools)
    assert reason == "pay arguments rejected: note/1/0: nan is not a JSON number (NaN and Infinity are refused)"


def _nested(depth: int) -> str:
    return '{"amount": 1, "note": ' + "[" * depth + "]" * depth + "}"


def test_nesting_past_the_limit_is_invalid_with_its_reason_and_the_limit_is_configurable():
    """The default allows 32 levels; Limits(max_argument_depth=...) moves it."""
    tools, _ = _payments()
    call = normalise_reply(_raw_call("pay", _nested(40)), 1)[1][0]
    assert "arguments nest deeper than 32 levels" in validate_call(call, tools)
    assert validate_call(call, tools, limits=Limits(max_argument_depth=64)) is None
    shallow = normalise_reply(_raw_call("pay", _nested(3)), 1)[1][0]
    assert "nest deeper than 3 levels" in validate_call(shallow, tools, limits=Limits(max_argument_depth=3))
    with pytest.raises(ValueError):
        Limits(max_argument_depth=1000)  # past what a saved state can hold


@pytest.mark.parametrize("depth", [150, 5000, 100_000])
def test_very_deep_arguments_never_raise_and_a_paused_run_holding_them_still_saves(depth):
    """Parsed or not, deep documents are refused with a reason; none raises RecursionError."""
    tools, paid = _payments()
    reply = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "function": {"name": "pay", "arguments": '{"amount": 5}'}},
            {"id": "c2", "function": {"name": "pay", "arguments": _nested(depth)}},
        ],
    }
    paused = run("t", ScriptedModel([reply]), tools, gate=ask_for_effects(tools))
    assert paused.stop is Stop.AWAITING_APPROVAL
    assert RunState.from_json(paused.state.to_json()) == paused.state  # the pause can be saved
    reason = validate_call(paused.state.pending[1], tools)
    assert reason is not None and ("nest" in reason or "size limit" in reason) and paid == []


def test_arguments_longer_than_the_size_limit_are_invalid():
    """Measured on the text the model sent, or on the canonical JSON of a call built in code."""
    tools, _ = _payments()
    long_text = '{"amount": 1, "note": ["' + "x" * 200 + '"]}'
    call = normalise_reply(_raw_call("pay", long_text), 1)[1][0]
    limits = Limits(max_argument_chars=100)
    assert "at most 100" in validate_call(call, tools, limits=limits)
    built = ToolCall("c", "pay", {"amount": 1, "note": ["x" * 200]})
    assert "at most 100" in validate_call(built, tools, limits=limits)
    unparsed = normalise_reply(_raw_call("pay", "[" * 300), 1)[1][0]
    assert "within the size limit" in validate_call(unparsed, tools, limits=limits)
    assert validate_call(call, tools) is None  # the default allows 100,000 characters


def _cyclic() -> dict[str, Any]:
    loop: dict[str, Any] = {"amount": 1}
    loop["note"] = [loop]
    return loop


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({"amount": 1, "note": [{1, 2}]}, "a set is not JSON data"),
        ({"amount": 1, "note": [{(1, 2): "x"}]}, "object key (1, 2) is not a string"),
        ({"amount": 10**5000}, "too large to be JSON data"),
    ],
    ids=["set", "tuple-key", "huge-int"],
)
def test_arguments_that_are_not_json_data_are_refused(arguments, fragment):
    """Calls built in code or handed over already parsed must still be plain JSON data."""
    tools, _ = _payments()
    assert fragment in validate_call(ToolCall("c", "pay", arguments), tools)


def test_parsed_arguments_from_a_server_that_are_cyclic_never_raise():
    """A Mapping of arguments (some servers send them parsed) may be cyclic: refused, fingerprinted, saved."""
    tools, paid = _payments()
    reply = {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "pay", "arguments": _cyclic()}}]}
    result = run("t", ScriptedModel([reply, answer_message("ok")]), tools, gate=_gate_counting([]))
    assert result.state.observations[0].kind == "invalid" and paid == []
    RunState.from_json(result.state.to_json())


# --- schemas -----------------------------------------------------------------------


def _string_tool(**string_schema: Any) -> ToolSpec:
    schema = {"type": "object", "properties": {"s": {"type": "string", **string_schema}}, "required": ["s"]}
    return ToolSpec("Take a string.", schema, lambda s: s)


def test_a_remote_ref_is_refused_at_definition_and_nothing_is_fetched(monkeypatch):
    """No network at definition or validation: a $ref must resolve inside the schema."""

    def no_network(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a schema reference was fetched")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    schema = {"type": "object", "properties": {"a": {"$ref": "https://example.com/amount.json"}}}
    with pytest.raises(ToolDefinitionError, match="nothing is ever fetched"):
        ToolSpec("d", schema, lambda a=None: a)


def test_a_dangling_ref_fails_at_definition_not_at_the_first_call():
    """A pointer to a $defs entry that is not there is a definition error."""
    schema = {"type": "object", "properties": {"a": {"$ref": "#/$defs/amount"}}, "$defs": {"mount": {}}}
    with pytest.raises(ToolDefinitionError, match="'#/\\$defs/amount' does not resolve"):
        ToolSpec("d", schema, lambda a=None: a)


def test_a_local_ref_resolves_and_validates():
    """$ref into $defs works, and is enforced (through jsonschema, since $ref is not compiled)."""
    schema = {
        "type": "object",
        "properties": {"a": {"$ref": "#/$defs/small"}},
        "$defs": {"small": {"type": "integer", "maximum": 5}},
    }
    spec = ToolSpec("d", schema, lambda a=None: a)
    assert spec.errors({"a": 3}) == []
    assert spec.errors({"a": 9}) == ["a: 9 is greater than the maximum of 5"]


def test_a_schema_that_breaks_its_meta_schema_is_refused():
    """The schema itself is checked against Draft 2020-12 when the ToolSpec is built."""
    with pytest.raises(ToolDefinitionError, match="invalid JSON Schema"):
        ToolSpec("d", {"type": "object", "properties": {"a": {"type": "integr"}}}, lambda a=None: a)


def test_a_backtracking_pattern_runs_in_linear_time():
    """^(a+)+$ on 28 a's and a '!' takes Python's re seconds; RE2 answers at once (a bound, not a benchmark)."""
    spec = _string_tool(pattern="^(a+)+$")
    start = time.perf_counter()
    assert spec.errors({"s": "a" * 28 + "!"}) == ["s: 'aaaaaaaaaaaaaaaaaaaaaaaaaaaa!' does not match '^(a+)+$'"]
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize("pattern", ["(?=a)b", "(a)\\1", "(?<!x)y"])
def test_patterns_that_need_backtracking_are_refused_at_definition(pattern):
    """Look-around and back-references cannot run in linear time: the tool is refused, saying why."""
    with pytest.raises(ToolDefinitionError, match="linear-time regex engine"):
        _string_tool(pattern=pattern)


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        ("^\\d+$", "123", True),
        ("^\\d+$", "\u0663", False),  # ARABIC-INDIC DIGIT THREE: not a JSON Schema \d
        ("^\\w+$", "\u00e9", False),  # é: \w is ASCII
        ("^[a-z]+$", "abc\n", False),  # $ ends the text; Python's would accept the newline
        ("^\\s$", "\u00a0", True),  # ECMA-262 \s includes no-break space
        ("^\\S$", "\u3000", False),
        ("^.$", "\r", False),  # ECMA-262 '.' stops at line terminators
        ("^\\u00e9$", "\u00e9", True),
        ("b", "abc", True),  # unanchored search
    ],
)
def test_patterns_mean_what_json_schema_says(pattern, text, matches):
    """ASCII \\d and \\w, $ at the very end, ECMA-262 \\s and '.'."""
    assert (_string_tool(pattern=pattern).errors({"s": text}) == []) is matches


FORMAT_CASES = {
    "date": (["2024-02-29"], ["2023-02-29", "20240101", "2024-1-01", "\u0662\u0660\u0662\u0664-01-01"]),
    "date-time": (["2024-01-01T10:00:00Z", "2024-01-01t10:00:00.5+01:00"], ["2024-01-01T10:00:00", "tomorrow"]),
    "time": (["10:00:00Z", "23:59:60Z"], ["10:00:00", "24:00:00Z", "22:59:60Z"]),
    "email": (["a.b@example.org", "x@[127.0.0.1]"], [".a@b.com", "a..b@c.com", "ab", "a b@c.com"]),
    "uri": (["https://example.com/x?y=1#z", "urn:isbn:123"], ["example.com", "http://x/ \u00e9", "http://x:99999/"]),
    "uuid": (["123e4567-e89b-12d3-a456-426614174000"], ["123e4567e89b12d3a456426614174000", "x"]),
    "ipv4": (["127.0.0.1"], ["256.0.0.1", "01.2.3.4", "1.2.3"]),
}


def test_checked_formats_are_exactly_the_documented_ones():
    """The public helper that generators ask names the seven checked formats."""
    assert checked_formats() == frozenset(FORMAT_CASES)


@pytest.mark.parametrize("name", sorted(FORMAT_CASES))
def test_formats_are_checked(name):
    """Each checked format accepts its examples and refuses the rest, with jsonschema's wording."""
    good, bad = FORMAT_CASES[name]
    spec = _string_tool(format=name)
    assert [spec.errors({"s": g}) for g in good] == [[] for _ in good]
    for value in bad:
        assert spec.errors({"s": value}) == [f"s: {value!r} is not a {name!r}"]


def test_an_unchecked_format_is_an_annotation():
    """Formats outside checked_formats() are shown to the model, not enforced."""
    assert _string_tool(format="hostname").errors({"s": "not a host!"}) == []


# --- shorthand, registries, names ------------------------------------------------------


def test_shorthand_schemas_are_closed():
    """{"arg": type} allows no other argument."""
    spec = ToolSpec("d", {"sku": str}, lambda sku: sku)
    assert spec.json_schema["additionalProperties"] is False
    assert spec.errors({"sku": "x", "admin": True}) == [
        "Additional properties are not allowed ('admin' was unexpected)"
    ]


@pytest.mark.parametrize("kind", [list[int], int | None, Any, "int"])
def test_an_unsupported_shorthand_type_names_the_supported_ones(kind):
    """list[int] and friends are not silently read as JSON Schema."""
    with pytest.raises(ToolDefinitionError, match="the shorthand schema accepts only the plain types str, bool, int"):
        ToolSpec("d", {"sku": str, "n": kind}, lambda sku, n: sku)


def test_a_registry_given_as_a_list_is_a_type_error():
    """run(tools=[spec]) says what a registry is instead of failing deep inside."""
    spec = ToolSpec("d", {}, lambda: 1)
    with pytest.raises(TypeError, match="tools must be a mapping of tool name to ToolSpec"):
        run("t", ScriptedModel([answer_message("x")]), [spec])  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["", "has space", "x" * 65, "dot.ted", "semi;colon"])
def test_tool_names_must_be_what_providers_accept(name):
    """^[a-zA-Z0-9_-]{1,64}$, checked when a run starts."""
    spec = ToolSpec("d", {}, lambda: 1)
    with pytest.raises(ToolDefinitionError, match="must match"):
        run("t", ScriptedModel([answer_message("x")]), {name: spec})


def test_a_call_with_no_name_never_runs_a_tool_named_empty():
    """Even a registry that was never checked cannot be tricked into resolving ''."""
    ran: list[int] = []
    tools = {"": ToolSpec("d", {}, lambda: ran.append(1))}
    assert validate_call(ToolCall("c", "", {}), tools).startswith("unknown tool: the call names no tool")
    reply = {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"arguments": "{}"}}]}
    ok = {"ok": ToolSpec("d", {}, lambda: ran.append(2))}
    result = run("t", ScriptedModel([reply, answer_message("x")]), ok)
    assert result.state.observations[0].kind == "invalid" and ran == []


# --- handlers and open schemas ---------------------------------------------------------

OPEN_SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}


def test_an_argument_an_open_schema_allows_reaches_only_a_handler_that_takes_it():
    """The extra argument is valid; the handler is called with what its signature names, no TypeError."""
    got: list[Any] = []
    named = ToolSpec("d", OPEN_SCHEMA, lambda order_id: got.append(order_id))
    anything = ToolSpec("d", OPEN_SCHEMA, lambda **kwargs: got.append(kwargs))
    for spec in (named, anything):
        model = ScriptedModel([tool_call_message("c1", "t", {"order_id": "A", "extra": 1}), answer_message("ok")])
        result = run("t", model, {"t": spec})
        assert result.stop is Stop.ANSWERED and result.state.observations[0].kind == "result"
    assert got == ["A", {"order_id": "A", "extra": 1}]


def test_a_schema_that_does_not_fit_its_handler_is_refused_at_definition():
    """A declared argument the handler cannot take, or a handler argument a valid call may omit."""
    with pytest.raises(ToolDefinitionError, match="the handler takes no such parameter"):
        ToolSpec("d", OPEN_SCHEMA, lambda: 1)
    with pytest.raises(ToolDefinitionError, match="the schema does not require them"):
        ToolSpec("d", OPEN_SCHEMA, lambda order_id, qty: 1)
    # A default makes it fit once the schema types it, or closes the object so no call can carry it.
    typed = {**OPEN_SCHEMA, "properties": {**OPEN_SCHEMA["properties"], "qty": {"type": "integer"}}}
    ToolSpec("d", typed, lambda order_id, qty=1: 1)
    ToolSpec("d", {**OPEN_SCHEMA, "additionalProperties": False}, lambda order_id, qty=1: 1)
    with pytest.raises(ToolDefinitionError, match="'qty' is not typed by the schema"):
        ToolSpec("d", OPEN_SCHEMA, lambda order_id, qty=1: 1)  # open: a call could pass qty as anything


# --- call ids --------------------------------------------------------------------------


def test_reused_and_duplicate_call_ids_are_renamed_deterministically_and_the_original_kept():
    """Within a reply, across turns, and against the engine's own stand-in ids."""
    first = {
        "role": "assistant",
        "tool_calls": [
            {"id": "x", "function": {"name": "t", "arguments": "{}"}},
            {"id": "x", "function": {"name": "t", "arguments": "{}"}},
            {"function": {"name": "t", "arguments": "{}"}},  # stand-in call_1_2
        ],
    }
    second = {
        "role": "assistant",
        "tool_calls": [
            {"id": "x", "function": {"name": "t", "arguments": "{}"}},
            {"id": "call_1_2", "function": {"name": "t", "arguments": "{}"}},
        ],
    }
    tools = {"t": ToolSpec("d", {}, lambda: "ok")}
    result = run("t", ScriptedModel([first, second, answer_message("done")]), tools, limits=Limits(repeated_denials=9))
    ids = [o.call_id for o in result.state.observations]
    assert ids == ["x", "x~2", "call_1_2", "x~3", "call_1_2~2"]
    assert len(set(ids)) == len(ids)
    _, calls = normalise_reply(second, 2, CallIds({"x", "x~2", "call_1_2"}))
    assert [(c.call_id, c.original_id) for c in calls] == [("x~3", "x"), ("call_1_2~2", "call_1_2")]
    assert check_run(result, [], Limits())["observations_correlated"]


# --- results that cannot be stored -----------------------------------------------------


def _deep_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("result", "fragment"),
    [
        ({(1, 2): "x"}, "(1, 2)"),
        (_cyclic(), "[{...}]"),
        (10**5000, "<int of"),
        (float("nan"), "nan"),
        ({"v": float("inf")}, "inf"),
        (_deep_list(5000), "[[[["),
        (object(), "<object object at"),
    ],
    ids=["tuple-key", "cycle", "huge-int", "nan", "inf", "deep", "object"],
)
def test_a_result_that_cannot_be_stored_is_kept_as_text_and_the_effect_recorded(result, fragment):
    """The handler ran: its observation is an ok result in text form, flagged, and the state still saves."""
    calls: list[int] = []

    def act() -> Any:
        calls.append(1)
        return result

    tools = {"act": ToolSpec("d", {}, act, effectful=True)}
    model = ScriptedModel([tool_call_message("c1", "act", {}), answer_message("done")])
    outcome = run("t", model, tools, gate=lambda call: Verdict.allow())
    observation = outcome.state.observations[0]
    assert calls == [1] and outcome.stop is Stop.ANSWERED
    assert observation.ok and observation.kind == "result" and observation.text_form
    assert isinstance(observation.content, str) and fragment in observation.content
    text = outcome.state.to_json()
    json.loads(text, parse_constant=_refuse)
    assert RunState.from_json(text) == outcome.state
    assert json.loads(outcome.state.messages[-2]["content"])["text_form"] is True  # the model is told


# --- Hypothesis: hostile documents raise nothing ------------------------------------------


def _safe_dumps(value: Any) -> str:
    try:
        return json.dumps(value, default=str)
    except (TypeError, ValueError, RecursionError):
        return "{}"


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**4400, max_value=10**4401),
    st.floats(),  # NaN and infinities included
    st.text(max_size=20),
    st.sampled_from([{1, 2}, (1, 2), b"bytes", object()]),
)
_documents = st.recursive(
    _scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=5), st.integers(), st.tuples(st.integers())), inner, max_size=4),
    ),
    max_leaves=20,
)
_texts = st.one_of(
    st.text(max_size=40),
    st.integers(0, 3000).map(_nested),
    st.builds(lambda d: _safe_dumps(d), _documents),
    st.sampled_from(['{"amount": NaN}', '{"amount": 1e999}', "{" * 2000, '{"amount": ' + "9" * 5000 + "}"]),
)


@given(arguments=st.one_of(_documents, _texts, st.builds(lambda d: {"amount": d}, _documents)))
def test_hostile_argument_documents_never_raise_anything_but_documented_errors(arguments):
    """Text or parsed, any document goes through parsing, validation and a whole run with a typed outcome."""
    tools, paid = _payments()
    reply = {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "pay", "arguments": arguments}}]}
    message, calls = normalise_reply(reply, 1)
    json.dumps(message, allow_nan=False)  # the stored message is strict JSON whatever arrived
    reason = validate_call(calls[0], tools)
    assert reason is None or isinstance(reason, str)
    calls[0].fingerprint()
    result = run("t", ScriptedModel([reply, answer_message("done")]), tools, gate=_gate_counting([]))
    assert result.stop in (Stop.ANSWERED, Stop.NO_PROGRESS)
    RunState.from_json(result.state.to_json())
    for amount in paid:  # whatever ran was a real, finite, allowed number
        assert isinstance(amount, (int, float)) and math.isfinite(amount) and amount <= 20


def test_a_recursive_schema_on_a_deep_stack_gives_a_reason_not_a_recursion_error():
    """jsonschema recurses per level; called with little stack left, validation still answers with a reason."""
    node = {"anyOf": [{"type": "array", "items": {"$ref": "#/$defs/node"}}, {"type": "integer"}]}
    schema = {"type": "object", "properties": {"t": {"$ref": "#/$defs/node"}}, "$defs": {"node": node}}
    tools = {"d": ToolSpec("d", schema, lambda t=None: t)}
    value: Any = "x"
    for _ in range(99):
        value = [value]
    call = ToolCall("c", "d", {"t": value})
    limits = Limits(max_argument_depth=100)

    def with_little_stack(depth: int) -> str | None:
        return validate_call(call, tools, limits=limits) if depth == 0 else with_little_stack(depth - 1)

    reason = with_little_stack(sys.getrecursionlimit() - 250)
    assert reason is not None and reason.startswith("d arguments rejected: ")
    assert len(reason) < 1200  # jsonschema's quote of the whole value is clipped
