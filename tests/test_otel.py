"""OpenTelemetry spans from run events, checked with the real SDK and its in-memory exporter."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from agent_fsm import HandlerError, ScriptedModel, Stop, ToolSpec, answer_message, arun, resume, run, tool_call_message
from agent_fsm.otel import OtelSink
from tests.async_worlds import AsyncModel
from tests.payments import make_payments, pay_call, pay_gate

SCRIPT = [pay_call(500), pay_call(10, "c2"), answer_message("paid ten")]


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def sink(exporter: InMemorySpanExporter) -> OtelSink:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OtelSink(provider, agent_name="payer", model="gpt-test", provider="openai")


def _by_name(spans: Sequence[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in sorted(spans, key=lambda s: s.start_time or 0):
        found.setdefault(span.name, []).append(span)
    return found


def _children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    span_id = parent.context.span_id
    children = [s for s in spans if s.parent is not None and s.parent.span_id == span_id]
    return sorted(children, key=lambda s: s.start_time or 0)


def _assert_nested_in_time(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> None:
    """Every child starts and ends inside its parent, and children follow one another without overlapping."""
    children = _children(spans, parent)
    for child in children:
        assert parent.start_time <= child.start_time <= child.end_time <= parent.end_time, child.name
    for before, after in zip(children, children[1:]):
        assert before.end_time <= after.start_time, (before.name, after.name)


def test_an_answered_run_is_one_invoke_agent_span_with_chat_and_tool_children(exporter, sink) -> None:
    """Names, kinds, parents and gen_ai attributes of every span of a run that paid and answered."""
    tools, _ = make_payments()
    model = ScriptedModel([pay_call(10), answer_message("paid")])
    result = run("pay", model, tools, gate=pay_gate, run_id="r1", on_event=sink)
    spans = exporter.get_finished_spans()
    named = _by_name(spans)
    assert sorted(named) == ["chat gpt-test", "execute_tool pay", "invoke_agent payer"]
    (agent,) = named["invoke_agent payer"]
    assert agent.parent is None and agent.kind is SpanKind.INTERNAL
    assert agent.attributes is not None
    assert dict(agent.attributes) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "payer",
        "gen_ai.conversation.id": "r1",
        "agent_fsm.run_id": "r1",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "agent_fsm.stop": "answered",
        "agent_fsm.code": "answered",
        "agent_fsm.turns": 2,
        "gen_ai.usage.input_tokens": sum(result.state.prompt_token_log),
        "gen_ai.usage.output_tokens": result.usage.output_tokens,
        "agent_fsm.usage.cached_tokens": 0,
        "agent_fsm.cost": "0",
    }
    assert agent.status.status_code is StatusCode.UNSET
    chats = named["chat gpt-test"]
    assert [c.attributes["gen_ai.usage.input_tokens"] for c in chats] == result.state.prompt_token_log  # type: ignore[index]
    assert all(c.kind is SpanKind.CLIENT and c.attributes["gen_ai.operation.name"] == "chat" for c in chats)  # type: ignore[index]
    assert all(c.attributes["gen_ai.request.model"] == "gpt-test" for c in chats)  # type: ignore[index]
    (tool,) = named["execute_tool pay"]
    assert tool.kind is SpanKind.INTERNAL and tool.attributes is not None
    assert tool.attributes["gen_ai.tool.name"] == "pay" and tool.attributes["gen_ai.tool.call.id"] == "c1"
    assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
    assert {s.context.trace_id for s in spans} == {agent.context.trace_id}
    assert [s.name for s in _children(spans, agent)] == ["chat gpt-test", "execute_tool pay", "chat gpt-test"]
    _assert_nested_in_time(spans, agent)
    assert sink.open_runs == ()


class SlowModel:
    """Answers as ``inner`` does, after ``delay`` seconds, so a span's length can be told from the events'."""

    def __init__(self, inner: Any, delay: float) -> None:
        self.inner, self.delay = inner, delay

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        time.sleep(self.delay)
        return self.inner.chat(messages, tools)


def test_spans_take_their_times_from_the_events_not_from_delivery(exporter, sink) -> None:
    """
    The sync driver delivers a step's events after the step: the chat span still lasts the model call,
    and a slow handler's time is the tool span's, not the next chat's.
    """
    tools, _ = make_payments()

    def slow_balance(account: str) -> int:
        time.sleep(0.05)
        return 1

    tools["balance"] = ToolSpec("Read a balance.", {"account": str}, slow_balance)
    script = [tool_call_message("c1", "balance", {"account": "ACME"}), answer_message("1")]
    model = SlowModel(ScriptedModel(script), 0.04)
    run("read", model, tools, on_event=sink)
    named = _by_name(exporter.get_finished_spans())
    first_chat, second_chat = named["chat gpt-test"]
    (tool,) = named["execute_tool balance"]
    for chat in (first_chat, second_chat):
        assert 0.04e9 <= chat.end_time - chat.start_time < 0.045e9 + 0.03e9  # type: ignore[operator]
    assert tool.end_time - tool.start_time >= 0.05e9  # type: ignore[operator]
    assert first_chat.end_time <= tool.start_time and tool.end_time <= second_chat.start_time  # type: ignore[operator]


def test_a_denial_is_an_event_on_the_run_span_and_only_the_allowed_call_is_executed(exporter, sink) -> None:
    tools, ledger = make_payments()
    result = run("pay", ScriptedModel(SCRIPT), tools, gate=pay_gate, run_id="r2", on_event=sink)
    spans = exporter.get_finished_spans()
    named = _by_name(spans)
    (agent,) = named["invoke_agent payer"]
    (denied,) = agent.events
    assert denied.name == "agent_fsm.denied" and denied.attributes is not None
    assert denied.attributes["gen_ai.tool.call.id"] == "c1" and denied.attributes["gen_ai.tool.name"] == "pay"
    assert denied.attributes["agent_fsm.reason"] == result.state.observations[0].content
    assert agent.start_time <= denied.timestamp <= agent.end_time  # type: ignore[operator]
    assert [(t.attributes or {}).get("gen_ai.tool.call.id") for t in named["execute_tool pay"]] == ["c2"]
    assert len(named["chat gpt-test"]) == 3 and len(ledger) == 1
    _assert_nested_in_time(spans, agent)


def test_an_invalid_proposal_is_an_event_too(exporter, sink) -> None:
    tools, _ = make_payments()
    model = ScriptedModel([tool_call_message("c1", "pay", {"account": "NOBODY", "cents": 1}), answer_message("no")])
    run("pay", model, tools, gate=pay_gate, on_event=sink)
    (agent,) = _by_name(exporter.get_finished_spans())["invoke_agent payer"]
    assert [e.name for e in agent.events] == ["agent_fsm.invalid"]
    assert "execute_tool pay" not in _by_name(exporter.get_finished_spans())


def test_a_paused_run_ends_its_span_and_its_resumption_is_a_linked_span(exporter, sink) -> None:
    """The pause is recorded on the first span; the resumed run is a new span, same conversation, linked to it."""
    tools, ledger = make_payments()
    model = ScriptedModel([pay_call(50), answer_message("paid fifty")])
    paused = run("pay", model, tools, gate=pay_gate, run_id="r3", on_event=sink)
    assert paused.stop is Stop.AWAITING_APPROVAL
    (first,) = exporter.get_finished_spans()[-1:]
    assert first.name == "invoke_agent payer" and first.attributes is not None
    assert first.attributes["agent_fsm.stop"] == "awaiting_approval"
    assert first.attributes["agent_fsm.pause_id"] == paused.state.pause_id
    (pause,) = first.events
    assert pause.name == "agent_fsm.paused" and pause.attributes is not None
    assert pause.attributes["agent_fsm.pause_id"] == paused.state.pause_id
    assert first.status.status_code is StatusCode.UNSET
    assert sink.open_runs == ()

    exporter.clear()
    done = resume(paused.state, model, tools, approve=True, gate=pay_gate, run_id="r3", on_event=sink)
    assert done.stop is Stop.ANSWERED and len(ledger) == 1
    spans = exporter.get_finished_spans()
    (second,) = _by_name(spans)["invoke_agent payer"]
    assert second.attributes is not None
    assert second.attributes["gen_ai.conversation.id"] == "r3" and second.attributes["agent_fsm.resumed"] is True
    assert second.attributes["agent_fsm.stop"] == "answered"
    assert [link.context.span_id for link in second.links] == [first.context.span_id]
    assert second.context.span_id != first.context.span_id
    assert [s.name for s in _children(spans, second)] == ["execute_tool pay", "chat gpt-test"]
    assert second.start_time >= first.end_time  # type: ignore[operator]
    _assert_nested_in_time(spans, second)


class Unreachable:
    """Replies once with a read, then the connection fails."""

    def __init__(self) -> None:
        self.calls = 0

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        self.calls += 1
        if self.calls == 2:
            time.sleep(0.02)
            raise ConnectionResetError("peer closed the connection")
        return tool_call_message("c1", "balance", {"account": "ACME"})


def test_a_provider_error_is_an_error_chat_span_and_an_error_run(exporter, sink) -> None:
    tools, _ = make_payments()
    result = run("read", Unreachable(), tools, on_event=sink)
    assert result.stop is Stop.PROVIDER_ERROR
    spans = exporter.get_finished_spans()
    named = _by_name(spans)
    (agent,) = named["invoke_agent payer"]
    ok, failed = named["chat gpt-test"]
    assert ok.status.status_code is StatusCode.UNSET
    assert failed.status.status_code is StatusCode.ERROR and failed.attributes is not None
    assert failed.attributes["error.type"] == "ConnectionResetError"
    assert failed.end_time - failed.start_time >= 0.02e9  # type: ignore[operator]
    assert agent.status.status_code is StatusCode.ERROR and agent.attributes is not None
    assert agent.attributes["error.type"] == "provider_error" and agent.attributes["agent_fsm.stop"] == "provider_error"
    _assert_nested_in_time(spans, agent)


def test_budget_stops_are_outcomes_not_errors(exporter, sink) -> None:
    """A step limit is the engine doing its job: the stop is recorded and the status stays unset."""
    from agent_fsm import Limits

    tools, _ = make_payments()
    reads = [tool_call_message(f"c{i}", "balance", {"account": "ACME"}) for i in range(5)]
    result = run("read", ScriptedModel(reads), tools, limits=Limits(max_turns=2), on_event=sink)
    assert result.stop is Stop.STEP_LIMIT
    (agent,) = _by_name(exporter.get_finished_spans())["invoke_agent payer"]
    assert agent.status.status_code is StatusCode.UNSET and agent.attributes is not None
    assert agent.attributes["agent_fsm.stop"] == "step_limit" and "error.type" not in agent.attributes


def test_concurrent_aruns_share_one_sink_and_keep_their_spans_apart(exporter, sink) -> None:
    """Twenty interleaved aruns: twenty traces, each with its own run's children only, nothing left open."""
    count = 20

    async def main() -> list[Any]:
        runs = []
        for i in range(count):
            tools, _ = make_payments()
            model = AsyncModel(ScriptedModel([pay_call(1 + i % 5), answer_message(f"done {i}")]), delay=0.005)
            runs.append(arun("pay", model, tools, gate=pay_gate, run_id=f"run-{i}", on_event=sink))
        return await asyncio.gather(*runs)

    results = asyncio.run(main())
    assert all(r.stop is Stop.ANSWERED for r in results)
    spans = exporter.get_finished_spans()
    agents = _by_name(spans)["invoke_agent payer"]
    assert len(agents) == count and len(spans) == 4 * count
    starts = sorted(a.start_time for a in agents)  # type: ignore[type-var]
    ends = sorted(a.end_time for a in agents)  # type: ignore[type-var]
    assert starts[-1] < ends[0]  # they did overlap: all began before any ended
    for agent in agents:
        assert agent.attributes is not None
        run_id = agent.attributes["gen_ai.conversation.id"]
        children = _children(spans, agent)
        assert [c.name for c in children] == ["chat gpt-test", "execute_tool pay", "chat gpt-test"], run_id
        assert {c.context.trace_id for c in children} == {agent.context.trace_id}
        _assert_nested_in_time(spans, agent)
    assert len({a.context.trace_id for a in agents}) == count
    assert sink.open_runs == ()


