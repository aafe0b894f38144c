"""
OpenTelemetry tracing for runs, after the GenAI semantic conventions: ``pip install "agent_fsm[otel]"``.

    from agent_fsm.otel import OtelSink

    sink = OtelSink(agent_name="support-desk", model=adapter.model, provider=adapter.provider)
    result = run(task, adapter, tools, gate=gate, on_event=sink)      # or arun(..., on_event=sink)

The spans, their attributes and what counts as an error are listed in
docs/observability.md. ``import agent_fsm`` never loads OpenTelemetry; this
package does.
"""

from agent_fsm.otel.sink import ERROR_STOPS, OtelSink

__all__ = ["ERROR_STOPS", "OtelSink"]
