"""Tests for agent_fsm.testing's building blocks: schema values, message strategies, invariant assertions."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agent_fsm.testing as kit
from agent_fsm import (
    Limits,
    RunResult,
    ScriptedModel,
    Stop,
    ToolCall,
    ToolSpec,
    Verdict,
    answer_message,
    parse_tool_calls,
    run,
    validate_call,
)
from agent_fsm.engine import tool_call_message
from agent_fsm.examples.support_desk import make_support_desk, refund_gate
from agent_fsm.testing import (
    InvariantViolation,
    TableGate,
    UnsupportedSchema,
    assert_run_invariants,
    assistant_messages,
    constants_of,
    schema_values,
    schema_violations,
    world_of,
)
from tests.strategies import CREDIT_SCHEMA, make_ledger

LEDGER = make_ledger().tools
TOOLS = {**LEDGER, **make_support_desk().tools}
SCHEMAS = {name: tool.json_schema for name, tool in TOOLS.items()}
VALUES = {name: schema_values(schema) for name, schema in SCHEMAS.items()}


def test_public_names_are_exported() -> None:
    """__all__ lists every public name of agent_fsm.testing and each one resolves."""
    public = {n for n in dir(kit) if not n.startswith("_")} - {"annotations"}
    modules = {n for n in public if type(getattr(kit, n)).__name__ == "module"}
    assert set(kit.__all__) == public - modules
    assert all(hasattr(kit, name) for name in kit.__all__)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
@given(data=st.data())
def test_schema_values_satisfy_the_real_validator(name: str, data: st.DataObject) -> None:
    """Every value generated from a tool's schema is accepted by the engine's validator, unfiltered."""
    value = data.draw(VALUES[name])
    assert TOOLS[name].errors(value) == []


# A credit contract whose every field is closed (enums, bounds, an anchored digit pattern),
# so that no random text can satisfy the schema by chance.
CLOSED_CREDIT = ToolSpec(
    "probe",
    {**CREDIT_SCHEMA, "properties": {k: v for k, v in CREDIT_SCHEMA["properties"].items() if k != "approval"}},
    lambda **kw: None,
)


@given(value=schema_violations(CLOSED_CREDIT.json_schema))
def test_schema_violations_are_refused(value: Any) -> None:
    """Every violation generated for a closed schema is refused by the engine's validator."""
    assert CLOSED_CREDIT.errors(value), f"{value!r} should break the credit contract"


def test_unsupported_keyword_is_refused_by_name() -> None:
    """A schema keyword outside the supported subset raises UnsupportedSchema naming it."""
    with pytest.raises(UnsupportedSchema, match=r"\['oneOf'\]"):
        schema_values({"oneOf": [{"type": "string"}, {"type": "integer"}]})


def test_constants_of_reads_code_globals_and_closures() -> None:
    """constants_of finds literals, named globals and closed-over values, with integer neighbours."""
    threshold = 750

    def predicate(call: ToolCall) -> bool:
        return call.name == "refund_order" and call.arguments["amount_cents"] > threshold  # type: ignore[index]

    found = constants_of(predicate, refund_gate)
    assert {749, 750, 751} <= set(found)  # closure
    assert {4999, 5000, 5001} <= set(found)  # AUTO_REFUND_LIMIT_CENTS, a global of refund_gate
    assert "refund_order" in found
    assert constants_of(None) == ()


MESSAGES = {kind: assistant_messages(LEDGER, kinds=(kind,)) for kind in kit.MESSAGE_KINDS}


@pytest.mark.parametrize("kind", kit.MESSAGE_KINDS)
@given(data=st.data())
def test_message_kinds_are_what_they_say(kind: str, data: st.DataObject) -> None:
    """Each message kind parses to proposals that validate (call), fail validation (the bad kinds), or none (answer)."""
    message = data.draw(MESSAGES[kind])
    assert message["role"] == "assistant"
    calls = parse_tool_calls(message)
    reasons = [validate_call(call, LEDGER) for call in calls]
    if kind == "answer":
        assert calls == [] and isinstance(message["content"], str)
    elif kind == "call":
        assert len(calls) == 1 and reasons == [None]
    elif kind == "parallel":
        assert len(calls) >= 2
    else:
        assert len(calls) == 1 and reasons[0] is not None
        expected = {
            "bad_json": ("not a JSON object",),
            "unknown_tool": ("unknown tool",),
            "bad_arguments": ("arguments rejected", "not a JSON object"),  # a wrong type may be a whole non-object
        }
        assert any(text in reasons[0] for text in expected[kind]), reasons[0]
    for item in message.get("tool_calls", []):
        assert isinstance(item["function"]["arguments"], str)


