"""Property: however a saved state is tampered with, no effect runs that a fresh judgement would not allow."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

from agent_fsm import (
    NotPaused,
    RunState,
    ScriptedModel,
    StateError,
    ToolCall,
    UngatedApproval,
    Verdict,
    advance,
    answer_message,
    as_verdict,
    deny_effects,
    resume,
    run,
    validate_call,
)
from agent_fsm.engine import RUN_MACHINE, call_fingerprint
from tests.payments import edit_pending_arguments, make_payments, pay_call, pay_gate

STATES = [s.name for s in RUN_MACHINE.states]
SCRIPT = [pay_call(50), pay_call(10, "c2"), pay_call(70, "c3"), answer_message("Paid.")]

amounts = st.one_of(st.integers(-5, 2_000), st.floats(allow_nan=False), st.text(max_size=3), st.booleans(), st.none())
arguments = st.fixed_dictionaries(
    {"account": st.sampled_from(["ACME", "GLOBEX", "EVIL"]), "cents": amounts},
    optional={"memo": st.text(max_size=3)},
)
json_values = st.one_of(st.none(), st.booleans(), st.integers(-3, 12), st.text(max_size=4), amounts)
# Paths into a saved state, and what a forger might write there.
FIELDS = [
    ("turns",),
    ("tool_attempts",),
    ("opening",),
    ("consumed",),
    ("machine_state",),
    ("pending", 0, "name"),
    ("pending", 0, "call_id"),
    ("pending", 0, "arguments", "cents"),
    ("pause", "fingerprint"),
    ("pause", "pause_id"),
    ("limits", "max_tool_calls"),
    ("limits", "max_turns"),
    ("prompt_token_log", 0),
    ("denials",),
]

tampering = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(FIELDS), json_values),
    st.tuples(st.just("forge_arguments"), arguments, st.booleans()),
    st.tuples(st.just("machine_state"), st.sampled_from(STATES), st.sampled_from(["allow", "ask", "invalid", None])),
    st.tuples(st.just("no_pause"), st.none(), st.none()),
    st.tuples(st.just("no_limits"), st.none(), st.none()),
)


def _tamper(text: str, edits: list[tuple[str, Any, Any]]) -> str:
    for kind, first, second in edits:
        if kind == "forge_arguments":
            with contextlib.suppress(KeyError, IndexError, TypeError):
                text = edit_pending_arguments(text, first, refingerprint=second)
            continue
        data = json.loads(text)
        try:
            if kind == "set":
                target = data
                for step in first[:-1]:
                    target = target[step]
                target[first[-1]] = second
            elif kind == "machine_state":
                data["machine_state"] = first
                if data["path"]:
                    data["path"][-1] = first
                data["judgement"] = None if second is None else {"kind": second, "reason": "forged"}
            elif kind == "no_pause":
                data["pause"] = None
            else:
                data["limits"] = None
        except (KeyError, IndexError, TypeError):
            pass
        text = json.dumps(data)
    return text


def _deny_all(call: ToolCall) -> Verdict:
    return Verdict.deny("closed")


@given(
    edits=st.lists(tampering, min_size=1, max_size=3),
    approve=st.booleans(),
    edit=st.one_of(st.none(), arguments),
    registry=st.sampled_from(["same", "tighter", "no_pay"]),
    gate_name=st.sampled_from(["pay_gate", "none", "deny_all"]),
)
def test_tampered_states_never_buy_an_effect(edits, approve, edit, registry, gate_name):
    """Random edits to a paused run's JSON: every payment made is one a fresh judgement allows
    (or the exact call a human approved), and nothing raises but the documented errors."""
    tools, _ = make_payments()
    paused = run("Pay.", ScriptedModel(SCRIPT), tools, gate=pay_gate)
    assert paused.state.pause is not None
    approved_fingerprint = paused.state.pause.fingerprint
    text = _tamper(paused.state.to_json(), edits)

    now, ledger = make_payments(maximum=40 if registry == "tighter" else 1000)
    if registry == "no_pay":
        del now["pay"]
    gate = {"pay_gate": pay_gate, "none": None, "deny_all": _deny_all}[gate_name]
    try:
        state = RunState.from_json(text)
    except ValueError:
        event("refused on load")
        assert ledger == []
        return
    try:
        if state.machine_state == "AwaitingApproval":
            resume(state, ScriptedModel(SCRIPT), now, approve=approve, gate=gate, arguments=edit if approve else None)
        else:
            advance(state, ScriptedModel(SCRIPT), now, gate=gate)
    except (StateError, NotPaused, UngatedApproval):  # the last: an effectful call approved with no gate
        event("refused by the driver")
        assert ledger == []
        return
    event(f"ran: {len(ledger)} payment(s)")

    fresh_gate = gate if gate is not None else deny_effects(now)
    for entry in ledger:
        call = ToolCall(entry["call_id"], "pay", {"account": entry["account"], "cents": entry["cents"]})
        if validate_call(call, now) is not None:
            raise AssertionError(f"{call!r} ran although the current contract refuses it")
        verdict = as_verdict(fresh_gate(call)).kind
        human = approve and (
            call_fingerprint(call) == approved_fingerprint or (edit is not None and call.arguments == edit)
        )
        assert verdict == "allow" or (verdict == "ask" and human), f"{call!r} ran on a gate verdict of {verdict}"


object_edits = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["turns", "tool_attempts", "opening", "alternation"]), st.integers(-2, 9)),
        st.tuples(st.just("machine_state"), st.sampled_from(STATES)),
        st.tuples(st.just("judgement"), st.sampled_from(["allow", "ask", "invalid", "denied"])),
        st.tuples(st.just("arguments"), arguments),
        st.tuples(st.just("consumed"), st.booleans()),
        st.tuples(st.just("pause"), st.none()),
    ),
    min_size=1,
    max_size=3,
)


@given(edits=object_edits, approve=st.booleans(), gate_name=st.sampled_from(["pay_gate", "none"]))
def test_tampered_state_objects_never_buy_an_effect(edits, approve, gate_name):
    """The same property for a state object edited in memory (no from_json in between): the driver's own checks."""
    from agent_fsm import Judgement

    tools, ledger = make_payments()
    state = run("Pay.", ScriptedModel(SCRIPT), tools, gate=pay_gate).state
    approved_fingerprint = state.pause.fingerprint
    for name, value in edits:
        if name == "judgement":
            state.judgement = Judgement(value, "forged")
        elif name == "arguments":
            state.pending[0] = ToolCall("c1", "pay", value, json.dumps(value))
        elif name == "machine_state":
            state.machine_state = value
            state.path[-1] = value
        else:
            setattr(state, name, value)
    gate = pay_gate if gate_name == "pay_gate" else None
    try:
        if state.machine_state == "AwaitingApproval":
            resume(state, ScriptedModel(SCRIPT), tools, approve=approve, gate=gate)
        else:
            advance(state, ScriptedModel(SCRIPT), tools, gate=gate)
    except (StateError, NotPaused, UngatedApproval):  # the last: an effectful call approved with no gate
        event("refused by the driver")
        assert ledger == []
        return
    event(f"ran: {len(ledger)} payment(s)")
    fresh_gate = gate if gate is not None else deny_effects(tools)
    for entry in ledger:
        call = ToolCall(entry["call_id"], "pay", {"account": entry["account"], "cents": entry["cents"]})
        verdict = as_verdict(fresh_gate(call)).kind
        human = approve and call_fingerprint(call) == approved_fingerprint
        assert validate_call(call, tools) is None and (verdict == "allow" or (verdict == "ask" and human)), call
