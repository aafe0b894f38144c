"""Run events: what they say, in which order, through both drivers, as JSON, and the DEBUG log."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import pytest

from agent_fsm import (
    Ended,
    Judged,
    ModelReplied,
    ModelRequested,
    Observed,
    Paused,
    Proposed,
    RunEvent,
    ScriptedModel,
    StateEntered,
    Stop,
    TextDelta,
    answer_message,
    arun,
    astream,
    event_from_json,
    event_to_json,
    resume,
    run,
    stream,
)
from tests.payments import make_payments, pay_call, pay_gate

SCRIPT = [pay_call(500), pay_call(10, "c2"), answer_message("paid ten")]


def _without_time(events: list[RunEvent]) -> list[Any]:
    return [attrs.evolve(e, at=0.0) if not isinstance(e, Ended) else ("ended", e.result.stop) for e in events]


def test_stream_tells_the_run_as_it_went() -> None:
    """Each state entered (the path), each model call, proposal, judgement and observation, then Ended."""
    tools, _ = make_payments()
    events = list(stream("pay", ScriptedModel(SCRIPT), tools, gate=pay_gate, run_id="r"))
    ended = events[-1]
    assert isinstance(ended, Ended) and ended.result.stop is Stop.ANSWERED
    assert [e.state for e in events if isinstance(e, StateEntered)] == ended.result.state.path
    assert all(e.run_id == "r" for e in events)
    kinds = [(type(e).__name__, getattr(e, "kind", None)) for e in events if not isinstance(e, StateEntered)]
    assert kinds == [
        ("ModelRequested", None),
        ("ModelReplied", None),
        ("Charged", None),
        ("Proposed", None),
        ("Judged", "denied"),
        ("Observed", "denied"),
        ("ModelRequested", None),
        ("ModelReplied", None),
        ("Charged", None),
        ("Proposed", None),
        ("Judged", "allow"),
        ("Observed", "result"),
        ("ModelRequested", None),
        ("ModelReplied", None),
        ("Charged", None),
        ("Ended", None),
    ]
    first = next(e for e in events if isinstance(e, StateEntered))
    assert (first.source, first.event, first.guard, first.state) == ("Ready", "next_turn", None, "Proposing")
    replies = [e for e in events if isinstance(e, ModelReplied)]
    assert [r.calls for r in replies] == [1, 1, 0] and replies[-1].text == "paid ten"
    requests = [e for e in events if isinstance(e, ModelRequested)]
    assert [r.prompt_tokens for r in requests] == ended.result.state.prompt_token_log
    assert [e.at for e in events] == sorted(e.at for e in events)


def test_every_event_survives_a_json_round_trip() -> None:
    tools, _ = make_payments()
    events = list(stream("pay", ScriptedModel([pay_call(50), answer_message("x")]), tools, gate=pay_gate))
    assert any(isinstance(e, Paused) for e in events)
    for event in events:
        text = json.dumps(event_to_json(event))
        again = event_from_json(json.loads(text))
        if isinstance(event, Ended):
            assert isinstance(again, Ended) and again.result.state == event.result.state
            assert again.result == event.result
        else:
            assert again == event
    with pytest.raises(ValueError, match="not a run event"):
        event_from_json({"type": "nonsense"})
    with pytest.raises(ValueError, match="wrong fields"):
        event_from_json({"type": "judged", "run_id": "r"})


def test_run_and_arun_post_the_same_events_to_on_event() -> None:
    """A plain sink under run, an async sink under arun, and astream: the same events in the same order."""
    tools, _ = make_payments()
    plain: list[RunEvent] = []
    run("pay", ScriptedModel(SCRIPT), tools, gate=pay_gate, run_id="r", on_event=plain.append)
    awaited: list[RunEvent] = []

    async def sink(event: RunEvent) -> None:
        await asyncio.sleep(0)
        awaited.append(event)

    async def streamed() -> list[RunEvent]:
        return [e async for e in astream("pay", ScriptedModel(SCRIPT), make_payments()[0], gate=pay_gate, run_id="r")]

    asyncio.run(arun("pay", ScriptedModel(SCRIPT), make_payments()[0], gate=pay_gate, run_id="r", on_event=sink))
    assert _without_time(awaited) == _without_time(plain) == _without_time(asyncio.run(streamed()))


def test_resume_posts_the_decision_and_what_follows() -> None:
    tools, ledger = make_payments()
    paused = run("pay", ScriptedModel([pay_call(50), answer_message("ok")]), tools, gate=pay_gate)
    events: list[RunEvent] = []
    resume(paused.state, ScriptedModel([pay_call(50), answer_message("ok")]), tools, approve=True, gate=pay_gate,
           on_event=events.append)  # fmt: skip
    assert [e.state for e in events if isinstance(e, StateEntered)][:2] == ["Executing", "Ready"]
    assert any(isinstance(e, Observed) and e.ok for e in events) and len(ledger) == 1


def test_leaving_astream_early_cancels_the_run() -> None:
    """Breaking out of astream at the first judgement: the run's task is cancelled, no effect happens after."""
    tools, ledger = make_payments()

    async def main() -> list[RunEvent]:
        seen: list[RunEvent] = []
        async for event in astream("pay", ScriptedModel([pay_call(10), answer_message("x")]), tools, gate=pay_gate):
            seen.append(event)
            if isinstance(event, Proposed):
                break
        await asyncio.sleep(0.01)
        return seen

    seen = asyncio.run(main())
    assert isinstance(seen[-1], Proposed) and not any(isinstance(e, Judged) for e in seen)
    assert len(ledger) <= 1  # the call in flight, if any, ran once


