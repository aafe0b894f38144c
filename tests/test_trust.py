"""The trust seam: a run that is saved, edited, approved and resumed keeps every guarantee."""

from __future__ import annotations

import copy
import json
import warnings

import pytest

from agent_fsm import (
    Judgement,
    Limits,
    NotPaused,
    RunState,
    ScriptedModel,
    StateError,
    Stop,
    ToolCall,
    UngatedApproval,
    Verdict,
    advance,
    answer_message,
    resume,
    run,
    tool_call_message,
)
from tests.payments import SCRIPT, edit_pending_arguments, make_payments, paused, pay_call, pay_gate


def _model() -> ScriptedModel:
    return ScriptedModel(SCRIPT)


# --- 1. authority is never read from saved data ---------------------------------


def test_arguments_raised_past_the_maximum_in_a_saved_state_do_not_run():
    """A forger who edits the paused call consistently (call, reply, pause) meets the schema again: invalid."""
    result, tools, ledger = paused()
    forged = edit_pending_arguments(result.state.to_json(), {"account": "ACME", "cents": 10**9})
    done = resume(RunState.from_json(forged), _model(), tools, approve=True, gate=pay_gate)
    assert ledger == []
    assert done.state.observations[0].kind == "invalid"
    assert "cents" in done.state.observations[0].content and "maximum" in done.state.observations[0].content


def test_editing_only_the_pending_call_is_refused_on_load():
    """The pending call must be the one the latest reply proposed: a lone edit is caught with its path."""
    result, _, _ = paused()
    data = json.loads(result.state.to_json())
    data["pending"][0]["arguments"]["cents"] = 99
    with pytest.raises(ValueError, match=r"inconsistent at pending\.0\.arguments"):
        RunState.from_json(json.dumps(data))


def test_an_edited_call_the_gate_still_asks_about_is_not_covered_by_the_approval():
    """The pause's fingerprint is of the call the gate asked about; an edit leaves the approval behind."""
    result, tools, ledger = paused(cents=50)
    forged = edit_pending_arguments(result.state.to_json(), {"account": "ACME", "cents": 90}, refingerprint=False)
    with pytest.raises(ValueError, match=r"pause\.fingerprint"):
        RunState.from_json(forged)
    state = copy.deepcopy(result.state)
    state.pending[0] = ToolCall("c1", "pay", {"account": "ACME", "cents": 90}, state.pending[0].raw_arguments)
    with pytest.raises(StateError):
        resume(state, _model(), tools, approve=True, gate=pay_gate)
    assert ledger == []


def test_a_three_field_forged_state_runs_nothing():
    """A state holding just a pending call and a paused machine state is not a saved run."""
    tools, ledger = make_payments()
    forged = {"format": 2, "machine_state": "AwaitingApproval", "pending": [{"call_id": "x", "name": "pay"}]}
    with pytest.raises(ValueError, match="malformed at messages: missing"):
        RunState.from_json(json.dumps(forged))
    in_memory = RunState(
        machine_state="AwaitingApproval", pending=[ToolCall("x", "pay", {"account": "ACME", "cents": 5})]
    )
    with pytest.raises(StateError, match="pending.0.call_id"):
        resume(in_memory, _model(), tools, approve=True)
    assert ledger == []


def test_a_state_forged_to_proposing_with_an_allow_judgement_is_judged_again():
    """advance() on Proposing discards the judgement found in the state: the secure default refuses the payment."""
    result, tools, ledger = paused(cents=50)
    data = json.loads(result.state.to_json())
    data.update(machine_state="Proposing", pause=None, judgement={"kind": "allow", "reason": "trust me"})
    data["path"][-1] = "Proposing"
    done = advance(RunState.from_json(json.dumps(data)), _model(), tools, gate=None)
    assert ledger == []
    assert done.state.observations[0].kind == "denied" and "no gate authorised" in done.state.observations[0].content


def test_a_judgement_found_in_memory_never_reaches_the_handler():
    """Even a run object driven straight into Executing stops at the boundary: no judgement of this process."""
    from agent_fsm.engine import RunContext
    from agent_fsm.engine._run import MACHINE

    result, tools, ledger = paused(cents=50)
    state = copy.deepcopy(result.state)
    state.judgement = Judgement("allow", "forged")
    context = RunContext(state, _model(), tools, pay_gate, Limits(), lambda m: 1)
    with pytest.raises(Exception, match="without a judgement made by this process"):
        MACHINE.fire(context, "approve")
    assert ledger == []


def test_a_schema_tightened_between_save_and_resume_holds():
    """The current registry judges: a payment of 50 saved under maximum 1000 is invalid under maximum 40."""
    result, _, _ = paused(cents=50)
    tighter, ledger = make_payments(maximum=40)
    done = resume(RunState.from_json(result.state.to_json()), _model(), tighter, approve=True, gate=pay_gate)
    assert ledger == [] and done.state.observations[0].kind == "invalid"
    assert "maximum of 40" in done.state.observations[0].content


