"""
Serving runs as Temporal workflows: the same routes, with Temporal in the place of the store and the pool.

    app = temporal_app([desk], "127.0.0.1:7233", clients=Clients.from_environment())

A run started over HTTP is a workflow (:func:`agent_fsm.temporal.start_run`)
that keeps its events; any worker of the task queue drives it, so serving
scales with Temporal's workers rather than one database. The routes find
here what they find in a store and a pool (:class:`TemporalRuns`): a start
starts a workflow, a read is the workflow's ``state`` query, a decision is
its update (``approve``, ``reject``, ``answer``, ``reply``), judged by the
workflow's validator; a run's event stream is its ``events`` query, polled
every ``poll`` seconds by this process while the run works, from the
first stream asked for and again after each decision taken here. A session (a protocol's thread) is runs
named ``<session>~1``, ``<session>~2``, ... as in a store, each starting from
the last one's transcript.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, cast

from starlette.applications import Starlette

from agent_fsm import Agent
from agent_fsm.engine import Ended, RunState, reply_of
from agent_fsm.serve.app import assemble
from agent_fsm.serve.clients import Clients
from agent_fsm.serve.core import Api
from agent_fsm.serve.stream import Hub, RunLog
from agent_fsm.serve.workers import Workers
from agent_fsm.store import RunExists, RunNotFound
from agent_fsm.store.records import Decision, RunSummary, StoredRun
from agent_fsm.store.rows import pause_columns, status_of, summary_of
from agent_fsm.store.sessions import SEPARATOR, SessionBusy
from agent_fsm.web.decisions import Request

if TYPE_CHECKING:
    from temporalio.client import Client

__all__ = ["POLL", "SESSIONS_KNOWN", "TemporalRuns", "temporal_app"]

POLL = 0.1
"""Seconds between two reads of a working run's events: an event reaches a stream at most this much later."""

SESSIONS_KNOWN = 10_000
"""How many sessions' run counts a process remembers; a session forgotten is counted again, a query a run."""

_CLOSED_BADLY = ("FAILED", "TERMINATED", "TIMED_OUT", "CANCELED")
_log = logging.getLogger("agent_fsm.serve")
T = TypeVar("T")


def _not_found(exc: BaseException) -> bool:
    from temporalio.service import RPCError, RPCStatusCode

    return isinstance(exc, RPCError) and exc.status is RPCStatusCode.NOT_FOUND


