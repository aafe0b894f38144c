"""Loop detection that costs O(1) per rejection and sees oscillation; check_run that fits real handlers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_fsm import Limits, ScriptedModel, Stop, ToolSpec, answer_message, check_run, run, tool_call_message
from agent_fsm.engine import RunContext, RunState
from agent_fsm.engine._run import denial_repeated
from tests.payments import make_payments, pay_call, pay_gate


def _alternating() -> ScriptedModel:
    """A model that answers each denial by flipping between two refused payments, A and B."""
    a, b = pay_call(500, "a"), pay_call(700, "b")
    return ScriptedModel([a], reactions={"of 500": b, "of 700": a})


def test_alternating_rejections_end_no_progress_with_their_own_reason():
    """A, B, A, B: no proposal came back repeated_denials=5 times, yet the run stops, saying it oscillated."""
    tools, ledger = make_payments()
    result = run("Pay.", _alternating(), tools, gate=pay_gate, limits=Limits(max_turns=20, repeated_denials=5))
    assert result.stop is Stop.NO_PROGRESS and ledger == []
    assert len(result.state.observations) == 4  # the fourth rejection completes A, B, A, B
    assert "alternated over 4 consecutive rejections" in result.reason
    assert max(result.state.denials.values()) == 2


def test_oscillation_is_bounded_by_limits():
    """Limits.oscillation sets how long an alternation may go on."""
    tools, _ = make_payments()
    limits = Limits(max_turns=20, repeated_denials=9, oscillation=6)
    result = run("Pay.", _alternating(), tools, gate=pay_gate, limits=limits)
    assert result.stop is Stop.NO_PROGRESS and len(result.state.observations) == 6
    with pytest.raises(ValueError):
        Limits(oscillation=2)  # A, B is not yet an alternation


def test_the_identical_repeat_keeps_its_reason():
    """The same refused payment twice: the repeat reason, as before."""
    tools, _ = make_payments()
    insist = pay_call(500, "s")
    result = run("Pay.", ScriptedModel([insist], reactions={"denied": insist}), tools, gate=pay_gate)
    assert result.stop is Stop.NO_PROGRESS and "the same rejected proposal came back 2 times" in result.reason


def test_three_different_rejections_are_not_an_oscillation():
    """A, B, C, A: not an alternation of two."""
    tools, _ = make_payments()
    calls = [pay_call(c, f"x{c}") for c in (500, 600, 700, 500, 600, 700)]
    reactions = {f"of {c}": calls[i + 1] for i, c in enumerate((500, 600, 700))}
    result = run(
        "Pay.",
        ScriptedModel([calls[0]], reactions=reactions),
        tools,
        gate=pay_gate,
        limits=Limits(max_turns=9, repeated_denials=3),
    )
    assert result.stop is Stop.NO_PROGRESS and "the same rejected proposal came back 3 times" in result.reason


class _NoScan(dict):
    """A denial table that fails the test if anything walks over it."""

    def values(self):
        raise AssertionError("the no-progress check scanned every rejection")

    def items(self):
        raise AssertionError("the no-progress check scanned every rejection")

    def __iter__(self):
        raise AssertionError("the no-progress check scanned every rejection")


def test_the_no_progress_check_reads_only_the_latest_rejection():
    """12,000 distinct rejections behind it, the guard looks at one entry: O(1) per turn."""
    tools, _ = make_payments()
    state = RunState()
    state.denials = _NoScan({f"pay:{i}": 1 for i in range(12_000)})
    state.recent_rejections = ["pay:11998", "pay:11999"]
    state.alternation = 2
    context = RunContext(state, ScriptedModel([]), tools, pay_gate, Limits(), lambda message: 1)
    assert denial_repeated(context) is False
    state.denials["pay:11999"] = 2
    assert denial_repeated(context) is True


# --- check_run's effects_authorized ---------------------------------------------------


def test_an_effect_that_names_its_call_is_authorised_whatever_the_handler_returns():
    """The ledger entry differs from the handler's return value; its call_id ties it to the allowed call."""
    tools, ledger = make_payments()
    result = run("Pay.", ScriptedModel([pay_call(10), answer_message("Paid.")]), tools, gate=pay_gate)
    assert ledger == [{"call_id": "c1", "account": "ACME", "cents": 10}]
    assert result.state.observations[0].content == "paid 10"
    assert check_run(result, ledger, Limits())["effects_authorized"]
    forged = [*ledger, {"call_id": "never-allowed", "account": "ACME", "cents": 10}]
    assert not check_run(result, forged, Limits())["effects_authorized"]


def test_an_effect_naming_a_denied_call_is_not_authorised():
    """A call_id of a call the gate refused does not authorise the entry."""
    tools, _ = make_payments()
    result = run("Pay.", ScriptedModel([pay_call(500, "big"), answer_message("no")]), tools, gate=pay_gate)
    assert result.state.observations[0].kind == "denied"
    assert not check_run(result, [{"call_id": "big", "cents": 500}], Limits())["effects_authorized"]


def test_check_run_takes_a_matcher():
    """match= decides what ties an entry to an executed call, for logs of any shape."""
    tools, _ = make_payments()
    result = run("Pay.", ScriptedModel([pay_call(10), answer_message("Paid.")]), tools, gate=pay_gate)
    log = [("payment", 10)]
    assert not check_run(result, log, Limits())["effects_authorized"]
    by_amount = lambda effect, observation: observation.content == f"paid {effect[1]}"
    assert check_run(result, log, Limits(), match=by_amount)["effects_authorized"]


def test_an_effect_equal_to_a_result_still_matches():
    """The old rule still holds: an entry equal to an ok observation's content is authorised."""
    tools, _ = make_payments()
    read = tool_call_message("r", "balance", {"account": "ACME"})
    result = run("Read.", ScriptedModel([read, answer_message("500")]), tools)
    assert check_run(result, [500], Limits())["effects_authorized"]
    assert not check_run(result, [501], Limits())["effects_authorized"]


@given(repeats=st.integers(min_value=1, max_value=4), extra=st.integers(min_value=0, max_value=6))
@settings(max_examples=40, database=None, derandomize=True)
def test_a_proposal_denied_again_and_again_ends_no_progress_on_its_count(repeats: int, extra: int) -> None:
    """
    However many turns are left, the same refused proposal ends the run ``no_progress`` at its
    ``repeated_denials``-th refusal: the machine has an edge for it, and no other budget stands in for it.
    """
    tools = {"pay": ToolSpec("Pay. Moves money.", {"cents": int}, lambda cents: cents, effectful=True)}
    same = [tool_call_message(f"c{i}", "pay", {"cents": 5}) for i in range(repeats + extra + 2)]
    limits = Limits(max_turns=repeats + extra + 2, repeated_denials=repeats)
    result = run("pay", ScriptedModel([*same, answer_message("gave up")]), tools, limits=limits)
    assert result.stop is Stop.NO_PROGRESS
    assert len(result.state.observations) == repeats