def test_a_tool_gone_by_resume_is_an_invalid_observation_not_an_error():
    """The call names a tool the registry no longer holds: invalid, with the reason, never a KeyError's text."""
    result, tools, _ = paused()
    without_pay = {"balance": tools["balance"]}
    done = resume(result.state, _model(), without_pay, approve=True, gate=pay_gate)
    first = done.state.observations[0]
    assert (first.kind, first.ok) == ("invalid", False)
    assert first.content.startswith("unknown tool: 'pay'")


def test_an_approval_does_not_outvote_a_deny():
    """A gate that now denies the paused call denies it, approval or not."""
    result, tools, ledger = paused(cents=50)
    done = resume(result.state, _model(), tools, approve=True, gate=lambda call: Verdict.deny("frozen account"))
    assert ledger == [] and done.state.observations[0].content == "frozen account"
    again, tools2, ledger2 = paused(cents=50)
    with pytest.raises(UngatedApproval):  # gate=None: the secure default refuses it, so the approval says so
        resume(again.state, _model(), tools2, approve=True)
    assert ledger2 == [] and not again.state.consumed


def test_an_approval_covers_only_the_fingerprint_it_names():
    """The approval turns an ask into allow for the approved call alone; any other call stays refused."""
    from agent_fsm.engine import call_fingerprint
    from agent_fsm.engine._boundary import approved_judgement

    tools, _ = make_payments()
    asked = ToolCall("c1", "pay", {"account": "ACME", "cents": 50})
    assert approved_judgement(asked, tools, pay_gate, call_fingerprint(asked)).kind == "allow"
    for other in (
        ToolCall("c1", "pay", {"account": "ACME", "cents": 60}),  # other arguments
        ToolCall("c9", "pay", {"account": "ACME", "cents": 50}),  # the same proposal made again later
    ):
        judgement = approved_judgement(other, tools, pay_gate, call_fingerprint(asked))
        assert judgement.kind == "denied" and "does not cover" in judgement.reason
    assert approved_judgement(asked, tools, pay_gate, None).kind == "denied"
    key_order = ToolCall("c1", "pay", {"cents": 50, "account": "ACME"})
    assert call_fingerprint(key_order) == call_fingerprint(asked)  # canonical arguments


def test_an_approval_runs_the_asked_call_once():
    """The gate asks again, the approval covers exactly that call, the payment is made once."""
    result, tools, ledger = paused(cents=50)
    done = resume(result.state, _model(), tools, approve=True, gate=pay_gate)
    assert done.stop is Stop.ANSWERED and ledger == [{"call_id": "c1", "account": "ACME", "cents": 50}]


def test_a_reviewer_edit_is_validated_and_gated_like_a_new_proposal():
    """arguments= replaces the call: an edit the gate asks about runs, one it denies or the schema refuses does not."""
    result, tools, ledger = paused(cents=50)
    done = resume(
        result.state, _model(), tools, approve=True, gate=pay_gate, arguments={"account": "ACME", "cents": 30}
    )
    assert ledger == [{"call_id": "c1", "account": "ACME", "cents": 30}] and done.stop is Stop.ANSWERED
    for edit, kind in (({"account": "ACME", "cents": 500}, "denied"), ({"account": "ACME", "cents": 5000}, "invalid")):
        again, tools2, ledger2 = paused(cents=50)
        refused = resume(again.state, _model(), tools2, approve=True, gate=pay_gate, arguments=edit)
        assert ledger2 == [] and refused.state.observations[0].kind == kind
    with pytest.raises(TypeError, match="'arguments'"):
        resume(paused()[0].state, _model(), tools, approve=False, arguments={"account": "ACME", "cents": 1})


# --- 2. a pause is decided once -------------------------------------------------------


def test_one_pause_approved_twice_in_memory_runs_once():
    """The second resume of the same state object raises NotPaused; the payment was made once."""
    result, tools, ledger = paused()
    resume(result.state, _model(), tools, approve=True, gate=pay_gate)
    assert result.state.consumed
    with pytest.raises(NotPaused, match="decided once"):
        resume(result.state, _model(), tools, approve=True, gate=pay_gate)
    assert len(ledger) == 1


def test_the_same_saved_json_approved_twice_is_refused_by_seen():
    """seen= records each pause id; a second approval of the same JSON is refused."""
    result, tools, ledger = paused()
    text = result.state.to_json()
    decided: set[str] = set()

    def seen(pause_id: str) -> bool:
        if pause_id in decided:
            return True
        decided.add(pause_id)
        return False

    resume(RunState.from_json(text), _model(), tools, approve=True, gate=pay_gate, seen=seen)
    with pytest.raises(NotPaused, match="was decided already"):
        resume(RunState.from_json(text), _model(), tools, approve=True, gate=pay_gate, seen=seen)
    assert len(ledger) == 1


