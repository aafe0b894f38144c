"""
The plain API: start runs, list and read them, stream their events as SSE, decide their pauses; JSON throughout.

A client sees and decides only its own runs (another's is 404, as an unknown
one). The event stream is the run's kept events (:mod:`agent_fsm.serve.kept`),
resumed from ``Last-Event-ID`` by any process on the store: from this
process's log while it drives the run, else from the store, read again
(:data:`POLL`) until the run rests. ``POST /runs/{id}/cancel`` cancels a
paused run: it ends ``cancelled`` (a decision like the others, taken once).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agent_fsm import Agent
from agent_fsm.engine import RunState
from agent_fsm.serve.clients import Client
from agent_fsm.serve.core import MAX_PAGE, Api, Refused, read_json, summary_data
from agent_fsm.serve.kept import EventId, Kept, event_id, stored_events
from agent_fsm.serve.stream import Record
from agent_fsm.store import AlreadyDecided, RunNotFound, StoreError
from agent_fsm.web.decisions import FormRefused, read_form

__all__ = ["POLL", "decide_as", "guarded", "plain_routes"]

POLL = (0.25, 2.0)
"""How often, in seconds, a stream of a run this process does not drive reads the store: at first, and at the
slowest, the wait doubling while nothing comes (a pause may wait for a person for days)."""

KEEPALIVE = 15.0

_log = logging.getLogger("agent_fsm.serve")


def guarded(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` with its :class:`Refused` answered as typed JSON."""

    async def answer(request: Request) -> Response:
        try:
            return await handler(request)
        except Refused as refused:
            return refused.response()

    return answer


_KEEPALIVE = b": keep-alive\n\n"


def _frame(event_id: str | int, data: dict[str, Any]) -> str:
    """One SSE frame: the event's id, its type as the event name, its data as compact JSON."""
    return f"id: {event_id}\nevent: {data['type']}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def _sse_told(record: Record | None) -> bytes:
    """One event a workflow told, numbered by the workflow (runs on Temporal)."""
    return _KEEPALIVE if record is None else _frame(record.seq, record.data).encode()


def _sse(batch: list[Kept] | None) -> bytes:
    """Kept events as SSE frames, one write for all of them (``None``: a keep-alive)."""
    if batch is None:
        return _KEEPALIVE
    return "".join(_frame(kept.text_id, kept.data) for kept in batch).encode()


async def kept_stream(api: Api, run_id: str, after: EventId) -> AsyncIterator[list[Kept] | None]:
    """
    The run's kept events after ``after``, as they come, until it rests (``None``: a keep-alive).

    What this process's log holds comes from it (every event of a run
    begun here, or since this process took the run up); the rest from the
    store. While this process drives the run its events come as they are
    derived; else the store is read again and again (:data:`POLL`), until this
    process takes the run up (a decision, a takeover) or it rests.
    """

    def agent_for(state: RunState) -> Agent:
        return api.agents.get(state.agent or "") or next(iter(api.agents.values()))

    quiet, wait = 0.0, POLL[0]
    rested = False  # the last event sent is a rest: the stream ends there if the run still rests
    while True:
        log = api.workers.hub.get(run_id)
        live = log is not None and log.driving
        held = log.kept_after(after) if log is not None and log.covers(after) else None
        if held:
            after, rested = held[-1].id, held[-1].rests
            yield held
            if rested and held[-1].data.get("stop") != "awaiting_approval":
                return  # ended for good; a pause may have been decided elsewhere since: the store says
            continue
        if held is None or not live:
            try:
                found, resting = await run_in_threadpool(stored_events, api.store, run_id, agent_for, after)
            except StoreError as exc:  # unreadable here (or the store failed): the client reconnects from its last
                _log.warning("the events of run %s cannot be read: %s", run_id, exc)
                return
            if found:
                after, rested = found[-1].id, found[-1].rests
                wait = POLL[0]
                yield found
            if resting and rested:
                return
        if log is not None and live:
            rested = False
            async for batch in log.follow_kept(after, keepalive=KEEPALIVE):
                if batch:
                    after, rested = batch[-1].id, batch[-1].rests
                yield batch
            if rested:
                return
            continue  # let go here: the run goes on elsewhere
        await asyncio.sleep(wait)
        quiet, wait = quiet + wait, min(wait * 2, POLL[1])
        if quiet >= KEEPALIVE:
            quiet = 0.0
            yield None


