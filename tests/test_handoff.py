"""The handoff controller: decide(), replay() of event lists, and its manual-library environment."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_fsm import ScriptedModel, Stop, answer_message, run, tool_call_message
from agent_fsm.examples.handoff import (
    INTERVAL_DAYS,
    STATUSES,
    Event,
    HandoffEnding,
    check_answer,
    decide,
    environment,
    flaky_environment,
    handoff_message,
    replay,
)

# --- decide -------------------------------------------------------------------


def test_finish_is_answered_even_at_the_limit_and_after_a_failure() -> None:
    """A final answer is accepted after the last allowed attempt and after any status."""
    assert decide("finish", 3, 3, "ok") == "answer"
    assert decide("finish", 3, 3, "permanent") == "answer"


def test_tool_continues_only_below_the_limit_with_an_ok_status() -> None:
    """continue needs used < limit and status ok; anything else hands off."""
    assert decide("tool", 2, 3, "ok") == "continue"
    assert decide("tool", 3, 3, "ok") == "handoff"
    for status in ("transient", "permanent", "schema", "denied"):
        assert decide("tool", 0, 3, status) == "handoff"


def test_decide_rejects_unknown_input() -> None:
    """An unknown action or status is a ValueError that names what came."""
    with pytest.raises(ValueError, match="'retry'"):
        decide("retry", 0, 1, "ok")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'flaky'"):
        decide("tool", 0, 1, "flaky")


# --- replay -------------------------------------------------------------------


def test_replay_normal_path() -> None:
    """Two good tool calls then a finish with evidence: answered after 2 attempts."""
    outcome = replay(["tool", "tool", "finish"], limit=3)
    assert (outcome.ending, outcome.attempts) == (HandoffEnding.ANSWERED, 2)
    assert outcome.decisions == ("continue", "continue", "answer")


def test_replay_counts_failed_attempts() -> None:
    """A timed-out call counts as an attempt, and the next tool proposal is handed off."""
    events = [{"action": "tool"}, {"action": "tool", "status": "transient"}, {"action": "tool"}]
    outcome = replay(events, limit=5)
    assert (outcome.ending, outcome.attempts) == (HandoffEnding.SERVICE_FAILURE, 2)


def test_replay_boundary_no_further_tool() -> None:
    """At the limit another tool is refused (exhausted budget) but a finish is still answered."""
    assert replay(["tool", "tool", "tool"], limit=2).ending is HandoffEnding.EXHAUSTED_BUDGET
    assert replay(["tool", "tool", "tool"], limit=2).attempts == 2
    assert replay(["tool", "tool", "finish"], limit=2).ending is HandoffEnding.ANSWERED


def test_permanent_failure_policies_differ_only_in_when_they_stop() -> None:
    """Immediate hands off on arrival; deferred still accepts a prepared answer; neither runs another tool."""
    events = [{"action": "tool", "status": "permanent"}, "finish"]
    immediate = replay(events, limit=3, policy="immediate")
    deferred = replay(events, limit=3, policy="deferred")
    assert (immediate.ending, immediate.attempts, immediate.decisions) == (
        HandoffEnding.SERVICE_FAILURE,
        1,
        ("continue", "handoff"),
    )
    assert (deferred.ending, deferred.attempts) == (HandoffEnding.ANSWERED, 1)
    tool_after = [{"action": "tool", "status": "permanent"}, "tool"]
    assert replay(tool_after, limit=3, policy="deferred").attempts == 1


def test_replay_distinguishes_every_ending() -> None:
    """Each ending reason comes out of the event list that causes it."""
    cases = {
        HandoffEnding.ANSWERED: ["finish"],
        HandoffEnding.MISSING_EVIDENCE: [{"action": "finish", "evidence": False}],
        HandoffEnding.DENIED_ACTION: [{"action": "tool", "status": "denied"}, "tool"],
        HandoffEnding.INVALID_ACTION: [{"action": "tool", "status": "schema"}, "tool"],
        HandoffEnding.EXHAUSTED_BUDGET: ["tool", "tool"],
        HandoffEnding.SERVICE_FAILURE: [{"action": "tool", "status": "permanent"}],
    }
    for ending, events in cases.items():
        assert replay(events, limit=1).ending is ending, events


def test_replay_rejects_bad_events_and_unfinished_lists() -> None:
    """Malformed events, a bad limit or events that run out are ValueErrors with a reason."""
    with pytest.raises(ValueError, match="unknown event keys"):
        replay([{"action": "tool", "colour": "red"}], limit=1)
    with pytest.raises(ValueError, match="bad event"):
        replay([{"action": "tool", "status": "weird"}], limit=1)
    with pytest.raises(ValueError, match="ran out after 1 tool attempts"):
        replay(["tool"], limit=3)
    with pytest.raises(ValueError, match="limit"):
        replay(["finish"], limit=-1)


_events = st.lists(
    st.one_of(
        st.builds(Event, action=st.just("tool"), status=st.sampled_from(STATUSES)),
        st.builds(Event, action=st.just("finish"), evidence=st.booleans()),
    ),
    max_size=12,
)


@given(events=_events, limit=st.integers(0, 6), policy=st.sampled_from(["immediate", "deferred"]))
def test_replay_properties(events: list[Event], limit: int, policy: str) -> None:
    """Attempts never exceed the limit, equal the tool events consumed, and no tool follows a failure."""
    terminated = events + [Event("finish")]
    outcome = replay(terminated, limit=limit, policy=policy)  # type: ignore[arg-type]
    assert outcome.attempts <= limit
    issued = [e for e, d in zip(terminated, outcome.decisions) if d == "continue"]
    assert len(issued) == outcome.attempts
    assert all(e.action == "tool" for e in issued)
    assert all(e.status == "ok" for e in issued[:-1]), "a tool ran after a failed one"
    assert outcome.decisions[: len(issued)] == ("continue",) * len(issued), "continues come first, then one ending"
    assert (outcome.decisions[-1] == "answer") == (
        outcome.ending in (HandoffEnding.ANSWERED, HandoffEnding.MISSING_EVIDENCE)
    )


# --- the environment ------------------------------------------------------------


def test_answer_check_refuses_only_unsupported_intervals() -> None:
    """An unsupported interval is refused (unsupported_claim); an honest 'unsettled' one stands (missing_evidence)."""
    env = environment()
    model = ScriptedModel(
        [
            tool_call_message("r1", "read_manual", {"manual_id": "M-200"}),
            answer_message(f"Every {INTERVAL_DAYS} days (M-200)."),
        ]
    )
    result = run("How often?", model, env.tools, answer_check=env.answer_check)
    assert result.stop is Stop.ANSWERED
    refused = check_answer("every 90 days", result.state)
    assert (refused.code, refused.accept) == ("unsupported_claim", False)
    honest = check_answer("The manuals I read do not settle it.", result.state)
    assert (honest.code, honest.accept) == ("missing_evidence", True)
    assert check_answer(f"every {INTERVAL_DAYS} days", result.state) is None
    assert env.checks["question_resolved"](result)


def test_the_handoff_message_lists_every_source_checked() -> None:
    """When the loop cannot go on, the message says what is unresolved and names each manual tried, refused ones too."""
    env = environment()
    model = ScriptedModel(
        [
            tool_call_message("r1", "read_manual", {"manual_id": "M-100"}),
            tool_call_message("r2", "read_manual", {"manual_id": "M-300"}),
        ]
    )
    result = run("How often?", model, env.tools, answer_check=env.answer_check, endings=env.endings)
    assert (result.stop, result.code) == (Stop.HANDOFF, "service_failure")
    message = handoff_message(result)
    assert "M-100 (read)" in message and "M-300 (error: permission denied" in message
    assert "not settled" in message and "To resume" in message
    assert env.checks["sources_listed"](result)


def test_flaky_search_times_out_once() -> None:
    """The flaky library's first search is a transient error; the second one answers."""
    env = flaky_environment()
    search = env.tools["search_manuals"].handler
    with pytest.raises(TimeoutError):
        search(query="PX-200")
    assert search(query="PX-200")[0]["manual_id"] == "M-200"


def test_restricted_manual_ends_the_run_handoff() -> None:
    """Reading the restricted manual is a permanent failure: handoff, no further model turn."""
    env = environment()
    model = ScriptedModel([tool_call_message("r1", "read_manual", {"manual_id": "M-300"}), answer_message("never")])
    result = run("How often?", model, env.tools)
    assert result.stop is Stop.HANDOFF
    assert result.state.turns == 1
    assert result.state.observations[0].permanent