def test_pause_ids_are_unique_across_runs_and_pauses():
    """Two runs of one script pause with different ids; each pause of a run has its own."""
    first, second = paused()[0], paused()[0]
    assert first.state.pause.pause_id != second.state.pause.pause_id
    tools, _ = make_payments()
    script = [pay_call(50, "a"), pay_call(60, "b"), answer_message("done")]
    one = run("t", ScriptedModel(script), tools, gate=pay_gate)
    two = resume(one.state, ScriptedModel(script), tools, approve=True, gate=pay_gate)
    assert two.stop is Stop.AWAITING_APPROVAL and two.state.pause.pause_id != one.state.pause.pause_id


def test_a_failed_judgement_leaves_the_pause_open():
    """A gate that raises on resume ran nothing: the same state can be resumed once the gate is fixed."""
    result, tools, ledger = paused()

    def broken(call):
        raise RuntimeError("policy service down")

    with pytest.raises(Exception, match="policy service down"):
        resume(result.state, _model(), tools, approve=True, gate=broken)
    assert not result.state.consumed
    resume(result.state, _model(), tools, approve=True, gate=pay_gate)
    assert len(ledger) == 1


# --- 3. budgets travel with the run ---------------------------------------------------


def test_approve_must_be_a_bool():
    """approve="false" is a mistake, not a yes."""
    result, tools, ledger = paused()
    for wrong in ("false", 1, None):
        with pytest.raises(TypeError, match="'approve' must be a bool"):
            resume(result.state, _model(), tools, approve=wrong, gate=pay_gate)
    assert ledger == [] and not result.state.consumed


def test_resume_without_limits_keeps_the_runs_limits():
    """A max_turns=2 run resumed without limits= ends within 2 turns."""
    tools, _ = make_payments()
    read = tool_call_message("r", "balance", {"account": "ACME"})
    script = [pay_call(50), read, read, read, answer_message("done")]
    result = run("t", ScriptedModel(script), tools, gate=pay_gate, limits=Limits(max_turns=2))
    done = resume(RunState.from_json(result.state.to_json()), ScriptedModel(script), tools, approve=True, gate=pay_gate)
    assert done.stop is Stop.STEP_LIMIT and done.state.turns == 2
    assert done.state.limits == Limits(max_turns=2)


def test_explicit_limits_replace_the_saved_ones():
    """limits= given on resume is used, and saved with the run from then on."""
    result, tools, _ = paused()
    done = resume(result.state, _model(), tools, approve=True, gate=pay_gate, limits=Limits(max_turns=1))
    assert done.stop is Stop.STEP_LIMIT and done.state.limits == Limits(max_turns=1)


@pytest.mark.parametrize(
    ("field", "value"), [("turns", -3), ("tool_attempts", -1), ("turns", 0), ("turns", 5), ("opening", 99)]
)
def test_counters_edited_out_of_line_are_refused(field, value):
    """Negative counters, or counters that disagree with the transcript, are refused on load and on resume."""
    result, tools, ledger = paused()
    data = json.loads(result.state.to_json())
    data[field] = value
    with pytest.raises(ValueError, match=field):
        RunState.from_json(json.dumps(data))
    state = copy.deepcopy(result.state)
    setattr(state, field, value)
    with pytest.raises(StateError, match=field):
        resume(state, _model(), tools, approve=True, gate=pay_gate)
    assert ledger == []


def test_fewer_tool_attempts_than_executed_calls_are_refused():
    """Resetting the attempt counter after a payment ran would buy a fresh tool budget: refused."""
    tools, ledger = make_payments()
    script = [pay_call(10, "c0"), pay_call(50), answer_message("Paid.")]
    result = run("t", ScriptedModel(script), tools, gate=pay_gate, limits=Limits(max_tool_calls=2))
    assert result.stop is Stop.AWAITING_APPROVAL and result.state.tool_attempts == len(ledger) == 1
    data = json.loads(result.state.to_json())
    data["tool_attempts"] = 0
    with pytest.raises(ValueError, match="inconsistent at tool_attempts: 0 handler attempts but 1 calls"):
        RunState.from_json(json.dumps(data))


