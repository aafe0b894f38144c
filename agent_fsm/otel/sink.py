"""
OpenTelemetry spans from run events, after the GenAI semantic conventions.

A run becomes one ``invoke_agent {agent}`` span (kind ``INTERNAL``); each
model call a child ``chat {model}`` span (kind ``CLIENT``); each executed
tool call a child ``execute_tool {tool}`` span (kind ``INTERNAL``). Spans
are made from the events' own ``at`` times, not from when the events are
delivered (the sync driver delivers them at the next step), so a span lasts
exactly as long as what it measures. Denials, invalid proposals, screens'
verdicts (``agent_fsm.screened``) and the pause are events on the run span;
the run's typed stop is its outcome.

A run nested in a tool call (an agent run as a tool, a handoff; its run id
is its parent's and the call's, joined by ``/``) is an ``invoke_agent``
span of its own under the parent's ``execute_tool`` span for that call,
which then lasts from the call's start to its observation (under the
parent's run span when the sink saw no such call).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Collection
from typing import Any

import attrs
from opentelemetry import trace
from opentelemetry.trace import Link, Span, SpanContext, SpanKind, Status, StatusCode, Tracer, TracerProvider

from agent_fsm.engine import (
    Charged,
    Ended,
    Judged,
    ModelReplied,
    ModelRequested,
    Observed,
    Paused,
    Proposed,
    RunEvent,
    Screened,
    StateEntered,
    Stop,
)

__all__ = ["ERROR_STOPS", "OtelSink"]

ERROR_STOPS: frozenset[Stop] = frozenset({Stop.PROVIDER_ERROR})
"""
Stops that set the run span's status to ``ERROR`` (with ``error.type`` the stop's value).