async def decide_as(api: Api, client: Client, run_id: str, body: dict[str, Any], agent: Agent) -> str:
    """
    Decide the pause ``body`` names (``decision``, ``pause_id``, ``arguments``, ``reason``, ``answer``, ``reply``)
    as ``client``.

    The one decision every protocol takes: read as the inbox reads its form,
    applied by the store's functions, judged afresh; a new kind of decision is
    one more case of :func:`agent_fsm.web.decisions.read_form`. Returns the
    action taken, once it is committed.

    Raises:
        Refused: the body is not a decision (422), the pause is not open (409), the run is unknown (404),
            the edit breaks the tool's contract or is denied by the gate (422).
    """
    arguments = body.get("arguments")
    edit = json.dumps(arguments) if arguments is not None else None
    form = {**body, "action": body.get("decision"), "arguments": edit}
    if form["action"] == "answer":  # a person's answer is any JSON value, checked against the result schema
        if "answer" not in body:
            raise Refused(
                422, "decision_refused", "an answer needs its 'answer' (the call's result); nothing was decided"
            )
        form.pop("answer")
    if form["action"] == "reply":  # each call's decision: {call_id: {"approve": true} | {"answer": ...} | ...}
        form["reply"] = json.dumps(body.get("reply"))
    try:
        decision = read_form(run_id, form)
        await api.workers.decide(agent, decision, client=client.name, given=body.get("answer"))
    except FormRefused as exc:
        raise Refused(exc.status, "decision_refused", exc.message) from None
    except AlreadyDecided as exc:
        raise Refused(409, "already_decided", f"{exc}; nothing was decided") from None
    except RunNotFound:
        raise Refused(404, "no_such_run", f"no run {run_id!r}") from None
    except StoreError:
        raise
    except ValueError as exc:
        raise Refused(422, "decision_refused", f"{exc}; nothing was decided") from None
    return decision.action


