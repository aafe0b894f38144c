"""
Tests for agent_fsm.examples.refund_limit: the refund limit as configuration the gate reads at each call.

The two runs of the support desk's over-reaching model are the evidence: a rule stated only in the system
prompt is not enforced; the same rule in the gate is, and the gate reads its limit from a file when the
call is judged, so an edit applies to the next refund without rebuilding anything.
"""

from __future__ import annotations

import json

import pytest

from agent_fsm import Agent, Stop, ToolCall, ToolSpec, allow_all
from agent_fsm.examples.demo import TASK, overreaching_model
from agent_fsm.examples.refund_limit import (
    PROMPT_RULE,
    configured_refund_gate,
    read_limit,
    write_limit,
)
from agent_fsm.examples.support_desk import SYSTEM_PROMPT, make_support_desk


def _refund(cents: int) -> ToolCall:
    return ToolCall("c1", "refund_order", {"order_id": "A-17", "amount_cents": cents})


def test_a_rule_in_the_prompt_alone_does_not_stop_the_over_reach():
    """The rebuttal's evidence: told the limit only in its prompt, the model's 9999-cent refund lands."""
    desk = make_support_desk()
    agent = Agent(overreaching_model(), desk.tools, gate=allow_all, system_prompt=f"{SYSTEM_PROMPT} {PROMPT_RULE}")
    result = agent.run(TASK)
    assert PROMPT_RULE in result.state.messages[0]["content"]
    assert result.stop is Stop.ANSWERED
    assert desk.effects == [{"order_id": "A-17", "refunded_cents": 9999}]


def test_the_gate_reads_the_limit_from_its_file_and_denies_the_over_reach(tmp_path):
    """With the limit file at 5000 the 9999 refund is denied, naming the limit and the file's digest; 4999 lands."""
    path = tmp_path / "refund-limit.json"
    digest = write_limit(path, 5000)
    desk = make_support_desk()
    result = Agent(overreaching_model(), desk.tools, gate=configured_refund_gate(path)).run(TASK)
    assert desk.effects == [{"order_id": "A-17", "refunded_cents": 4999}]
    denied = [o for o in result.state.observations if o.kind == "denied"]
    assert len(denied) == 1
    assert "above 5000 cents" in denied[0].content and digest[:12] in denied[0].content


def test_an_edit_applies_to_the_next_call_without_rebuilding_the_gate(tmp_path):
    """One gate object: the file says 5000, then 10000; the same 9999 refund is denied, then allowed."""
    path = tmp_path / "refund-limit.json"
    write_limit(path, 5000)
    gate = configured_refund_gate(path)
    assert gate(_refund(9999)).kind == "deny"
    write_limit(path, 10_000)
    verdict = gate(_refund(9999))
    assert verdict.kind == "allow" and "10000-cent limit" in verdict.reason


def test_the_limit_is_read_when_the_call_is_judged_not_when_the_run_starts(tmp_path):
    """The file is raised mid-run (by the lookup's handler): the refund judged after that runs under the new limit."""
    path = tmp_path / "refund-limit.json"
    write_limit(path, 5000)
    desk = make_support_desk()
    lookup = desk.tools["lookup_order"]
    real = lookup.handler

    def lookup_then_raise_limit(order_id: str):
        write_limit(path, 20_000)
        return real(order_id)

    desk.tools["lookup_order"] = ToolSpec(lookup.description, lookup.schema, lookup_then_raise_limit)
    Agent(overreaching_model(), desk.tools, gate=configured_refund_gate(path)).run(TASK)
    assert desk.effects == [{"order_id": "A-17", "refunded_cents": 9999}]


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (None, "cannot be read"),
        ("not json", "cannot be read"),
        (json.dumps({"refund_limit_cents": "5000"}), "must be a whole number of cents"),
        (json.dumps({"refund_limit_cents": True}), "must be a whole number of cents"),
        (json.dumps({"refund_limit_cents": -1}), "must be a whole number of cents"),
        (json.dumps({"limit": 5000}), "must be a whole number of cents"),
        (json.dumps([5000]), "must be a whole number of cents"),
    ],
)
def test_a_missing_or_malformed_limit_denies_every_refund(tmp_path, content, fragment):
    """No readable limit, no refund: the gate fails closed and says why; other tools are not held up."""
    path = tmp_path / "refund-limit.json"
    if content is not None:
        path.write_text(content)
    gate = configured_refund_gate(path)
    verdict = gate(_refund(1))
    assert verdict.kind == "deny" and fragment in verdict.reason
    assert gate(ToolCall("c2", "lookup_order", {"order_id": "A-17"})).kind == "allow"
    with pytest.raises(ValueError, match=fragment):
        read_limit(path)


def test_write_limit_refuses_what_read_limit_would_refuse(tmp_path):
    """A limit that is not a non-negative int is never written, so a typo cannot reach the file."""
    path = tmp_path / "refund-limit.json"
    with pytest.raises(ValueError, match="must be a whole number of cents"):
        write_limit(path, 50.5)  # type: ignore[arg-type]
    assert not path.exists()
    digest = write_limit(path, 0)
    assert read_limit(path) == (0, digest)
