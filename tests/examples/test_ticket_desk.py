"""
Tests for agent_fsm.examples.ticket_desk: the three endings, approval, and a conversation session.

The specs under specs/ticket_desk/ are run by the spec plugin; these tests drive the desk directly.
"""

from __future__ import annotations

import pytest

from agent_fsm import (
    RunError,
    Stop,
    ToolCall,
    allow_all,
    ask_for_effects,
    check_run,
)
from agent_fsm.examples.ticket_desk import (
    LIMITS,
    Session,
    TicketDesk,
    environment,
    reply_text,
    rules,
)

CLOSE = "Please close the ticket about login."
RECEIPT = {"id": "TKT-3", "subject": "Login page returns a 500 error", "status": "closed"}


def _run(task, *, model="rules", gate=None, history=()):
    env = environment()
    policy = env.models[model]()
    result = env.agent(policy, gate=gate, limits=LIMITS).run(task, history=history)
    return env, policy, result


def test_answer_ending():
    """A search question is answered in two turns; 'log in' in TKT-1 is not the word 'login'."""
    _, _, result = _run("Which tickets mention login?")
    assert result.stop is Stop.ANSWERED
    assert "TKT-3" in result.answer and "TKT-1" not in result.answer
    assert (result.state.turns, result.state.tool_attempts) == (2, 1)


def test_guard_ending_is_not_an_answer():
    """A policy that never finishes is stopped by the guard with no answer."""
    _, _, result = _run("keep looking", model="stubborn")
    assert result.stop is Stop.STEP_LIMIT
    assert result.answer is None and result.state.turns == LIMITS.max_turns
    assert reply_text(result).startswith("Stopped (step_limit)")


def test_destructive_tools_are_denied_by_default():
    """With no gate the close is denied; the ticket stays open and nothing lands in the effect log."""
    env, _, result = _run(CLOSE)
    assert [o.kind for o in result.state.observations] == ["result", "denied"]
    assert env.effects == [] and env.checks["all_open"](result)


def test_pause_ending_names_the_blocked_call():
    """Under the ask gate the run pauses on close_ticket(TKT-3) and nothing is closed."""
    env, _, result = _run(CLOSE, gate=environment().gates["ask"])
    assert result.stop is Stop.AWAITING_APPROVAL
    assert result.blocked_on == ToolCall("decision_2", "close_ticket", {"ticket_id": "TKT-3"})
    assert env.effects == []
    assert reply_text(result) == 'Awaiting approval to run close_ticket with {"ticket_id": "TKT-3"}.'


@pytest.mark.parametrize(
    "approve, effects, kinds", [(True, [RECEIPT], ["result", "result"]), (False, [], ["result", "denied"])]
)
def test_resume_after_pause(approve, effects, kinds):
    """Approval runs the blocked close exactly once; rejection leaves the ticket open."""
    env = environment()
    agent = env.agent(env.models["rules"](), gate=env.gates["ask"], limits=LIMITS)
    paused = agent.run(CLOSE)
    result = agent.resume(paused.state, approve=approve, reason="not yet")
    assert result.stop is Stop.ANSWERED
    assert env.effects == effects
    assert [o.kind for o in result.state.observations] == kinds
    assert all(check_run(result, env.effects, LIMITS).values())


def test_follow_up_is_resolved_from_history():
    """'Close that one' closes the ticket named in the previous answer."""
    history = [
        {"role": "user", "content": "Which tickets mention billing?"},
        {"role": "assistant", "content": "Open tickets about billing: TKT-4 (Billing address cannot be changed)."},
    ]
    env, _, result = _run("Close that one.", gate=allow_all, history=history)
    assert [e["id"] for e in env.effects] == ["TKT-4"]
    assert result.state.messages[1:3] == history


def test_follow_up_without_a_referent_asks_which():
    """With no earlier ticket in the conversation the policy asks instead of guessing."""
    decision = rules("close it", [], conversation=[])
    assert decision == {"action": "final", "answer": "Which ticket do you mean?"}