def plain_routes(api: Api) -> list[Route]:
    async def agents(request: Request) -> Response:
        api.client(request, "read")
        return JSONResponse({"agents": [{"name": n, "digest": a.digest} for n, a in sorted(api.agents.items())]})

    async def start(request: Request) -> Response:
        client = api.client(request, "start")
        body = await read_json(request)
        agent = api.agent(body.get("agent"))
        task = body.get("task")
        if not isinstance(task, str) or not task.strip():
            raise Refused(422, "no_task", "the body needs a non-empty 'task' string")
        session = body.get("session")
        if session is not None and (not isinstance(session, str) or not session):
            raise Refused(422, "bad_session", "'session' names a conversation with a non-empty string")
        run_id = await api.start(agent, task, client, session)
        return JSONResponse({"run_id": run_id, "status": "running", "events": f"/runs/{run_id}/events"}, 202)

    async def listing(request: Request) -> Response:
        client = api.client(request, "read")
        status = request.query_params.get("status")
        if status not in (None, "running", "paused", "ended", "failed"):
            raise Refused(422, "bad_status", "status is one of running, paused, ended, failed")
        try:
            limit = int(request.query_params.get("limit", "50"))
        except ValueError:
            limit = 0
        if not 1 <= limit <= MAX_PAGE:
            raise Refused(422, "bad_limit", f"limit is a whole number from 1 to {MAX_PAGE}")
        after = request.query_params.get("after")
        summaries = await run_in_threadpool(api.store.runs, status)
        mine = sorted((s for s in summaries if client.owns(s.run_id)), key=lambda s: s.run_id)
        if after is not None:
            mine = [s for s in mine if s.run_id > after]
        page = mine[:limit]
        more = len(mine) > limit
        return JSONResponse({"runs": [summary_data(s) for s in page], "next": page[-1].run_id if more else None})

    async def read(request: Request) -> Response:
        client = api.client(request, "read")
        return JSONResponse(summary_data(await api.summary(client, request.path_params["run_id"])))

    async def events(request: Request) -> Response:
        client = api.client(request, "read")
        run_id = request.path_params["run_id"]
        if getattr(api.workers, "tells_events", False):  # runs on Temporal: the workflow numbers its own events
            return await told(client, run_id, request)
        if api.workers.hub.get(run_id) is None or not client.owns(run_id):  # a run held here is stored
            await api.summary(client, run_id)
        seen = event_id(request.headers.get("last-event-id") or request.query_params.get("after") or "0")
        if seen is None:
            raise Refused(422, "bad_event_id", "Last-Event-ID is the id of the last event received (P.I)")
        follow = kept_stream(api, run_id, seen)

        async def body() -> AsyncIterator[bytes]:
            async for batch in follow:
                yield _sse(batch)

        return StreamingResponse(body(), media_type="text/event-stream", headers={"x-accel-buffering": "no"})

    async def told(client: Client, run_id: str, request: Request) -> Response:
        await api.summary(client, run_id)
        seen_text = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        if not seen_text.isdigit():
            raise Refused(422, "bad_event_id", "Last-Event-ID is the number of the last event received")
        log = api.workers.hub.get(run_id)
        if log is None:
            raise Refused(409, "not_streamed_here", f"run {run_id!r}: its events cannot be read")
        follow = log.follow(int(seen_text))

        async def body() -> AsyncIterator[bytes]:
            async for record in follow:
                yield _sse_told(record)

        return StreamingResponse(body(), media_type="text/event-stream", headers={"x-accel-buffering": "no"})

    async def decide(request: Request) -> Response:
        client = api.client(request, "decide")
        run_id = request.path_params["run_id"]
        await api.summary(client, run_id)
        body = await read_json(request)
        action = await decide_as(api, client, run_id, body, api.agent(body.get("agent")))
        return JSONResponse({"run_id": run_id, "decision": action, "events": f"/runs/{run_id}/events"}, 202)

    async def cancel(request: Request) -> Response:
        client = api.client(request, "decide")
        run_id = request.path_params["run_id"]
        summary = await api.summary(client, run_id)
        empty = request.headers.get("content-length", "0") == "0" and "content-type" not in request.headers
        body = {} if empty else await read_json(request)  # a cancel needs no body; one given is read as JSON
        if summary.status != "paused":
            raise Refused(
                409,
                "not_cancelable",
                f"run {run_id!r} is {summary.status}: a run is cancelled at a pause, not between its steps",
            )
        asked = {
            "decision": "cancel",
            "pause_id": body.get("pause_id") or summary.pause_id,
            "reason": body.get("reason"),
        }
        action = await decide_as(api, client, run_id, asked, api.agent(body.get("agent")))
        return JSONResponse({"run_id": run_id, "decision": action, "events": f"/runs/{run_id}/events"}, 202)

    return [
        Route("/agents", guarded(agents), methods=["GET"]),
        Route("/runs", guarded(start), methods=["POST"]),
        Route("/runs", guarded(listing), methods=["GET"]),
        Route("/runs/{run_id}", guarded(read), methods=["GET"]),
        Route("/runs/{run_id}/events", guarded(events), methods=["GET"]),
        Route("/runs/{run_id}/decision", guarded(decide), methods=["POST"]),
        Route("/runs/{run_id}/cancel", guarded(cancel), methods=["POST"]),
    ]
