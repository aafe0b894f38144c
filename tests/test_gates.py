"""Gates: verdicts, tuple gates, the secure default and gate bugs."""

from __future__ import annotations

import pytest

from agent_fsm import (
    GateError,
    ScriptedModel,
    Stop,
    ToolCall,
    Verdict,
    allow_all,
    answer_message,
    as_verdict,
    ask_for_effects,
    deny_effects,
    run,
    tool_call_message,
)
from tests.warehouse import make_warehouse, ship_args


def test_tuples_read_as_verdicts():
    """(True, r) allows and (False, r) denies, keeping the reason."""
    assert as_verdict((True, "ok")) == Verdict("allow", "ok")
    assert as_verdict((False, "no")) == Verdict("deny", "no")


@pytest.mark.parametrize("bad", [None, True, "allow", (1, "x"), (True,), (True, "r", 3), {"allowed": True}])
def test_anything_else_is_a_gate_error(bad):
    """A gate answering something that is not a verdict is a bug, never guessed at."""
    with pytest.raises(GateError, match="must return a Verdict"):
        as_verdict(bad)


def test_verdict_kind_is_checked():
    """Only allow, deny and ask exist."""
    with pytest.raises(ValueError):
        Verdict("maybe", "")


def test_secure_default_and_ask_gates_follow_the_effectful_flag():
    """deny_effects refuses effectful tools; ask_for_effects asks; both allow reads."""
    tools, _ = make_warehouse()
    read = ToolCall("r", "count_stock", {"sku": "BOLT"})
    write = ToolCall("w", "ship", ship_args())
    assert deny_effects(tools)(read).kind == "allow"
    assert deny_effects(tools)(write).kind == "deny"
    assert ask_for_effects(tools)(write).kind == "ask"
    assert allow_all(write).kind == "allow"


def test_gate_sees_only_validated_calls():
    """The gate is never consulted for a proposal that broke its contract."""
    tools, _ = make_warehouse()
    seen: list[ToolCall] = []

    def recording_gate(call):
        seen.append(call)
        return Verdict.allow()

    model = ScriptedModel(
        [
            tool_call_message("c", "ship", {"qty": "lots"}),
            tool_call_message("d", "ship", ship_args()),
            answer_message("Shipped."),
        ]
    )
    run("t", model, tools, gate=recording_gate)
    assert [c.call_id for c in seen] == ["d"]


def test_a_gate_that_raises_fails_the_run_loudly():
    """An exception inside a gate is a GateError carrying the state, not an observation."""
    tools, effects = make_warehouse()

    def broken_gate(call):
        raise LookupError("policy table missing")

    with pytest.raises(GateError) as caught:
        run("t", ScriptedModel([tool_call_message("c", "ship", ship_args())]), tools, gate=broken_gate)
    assert isinstance(caught.value.__cause__, LookupError)
    assert caught.value.state.turns == 1 and effects == []


def test_a_gate_returning_garbage_fails_the_run_with_the_state():
    """A gate returning a non-verdict stops the run; the error carries the state."""
    tools, _ = make_warehouse()
    with pytest.raises(GateError) as caught:
        run("t", ScriptedModel([tool_call_message("c", "ship", ship_args())]), tools, gate=lambda call: "yes")
    assert caught.value.state is not None and caught.value.state.machine_state == "Proposing"


def test_denied_effect_never_reaches_the_handler():
    """Whatever the model proposes, a denying gate keeps the effect log empty."""
    tools, effects = make_warehouse()
    proposals = [tool_call_message(f"c{i}", "ship", ship_args(qty=i)) for i in range(1, 6)]
    model = ScriptedModel([*proposals, answer_message("I could not ship anything.")])
    result = run("t", model, tools, gate=lambda call: Verdict.deny("frozen"))
    assert effects == [] and result.stop is Stop.ANSWERED