def test_a_run_that_raises_is_closed_by_fail(exporter, sink) -> None:
    """A handler's bug posts no Ended: the run stays open until fail() ends it with the error recorded."""
    tools, _ = make_payments()

    def broken(account: str) -> int:
        raise RuntimeError("bug")

    tools["balance"] = ToolSpec("Read a balance.", {"account": str}, broken)
    model = ScriptedModel([tool_call_message("c1", "balance", {"account": "ACME"}), answer_message("x")])
    with pytest.raises(HandlerError) as raised:
        run("read", model, tools, run_id="r4", on_event=sink)
    assert sink.open_runs == ("r4",)
    sink.fail("r4", raised.value)
    sink.fail("r4", raised.value)  # once closed, nothing more to do
    assert sink.open_runs == ()
    (agent,) = _by_name(exporter.get_finished_spans())["invoke_agent payer"]
    assert agent.status.status_code is StatusCode.ERROR and agent.attributes is not None
    assert agent.attributes["error.type"] == "HandlerError"
    assert [e.name for e in agent.events] == ["exception"]


def test_the_global_tracer_provider_and_an_unknown_model_give_plain_names(exporter) -> None:
    """Without a model name the chat span is ``chat`` and carries no gen_ai.request.model."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tools, _ = make_payments()
    run("t", ScriptedModel([answer_message("hi")]), tools, on_event=OtelSink(provider))
    named = _by_name(exporter.get_finished_spans())
    assert sorted(named) == ["chat", "invoke_agent agent_fsm"]
    assert "gen_ai.request.model" not in (named["chat"][0].attributes or {})


def test_chat_spans_carry_the_tokens_and_cost_of_their_call_and_the_run_span_the_totals(exporter, sink) -> None:
    """A priced run: each chat span says what its call used and cost; the run span sums them."""
    from decimal import Decimal

    from agent_fsm import Agent, ModelReply, Price, Prices

    class Reporting:
        model = "gpt-test"

        def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
            done = any(m.get("role") == "tool" for m in messages)
            reply = answer_message("paid") if done else pay_call(10)
            return ModelReply(reply, prompt_tokens=None, output_tokens=7 if done else 11, cached_tokens=None)

    tools, _ = make_payments()
    prices = Prices({"gpt-test": Price(Decimal("1"), Decimal("3"))})
    result = Agent(Reporting(), tools, gate=pay_gate, prices=prices).run("pay", run_id="r9", on_event=sink)
    named = _by_name(exporter.get_finished_spans())
    chats = named["chat gpt-test"]
    assert [c.attributes["gen_ai.usage.output_tokens"] for c in chats] == [11, 7]  # type: ignore[index]
    costs = [Decimal(c.attributes["agent_fsm.cost"]) for c in chats]  # type: ignore[index, arg-type]
    assert sum(costs) == result.usage.cost > 0
    assert all(c.attributes["gen_ai.response.model"] == "gpt-test" for c in chats)  # type: ignore[index]
    (agent,) = named["invoke_agent payer"]
    assert agent.attributes is not None
    assert agent.attributes["gen_ai.usage.output_tokens"] == 18
    assert Decimal(str(agent.attributes["agent_fsm.cost"])) == result.usage.cost
    _assert_nested_in_time(exporter.get_finished_spans(), agent)