class TemporalRuns:
    """
    Runs on Temporal where the routes use a store and a pool of workers: ``start``, ``decide`` and ``hub``
    (the pool's), ``store`` (itself: ``load``, ``runs``, ``history``).

    Built on the server's event loop at start-up; ``start``, ``load``, ``runs`` and ``history`` block (the
    routes call them from threads), ``decide`` is awaited.
    """

    tells_events = True
    """The event stream is the workflow's own numbered events (``id: N``), not events kept in a store (``P.I``)."""

    def __init__(
        self,
        client: Client,
        agents: Mapping[str, Agent],
        *,
        task_queue: str,
        poll: float = POLL,
    ) -> None:
        self.client = client
        self.agents = dict(agents)
        self.task_queue = task_queue
        self.poll = poll
        self.loop = self._loop = asyncio.get_running_loop()
        self.hub: Hub = _Read(self)
        # Each log's last event read, by the workflow's numbering (a log the hub forgets is read afresh).
        self._read: weakref.WeakKeyDictionary[RunLog, int] = weakref.WeakKeyDictionary()
        self._following: dict[str, asyncio.Task[None]] = {}
        self._sessions: OrderedDict[str, int] = OrderedDict()  # a session's runs known to exist (a hint)

    @property
    def store(self) -> TemporalRuns:
        """What the routes read runs from: the workflows themselves."""
        return self

    def _wait(self, work: Awaitable[T]) -> T:
        """``work`` done on the server's loop, waited for from a route's thread."""
        return asyncio.run_coroutine_threadsafe(_awaited(work), self._loop).result()

    # --- the pool's part -------------------------------------------------------------

    def start(self, agent: Agent, task: str, *, client: str, session: str | None = None) -> str:
        """
        Start a workflow running ``task`` for ``client`` (the next run of its ``session``), return its id.

        Raises:
            SessionBusy: the session's last run is not at rest.
            RunExists: another start took the session's next run first.
        """
        return self._wait(self._start(agent, task, client, session))

    async def _start(self, agent: Agent, task: str, client: str, session: str | None) -> str:
        from temporalio.exceptions import WorkflowAlreadyStartedError

        from agent_fsm.temporal import start_run

        history: list[dict[str, Any]] = []
        if session is None:
            run_id = f"{client}.{secrets.token_hex(12)}"
        else:
            run_id, history = await self._next_run(f"{client}.{session}")
        try:
            await start_run(
                self.client,
                agent=agent.name or "",
                task=task,
                run_id=run_id,
                history=history,
                task_queue=self.task_queue,
                keep_events=True,
            )
        except WorkflowAlreadyStartedError:
            raise RunExists(f"run {run_id!r} was started already") from None
        self.hub.open(run_id)
        self._follow(run_id)
        return run_id

    async def _next_run(self, session: str) -> tuple[str, list[dict[str, Any]]]:
        """The next run of ``session`` and the history it starts from, as a store's Session finds them."""
        known = self._sessions.get(session, 0)
        while True:  # past the runs this process knows of, to the first id no workflow has
            try:
                await self.client.get_workflow_handle(f"{session}{SEPARATOR}{known + 1}").describe()
            except Exception as exc:
                if not _not_found(exc):
                    raise
                break
            known += 1
        self._sessions[session] = known
        self._sessions.move_to_end(session)
        while len(self._sessions) > SESSIONS_KNOWN:
            self._sessions.popitem(last=False)
        if known == 0:
            return f"{session}{SEPARATOR}1", []
        last = f"{session}{SEPARATOR}{known}"
        state = await self._state(last)
        if status_of(state)[0] != "ended":
            raise SessionBusy(f"session {session!r}: run {last!r} is {status_of(state)[0]}; decide it first")
        history = [dict(m) for m in state.messages if m.get("role") != "system"]
        return f"{session}{SEPARATOR}{known + 1}", history

    async def decide(self, agent: Agent, request: Request, *, client: str, given: Any = None) -> None:
        """
        Send ``request`` to the run's workflow as its update, as ``client``; return once the workflow took it.

        Raises:
            AlreadyDecided: the pause was decided already.
            DecisionRefused: (a ``ValueError``) the workflow's validator refused it: nothing was decided.
            ValueError: not a decision.
        """
        from agent_fsm.temporal import get_run

        run = get_run(self.client, request.run_id)
        how: dict[str, Any] = {"reviewer": client, "pause_id": request.pause_id or None}
        action = request.action
        if action in ("approve", "edit"):
            await run.approve(arguments=request.arguments if action == "edit" else None, **how)
        elif action == "reject":
            await run.reject(reason=request.reason or "", **how)
        elif action == "answer":
            await run.answer(answer=given, **how)
        elif action == "reply":
            await run.review(reply=reply_of(request.reply), **how)
        elif action == "cancel":
            await run.cancel(reason=request.reason or "", **how)
        else:
            raise ValueError(f"a run on Temporal takes approve, edit, reject, answer, reply or cancel, not {action!r}")
        self._follow(request.run_id)

    def sweep(self, agents: Mapping[str, Agent], *, older_than: float) -> list[str]:
        """Nothing to take over: Temporal gives a run whose worker died to another worker."""
        return []

    async def aclose(self) -> None:
        """Stop reading the runs' events."""
        for task in list(self._following.values()):
            task.cancel()
        await asyncio.gather(*self._following.values(), return_exceptions=True)

    # --- the event stream ------------------------------------------------------------

    def _follow(self, run_id: str, *, moving: bool = True) -> None:
        """
        Read the run's events into its log until it rests (again), unless that is being done already.

        ``moving``: the run was just started or decided, so a log resting on its last rest is not read to its end.
        """
        if run_id not in self._following:
            self._following[run_id] = asyncio.create_task(self._read_events(run_id, moving))

    async def _read_events(self, run_id: str, moving: bool) -> None:
        from agent_fsm.temporal import get_run

        run, log = get_run(self.client, run_id), self.hub.open(run_id)
        quiet = 0
        try:
            while True:
                first, events = await run.events(self._read.get(log, 0))
                for number, event in enumerate(events, first):
                    log.append(event)
                    self._read[log] = number
                if events and isinstance(events[-1], Ended):
                    return  # at rest: a decision taken here follows it again
                if not events and not moving and log.resting:
                    return  # read to its rest: nothing more comes until a decision
                moving = moving and not events
                quiet = 0 if events else quiet + 1
                if quiet and quiet % 20 == 0:  # a run a bug stopped tells no rest: its workflow says it failed
                    described = await run.handle.describe()
                    if described.status is not None and described.status.name in _CLOSED_BADLY:
                        log.fail(run_id, f"the workflow is {described.status.name.lower()}")
                        return
                await asyncio.sleep(self.poll)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the stream says it failed; the run itself is Temporal's to keep
            _log.error("reading the events of run %s failed: %s: %s", run_id, type(exc).__name__, exc)
            log.fail(run_id, f"its events could not be read: {type(exc).__name__}: {exc}")
        finally:
            self._following.pop(run_id, None)

    # --- the store's part ------------------------------------------------------------

    async def _state(self, run_id: str) -> RunState:
        from agent_fsm.temporal import get_run

        try:
            return await get_run(self.client, run_id).state()
        except Exception as exc:
            if _not_found(exc):
                raise RunNotFound(f"no run {run_id!r}") from None
            raise

    def load(self, run_id: str) -> StoredRun:
        """
        The run as its workflow answers the ``state`` query: its state and a summary of it.

        Raises:
            RunNotFound: no workflow has that id.
        """
        return self._wait(self._stored(run_id))

    async def _stored(self, run_id: str, status: Any = None) -> StoredRun:
        """The run's state and summary; ``status``: its workflow's, when listed (else asked for)."""
        from agent_fsm.temporal import get_run

        state = await self._state(run_id)
        if status is None:
            status = (await get_run(self.client, run_id).handle.describe()).status
        failed = status.name.lower() if status is not None and status.name in _CLOSED_BADLY else None
        return StoredRun(self._summary(run_id, state, failed), state, None)

    def _summary(self, run_id: str, state: RunState, failed: str | None = None) -> RunSummary:
        """The run as a store lists it; ``failed``: how its workflow closed, when a bug stopped it."""
        status, stop = status_of(state) if failed is None else ("failed", None)
        reason, blocked = pause_columns(state)  # as a store keeps them: a pause's reason and call
        reason = reason if failed is None else f"the workflow is {failed}"
        row = (run_id, status, stop, state.machine_state, state.pause_id, reason, blocked, None, 0.0, 0.0, 0)
        return summary_of(row)

    def runs(self, status: str | None = None) -> list[RunSummary]:
        """Every run of the task queue (each asked its state: a listing costs a query a run), or those in ``status``."""
        return self._wait(self._runs(status))

    async def _runs(self, status: str | None) -> list[RunSummary]:
        from agent_fsm.temporal.workflow import WORKFLOW_NAME

        found = []
        query = f"WorkflowType = '{WORKFLOW_NAME}' AND TaskQueue = '{self.task_queue}'"
        async for execution in self.client.list_workflows(query):
            summary = (await self._stored(execution.id, execution.status)).summary
            if status is None or summary.status == status:
                found.append(summary)
        return found

    def history(self, run_id: str) -> list[Decision]:
        """The decisions taken on the run's pauses, as its workflow recorded them (the ``decisions`` query)."""
        from agent_fsm.temporal import get_run

        taken = self._wait(get_run(self.client, run_id).decisions())
        return [
            Decision(run_id, d["pause_id"], d["decision"], d["reviewer"], d.get("reason"), d.get("reply"), d["at"])
            for d in taken
        ]