def test_delete_and_show_plans():
    """Delete runs delete_ticket once approved; show reads the ticket without effects."""
    env, _, result = _run("Delete ticket TKT-2", gate=allow_all)
    assert env.effects == [{"id": "TKT-2", "deleted": True, "subject": "Invoice PDF downloads blank"}]
    assert "Deleted TKT-2" in result.answer
    env, _, result = _run("Show TKT-9")
    assert [o.kind for o in result.state.observations] == ["error"]
    assert "no ticket TKT-9" in result.answer


def test_session_keeps_history_memo_and_log_across_turns():
    """A conversation: search, a paused close approved by a human, then a repeated search."""
    desk = TicketDesk()
    session = Session(desk=desk, gate=ask_for_effects(desk.tools()))
    first = session.ask("Which tickets mention login?")
    assert first.stop is Stop.ANSWERED and desk.backend_reads == 1

    paused = session.ask("Close that one.")
    assert paused.stop is Stop.AWAITING_APPROVAL and session.paused is paused
    with pytest.raises(RunError, match="call decide"):
        session.ask("Anything else?")
    done = session.decide(approve=True)
    assert done.stop is Stop.ANSWERED and desk.effects == [RECEIPT]

    again = session.ask("Which tickets mention login?")
    assert "No open ticket mentions 'login'" in again.answer
    assert [m["role"] for m in session.history] == ["user", "assistant"] * 3
    assert session.history[3]["content"] == "Closed TKT-3: 'Login page returns a 500 error'."
    assert [(r.exchange, r.tool, r.kind) for r in session.log] == [
        (1, "search_tickets", "result"),
        (2, "close_ticket", "result"),
        (3, "search_tickets", "result"),
    ]


def test_session_agent_is_its_model_gate_and_limits_over_the_memo():
    """The agent a session runs holds its memoised tools, its gate and limits, and the desk's endings."""
    desk = TicketDesk()
    gate = ask_for_effects(desk.tools())
    session = Session(desk=desk, gate=gate, limits=LIMITS)
    agent = session.agent
    assert (agent.model, agent.tools, agent.gate, agent.limits) == (session.model, session.tools, gate, LIMITS)
    assert agent.tools is not desk.tools() and agent.endings is environment().endings
    assert agent.run("Which tickets mention login?").code == "answer"


def test_session_memo_serves_repeats_and_is_cleared_by_effects():
    """A repeated read costs the backend nothing until an effect makes cached results stale."""
    desk = TicketDesk()
    session = Session(desk=desk, gate=allow_all)
    session.ask("Which tickets mention billing?")
    session.ask("Which tickets mention billing?")
    assert (desk.backend_reads, session.memo_hits) == (1, 1)
    session.ask("Close TKT-1")
    assert session.memo == {}
    session.ask("Which tickets mention billing?")
    assert desk.backend_reads == 2


def test_session_rejection_and_decide_without_pause():
    """A rejected close leaves the ticket open; deciding with nothing paused is an error."""
    desk = TicketDesk()
    session = Session(desk=desk, gate=ask_for_effects(desk.tools()))
    with pytest.raises(RunError, match="no exchange is awaiting approval"):
        session.decide(approve=True)
    session.ask("Close TKT-2")
    result = session.decide(approve=False, reason="customer replied")
    assert desk.effects == [] and "customer replied" in result.answer
    assert session.paused is None


def test_create_intent_opens_a_ticket_in_a_session():
    """ "Create a ticket about ..." runs create_ticket under the desk gate; the next search finds it."""
    from agent_fsm.examples.ticket_desk import Session, TicketDesk, desk_gate

    desk = TicketDesk()
    session = Session(desk=desk, gate=desk_gate(desk.tools()))
    created = session.ask("Please file a new ticket about login emails arriving late.")
    assert (created.stop, created.code) == (Stop.ANSWERED, "answer")
    assert desk.effects == [{"id": "TKT-5", "subject": "Login emails arriving late", "status": "open", "created": True}]
    found = session.ask("Which tickets mention login?")
    assert "TKT-5" in found.answer
    paused = session.ask("Close TKT-5.")
    assert (paused.stop, paused.code) == (Stop.AWAITING_APPROVAL, "pause")
