"""
The plain API: start runs, list and read them, stream their events as SSE, decide their pauses; JSON throughout.

Every request carries ``Authorization: Bearer <token>`` of a client with the
scope it needs; a client sees and decides only its own runs (another's is
404, as an unknown one). Every refusal is a 4xx with a JSON body
``{"error": {"code": ..., "message": ...}}``, never a traceback; bodies are
bounded; responses carry the inbox's security headers; CORS is off unless
origins are named.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agent_fsm import Agent
from agent_fsm.serve.clients import Client, Clients
from agent_fsm.serve.stream import Hub, Record
from agent_fsm.serve.workers import Workers
from agent_fsm.store import AlreadyDecided, RunNotFound, StoreError
from agent_fsm.store.protocol import RunStore
from agent_fsm.store.records import RunSummary
from agent_fsm.web.decisions import FormRefused, read_form

__all__ = ["API_HEADERS", "MAX_BODY", "Refused", "serve_app"]

MAX_BODY = 256 * 1024
"""The largest request body taken, in bytes (a task, a decision): a larger one is refused with 413."""

MAX_PAGE = 200
API_HEADERS = [
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]
"""Headers on every answer: nothing in it runs, frames or is cached; the inbox's, for an API."""


class Refused(Exception):
    """A request not carried out: the HTTP ``status``, a stable ``code`` a client branches on, and why."""

    def __init__(self, status: int, code: str, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = dict(headers or {})

    def response(self) -> JSONResponse:
        """The refusal as a JSON answer."""
        body = {"error": {"code": self.code, "message": self.message}}
        return JSONResponse(body, status_code=self.status, headers=self.headers)


class _Guarded:
    """ASGI middleware: security headers on every answer; an unexpected failure answered as a JSON 500."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def with_headers(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = [*message.get("headers", []), *API_HEADERS]
            await send(message)

        try:
            await self.app(scope, receive, with_headers)
        except Exception:
            if scope["type"] != "http" or started:
                raise
            failure = Refused(500, "server_error", "the server failed on this request; it was logged")
            await failure.response()(scope, receive, with_headers)
            raise


async def read_json(request: Request, limit: int = MAX_BODY) -> dict[str, Any]:
    """
    The request's body as a JSON object, read up to ``limit`` bytes.

    Raises:
        Refused: 413 (too large), 415 (not JSON), 422 (not an object, or not readable JSON).
    """
    if "application/json" not in request.headers.get("content-type", ""):
        raise Refused(415, "not_json", "send the body as application/json")
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > limit):
        raise Refused(413, "body_too_large", f"the body is over {limit} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise Refused(413, "body_too_large", f"the body is over {limit} bytes")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise Refused(422, "bad_json", f"the body is not readable JSON: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise Refused(422, "not_an_object", "the body must be a JSON object")
    return data


def summary_data(summary: RunSummary) -> dict[str, Any]:
    """A stored run as the API lists it."""
    blocked = summary.blocked
    return {
        "run_id": summary.run_id,
        "status": summary.status,
        "stop": summary.stop,
        "machine_state": summary.machine_state,
        "pause_id": summary.pause_id,
        "reason": summary.reason,
        "blocked": None
        if blocked is None
        else {"call_id": blocked.call_id, "name": blocked.name, "arguments": blocked.arguments},
        "created_at": summary.created_at,
        "updated_at": summary.updated_at,
    }


class _Api:
    """The routes' shared parts: the agents by name, the clients; the store and the workers once started."""

    def __init__(self, agents: Mapping[str, Agent], clients: Clients) -> None:
        self.agents = dict(agents)
        self.clients = clients
        self._workers: Workers | None = None

    @property
    def workers(self) -> Workers:
        """The pool driving this process's runs (from start-up to shutdown)."""
        if self._workers is None:
            raise RuntimeError("the app is not started: serve it with its lifespan (uvicorn does)")
        return self._workers

    @property
    def store(self) -> RunStore:
        """The store the runs are kept in."""
        return self.workers.store

    def client(self, request: Request, scope: str) -> Client:
        """The calling client, if its token is known and allows ``scope`` (401 or 403 if not)."""
        kind, _, token = request.headers.get("authorization", "").partition(" ")
        client = self.clients.check(token.strip()) if kind.lower() == "bearer" and token.strip() else None
        if client is None:
            raise Refused(401, "unauthenticated", "send Authorization: Bearer <token>", {"WWW-Authenticate": "Bearer"})
        if scope not in client.scopes:
            raise Refused(403, "forbidden", f"this token may not {scope} runs")
        return client

    def agent(self, name: Any) -> Agent:
        """The served agent named ``name`` (the only one when there is one and no name is given)."""
        if name is None and len(self.agents) == 1:
            return next(iter(self.agents.values()))
        if not isinstance(name, str) or name not in self.agents:
            raise Refused(422, "unknown_agent", f"no agent {name!r}; served: {sorted(self.agents)}")
        return self.agents[name]

    async def summary(self, client: Client, run_id: str) -> RunSummary:
        """The client's run ``run_id`` (404 if none, or another client's)."""
        if not client.owns(run_id):
            raise Refused(404, "no_such_run", f"no run {run_id!r}")
        try:
            stored = await run_in_threadpool(self.store.load, run_id)
        except RunNotFound:
            raise Refused(404, "no_such_run", f"no run {run_id!r}") from None
        return stored.summary


def _sse(record: Record | None) -> bytes:
    if record is None:
        return b": keep-alive\n\n"
    data = json.dumps(record.data, separators=(",", ":"))
    return f"id: {record.seq}\nevent: {record.data['type']}\ndata: {data}\n\n".encode()


def _routes(api: _Api) -> list[Route]:
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
        run_id = await run_in_threadpool(api.workers.start, agent, task, client=client.name)
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
        summary = await api.summary(client, run_id)
        seen_text = request.headers.get("last-event-id") or request.query_params.get("after") or "0"
        if not seen_text.isdigit():
            raise Refused(422, "bad_event_id", "Last-Event-ID is the number of the last event received")
        log = api.workers.hub.get(run_id)
        if log is None:  # driven by another process, or before this one started: its rest, as stored
            raise Refused(
                409, "not_streamed_here", f"run {run_id!r} is {summary.status} and its events are not held here"
            )
        follow = log.follow(int(seen_text))

        async def body() -> AsyncIterator[bytes]:
            async for record in follow:
                yield _sse(record)

        return StreamingResponse(body(), media_type="text/event-stream", headers={"x-accel-buffering": "no"})

    async def decide(request: Request) -> Response:
        client = api.client(request, "decide")
        run_id = request.path_params["run_id"]
        await api.summary(client, run_id)
        body = await read_json(request)
        arguments = body.get("arguments")
        edit = json.dumps(arguments) if arguments is not None else None
        form = {**body, "action": body.get("decision"), "arguments": edit}
        try:
            decision = read_form(run_id, form)
            await api.workers.decide(api.agent(body.get("agent")), decision, client=client.name)
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
        return JSONResponse({"run_id": run_id, "decision": decision.action, "events": f"/runs/{run_id}/events"}, 202)

    def guarded(handler: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except Refused as refused:
                return refused.response()

        return answer

    return [
        Route("/agents", guarded(agents), methods=["GET"]),
        Route("/runs", guarded(start), methods=["POST"]),
        Route("/runs", guarded(listing), methods=["GET"]),
        Route("/runs/{run_id}", guarded(read), methods=["GET"]),
        Route("/runs/{run_id}/events", guarded(events), methods=["GET"]),
        Route("/runs/{run_id}/decision", guarded(decide), methods=["POST"]),
    ]


def serve_app(
    agents: Agent | Mapping[str, Agent],
    store: Callable[[], RunStore],
    *,
    clients: Clients,
    workers: int = 8,
    cors_origins: tuple[str, ...] = (),
) -> Starlette:
    """
    An ASGI app serving ``agents`` (one, or several by name) on the store ``store()`` opens, to ``clients``.

    The store is opened at start-up and closed at shutdown, with the pool of
    ``workers`` threads that drive the runs. ``cors_origins`` names the
    origins a browser may call from (none: CORS off).
    """
    served = {agents.name or "agent": agents} if isinstance(agents, Agent) else dict(agents)
    if not served or not all(isinstance(a, Agent) for a in served.values()):
        raise TypeError(f"'agents' must be an Agent or a mapping of names to Agents (got {agents!r:.200})")
    api = _Api(served, clients)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        opened = await run_in_threadpool(store)
        api._workers = pool = Workers(opened, Hub(asyncio.get_running_loop()), size=workers)
        try:
            yield
        finally:
            await run_in_threadpool(pool.close)
            api._workers = None
            opened.close()

    async def not_found(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return Refused(
            exc.status_code, "not_found" if exc.status_code == 404 else "bad_request", str(exc.detail)
        ).response()

    middleware = [Middleware(_Guarded)]
    if cors_origins:
        middleware.append(
            Middleware(
                CORSMiddleware,
                allow_origins=list(cors_origins),
                allow_methods=["GET", "POST"],
                allow_headers=["authorization", "content-type", "last-event-id"],
            )
        )
    return Starlette(
        routes=_routes(api), middleware=middleware, lifespan=lifespan, exception_handlers={HTTPException: not_found}
    )
