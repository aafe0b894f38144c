"""
Background runs: begun in the store before the caller is answered, then driven by a bounded pool of threads.

One store object serves the process (both stores are safe across threads),
so the process is the owner of every run it begins or decides. A decision
goes through :func:`agent_fsm.store.approve`, :func:`agent_fsm.store.reject`,
:func:`agent_fsm.store.answer`, :func:`agent_fsm.store.decide_reply` or
:func:`agent_fsm.store.cancel` (a compare-and-set on the open pause, an edit
or answer judged by the agent's contract and gate), then the run goes on in
the pool; the caller is answered once the decision is committed, its continuation
streamed as it comes.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import secrets
import threading
from collections.abc import Callable, Mapping
from typing import Any, cast

from agent_fsm import Agent
from agent_fsm.engine import RunEvent, RunResult, continue_run
from agent_fsm.serve.kept import Opening, Watched, opening
from agent_fsm.serve.stream import Hub
from agent_fsm.store import Session, StoreError
from agent_fsm.store.protocol import RunStore
from agent_fsm.web.decisions import Request, decide

__all__ = ["Workers"]

_log = logging.getLogger("agent_fsm.serve")


class Workers:
    """
    A pool of at most ``size`` threads driving runs on ``store``, their events kept in ``hub``.

    The pool's queue is unbounded but every run in it is already in the store
    (``running``): a process killed with runs queued leaves them to ``recover``.
    """

    def __init__(self, store: RunStore, hub: Hub, *, size: int = 8) -> None:
        self.store = store
        self.hub = hub
        self.size = size
        self._busy = 0  # runs submitted and not yet done: a sweep claims no more than the free threads
        self._busy_lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=size, thread_name_prefix="agent-fsm-run")

    def close(self) -> None:
        """Stop taking runs and wait for the ones in flight."""
        self._pool.shutdown(wait=True, cancel_futures=False)

    def start(self, agent: Agent, task: str, *, client: str, session: str | None = None) -> str:
        """
        Begin a run of ``task`` in the store (named for ``client``), queue it, and return its id.

        With ``session`` the run is the next of the client's session of that
        name (:class:`agent_fsm.store.Session`), starting from its history.
        Blocking: call it from a thread, not the event loop.

        Raises:
            SessionBusy: the session's last run is not at rest.
            RunExists: another start took the session's next run first.
        """
        history: list[dict[str, Any]] = []
        if session is None:
            run_id = f"{client}.{secrets.token_hex(12)}"
        else:
            run_id, history = Session(self.store, agent, f"{client}.{session}").next_run()
        state = agent.start(task, history=history, run_id=run_id)
        state.agent_digest = agent.digest  # a stored run names its contracts from the start, as Agent.run does
        self.store.begin(run_id, state)
        log = self.hub.open(run_id)
        watched = Watched(self.store, run_id, log.drive)
        watched.tracker = log.drive(Opening(0, len(state.messages), 0))
        watched.tracker.state = state
        store = cast(RunStore, watched)
        self._submit(lambda: agent.advance(state, store=store, run_id=run_id, on_event=log.append), run_id)
        return run_id

    async def decide(self, agent: Agent, request: Request, *, client: str, given: Any = None) -> None:
        """
        Take ``request`` as ``client`` and let the run go on in the pool; return once the decision is committed.

        ``given`` is a person's answer (the JSON value) when ``request.action`` is ``answer``;
        ``cancel`` ends the run ``cancelled``.

        Raises:
            AlreadyDecided, RunNotFound, ValueError (an edit, an answer or a review refused), StoreError:
                nothing was decided.
        """
        log = self.hub.open(request.run_id)
        loop = asyncio.get_running_loop()
        decided: asyncio.Future[None] = loop.create_future()

        def settle(error: BaseException | None) -> None:
            if decided.done():
                return
            if error is None:
                decided.set_result(None)
            else:
                decided.set_exception(error)

        committed = threading.Event()

        def on_event(event: RunEvent) -> None:
            log.append(event)
            if not committed.is_set():  # the continued run's first event: the decision is committed
                committed.set()
                loop.call_soon_threadsafe(settle, None)

        store = cast(RunStore, Watched(self.store, request.run_id, log.drive))

        def deciding() -> RunResult | None:
            try:
                return decide(store, request, agent, reviewer=client, given=given, on_event=on_event)
            except Exception as exc:
                loop.call_soon_threadsafe(settle, exc)
                if committed.is_set():
                    raise
                return None  # refused before anything was decided: the caller is told, nothing to log
            finally:
                loop.call_soon_threadsafe(settle, None)

        self._submit(deciding, request.run_id)
        await decided

    def sweep(self, agents: Mapping[str, Agent], *, older_than: float) -> list[str]:
        """
        Take over the runs a dead process left ``running`` (no commit for ``older_than`` seconds) and queue them.

        They are claimed under row locks (:meth:`agent_fsm.store.RunStore.claim_stale`), at most as many as
        the pool has free threads, so of several processes sweeping one store exactly one continues a run and
        each takes the share it can drive now (a run claimed and left queued would go stale and be taken over
        again); it goes on from its last checkpoint as
        :func:`agent_fsm.store.recover` continues one, by the served agent the run names (a run of an agent
        not served here is left for a process that serves it, claimed by this one until it is stale again).
        Blocking: call it from a thread.
        """
        taken: list[str] = []
        with self._busy_lock:
            free = self.size - self._busy
        if free <= 0:
            return taken
        for stored in self.store.claim_stale(older_than, limit=free):
            agent = agents.get(stored.state.agent or "") or (next(iter(agents.values())) if len(agents) == 1 else None)
            if agent is None:
                _log.warning("run %s names agent %r, not served here", stored.run_id, stored.state.agent)
                continue
            log = self.hub.open(stored.run_id)
            watched = Watched(self.store, stored.run_id, log.drive)
            watched.tracker = log.drive(opening(self.store, stored.run_id))
            watched.tracker.state = stored.state
            go_on = functools.partial(
                continue_run,
                agent,
                stored.state,
                store=cast(RunStore, watched),
                run_id=stored.run_id,
                intent=stored.intent,
                on_event=log.append,
            )
            self._submit(go_on, stored.run_id)
            taken.append(stored.run_id)
        return taken

    def _submit(self, work: Callable[[], RunResult | None], run_id: str) -> None:
        def report(future: concurrent.futures.Future[RunResult | None]) -> None:
            with self._busy_lock:
                self._busy -= 1
            error = future.exception()
            if error is not None:  # a bug: the store has it as failed (see agent_fsm.store.SqlStore.fail)
                _log.error("run %s stopped: %s: %s", run_id, type(error).__name__, error)
                log = self.hub.open(run_id)
                try:
                    summary = self.store.load(run_id).summary
                except StoreError:
                    summary = None
                if summary is not None and summary.status == "failed":
                    log.fail(run_id, f"{type(error).__name__}: {error}", summary.reason)
                else:  # not recorded as failed: the run is left to whichever process takes it over
                    log.let_go(run_id, f"{type(error).__name__}: {error}")

        with self._busy_lock:
            self._busy += 1
        self._pool.submit(work).add_done_callback(report)
