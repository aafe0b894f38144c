"""
``POST /ag-ui``: an AG-UI 1.0 ``RunAgentInput`` in, the run's AG-UI events out (SSE).

A request without ``resume`` starts a run of its last user message (scope
``start``), the next run of the thread's session: the conversation so far
comes from the store, not from the messages the client sends; a request
whose ``resume`` answers the interrupt a pause ended the previous AG-UI run
with decides that pause (scope ``decide``), through the same decision as the
plain API, judged afresh, and streams the run on from there. Client-declared
tools are refused: a client tool would be an effect the agent's gate never
judged. A refusal before the stream is a typed JSON 4xx.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from agent_fsm.serve.ag_ui.events import Translator, split_interrupt_id
from agent_fsm.serve.clients import Client
from agent_fsm.serve.core import Api, Refused, read_json
from agent_fsm.serve.plain import decide_as, guarded

__all__ = ["ag_ui_routes"]


def _task(messages: Any) -> str:
    """The text of the last user message (a string, or its text parts joined)."""
    if not isinstance(messages, list):
        raise Refused(422, "bad_input", "'messages' must be a list")
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
            if isinstance(content, str) and content.strip():
                return content
    raise Refused(422, "no_task", "the input has no user message with text to run")


def _resume(client: Client, entries: list[Any]) -> tuple[str, dict[str, Any]]:
    """The run a resume decides and the decision its one entry asks for."""
    if len(entries) != 1 or not isinstance(entries[0], dict):
        raise Refused(422, "bad_resume", "'resume' answers the one open interrupt with one entry")
    entry = entries[0]
    named = split_interrupt_id(str(entry.get("interruptId", "")))
    if named is None or not client.owns(named[0]):
        raise Refused(404, "no_such_interrupt", f"no interrupt {entry.get('interruptId')!r}")
    run_id, pause_id = named
    given = entry.get("payload")
    payload: dict[str, Any] = given if isinstance(given, dict) else {}
    if entry.get("status") == "cancelled":
        reason = payload.get("reason") if isinstance(payload.get("reason"), str) else ""
        body = {"decision": "reject", "reason": reason or "cancelled by the client"}
    elif entry.get("status") == "resolved":
        body = dict(payload)
    else:
        raise Refused(422, "bad_resume", "a resume entry's status is 'resolved' or 'cancelled'")
    return run_id, {**body, "pause_id": pause_id}


def ag_ui_routes(api: Api) -> list[Route]:
    """The AG-UI endpoint over ``api``."""

    async def run(request: Request) -> Response:
        client = api.client(request, "start")
        given = await read_json(request)
        thread_id, run_id = given.get("threadId"), given.get("runId")
        if not isinstance(thread_id, str) or not isinstance(run_id, str) or not thread_id or not run_id:
            raise Refused(422, "bad_input", "a RunAgentInput names its threadId and runId")
        if given.get("tools"):
            raise Refused(422, "client_tools_refused", "this agent takes no client-declared tools")
        forwarded = given.get("forwardedProps")
        agent = api.agent(forwarded.get("agent") if isinstance(forwarded, dict) else None)
        resume = given.get("resume")
        if resume:
            api.client(request, "decide")
            served, decision = _resume(client, resume if isinstance(resume, list) else [resume])
            await api.summary(client, served)
            log = api.workers.hub.open(served)
            seen = len(log.after(0))
            await decide_as(api, client, served, decision, agent)
        else:
            task = _task(given.get("messages"))
            served = await api.start(agent, task, client, session=thread_id)
            log = api.workers.hub.open(served)
            seen = 0
        translator = Translator(thread_id, run_id, served, agent)
        follow = log.follow(seen)

        async def stream() -> AsyncIterator[bytes]:
            yield _frame(translator.started(given))
            async for record in follow:
                if record is None:
                    yield b": keep-alive\n\n"
                    continue
                for event in translator.translate(record):
                    yield _frame(event)

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"x-accel-buffering": "no"})

    return [Route("/ag-ui", guarded(run), methods=["POST"])]


def _frame(event: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(event, separators=(',', ':'), default=repr)}\n\n".encode()
