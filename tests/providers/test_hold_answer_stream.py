"""hold_answer over real server-sent events: an OpenAI-compatible stream from 127.0.0.1, a rejected answer held back."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agent_fsm import Agent, AnswerWithheld, TextDelta
from agent_fsm.providers import OpenAIChat
from agent_fsm.testing import assert_answer_held

from .loopback import LoopbackServer, Reply
from .streaming import explode

SCHEMA = {"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]}
DRAFT = "about twelve, I think"
FINAL = json.dumps({"total": 12})


def _streamed(text: str) -> Reply:
    """A chat completion answering ``text``, sent as server-sent events in small pieces."""
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
    }
    return Reply(200, explode("openai", body, [3, 7, 11, 15]), (("content-type", "text/event-stream"),))


def _agent(server: LoopbackServer, **options: Any) -> Agent:
    server.script(_streamed(DRAFT), _streamed(FINAL))
    model = OpenAIChat(base_url=server.url + "/v1", model="m", stream=True, native_output=False, **options)
    return Agent(model, {}, output=SCHEMA)


def test_the_draft_never_reaches_the_consumer_on_either_driver(server: LoopbackServer) -> None:
    """The draft streamed by the server fails the typed output: with hold_answer its pieces never arrive, the final
    answer's do, and AnswerWithheld says another answer is coming."""

    async def collect(agent: Agent) -> list[Any]:
        events = [e async for e in agent.astream("Count them.", hold_answer=True)]
        await agent.model.aclose()  # type: ignore[attr-defined]
        return events

    for events in (
        list(_agent(server).stream("Count them.", hold_answer=True)),
        asyncio.run(collect(_agent(server))),
    ):
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == FINAL
        assert [(e.state, e.retrying) for e in events if isinstance(e, AnswerWithheld)] == [("OutputInvalid", True)]
        assert_answer_held(events)
        assert events[-1].result.output == {"total": 12}


def test_without_holding_the_draft_is_shown(server: LoopbackServer) -> None:
    """The same stream without hold_answer delivers the draft's pieces first: what holding prevents."""
    events = list(_agent(server).stream("Count them."))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == DRAFT + FINAL