class _Read(Hub):
    """The runs' event logs, each read from its workflow: a stream asked for any run follows it from there."""

    def __init__(self, runs: TemporalRuns) -> None:
        super().__init__(runs.loop)
        self._runs = runs

    def get(self, run_id: str) -> RunLog | None:
        """The run's log, read on from its workflow's events (whichever process started or decided it)."""
        log = self.open(run_id)
        self._runs._follow(run_id, moving=False)
        return log


async def _awaited(work: Awaitable[T]) -> T:
    return await work


def temporal_app(
    agents: Agent | Iterable[Agent],
    temporal: Client | str,
    *,
    clients: Clients,
    task_queue: str | None = None,
    cors_origins: tuple[str, ...] = (),
    poll: float = POLL,
) -> Starlette:
    """
    An ASGI app serving ``agents`` as :func:`agent_fsm.serve.serve_app` does, their runs workflows on Temporal.

    ``temporal`` is a connected ``temporalio.client.Client`` or the server's
    address (connected at start-up). Each agent is served under its name, the
    name the workers of ``task_queue`` (default
    :data:`agent_fsm.temporal.DEFAULT_TASK_QUEUE`) serve it by
    (:func:`agent_fsm.temporal.create_worker`); this process drives nothing.

    Raises:
        TypeError: an agent has no name.
    """
    from agent_fsm.temporal import DEFAULT_TASK_QUEUE

    listed = [agents] if isinstance(agents, Agent) else list(agents)
    if not listed or not all(isinstance(a, Agent) and a.name for a in listed):
        raise TypeError("serve named Agents on Temporal: its workers find each by its name (Agent(..., name=...))")
    served = {a.name or "": a for a in listed}
    api = Api(served, clients)
    queue = task_queue or DEFAULT_TASK_QUEUE

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if isinstance(temporal, str):
            from temporalio.client import Client

            client = await Client.connect(temporal)
        else:
            client = temporal
        runs = TemporalRuns(client, served, task_queue=queue, poll=poll)
        api.started = cast(Workers, runs)  # it plays the pool (and its store) for every route
        try:
            yield
        finally:
            await runs.aclose()
            api.started = None

    return assemble(api, lifespan, cors_origins)
