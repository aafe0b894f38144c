"""
The server as one ASGI app: the plain API and each protocol's routes over one store, one pool, one event stream.

Runs are begun in the store before the caller is answered and driven by a
bounded pool of threads (:mod:`agent_fsm.serve.workers`); each protocol
adapts the same events (:mod:`agent_fsm.serve.stream`) and decides through
the store's functions, never drives a run of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import AsyncIterator, Callable, Mapping

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Lifespan

from agent_fsm import Agent
from agent_fsm.serve.a2a import a2a_routes
from agent_fsm.serve.ag_ui import ag_ui_routes
from agent_fsm.serve.clients import Clients
from agent_fsm.serve.core import Api, Guarded, Refused
from agent_fsm.serve.plain import plain_routes
from agent_fsm.serve.stream import Hub
from agent_fsm.serve.workers import Workers
from agent_fsm.store import StoreError
from agent_fsm.store.protocol import RunStore

__all__ = ["GC_THRESHOLD", "assemble", "serve_app", "settle_gc"]

GC_THRESHOLD = (50_000, 50, 50)
"""
The collector's thresholds once serving: young passes every 50,000 allocations, not 700.

With thousands of runs in flight each young pass walks their fresh objects;
measured by bench/flat_cost.py (three 5 ms model calls a run), CPU per run
goes from 2.5x to 1.24x between 1,000 and 20,000 runs at once.
"""

_log = logging.getLogger("agent_fsm.serve")


def settle_gc() -> None:
    """
    Tune this process's collector for serving, once start-up is done: cost per run flat with many in flight.

    The objects of start-up (modules, the agent, the app) are moved out of the
    collector's sight (``gc.freeze``) and its young passes made rarer
    (:data:`GC_THRESHOLD`). It changes the whole process: call it only in a
    process that serves.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


async def _sweep(pool: Workers, agents: Mapping[str, Agent], every: float) -> None:
    """Take over stale runs now (a restart) and every ``every`` seconds; a store's failure waits for the next."""
    while True:
        try:
            await run_in_threadpool(pool.sweep, agents, older_than=every)
        except StoreError as exc:
            _log.warning("taking over stale runs failed: %s", exc)
        await asyncio.sleep(every)


def serve_app(
    agents: Agent | Mapping[str, Agent],
    store: Callable[[], RunStore],
    *,
    clients: Clients,
    workers: int = 8,
    cors_origins: tuple[str, ...] = (),
    recover_after: float | None = 60.0,
) -> Starlette:
    """
    An ASGI app serving ``agents`` (one, or several by name) on the store ``store()`` opens, to ``clients``.

    The store is opened at start-up and closed at shutdown, with the pool of
    ``workers`` threads that drive the runs. ``cors_origins`` names the
    origins a browser may call from (none: CORS off). Every ``recover_after``
    seconds (None: never) the runs a dead process left ``running`` that long
    are taken over (:meth:`agent_fsm.serve.workers.Workers.sweep`): choose it
    above the longest a run may go without a commit, a wait in the pool's
    queue included. A process that only serves calls :func:`settle_gc` before
    serving (``agent-fsm serve`` does); an app mounted in a larger process leaves
    the collector alone.
    """
    served = {agents.name or "agent": agents} if isinstance(agents, Agent) else dict(agents)
    if not served or not all(isinstance(a, Agent) for a in served.values()):
        raise TypeError(f"'agents' must be an Agent or a mapping of names to Agents (got {agents!r:.200})")
    api = Api(served, clients)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        opened = await run_in_threadpool(store)
        api.started = pool = Workers(opened, Hub(asyncio.get_running_loop()), size=workers)
        sweeping = None if recover_after is None else asyncio.create_task(_sweep(pool, served, recover_after))
        try:
            yield
        finally:
            if sweeping is not None:
                sweeping.cancel()
            await run_in_threadpool(pool.close)
            api.started = None
            opened.close()

    return assemble(api, lifespan, cors_origins)


def assemble(api: Api, lifespan: Lifespan[Starlette], cors_origins: tuple[str, ...]) -> Starlette:
    """The app of ``api``: every protocol's routes, the guards and CORS, run by ``lifespan`` (which starts ``api``)."""

    async def not_found(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return Refused(
            exc.status_code, "not_found" if exc.status_code == 404 else "bad_request", str(exc.detail)
        ).response()

    middleware = [Middleware(Guarded)]
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
        routes=[*plain_routes(api), *ag_ui_routes(api), *a2a_routes(api)],
        middleware=middleware,
        lifespan=lifespan,
        exception_handlers={HTTPException: not_found},
    )