def test_unknown_message_kind_is_refused() -> None:
    """Asking for a message kind that does not exist raises ValueError listing the kinds."""
    with pytest.raises(ValueError, match="non-empty selection"):
        assistant_messages(LEDGER, kinds=("shouting",))  # type: ignore[arg-type]


def test_table_gate_answers_both_forms() -> None:
    """TableGate answers Verdicts and (bool, reason) tuples, and its default covers unlisted tools."""
    gate = TableGate({"a": "allow_tuple", "b": "ask", "c": "deny_tuple"}, default="deny")
    assert gate(ToolCall("1", "a", {})) == (True, "a allowed by table")
    assert gate(ToolCall("1", "b", {})) == Verdict("ask", "b: ask by table")
    assert gate(ToolCall("1", "c", {}))[0] is False  # type: ignore[index]
    assert gate(ToolCall("1", "zzz", {})).kind == "deny"  # type: ignore[union-attr]


def test_world_of_reads_registries_and_worlds() -> None:
    """world_of accepts a registry or an object with tools and effects, and refuses anything else."""
    desk = make_support_desk()
    assert world_of(desk).effects is desk.effects
    assert world_of(desk.tools).effects == []
    with pytest.raises(TypeError, match="registry or an object with .tools"):
        world_of(42)


@settings(max_examples=20)
@given(data=st.data())
def test_register_type_strategies_enables_from_type(data: st.DataObject) -> None:
    """After registration st.from_type builds Limits, Verdicts and ToolCalls."""
    kit.register_type_strategies()
    assert isinstance(data.draw(st.from_type(Limits)), Limits)
    assert data.draw(st.from_type(Verdict)).kind in ("allow", "deny", "ask")
    assert isinstance(data.draw(st.from_type(ToolCall)), ToolCall)


# --- the invariant assertions, on a real run tampered with one way at a time -------------


def _denied_refund() -> tuple[RunResult, list[Any]]:
    desk = make_support_desk()
    model = ScriptedModel(
        [
            tool_call_message("call_1", "lookup_order", {"order_id": "A-17"}, thought="Checking the order."),
            tool_call_message("call_2", "refund_order", {"order_id": "A-17", "amount_cents": 9000}),
            tool_call_message("call_3", "refund_order", {"order_id": "A-17", "amount_cents": 4999}),
            answer_message("Refunded 4999 cents, the amount paid."),
        ]
    )
    return run("refund A-17", model, desk.tools, gate=refund_gate, limits=Limits()), desk.effects


def _tampered(result: RunResult, **changes: Any) -> RunResult:
    state = copy.deepcopy(result.state)
    for name, value in changes.items():
        setattr(state, name, value)
    return attrs.evolve(result, state=state)


def test_a_real_run_satisfies_every_invariant() -> None:
    """The support-desk run with a denied then a corrected refund satisfies every invariant."""
    result, effects = _denied_refund()
    assert result.stop is Stop.ANSWERED and effects == [{"order_id": "A-17", "refunded_cents": 4999}]
    assert_run_invariants(result, effects, Limits(), tools=make_support_desk().tools, gate=refund_gate)


def _broken(result: RunResult, effects: Any = None, limits: Limits = Limits(), **kw: Any) -> InvariantViolation:
    with pytest.raises(InvariantViolation) as caught:
        assert_run_invariants(result, effects, limits, **kw)
    return caught.value


def test_turns_over_budget_are_named() -> None:
    """A run with more model calls than max_turns breaks turn_budget, with both figures."""
    result, effects = _denied_refund()
    failure = _broken(result, effects, Limits(max_turns=3))
    assert failure.invariant == "turn_budget" and failure.detail == "4 model calls made, max_turns is 3"


def test_prompt_over_budget_names_the_call() -> None:
    """A prompt above max_prompt_tokens breaks token_budget and names which model call sent it."""
    result, _ = _denied_refund()
    biggest = max(result.state.prompt_token_log)
    failure = _broken(result, limits=Limits(max_prompt_tokens=biggest - 1))
    assert failure.invariant == "token_budget"
    assert failure.where == f"model call {result.state.prompt_token_log.index(biggest) + 1}"


