"""Tests for agent_fsm.patterns.meter: one accounting for every control policy."""

from __future__ import annotations

import threading

import pytest

from agent_fsm import (
    Agent,
    ModelReply,
    ProviderFailure,
    ScriptedModel,
    ToolCall,
    answer_message,
    estimate_tokens,
)
from agent_fsm.examples.support_desk import make_support_desk, refund_gate
from agent_fsm.patterns.meter import Meter, Spend


class _Fails:
    def chat(self, messages, tools=()):
        raise ProviderFailure("connection refused")


def test_ask_charges_one_call_and_the_estimated_prompt():
    """A model call costs one call and the estimate of every message and declaration sent."""
    meter = Meter()
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]
    declarations = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    reply = meter.ask(ScriptedModel([answer_message("hi")]), messages, declarations)
    assert reply == answer_message("hi")
    expected = sum(estimate_tokens(m) for m in (*messages, *declarations))
    assert meter.spend() == Spend(model_calls=1, tool_calls=0, prompt_tokens=expected)


def test_provider_usage_replaces_the_estimate():
    """A provider's reported prompt size is charged instead of the estimate, and the reply is unwrapped."""

    class Counted:
        def chat(self, messages, tools=()):
            return ModelReply(answer_message("ok"), prompt_tokens=123)

    meter = Meter()
    assert meter.ask(Counted(), [{"role": "user", "content": "x" * 400}]) == answer_message("ok")
    assert meter.spend() == Spend(1, 0, 123)


def test_a_failed_model_call_is_still_charged():
    """The prompt was sent, so the call counts even though the model failed."""
    meter = Meter()
    with pytest.raises(ProviderFailure):
        meter.ask(_Fails(), [{"role": "user", "content": "hi"}])
    assert meter.model_calls == 1 and meter.prompt_tokens > 0


def test_attempt_crosses_the_boundary_and_charges_refusals_too():
    """A denied refund is charged as a tool call but its handler never runs."""
    desk = make_support_desk()
    meter = Meter()
    denied = meter.attempt(
        ToolCall("a", "refund_order", {"order_id": "A-17", "amount_cents": 9999}), desk.tools, refund_gate
    )
    invalid = meter.attempt(ToolCall("b", "refund_order", {"order_id": "A-17"}), desk.tools, refund_gate)
    allowed = meter.attempt(
        ToolCall("c", "refund_order", {"order_id": "A-17", "amount_cents": 4999}), desk.tools, refund_gate
    )
    assert (denied.kind, invalid.kind, allowed.kind) == ("denied", "invalid", "result")
    assert desk.effects == [{"order_id": "A-17", "refunded_cents": 4999}]
    assert meter.spend() == Spend(0, 3, 0)


def test_metered_model_charges_the_run_machine_exactly_as_it_measures_itself():
    """Wrapped around a run's model, the meter agrees with the run's own turn count and prompt log."""
    desk = make_support_desk()
    meter = Meter()
    script = ScriptedModel(
        [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "lookup_order", "arguments": '{"order_id": "A-17"}'},
                    }
                ],
            },
            answer_message("done"),
        ]
    )
    result = meter.metered(Agent(script, desk.tools, gate=refund_gate)).run("refund A-17")
    assert meter.model_calls == result.state.turns == 2
    assert meter.prompt_tokens == sum(result.state.prompt_token_log)


def test_charges_from_many_threads_are_not_lost():
    """The fan-out charges from worker threads; every charge must count."""
    desk = make_support_desk()
    meter = Meter()
    call = ToolCall("r", "read_policy", {})
    threads = [
        threading.Thread(target=lambda: [meter.attempt(call, desk.tools, refund_gate) for _ in range(50)])
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert meter.tool_calls == 400