Rationale: only a failure outside the run's control (the model could not
be reached) is an error of the operation. A budget stop, a handoff, a
rejected answer or a pause is the engine doing its job: the span's status
stays unset and ``agent_fsm.stop`` says which ending it was.
"""

_SCOPE = "agent_fsm"


def _ns(at: float) -> int:
    return int(at * 1e9)


@attrs.define
class _Run:
    """The spans of one run in flight, and what is waiting for its end event."""

    span: Span
    request: ModelRequested | None = None  # a model call asked for and not yet answered
    failed_at: float | None = None  # when the run moved on from an unanswered model call
    executing_at: float | None = None  # when the head call entered Executing
    input_tokens: int = 0  # prompt tokens of the model calls this span saw
    # The chat span of the latest reply, ended when its Charged event (tokens out, cost) or anything else arrives.
    chat: Span | None = None
    chat_end: float = 0.0
    names: dict[str, str] = attrs.Factory(dict)  # call id -> tool name, of the calls proposed
    tools: dict[str, Span] = attrs.Factory(dict)  # call id -> its execute_tool span, opened early for a nested run
    nested: bool = False  # a run nested in a call of a run this sink follows


class OtelSink:
    """
    An ``on_event=`` sink that turns run events into OpenTelemetry spans.

    One sink serves any number of runs, sync or async, at once: spans are
    kept by run id (give concurrent runs distinct run ids, as the
    default ids are). ``tracer_provider`` defaults to the global one;
    ``agent_name`` names the run span; ``model`` and ``provider`` fill
    ``gen_ai.request.model`` and ``gen_ai.provider.name`` when known (a
    provider adapter's ``.model`` and ``.provider``). A run paused for a
    human ends its span with the pause recorded; the run resumed later is a
    new ``invoke_agent`` span with the same ``gen_ai.conversation.id`` (the
    run id), linked to the paused one when this sink saw it.

    A run that raises instead of ending (a handler's bug, a cancellation)
    posts no ``Ended``: pass the exception to :meth:`fail` to close its spans.
    """

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        agent_name: str = "agent_fsm",
        model: str | None = None,
        provider: str | None = None,
        error_stops: Collection[Stop] = ERROR_STOPS,
    ) -> None:
        provider_ = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        self._tracer: Tracer = provider_.get_tracer(_SCOPE)
        self.agent_name = agent_name
        self.model = model
        self.provider = provider
        self.error_stops = frozenset(error_stops)
        self._runs: dict[str, _Run] = {}
        self._paused: dict[str, SpanContext] = {}  # run id -> the span that paused, to link its resumption
        self._lock = threading.Lock()  # runs in threads may share the sink

    @property
    def open_runs(self) -> tuple[str, ...]:
        """The ids of runs whose span is open (a run that raised stays here until :meth:`fail`)."""
        with self._lock:
            return tuple(self._runs)

    def __call__(self, event: RunEvent) -> None:
        """Take one event of any run."""
        with self._lock:
            run = self._runs.get(event.run_id)
            if run is None:
                run = self._runs[event.run_id] = self._begin(event)
            if isinstance(event, Ended):
                del self._runs[event.run_id]
        self._take(run, event)

    def fail(self, run_id: str, error: BaseException) -> None:
        """End the open spans of ``run_id`` with ``error`` recorded (status ``ERROR``); nothing if none is open."""
        with self._lock:
            run = self._runs.pop(run_id, None)
        if run is None:
            return
        now = time.time()
        if run.chat is not None:
            self._end_chat(run)
        self._close_chat(run, now, type(error).__name__)
        self._close_tools(run, now)
        run.span.record_exception(error, timestamp=_ns(now))
        run.span.set_attribute("error.type", type(error).__qualname__)
        run.span.set_status(Status(StatusCode.ERROR, str(error) or type(error).__name__))
        run.span.end(end_time=_ns(now))

    # --- the spans -------------------------------------------------------------

    def _begin(self, event: RunEvent) -> _Run:
        """A run's span: under its parent's tool call when it is a nested run whose parent this sink follows."""
        parent_id, _, call_id = event.run_id.rpartition("/")
        parent = self._runs.get(parent_id) if parent_id else None
        name = self.agent_name if parent is None else parent.names.get(call_id, self.agent_name)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": name,
            "gen_ai.conversation.id": event.run_id,
            "agent_fsm.run_id": event.run_id,
        }
        context = None
        if parent is not None:
            attributes["agent_fsm.parent_run_id"] = parent_id
            attributes["gen_ai.tool.call.id"] = call_id
            context = trace.set_span_in_context(self._tool_span(parent, call_id, event.at))
        if self.provider is not None:
            attributes["gen_ai.provider.name"] = self.provider
        if self.model is not None:
            attributes["gen_ai.request.model"] = self.model
        resumed = isinstance(event, StateEntered) and event.source == "AwaitingApproval"
        if resumed:
            attributes["agent_fsm.resumed"] = True
        paused = self._paused.pop(event.run_id, None)
        links = [Link(paused, {"agent_fsm.link": "resumes"})] if paused is not None else []
        span = self._tracer.start_span(
            f"invoke_agent {name}",
            context=context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
            start_time=_ns(event.at),
        )
        return _Run(span, nested=parent is not None)

    def _tool_span(self, run: _Run, call_id: str, at: float) -> Span:
        """The open ``execute_tool`` span of ``call_id``, started when the call entered Executing."""
        span = run.tools.get(call_id)
        if span is None:
            start = run.executing_at if run.executing_at is not None else at
            span = self._start_tool(run, run.names.get(call_id, "tool"), call_id, start)
            run.tools[call_id] = span
        return span

    def _start_tool(self, run: _Run, name: str, call_id: str, start: float) -> Span:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": call_id,
            "gen_ai.tool.type": "function",
        }
        return self._child(run, f"execute_tool {name}", SpanKind.INTERNAL, start, attributes)

    def _close_tools(self, run: _Run, at: float) -> None:
        """Tool spans still open when the run stops (its nested run paused it, or it raised): ended there."""
        for span in run.tools.values():
            span.end(end_time=_ns(at))
        run.tools.clear()

    def _child(self, run: _Run, name: str, kind: SpanKind, start: float, attributes: dict[str, Any]) -> Span:
        context = trace.set_span_in_context(run.span)
        return self._tracer.start_span(name, context=context, kind=kind, attributes=attributes, start_time=_ns(start))

    def _take(self, run: _Run, event: RunEvent) -> None:
        if run.chat is not None:
            if isinstance(event, Charged):
                self._charged(run, event)
                return
            self._end_chat(run)
        if isinstance(event, StateEntered):
            if run.request is not None and run.failed_at is None:
                run.failed_at = event.at  # the run moved on from a model call that never replied
            if event.state == "Executing":
                run.executing_at = event.at
        elif isinstance(event, ModelRequested):
            run.request, run.failed_at = event, None
        elif isinstance(event, ModelReplied):
            self._chat(run, event)
        elif isinstance(event, Proposed):
            run.names[event.call_id] = event.name
        elif isinstance(event, Observed):
            self._tool(run, event)
        elif isinstance(event, Judged) and event.kind in ("denied", "invalid"):
            attributes = {"gen_ai.tool.name": event.name, "gen_ai.tool.call.id": event.call_id}
            attributes["agent_fsm.reason"] = event.reason
            run.span.add_event(f"agent_fsm.{event.kind}", attributes, timestamp=_ns(event.at))
        elif isinstance(event, Screened):
            attributes = {"agent_fsm.screen.stage": event.stage, "agent_fsm.screen.action": event.action}
            if event.call_id is not None:
                attributes["gen_ai.tool.call.id"] = event.call_id
            if event.code is not None:
                attributes["agent_fsm.code"] = event.code
            if event.reason:
                attributes["agent_fsm.reason"] = event.reason
            run.span.add_event("agent_fsm.screened", attributes, timestamp=_ns(event.at))
        elif isinstance(event, Paused):
            run.span.add_event(
                "agent_fsm.paused",
                {
                    "agent_fsm.pause_id": event.pause_id,
                    "gen_ai.tool.name": event.name,
                    "gen_ai.tool.call.id": event.call_id,
                    "agent_fsm.reason": event.reason,
                },
                timestamp=_ns(event.at),
            )
        elif isinstance(event, Ended):
            self._end(run, event)

    def _chat_attributes(self, turn: int) -> dict[str, Any]:
        attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "agent_fsm.turn": turn}
        if self.model is not None:
            attributes["gen_ai.request.model"] = self.model
        if self.provider is not None:
            attributes["gen_ai.provider.name"] = self.provider
        return attributes

    def _chat_name(self) -> str:
        return "chat" if self.model is None else f"chat {self.model}"

    def _chat(self, run: _Run, reply: ModelReplied) -> None:
        request = run.request
        start = request.at if request is not None else reply.at
        attributes = self._chat_attributes(reply.turn)
        attributes["gen_ai.usage.input_tokens"] = reply.prompt_tokens
        if reply.finish is not None:
            attributes["gen_ai.response.finish_reasons"] = [reply.finish]
        attributes["agent_fsm.proposed_calls"] = reply.calls
        run.chat, run.chat_end = self._child(run, self._chat_name(), SpanKind.CLIENT, start, attributes), reply.at
        run.request = run.failed_at = None
        run.input_tokens += reply.prompt_tokens

    def _charged(self, run: _Run, charged: Charged) -> None:
        """What the call used, by the provider's figures where it reported them, and what it cost."""
        span = run.chat
        assert span is not None
        span.set_attribute("gen_ai.usage.input_tokens", charged.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", charged.output_tokens)
        span.set_attribute("agent_fsm.usage.cached_tokens", charged.cached_tokens)
        span.set_attribute("agent_fsm.cost", charged.cost)
        if charged.model is not None:
            span.set_attribute("gen_ai.response.model", charged.model)
        self._end_chat(run)

    def _end_chat(self, run: _Run) -> None:
        assert run.chat is not None
        run.chat.end(end_time=_ns(run.chat_end))
        run.chat = None

    def _close_chat(self, run: _Run, at: float, error_type: str) -> None:
        """A model call that never replied: its span ends in error when the run moved on (or ends)."""
        request = run.request
        if request is None:
            return
        attributes = self._chat_attributes(request.turn)
        attributes["error.type"] = error_type
        span = self._child(run, self._chat_name(), SpanKind.CLIENT, request.at, attributes)
        span.set_status(Status(StatusCode.ERROR, error_type))
        span.end(end_time=_ns(run.failed_at if run.failed_at is not None else at))
        run.request = run.failed_at = None

    def _tool(self, run: _Run, observed: Observed) -> None:
        span = run.tools.pop(observed.call_id, None)
        if span is None:
            if run.executing_at is None:
                return  # refused before the boundary: recorded on the run span by its judgement
            span = self._start_tool(run, observed.name, observed.call_id, run.executing_at)
        elif run.names.get(observed.call_id) != observed.name:  # opened unnamed: a resumed run saw no proposal
            span.update_name(f"execute_tool {observed.name}")
            span.set_attribute("gen_ai.tool.name", observed.name)
        if not observed.ok:
            span.set_attribute("error.type", "tool_error")
            span.set_status(Status(StatusCode.ERROR, str(observed.content)[:200]))
        span.end(end_time=_ns(observed.at))
        run.executing_at = None

    def _end(self, run: _Run, ended: Ended) -> None:
        result = ended.result
        state = result.state
        fault = state.fault
        self._close_chat(run, ended.at, fault.type if fault is not None else "_OTHER")
        self._close_tools(run, ended.at)
        span = run.span
        if state.agent and run.nested:
            span.update_name(f"invoke_agent {state.agent}")  # a nested run: named for the agent that ran it
            span.set_attribute("gen_ai.agent.name", state.agent)
        span.set_attribute("agent_fsm.stop", result.stop.value)
        span.set_attribute("agent_fsm.code", result.code)
        span.set_attribute("agent_fsm.turns", state.turns)
        span.set_attribute("gen_ai.usage.input_tokens", run.input_tokens)
        usage = state.usage  # the run's own totals: the provider's figures where reported, and the cost
        span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens)
        span.set_attribute("agent_fsm.usage.cached_tokens", usage.cached_tokens)
        span.set_attribute("agent_fsm.cost", format(usage.cost, "f"))
        if result.reason:
            span.set_attribute("agent_fsm.reason", result.reason)
        if result.stop is Stop.AWAITING_APPROVAL and state.pause is not None:
            span.set_attribute("agent_fsm.pause_id", state.pause.pause_id)
            with self._lock:
                self._paused[ended.run_id] = span.get_span_context()
        if result.stop in self.error_stops:
            span.set_attribute("error.type", result.stop.value)
            span.set_status(Status(StatusCode.ERROR, result.reason or result.stop.value))
        span.end(end_time=_ns(ended.at))
