"""
A2A 1.0 over JSON-RPC: the agent card, ``SendMessage``, ``SendStreamingMessage``, ``GetTask``, ``CancelTask``.

A message without a task starts a run of its text (scope ``start``), the
next run of its context's session (a message without a context opens one); a
message to a task waiting for input (``TASK_STATE_INPUT_REQUIRED``) decides
its pause (scope ``decide``), with a data part ``{"decision": ...}`` as the
plain API takes it or the text ``approve`` or ``reject: <reason>``, judged
afresh by the agent's gate. ``CancelTask`` cancels a task waiting for
input: the run ends ``cancelled`` there, decided once through
:func:`agent_fsm.store.cancel` (``TASK_STATE_CANCELED``); a working task
answers ``TaskNotCancelableError``, as a run is not stopped between its
steps.
"""

from __future__ import annotations

import json
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from agent_fsm import Agent
from agent_fsm.engine import RunState
from agent_fsm.serve.a2a.events import Tasks
from agent_fsm.serve.clients import Client
from agent_fsm.serve.core import Api, Refused, read_json
from agent_fsm.serve.plain import decide_as, guarded
from agent_fsm.store import AlreadyDecided
from agent_fsm.web.decisions import Request as Decision

__all__ = ["a2a_routes"]

TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
UNSUPPORTED = -32004
INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
INVALID_REQUEST = -32600

CANCELLED = "the task was cancelled"
"""The reason a ``CancelTask`` is recorded with (the request gives none)."""


class RpcError(Exception):
    """A JSON-RPC error answer: A2A's ``code`` for it, and why."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _whole(value: Any) -> Any:
    """``value`` with every integral float an int: a data part is a protobuf Struct, whose numbers are all doubles."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)
    if isinstance(value, dict):
        return {key: _whole(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole(item) for item in value]
    return value


def _parts(message: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    parts = message.get("parts")
    if not isinstance(parts, list):
        raise RpcError(INVALID_PARAMS, "a message has a list of parts")
    text = "".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))
    data = next((p["data"] for p in parts if isinstance(p, dict) and isinstance(p.get("data"), dict)), None)
    try:
        return text, _whole(data)
    except RecursionError:
        raise RpcError(INVALID_PARAMS, "the data part nests too deeply") from None


def _decision(text: str, data: dict[str, Any] | None) -> dict[str, Any]:
    """What a message to a waiting task decides: its data part, or ``approve`` / ``reject: reason`` as text."""
    if data is not None and "decision" in data:
        return dict(data)
    said = text.strip()
    if said.lower() == "approve":
        return {"decision": "approve"}
    verb, _, reason = said.partition(":")
    if verb.strip().lower() == "reject":
        return {"decision": "reject", "reason": reason.strip()}
    raise RpcError(
        INVALID_PARAMS, "a task waiting for input takes 'approve', 'reject: <reason>' or a decision data part"
    )