def test_an_unauthorised_effect_is_named() -> None:
    """An effect no executed call produced breaks effects_authorized and names the effect."""
    result, effects = _denied_refund()
    failure = _broken(result, [*effects, {"order_id": "A-17", "refunded_cents": 9000}])
    assert failure.invariant == "effects_authorized" and failure.where == "effect 1"


def test_a_lost_tool_message_is_named() -> None:
    """An observation whose tool message went missing breaks observations_correlated."""
    result, _ = _denied_refund()
    messages = [m for m in result.state.messages if m.get("tool_call_id") != "call_3"]
    failure = _broken(_tampered(result, messages=messages))
    assert failure.invariant == "observations_correlated"
    assert failure.detail == "3 observations but only 2 tool messages carry them"


def test_a_misdirected_tool_message_is_named() -> None:
    """A tool message answering the wrong call id is reported at its index."""
    result, _ = _denied_refund()
    messages = copy.deepcopy(result.state.messages)
    index = next(i for i, m in enumerate(messages) if m.get("role") == "tool")
    messages[index]["tool_call_id"] = "call_9"
    failure = _broken(_tampered(result, messages=messages))
    assert failure.invariant == "observations_correlated" and failure.where == f"message {index}"


def test_an_executed_denied_call_is_named() -> None:
    """A gate that would deny an executed call breaks gate_consulted unless a human approved it."""
    result, effects = _denied_refund()
    deny_all = lambda call: Verdict.deny("no")
    failure = _broken(result, effects, gate=deny_all)
    assert failure.invariant == "gate_consulted" and "lookup_order" in failure.detail
    approved = [o.call_id for o in result.state.observations if o.kind == "result"]
    assert_run_invariants(result, effects, gate=deny_all, approved=approved)


def test_an_executed_invalid_call_is_named() -> None:
    """A call executed against a registry whose contract refuses it breaks contract_checked."""
    result, _ = _denied_refund()
    stricter = dict(make_support_desk().tools)
    stricter["lookup_order"] = ToolSpec("x", {"order_id": int}, lambda order_id: None)
    assert _broken(result, tools=stricter).invariant == "contract_checked"


def test_a_rewritten_answer_is_named() -> None:
    """An answer that is not the final assistant message's text breaks answer_recorded."""
    result, _ = _denied_refund()
    failure = _broken(attrs.evolve(result, answer="Refunded 9000 cents."))
    assert failure.invariant == "answer_recorded"


def test_a_stop_that_disagrees_with_the_state_is_named() -> None:
    """A stop that is not the one of the machine state breaks typed_ending."""
    result, _ = _denied_refund()
    failure = _broken(attrs.evolve(result, stop=Stop.STEP_LIMIT, answer=None))
    assert failure.invariant == "typed_ending"


def test_an_unjustified_budget_stop_is_named() -> None:
    """Claiming step_limit before max_turns is spent breaks stop_justified."""
    result, _ = _denied_refund()
    claimed = attrs.evolve(result, stop=Stop.STEP_LIMIT, answer=None)
    claimed = _tampered(claimed, machine_state="StepLimit")
    assert _broken(claimed).invariant == "stop_justified"


def test_describe_run_lists_every_message() -> None:
    """describe_run shows the stop and one line per message, proposals with their arguments."""
    result, _ = _denied_refund()
    text = kit.describe_run(result)
    assert text.splitlines()[0] == "stop='answered' reason=None"
    assert len(text.splitlines()) == 1 + len(result.state.messages)
    assert (
        'refund_order({"order_id": "A-17", "amount_cents": 9000})' in text and "thought='Checking the order.'" in text
    )


def test_invariants_table_names_every_failure_used() -> None:
    """Every invariant name the kit can raise has a description in INVARIANTS."""
    assert {"turn_budget", "gate_consulted", "forbidden_effect", "expected_stop", "deterministic_replay"} <= set(
        kit.INVARIANTS
    )
    with pytest.raises(KeyError):
        InvariantViolation("made_up", "x")
    assert json.dumps(kit.INVARIANTS)


