"""
What every protocol of the server shares: the calling client, the agents, the store and workers, typed refusals.

Every refusal is a :class:`Refused`, answered as a 4xx with a JSON body
``{"error": {"code": ..., "message": ...}}``, never a traceback; bodies are
bounded; every answer carries :data:`API_HEADERS`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.types import Receive, Scope, Send

from agent_fsm import Agent
from agent_fsm.engine import PersonAnswers, RunState, answered_by, reply_strands
from agent_fsm.serve.clients import Client, Clients
from agent_fsm.serve.workers import Workers
from agent_fsm.store import RunExists, RunNotFound, SessionBusy
from agent_fsm.store.protocol import RunStore
from agent_fsm.store.records import RunSummary
from agent_fsm.web.app import SecurityHeaders

__all__ = ["API_HEADERS", "MAX_BODY", "Api", "Guarded", "Refused", "asks", "read_json", "summary_data"]

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


class Guarded(SecurityHeaders):
    """The inbox's middleware with the API's headers: an unexpected failure answered as a JSON 500."""

    headers = API_HEADERS

    async def failed(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Answer the failed request with a typed JSON 500 (the failure goes on up to be logged)."""
        failure = Refused(500, "server_error", "the server failed on this request; it was logged")
        await failure.response()(scope, receive, send)


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


def asks(agent: Agent, state: RunState) -> dict[str, Any]:
    """
    What a pause of ``agent`` asks, as every protocol says it: the decisions it takes and the blocked call;
    for a call a person answers, its ``question`` (the arguments) and the ``result_schema`` an answer must
    meet; for a reply of several calls that need a person, each of them (``reply``, decided whole), or why
    it cannot be decided whole (``reply_refused``).

    Read from the serving agent's own tools, never from the stored state, as a decision is judged.
    """
    call, person = answered_by(agent.tools, state)
    found: dict[str, Any] = {
        "decisions": ["answer", "reject", "cancel"] if person is not None else ["approve", "edit", "reject", "cancel"],
        "call": {"call_id": call.call_id, "name": call.name, "arguments": call.arguments},
    }
    if person is not None:
        found["question"] = call.arguments
        found["result_schema"] = person.result
    review = agent.reply_review(state) if state.pending else []
    stranded = reply_strands(agent, state) if len(review) > 1 else None
    if stranded is not None:  # a call whose server may ask comes first: decided one at a time
        found["reply_refused"] = stranded
    elif len(review) > 1:
        found["decisions"].append("reply")
        found["reply"] = []
        for one in review:
            owner, at = agent, state  # a nested run's call (``n1/c2``) is its own agent's tool
            for call_id in one.call_id.split("/")[:-1]:
                outer = owner.tools.get(at.pending[0].name)
                owner, at = getattr(outer.handler if outer else None, "agent", owner), at.children[call_id]
            spec = owner.tools.get(one.name)
            answers = spec.handler if spec is not None and isinstance(spec.handler, PersonAnswers) else None
            entry = {"call_id": one.call_id, "name": one.name, "arguments": one.arguments}
            found["reply"].append(entry if answers is None else {**entry, "result_schema": answers.result})
    return found


class Api:
    """The routes' shared parts: the agents by name, the clients; the store and the workers once started."""

    def __init__(self, agents: Mapping[str, Agent], clients: Clients) -> None:
        self.agents = dict(agents)
        self.clients = clients
        self.started: Workers | None = None

    @property
    def workers(self) -> Workers:
        """The pool driving this process's runs (from start-up to shutdown)."""
        if self.started is None:
            raise RuntimeError("the app is not started: serve it with its lifespan (uvicorn does)")
        return self.started

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

    async def start(self, agent: Agent, task: str, client: Client, session: str | None = None) -> str:
        """
        Begin a run of ``task`` for ``client`` (the next of its ``session``, a protocol's thread), return its id.

        A session's key is hashed: any text a protocol sends names one, and none can reach another client's.

        Raises:
            Refused: (409) the session's last run is not at rest, or another start took its next run.
        """
        key = None if session is None else "s" + hashlib.sha256(session.encode()).hexdigest()[:24]
        try:
            return await run_in_threadpool(self.workers.start, agent, task, client=client.name, session=key)
        except (SessionBusy, RunExists) as exc:
            raise Refused(409, "session_busy", f"{exc}; nothing was started") from None

    async def summary(self, client: Client, run_id: str) -> RunSummary:
        """The client's run ``run_id`` (404 if none, or another client's)."""
        if not client.owns(run_id):
            raise Refused(404, "no_such_run", f"no run {run_id!r}")
        try:
            stored = await run_in_threadpool(self.store.load, run_id)
        except RunNotFound:
            raise Refused(404, "no_such_run", f"no run {run_id!r}") from None
        return stored.summary
