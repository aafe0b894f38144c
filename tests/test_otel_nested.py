"""Spans of nested runs nest: a child run's span sits under its parent's tool-call span, checked with the real SDK."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agent_fsm import ScriptedModel, answer_message, run
from agent_fsm.otel import OtelSink
from tests.nested_world import desk_agent


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def sink(exporter: InMemorySpanExporter) -> OtelSink:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return OtelSink(provider, agent_name="desk")


def _parent(spans: Sequence[ReadableSpan], span: ReadableSpan) -> ReadableSpan | None:
    if span.parent is None:
        return None
    (found,) = [s for s in spans if s.context.span_id == span.parent.span_id]
    return found


def _check_tree(spans: Sequence[ReadableSpan], top_run: str) -> list[ReadableSpan]:
    """Every nested run's span is under its parent's execute_tool span of its call, inside it in time; returns them."""
    runs = [s for s in spans if s.name.startswith("invoke_agent")]
    nested = [s for s in runs if s.attributes["agent_fsm.run_id"] != top_run]
    for child in nested:
        run_id = child.attributes["agent_fsm.run_id"]
        parent_run, _, call_id = run_id.rpartition("/")
        tool = _parent(spans, child)
        assert tool is not None and tool.name.startswith("execute_tool"), (child.name, tool and tool.name)
        assert tool.attributes["gen_ai.tool.call.id"] == call_id == child.attributes["gen_ai.tool.call.id"]
        above = _parent(spans, tool)
        assert above is not None and above.attributes["agent_fsm.run_id"] == parent_run
        assert child.attributes["agent_fsm.parent_run_id"] == parent_run
        assert tool.start_time <= child.start_time <= child.end_time <= tool.end_time <= above.end_time
    tops = [s for s in runs if s.attributes["agent_fsm.run_id"] == top_run]
    assert tops and all(s.parent is None for s in tops)
    return nested


def test_a_nested_pause_and_its_approval_nest_their_spans_two_levels_deep(exporter, sink) -> None:
    """desk -> triage -> refunds: paused, then approved; each level's span under the call that ran it, named for it."""
    agent = desk_agent()
    paused = agent.run("refund A1", on_event=sink, run_id="top")
    assert paused.blocked_path == ("d1", "t1", "r1")
    done = agent.resume(paused.state, approve=True, on_event=sink)
    assert done.stop.value == "answered" and sink.open_runs == ()
    spans = exporter.get_finished_spans()
    nested = _check_tree(spans, "top")
    names = sorted((s.attributes["agent_fsm.run_id"], s.name, s.attributes["agent_fsm.stop"]) for s in nested)
    assert names == [
        ("top/d1", "invoke_agent triage", "answered"),
        ("top/d1", "invoke_agent triage", "awaiting_approval"),
        ("top/d1/t1", "invoke_agent refunds", "answered"),
        ("top/d1/t1", "invoke_agent refunds", "awaiting_approval"),
    ]
    tools = sorted(s.name for s in spans if s.name.startswith("execute_tool"))
    assert tools == ["execute_tool refund"] + ["execute_tool refunds"] * 2 + ["execute_tool triage"] * 2
    (refund,) = [s for s in spans if s.name == "execute_tool refund"]
    assert _parent(spans, refund).attributes["agent_fsm.run_id"] == "top/d1/t1"  # type: ignore[union-attr]
    resumed = [s for s in nested if s.attributes["agent_fsm.stop"] == "answered" and s.links]
    assert {s.attributes["agent_fsm.run_id"] for s in resumed} == {"top/d1", "top/d1/t1"}  # linked to their pauses


def test_async_nested_runs_nest_alike(exporter, sink) -> None:
    """The async driver's events make the same tree."""
    agent = desk_agent(cents=100)  # small: no pause
    result = asyncio.run(agent.arun("refund A1", on_event=sink, run_id="atop"))
    assert result.stop.value == "answered"
    nested = _check_tree(exporter.get_finished_spans(), "atop")
    assert sorted(s.name for s in nested) == ["invoke_agent refunds", "invoke_agent triage"]


def test_a_run_id_with_a_slash_but_no_parent_seen_is_a_root_span(exporter, sink) -> None:
    """Only a parent this sink follows adopts a run: a user's id holding '/' stays a root span."""
    run("hi", ScriptedModel([answer_message("hello")]), {}, run_id="team/a1", on_event=sink)
    (span,) = [s for s in exporter.get_finished_spans() if s.name.startswith("invoke_agent")]
    assert span.parent is None and "agent_fsm.parent_run_id" not in span.attributes


def test_a_handoff_nests_the_run_that_took_over(exporter, sink) -> None:
    """The agent handed over to is a span under the handing call's span; the parent ends handed_over."""
    from agent_fsm import Agent, tool_call_message

    billing = Agent(ScriptedModel([answer_message("fine")]), {}, name="billing")
    front = Agent(ScriptedModel([tool_call_message("h1", "to_billing", {})]), {"to_billing": billing.handoff()})
    assert front.run("invoice?", run_id="f", on_event=sink).stop.value == "handed_over"
    spans = exporter.get_finished_spans()
    (child,) = _check_tree(spans, "f")
    assert child.name == "invoke_agent billing" and _parent(spans, child).name == "execute_tool to_billing"  # type: ignore[union-attr]
    (top,) = [s for s in spans if s.attributes.get("agent_fsm.run_id") == "f" and s.name.startswith("invoke")]
    assert top.attributes["agent_fsm.stop"] == "handed_over" and sink.open_runs == ()
