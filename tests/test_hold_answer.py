"""stream(..., hold_answer=True) and astream release an answer's text only once the run accepted it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agent_fsm import (
    Agent,
    AnswerWithheld,
    Limits,
    ModelReplied,
    ModelReply,
    RunEvent,
    StateEntered,
    TextDelta,
    ToolSpec,
    answer_message,
    event_from_json,
    event_to_json,
    tool_call_message,
)

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}
DRAFT = "DRAFT not json at all"
FINAL = json.dumps({"city": "Oslo"})
TOOLS = {"look": ToolSpec("Look.", {"key": str}, lambda key: f"value of {key}")}


class StreamingScript:
    """A model that plays ``replies`` in order, streaming each reply's text in fragments of three characters."""

    streams = True

    def __init__(self, replies: Sequence[Mapping[str, Any] | ModelReply]) -> None:
        self.replies = list(replies)

    def _next(self, messages: Sequence[Mapping[str, Any]]) -> tuple[Any, list[str]]:
        reply = self.replies[sum(m.get("role") == "assistant" for m in messages)]
        text = (reply.message if isinstance(reply, ModelReply) else reply).get("content") or ""
        return reply, [text[i : i + 3] for i in range(0, len(text), 3)]

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Any = (), *, on_delta: Any = None) -> Any:
        reply, pieces = self._next(messages)
        for piece in pieces:
            if on_delta is not None:
                on_delta(piece)
        return reply

    async def achat(self, messages: Sequence[Mapping[str, Any]], tools: Any = (), *, on_delta: Any = None) -> Any:
        reply, pieces = self._next(messages)
        for piece in pieces:
            await asyncio.sleep(0)
            if on_delta is not None:
                await on_delta(piece)
        return reply


def _typed_agent() -> Agent:
    """A run whose first answer fails the typed output (so it is retried) and whose second passes."""
    return Agent(StreamingScript([answer_message(DRAFT), answer_message(FINAL)]), {}, output=SCHEMA)


def _released_text(events: list[RunEvent], turn: int | None = None) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta) and (turn is None or e.turn == turn))


def _astream(agent: Agent, **options: Any) -> list[RunEvent]:
    async def collect() -> list[RunEvent]:
        return [e async for e in agent.astream("Where?", **options)]

    return asyncio.run(collect())


def test_without_holding_a_rejected_answer_is_streamed() -> None:
    """As before: the first answer's text reaches the consumer although the typed output then rejects it."""
    events = list(_typed_agent().stream("Where?"))
    assert _released_text(events, 1) == DRAFT
    assert not any(isinstance(e, AnswerWithheld) for e in events)


def test_a_rejected_answer_is_never_released_and_the_consumer_is_told() -> None:
    """hold_answer=True on both drivers: the rejected draft's chunks never arrive; an AnswerWithheld says another
    answer is coming; the accepted answer's chunks arrive, before the run enters Answered."""
    for events in (list(_typed_agent().stream("Where?", hold_answer=True)), _astream(_typed_agent(), hold_answer=True)):
        assert _released_text(events) == FINAL
        # Only the run's own record (the Ended event's saved state) keeps the draft, as its transcript must.
        assert [e.type for e in events if DRAFT in json.dumps(event_to_json(e))] == ["ended"]
        [withheld] = [e for e in events if isinstance(e, AnswerWithheld)]
        assert (withheld.turn, withheld.state, withheld.retrying) == (1, "OutputInvalid", True)
        replied = [e for e in events if isinstance(e, ModelReplied)]
        assert [r.text for r in replied] == [None, FINAL]
        answered = next(i for i, e in enumerate(events) if isinstance(e, StateEntered) and e.state == "Answered")
        last_delta = max(i for i, e in enumerate(events) if isinstance(e, TextDelta))
        assert events.index(withheld) < last_delta < answered
        assert events[-1].result.output == {"city": "Oslo"}  # type: ignore[attr-defined]


def test_an_answer_the_check_refuses_ends_without_its_text() -> None:
    """The answer check refuses the only answer: no chunk is released, and no other answer is coming."""
    agent = Agent(
        StreamingScript([answer_message("I guess it is fine")]),
        {},
        answer_check=lambda text, state: "a guess is no answer" if "guess" in text else None,
    )
    events = list(agent.stream("Is it fine?", hold_answer=True))
    assert _released_text(events) == ""
    [withheld] = [e for e in events if isinstance(e, AnswerWithheld)]
    assert (withheld.state, withheld.retrying) == ("AnswerRejected", False)
    assert events[-1].result.stop.value == "answer_rejected"  # type: ignore[attr-defined]


def test_a_reply_that_proposes_calls_streams_as_without_holding() -> None:
    """The text beside a tool call is no answer: held or not, the same events arrive in the same order."""
    replies = [tool_call_message("c1", "look", {"key": "a"}, thought="Let me look that up."), answer_message("a")]

    def shape(events: list[RunEvent]) -> list[tuple[str, Any]]:
        return [(e.type, getattr(e, "text", None)) for e in events if not isinstance(e, StateEntered)]

    plain = list(Agent(StreamingScript(replies), TOOLS).stream("Look a up."))
    held = list(Agent(StreamingScript(replies), TOOLS).stream("Look a up.", hold_answer=True))
    assert shape(held) == shape(plain)
    assert _released_text(held, 1) == "Let me look that up."


def test_a_budget_ending_the_run_withholds_the_answer_it_cut_off() -> None:
    """An answer the run could not accept (the reply was cut off at the output limit) is withheld too."""
    cut = ModelReply(answer_message("The answer is"), finish="length")
    agent = Agent(StreamingScript([cut]), {}, limits=Limits(accept_truncated=False))
    events = list(agent.stream("Tell me.", hold_answer=True))
    assert _released_text(events) == ""
    assert [e.state for e in events if isinstance(e, AnswerWithheld)] == ["AnswerRejected"]


def test_the_withheld_event_survives_a_json_round_trip() -> None:
    """Like every event, AnswerWithheld can be shipped to a UI as JSON and read back equal."""
    event = AnswerWithheld("r1", 1.5, 2, "OutputInvalid", True)
    assert event_from_json(event_to_json(event)) == event