def test_missing_hypothesis_names_the_testing_extra() -> None:
    """Without hypothesis, importing the kit says which extra to install, not a bare ModuleNotFoundError."""
    import subprocess
    import sys
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    code = "import sys; sys.modules['hypothesis'] = None\nimport agent_fsm.testing"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, env={"PYTHONPATH": str(root)}
    )
    assert done.returncode != 0
    assert "ImportError: agent_fsm.testing needs the 'testing' extra" in done.stderr
    assert 'pip install "agent_fsm[testing]"' in done.stderr
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {e.split(">")[0] for e in extras["testing"]} == {"hypothesis", "pytest"}


@pytest.mark.parametrize("kind", ["date", "date-time", "time", "email", "uri", "uuid", "ipv4"])
@given(data=st.data())
def test_format_values_are_real_values_of_their_format(kind: str, data: st.DataObject) -> None:
    """Every format the kit generates passes jsonschema's FormatChecker and a strict parse of its own."""
    import datetime as dt
    import urllib.parse

    from jsonschema import Draft202012Validator

    schema = {"type": "string", "format": kind, "maxLength": 60}
    value = data.draw(schema_values(schema))
    assert Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER).is_valid(value)
    assert value.isascii()
    if kind == "date":
        dt.date.fromisoformat(value)
    elif kind == "date-time":
        assert value.endswith("Z") and dt.datetime.fromisoformat(value[:-1] + "+00:00").tzinfo is not None
    elif kind == "time":
        assert re.fullmatch(r"\d{2}:\d{2}:\d{2}Z", value)
    elif kind == "uri":
        parsed = urllib.parse.urlsplit(value)
        assert parsed.scheme in ("http", "https") and parsed.netloc


@given(data=st.data())
def test_patterns_use_ascii_digits(data: st.DataObject) -> None:
    """``\\d`` in a schema pattern is ASCII, as in JSON Schema: no digits of other scripts are generated."""
    value = data.draw(schema_values({"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"}))
    assert re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", value)


def test_unknown_format_is_refused_by_name() -> None:
    """A format the kit cannot generate is named, not guessed at."""
    with pytest.raises(UnsupportedSchema, match="'hostname'"):
        schema_values({"type": "string", "format": "hostname"})


def test_constants_of_skips_docstrings_and_reads_dates() -> None:
    """A gate's docstring is prose, not a threshold; its dates come back as ISO strings with their neighbours."""
    import datetime as dt

    cutoff = dt.date(2031, 3, 31)

    def gate(call: Any) -> bool:
        """Refuse anything above 7 hours."""
        return call.arguments["hours"] > 7 and call.arguments["day"] <= cutoff

    found = constants_of(gate)
    assert "Refuse anything above 7 hours." not in found
    assert {7, 6, 8} <= set(found)
    assert {"2031-03-31", "2031-03-30", "2031-04-01"} <= set(found)


def _paying_run() -> tuple[RunResult, list[dict[str, Any]]]:
    """A handler that logs its payment with the call's id and returns a receipt that is not the log entry."""
    from agent_fsm import ScriptedModel, ToolSpec, answer_message, current_call_id, run

    ledger: list[dict[str, Any]] = []

    def pay(amount: int) -> dict[str, Any]:
        ledger.append({"call_id": current_call_id(), "amount": amount})
        return {"receipt": f"R-{len(ledger)}"}

    tools = {"pay": ToolSpec("Pay.", {"amount": int}, pay)}
    model = ScriptedModel([tool_call_message("p1", "pay", {"amount": 5}), answer_message("paid")])
    return run("pay 5", model, tools, gate=lambda call: Verdict.allow()), ledger


def test_effects_named_by_call_id_are_authorized() -> None:
    """The kit ties an effect to its call as check_run does: a call_id field names it, whatever the handler returned."""
    result, ledger = _paying_run()
    assert ledger and ledger[0]["call_id"] == "p1"
    assert_run_invariants(result, ledger, Limits())


def test_an_effect_naming_no_executed_call_is_caught() -> None:
    """A forged entry whose call_id names no executed call breaks effects_authorized."""
    result, ledger = _paying_run()
    assert _broken(result, [*ledger, {"call_id": "p9", "amount": 500}]).invariant == "effects_authorized"


def test_a_custom_effect_match_is_used() -> None:
    """``match=`` replaces the default tie between a log entry and a call, in the kit and in check_run."""
    result, ledger = _paying_run()
    entries = [{"amount": e["amount"]} for e in ledger]
    assert _broken(result, entries).invariant == "effects_authorized"
    assert_run_invariants(result, entries, Limits(), match=lambda effect, observation: observation.ok)