class Streaming:
    """A model that streams its answer in fragments (as the provider adapters do with stream=True)."""

    streams = True

    def __init__(self, text: str) -> None:
        self.text = text

    def _fragments(self) -> list[str]:
        return [self.text[i : i + 3] for i in range(0, len(self.text), 3)]

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Any = (), *, on_delta: Any = None) -> Any:
        for piece in self._fragments():
            if on_delta is not None:
                on_delta(piece)
        return answer_message(self.text)

    async def achat(self, messages: Sequence[Mapping[str, Any]], tools: Any = (), *, on_delta: Any = None) -> Any:
        for piece in self._fragments():
            await asyncio.sleep(0)
            if on_delta is not None:
                await on_delta(piece)
        return answer_message(self.text)


def test_text_deltas_arrive_before_the_reply_in_both_drivers() -> None:
    tools, _ = make_payments()
    live: list[RunEvent] = []
    run("t", Streaming("hello world"), tools, on_event=live.append)

    async def streamed() -> list[RunEvent]:
        return [e async for e in astream("t", Streaming("hello world"), tools)]

    for events in (live, asyncio.run(streamed()), list(stream("t", Streaming("hello world"), tools))):
        deltas = [e for e in events if isinstance(e, TextDelta)]
        assert "".join(d.text for d in deltas) == "hello world" and {d.turn for d in deltas} == {1}
        reply = next(i for i, e in enumerate(events) if isinstance(e, ModelReplied))
        assert all(events.index(d) < reply for d in deltas)
    assert run("t", Streaming("quiet"), tools).answer == "quiet"  # nobody listens: no on_delta passed


def test_one_debug_line_per_transition_and_nothing_at_info(caplog: pytest.LogCaptureFixture) -> None:
    tools, _ = make_payments()
    with caplog.at_level(logging.INFO, logger="agent_fsm"):
        run("pay", ScriptedModel(SCRIPT), tools, gate=pay_gate)
    assert caplog.records == []
    with caplog.at_level(logging.DEBUG, logger="agent_fsm"):
        result = run("pay", ScriptedModel(SCRIPT), tools, gate=pay_gate, run_id="r")
    lines = [r.getMessage() for r in caplog.records if r.name == "agent_fsm"]
    assert len(lines) == len(result.state.path)
    assert lines[0] == "run r: Ready --next_turn [else]--> Proposing (turn 0)"
    assert lines[1].startswith("run r: Proposing --judge [call_rejected]--> Denied")


def test_every_event_reads_compares_and_hashes_as_an_attrs_record() -> None:
    """The shared repr, equality and hash of the event classes behave as attrs would generate them per class."""
    from agent_fsm.engine._events import EVENT_TYPES

    for cls in (RunEvent, *EVENT_TYPES.values()):
        if cls is Ended:
            continue  # its result is checked through the JSON round trip above
        names = [f.name for f in attrs.fields(cls)]
        values = {name: f"{name}-{i}" for i, name in enumerate(names)}
        event, same = cls(**values), cls(**values)
        shown = ", ".join(f"{name}={value!r}" for name, value in values.items())
        assert repr(event) == f"{cls.__qualname__}({shown})"
        assert event == same and hash(event) == hash(same)
        assert (event != same) is False  # != is the inverse of the shared ==
        for name in names:  # every field takes part in equality
            other = cls(**{**values, name: "else"})
            assert event != other and (event == other) is False
        assert event != RunEvent(values["run_id"], values["at"]) or cls is RunEvent
        assert event.__eq__(object()) is NotImplemented
