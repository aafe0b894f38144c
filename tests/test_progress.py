"""A handler's progress (ToolContext.progress, report_progress) reaches the run's listeners while the call runs."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from agent_fsm import (
    Agent,
    HandlerError,
    Observed,
    ScriptedModel,
    ToolContext,
    ToolProgress,
    ToolSpec,
    allow_all,
    answer_message,
    event_from_json,
    event_to_json,
    report_progress,
    tool_call_message,
)
from agent_fsm.engine import MAX_PROGRESS_MESSAGE


def _model() -> ScriptedModel:
    return ScriptedModel([tool_call_message("c1", "copy", {"files": 3}), answer_message("copied")])


def _waiting_tools(heard: threading.Event, *, blocking: bool = False) -> dict[str, ToolSpec]:
    """``copy`` reports each file, and after the first waits (up to 5 s) until a listener has heard it."""
    waited: list[bool] = []

    def copy(files: int, context: ToolContext) -> dict[str, Any]:
        for done in range(1, files + 1):
            context.progress(done, files, f"file {done}")
            if done == 1:
                waited.append(heard.wait(5))
        return {"copied": files, "heard_during_the_call": waited == [True]}

    return {"copy": ToolSpec("Copy files.", {"files": int}, copy, blocking=blocking)}


def _progress(events: list[Any]) -> list[tuple[float, float | None, str | None]]:
    return [(e.progress, e.total, e.message) for e in events if isinstance(e, ToolProgress)]


def test_on_event_hears_progress_while_the_handler_runs() -> None:
    """Each report is an event, heard before the handler returns, in order, before the call's observation."""
    heard = threading.Event()
    events: list[Any] = []

    def listen(event: Any) -> None:
        events.append(event)
        if isinstance(event, ToolProgress):
            heard.set()

    result = Agent(_model(), _waiting_tools(heard), gate=allow_all).run("copy", on_event=listen)
    assert result.state.observations[0].content == {"copied": 3, "heard_during_the_call": True}
    assert _progress(events) == [(1.0, 3.0, "file 1"), (2.0, 3.0, "file 2"), (3.0, 3.0, "file 3")]
    first = next(i for i, e in enumerate(events) if isinstance(e, ToolProgress))
    observed = next(i for i, e in enumerate(events) if isinstance(e, Observed))
    assert first < observed and {(e.call_id, e.name) for e in events if isinstance(e, ToolProgress)} == {("c1", "copy")}


@pytest.mark.parametrize("blocking", [False, True])
def test_astream_hears_progress_live_from_a_worker_thread_or_the_loop(blocking: bool) -> None:
    """Under the async driver a blocking handler reports from a worker thread; astream yields each report as made."""
    heard = threading.Event()
    tools = _waiting_tools(heard, blocking=blocking)

    async def main() -> list[Any]:
        seen = []
        async for event in Agent(_model(), tools, gate=allow_all).astream("copy"):
            seen.append(event)
            if isinstance(event, ToolProgress):
                heard.set()
        return seen

    if not blocking:  # a plain handler on the loop cannot be heard while it blocks the loop: it reports, unwaited
        heard.set()
    events = asyncio.run(main())
    assert _progress(events) == [(1.0, 3.0, "file 1"), (2.0, 3.0, "file 2"), (3.0, 3.0, "file 3")]
    [observed] = [e for e in events if isinstance(e, Observed)]
    assert observed.content == {"copied": 3, "heard_during_the_call": True}
    assert events.index(observed) > max(i for i, e in enumerate(events) if isinstance(e, ToolProgress))


def test_stream_delivers_progress_after_the_call_and_nobody_listening_costs_nothing() -> None:
    """``stream`` yields between requests, so the reports come once the call returns; with no listener they vanish."""
    heard = threading.Event()
    heard.set()
    agent = Agent(_model(), _waiting_tools(heard), gate=allow_all)
    events = list(agent.stream("copy"))
    assert len(_progress(events)) == 3
    quiet = agent.run("copy")
    assert quiet.state.observations[0].content["copied"] == 3


def test_report_progress_needs_no_context_parameter_and_checks_what_it_is_given() -> None:
    """The module-level form works in any handler; bad values are refused, a long message is cut."""
    said: list[Any] = []

    def scan(pages: int) -> str:
        report_progress(0.5, message="x" * (MAX_PROGRESS_MESSAGE + 50))
        return "scanned"

    tools = {"scan": ToolSpec("Scan.", {"pages": int}, scan)}
    model = ScriptedModel([tool_call_message("c1", "scan", {"pages": 2}), answer_message("ok")])
    Agent(model, tools).run("scan", on_event=said.append)
    [event] = [e for e in said if isinstance(e, ToolProgress)]
    assert event.total is None and event.message is not None and len(event.message) == MAX_PROGRESS_MESSAGE
    assert event.message.endswith("…")
    assert event_from_json(json.loads(json.dumps(event_to_json(event)))) == event
    with pytest.raises(TypeError, match="progress must be a number"):
        report_progress("half")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="progress must be a number"):
        report_progress(True)
    with pytest.raises(ValueError, match="total must be a finite number"):
        report_progress(1, float("nan"))
    with pytest.raises(TypeError, match="message must be a str"):
        report_progress(1, 2, message=3)  # type: ignore[arg-type]
    report_progress(1, 2, "outside any handler: nobody hears it")  # no error


def test_a_listener_that_fails_on_progress_fails_the_run_not_the_tool() -> None:
    """The listener's exception is raised by the driver, never turned into the tool's error; the handler finished."""
    finished: list[int] = []

    def copy(files: int, context: ToolContext) -> int:
        context.progress(1, files)
        finished.append(files)
        return files

    def listen(event: Any) -> None:
        if isinstance(event, ToolProgress):
            raise KeyError("listener bug")

    for blocking in (False, True):
        agent = Agent(_model(), {"copy": ToolSpec("Copy.", {"files": int}, copy, blocking=blocking)}, gate=allow_all)
        with pytest.raises(KeyError, match="listener bug"):
            agent.run("copy", on_event=listen)
        with pytest.raises(KeyError, match="listener bug"):
            asyncio.run(agent.arun("copy", on_event=listen))
    assert finished == [3, 3, 3, 3]


def test_a_handler_passing_junk_to_progress_is_a_bug_said_so() -> None:
    """A non-number from a handler's own code is its bug: HandlerError, with the run's state."""

    def broken(n: int, context: ToolContext) -> str:
        context.progress([n])  # type: ignore[arg-type]
        return "never"

    model = ScriptedModel([tool_call_message("c1", "broken", {"n": 1}), answer_message("ok")])
    with pytest.raises(HandlerError, match="progress must be a number"):
        Agent(model, {"broken": ToolSpec("Broken.", {"n": int}, broken)}).run("b", on_event=lambda e: None)