def a2a_routes(api: Api) -> list[Route]:
    """The agent card and the JSON-RPC endpoint over ``api``."""
    # The context each task was started in, in this process's memory (the oldest forgotten past 100,000:
    # a task read later, or elsewhere, names its own id as its context).
    contexts: OrderedDict[str, str] = OrderedDict()

    async def card(request: Request) -> Response:
        agent = api.agent(None) if len(api.agents) == 1 else next(iter(api.agents.values()))
        name = agent.name or "agent"
        base = str(request.base_url).rstrip("/")
        return JSONResponse(
            {
                "name": name,
                "description": f"agent_fsm agent {name!r}: every effect judged by its gate; pauses ask for input.",
                "version": agent.digest[:12],
                "supportedInterfaces": [{"url": f"{base}/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                "capabilities": {"streaming": True, "pushNotifications": False},
                "defaultInputModes": ["text/plain", "application/json"],
                "defaultOutputModes": ["text/plain", "application/json"],
                "skills": [{"id": name, "name": name, "description": "runs a task to a typed ending", "tags": []}],
            }
        )

    async def send(client: Client, params: dict[str, Any], stream: bool, rpc_id: Any) -> Response:
        message = params.get("message")
        if not isinstance(message, dict):
            raise RpcError(INVALID_PARAMS, "SendMessage takes a message")
        text, data = _parts(message)
        given = message.get("taskId")
        agent = api.agent(None) if len(api.agents) == 1 else api.agent((params.get("metadata") or {}).get("agent"))
        task_id: str
        if given:
            task_id = str(given)
            if "decide" not in client.scopes:
                raise Refused(403, "forbidden", "this token may not decide runs")
            summary = await _summary(client, task_id)
            if summary.status != "paused":
                raise RpcError(UNSUPPORTED, f"task {task_id!r} is {summary.status}, not waiting for input")
            decision = {**_decision(text, data), "pause_id": summary.pause_id}
            log = api.workers.hub.open(task_id)
            seen = len(log.after(0))
            try:
                await decide_as(api, client, task_id, decision, agent)
            except Refused as refused:
                raise RpcError(INVALID_PARAMS, f"{refused.code}: {refused.message}") from None
            context = contexts.get(task_id, str(message.get("contextId") or task_id))
        else:
            if "start" not in client.scopes:
                raise Refused(403, "forbidden", "this token may not start runs")
            if not text.strip():
                raise RpcError(INVALID_PARAMS, "the message has no text to run")
            context = str(message.get("contextId") or uuid.uuid4().hex)
            try:
                task_id = await api.start(agent, text, client, session=context)
            except Refused as refused:
                raise RpcError(UNSUPPORTED, refused.message) from None
            contexts[task_id] = context
            while len(contexts) > 100_000:
                contexts.popitem(last=False)
            log = api.workers.hub.open(task_id)
            seen = 0
        tasks = Tasks(context, agent)
        follow = log.follow(seen)
        if not stream:
            async for _ in follow:
                pass
            return _result(rpc_id, {"task": await _task(client, task_id)})

        async def frames() -> AsyncIterator[bytes]:
            yield _frame(rpc_id, {"task": tasks.task(task_id, "TASK_STATE_WORKING")})
            async for record in follow:
                if record is None:
                    yield b": keep-alive\n\n"
                    continue
                for update in tasks.translate(record):
                    yield _frame(rpc_id, update)

        return StreamingResponse(frames(), media_type="text/event-stream", headers={"x-accel-buffering": "no"})

    async def _summary(client: Client, task_id: str) -> Any:
        try:
            return await api.summary(client, task_id)
        except Refused:
            raise RpcError(TASK_NOT_FOUND, f"no task {task_id!r}") from None

    def _served(state: RunState) -> Agent:
        """The served agent a stored run names (the first served, for a run that names none served here)."""
        return api.agents.get(state.agent or "") or next(iter(api.agents.values()))

    async def _task(client: Client, task_id: str) -> dict[str, Any]:
        summary = await _summary(client, task_id)
        stored = await run_in_threadpool(api.store.load, task_id)
        by = None
        if summary.status == "ended" and summary.stop == "cancelled":  # who cancelled: the last decision's reviewer
            decisions = await run_in_threadpool(api.store.history, task_id)
            by = decisions[-1].reviewer if decisions and decisions[-1].decision == "cancel" else None
        return Tasks(contexts.get(task_id, task_id), _served(stored.state)).of_summary(summary, stored.state, by)

    async def cancel(client: Client, task_id: str, rpc_id: Any) -> Response:
        summary = await _summary(client, task_id)
        if summary.status != "paused":
            raise RpcError(
                TASK_NOT_CANCELABLE,
                f"task {task_id!r} is {summary.status}: a working task is not stopped between its steps,"
                " and an ended one has nothing left to cancel; a task waiting for input can be cancelled",
            )
        if "decide" not in client.scopes:
            raise Refused(403, "forbidden", "this token may not decide runs")
        stored = await run_in_threadpool(api.store.load, task_id)
        log = api.workers.hub.open(task_id)
        seen = len(log.after(0))
        try:
            await api.workers.decide(
                _served(stored.state),
                Decision(task_id, summary.pause_id or "", "cancel", reason=CANCELLED),
                client=client.name,
            )
        except AlreadyDecided:
            raise RpcError(
                TASK_NOT_CANCELABLE, f"task {task_id!r} was decided meanwhile; nothing was cancelled"
            ) from None
        async for _ in log.follow(seen):
            pass
        return _result(rpc_id, await _task(client, task_id))

    async def rpc(request: Request) -> Response:
        client = api.client(request, "read")
        body = await read_json(request)
        rpc_id = body.get("id")
        try:
            method, params = body.get("method"), body.get("params")
            if body.get("jsonrpc") != "2.0" or not isinstance(method, str) or not isinstance(params, dict):
                raise RpcError(INVALID_REQUEST, "a JSON-RPC 2.0 request with a method and params")
            if method in ("SendMessage", "SendStreamingMessage"):
                return await send(client, params, method == "SendStreamingMessage", rpc_id)
            if method == "GetTask":
                return _result(rpc_id, await _task(client, str(params.get("id"))))
            if method == "CancelTask":
                return await cancel(client, str(params.get("id")), rpc_id)
            raise RpcError(METHOD_NOT_FOUND, f"no method {method!r}")
        except RpcError as exc:
            return JSONResponse({"jsonrpc": "2.0", "id": rpc_id, "error": {"code": exc.code, "message": exc.message}})

    return [
        Route("/.well-known/agent-card.json", guarded(card), methods=["GET"]),
        Route("/a2a", guarded(rpc), methods=["POST"]),
    ]


def _result(rpc_id: Any, result: dict[str, Any]) -> Response:
    return JSONResponse({"jsonrpc": "2.0", "id": rpc_id, "result": result})


def _frame(rpc_id: Any, result: dict[str, Any]) -> bytes:
    data = json.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": result}, separators=(",", ":"), default=repr)
    return f"data: {data}\n\n".encode()