def test_approved_calls_count_against_max_tool_calls():
    """With the tool budget spent (explicitly, or by the saved counter) an approved call does not run."""
    result, tools, ledger = paused(limits=Limits(max_tool_calls=2))
    done = resume(result.state, _model(), tools, approve=True, gate=pay_gate, limits=Limits(max_tool_calls=0))
    assert ledger == [] and "tool budget is spent" in done.state.observations[0].content
    data = json.loads(paused(limits=Limits(max_tool_calls=2))[0].state.to_json())
    data["tool_attempts"] = 2  # more attempts than executed calls only shrinks the budget: accepted
    tools2, ledger2 = make_payments()
    resume(RunState.from_json(json.dumps(data)), _model(), tools2, approve=True, gate=pay_gate)
    assert ledger2 == []


# --- 6. garbage from gates, checks, estimators and models -------------------------------


def test_a_verdict_with_a_non_string_reason_is_a_gate_error_with_the_state():
    """Verdict("deny", 5) is a bug in the gate; the run's state is attached."""
    from agent_fsm import GateError

    tools, _ = make_payments()
    with pytest.raises(GateError) as caught:
        run("t", _model(), tools, gate=lambda call: Verdict("deny", 5))
    assert caught.value.state is not None and caught.value.state.turns == 1
    with pytest.raises(GateError) as caught:
        run("t", _model(), tools, gate=lambda call: {"allow": True})
    assert caught.value.state is not None
    built_around = object.__new__(Verdict)  # a Verdict that skipped its validators
    object.__setattr__(built_around, "kind", "allow")
    object.__setattr__(built_around, "reason", None)
    with pytest.raises(GateError, match="reason string") as caught:
        run("t", _model(), tools, gate=lambda call: built_around)
    assert caught.value.state is not None and caught.value.state.machine_state == "Proposing"


def test_a_raising_answer_check_or_estimator_is_a_run_error_with_the_state():
    """Failures in user callbacks stop the run loudly, with everything it did attached."""
    from agent_fsm import RunError

    tools, _ = make_payments()
    answer = ScriptedModel([answer_message("hi")])

    def check(text, state):
        raise LookupError("no rubric")

    with pytest.raises(RunError, match="answer check raised LookupError") as caught:
        run("t", answer, tools, answer_check=check)
    assert caught.value.state.messages[-1]["content"] == "hi"
    with pytest.raises(RunError, match="must return None, a reason string or an Ending"):
        run("t", answer, tools, answer_check=lambda text, state: 42)
    calls = []

    def estimator(message):
        calls.append(message)
        if message.get("role") == "assistant":
            raise OverflowError("too long")
        return 1

    with pytest.raises(RunError, match="estimator raised OverflowError") as caught:
        run("t", answer, tools, estimator=estimator)
    assert caught.value.state is not None and caught.value.state.turns == 1
    with pytest.raises(RunError, match="whole number"):
        run("t", answer, tools, estimator=lambda message: 1.5 if message.get("role") == "assistant" else 1)


@pytest.mark.parametrize(
    ("reply", "fragment"), [(None, "returned None"), (7, "returned int 7"), ("text", "returned str")]
)
def test_a_model_returning_no_message_is_a_run_error(reply, fragment):
    """None, a number or bare text is not an assistant message: the run says what came back and what to do."""
    from agent_fsm import RunError

    class Odd:
        def chat(self, messages, tools=()):
            return reply

    tools, _ = make_payments()
    with pytest.raises(RunError, match=fragment) as caught:
        run("t", Odd(), tools)
    assert "return an assistant message" in caught.value.message and caught.value.state.turns == 1


def test_an_async_model_points_to_the_async_api():
    """async def chat returns a coroutine: a RunError (and TypeError) says to use arun, the coroutine is closed."""
    from agent_fsm import NotSynchronous, RunError

    class Async:
        async def chat(self, messages, tools=()):
            return answer_message("never seen")

    tools, _ = make_payments()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(RunError, match="is asynchronous .* run it with arun") as raised:
            run("t", Async(), tools, gate=pay_gate)
    assert isinstance(raised.value, NotSynchronous) and isinstance(raised.value, TypeError)
    assert raised.value.state is not None and raised.value.state.machine_state == "Ready"  # the call was undone


def test_a_stored_run_approved_from_the_inbox_keeps_its_limits(tmp_path):
    """store.approve with an agent whose limits are None runs under the limits the run was started with."""
    from agent_fsm import Agent
    from agent_fsm.store import SqliteStore, approve

    tools, _ = make_payments()
    read = tool_call_message("r", "balance", {"account": "ACME"})
    script = [pay_call(50), read, read, read, answer_message("done")]
    store = SqliteStore(tmp_path / "runs.db")
    run("t", ScriptedModel(script), tools, gate=pay_gate, limits=Limits(max_turns=2), store=store, run_id="r1")
    done = approve(store, "r1", Agent(ScriptedModel(script), tools, gate=pay_gate), reviewer="ana")
    assert done.stop is Stop.STEP_LIMIT and done.state.turns == 2
