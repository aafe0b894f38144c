"""match=: a world that logs its effects in its own shape is checked without reshaping its log."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from agent_fsm import ScriptedModel, ToolCall, ToolSpec, Verdict, answer_message, run, tool_call_message
from agent_fsm.testing import (
    InvariantViolation,
    by_call,
    check_driver,
    check_gate_contains,
    check_policy_ends,
    run_harness,
)

FIXED = settings(derandomize=True, database=None, max_examples=30, phases=[p for p in Phase if p is not Phase.explain])


@attrs.define
class Payouts:
    """A payout office that logs one ``(payee, cents)`` tuple per payment and answers with a receipt number."""

    tools: dict[str, ToolSpec]
    effects: list[tuple[str, int]]


def make_payouts(*, stray: bool = False) -> Payouts:
    effects: list[tuple[str, int]] = []

    def pay(payee: str, cents: int) -> dict[str, Any]:
        effects.append((payee, cents))
        if stray:  # a payment no call asked for
            effects.append(("treasury", 1))
        return {"receipt": len(effects)}

    schema = {
        "type": "object",
        "properties": {
            "payee": {"type": "string", "pattern": "^P[0-9]{2}$"},
            "cents": {"type": "integer", "minimum": 1, "maximum": 5_000},
        },
        "required": ["payee", "cents"],
        "additionalProperties": False,
    }
    return Payouts({"pay": ToolSpec("Pay a payee.", schema, pay, effectful=True)}, effects)


def payment_of(effect: Any, call: ToolCall) -> bool:
    return call.arguments is not None and effect == (call.arguments["payee"], call.arguments["cents"])


def small_payments(call: ToolCall) -> Verdict:
    assert call.arguments is not None
    return Verdict.ask("large payment") if call.arguments["cents"] > 1_000 else Verdict.allow("small payment")


def large(call: ToolCall) -> bool:
    return call.arguments is not None and call.arguments["cents"] > 1_000


def test_default_convention_refuses_a_log_in_its_own_shape() -> None:
    """Without match=, the sound gate fails effects_authorized: a tuple is neither the receipt nor names a call id."""
    with pytest.raises(InvariantViolation) as caught:
        check_gate_contains(small_payments, make_payouts, large, settings=FIXED)
    assert caught.value.invariant == "effects_authorized"


def test_match_accepts_the_log_as_it_is() -> None:
    """With match= tying each tuple to the call's arguments, the same sound gate passes every check."""
    check_gate_contains(small_payments, make_payouts, large, settings=FIXED, match=payment_of)
    check_policy_ends(
        lambda: _Pays(), make_payouts, stops={"answered", "awaiting_approval"}, settings=FIXED, match=payment_of
    )
    check_driver(run, make_payouts, settings=FIXED, match=payment_of)


def test_match_still_catches_an_effect_no_call_made() -> None:
    """A payment logged beside the real one matches no executed call: effects_authorized names it."""
    with pytest.raises(InvariantViolation) as caught:
        check_gate_contains(small_payments, lambda: make_payouts(stray=True), large, settings=FIXED, match=payment_of)
    assert caught.value.invariant == "effects_authorized"
    assert "('treasury', 1)" in caught.value.detail


def test_the_harness_takes_match() -> None:
    """run_harness(match=...) checks the world's own log after every step."""
    harness = run_harness(make_payouts, gate=small_payments, forbidden=large, match=payment_of)
    run_state_machine_as_test(harness, settings=settings(harness.TestCase.settings, max_examples=15, derandomize=True))
    stray = run_harness(lambda: make_payouts(stray=True), gate=small_payments, match=payment_of)
    with pytest.raises(InvariantViolation) as caught:
        run_state_machine_as_test(stray, settings=settings(stray.TestCase.settings, max_examples=50, derandomize=True))
    assert caught.value.invariant == "effects_authorized"


def test_by_call_pairs_each_observation_with_its_call() -> None:
    """by_call hands the matcher the call behind each executed observation, and nothing for a denied one."""
    world = make_payouts()
    model = ScriptedModel(
        [
            tool_call_message("a", "pay", {"payee": "P01", "cents": 5}),
            tool_call_message("b", "pay", {"payee": "P02", "cents": 4000}),
        ]
    )
    result = run("pay", model, world.tools, gate=small_payments)
    match = by_call(payment_of, result.state)
    executed = [o for o in result.state.observations if o.kind == "result"]
    assert [match(("P01", 5), o) for o in result.state.observations] == [
        o in executed for o in result.state.observations
    ]
    assert not any(match(("P02", 4000), o) for o in result.state.observations)


class _Pays:
    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        if not any(m.get("role") == "tool" for m in messages):
            return tool_call_message("call_1", "pay", {"payee": "P07", "cents": 300})
        return answer_message("Paid.")
