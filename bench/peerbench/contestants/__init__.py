"""
The contestants: one module per implementation, and the roster the benchmark runs.

A peer framework is imported only when its contestant first runs, so a
missing peer is skipped rather than failing the import of this package.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ..scenarios import Job, Outcome
from .agent_fsm_ import arun_agent_fsm, run_agent_fsm
from .bare import arun_bare, run_bare
from .burr_ import run_burr
from .langgraph_ import arun_langgraph, run_langgraph
from .pydantic_graph_ import arun_pydantic_graph
from .statemachine_ import run_statemachine
from .transitions_ import run_transitions


@dataclass(frozen=True)
class Contestant:
    """One implementation: how it runs synchronously and/or on asyncio, and what it needs installed."""

    name: str
    sync: Callable[[Job], Outcome] | None = None
    asynchronous: Callable[[Job], Coroutine[Any, Any, Outcome]] | None = None
    requires: str | None = None  # the module to import; None: always available
    package: str = ""
    # Async-native frameworks run concurrently on asyncio only, not on threads.
    async_native: bool = False

    @property
    def available(self) -> bool:
        return self.requires is None or importlib.util.find_spec(self.requires) is not None


CONTESTANTS = [
    Contestant("bare loop", run_bare),
    Contestant("bare loop (async)", asynchronous=arun_bare),
    Contestant("agent_fsm", run_agent_fsm, arun_agent_fsm),
    Contestant("transitions (shared machine)", run_transitions, requires="transitions", package="transitions"),
    Contestant(
        "LangGraph", run_langgraph, arun_langgraph, requires="langgraph", package="langgraph", async_native=True
    ),
    Contestant("Burr", run_burr, requires="burr", package="apache-burr"),
    Contestant("pydantic-graph", asynchronous=arun_pydantic_graph, requires="pydantic_graph", package="pydantic-graph"),
    Contestant("python-statemachine", run_statemachine, requires="statemachine", package="python-statemachine"),
]
PEERS_PACKAGES = [c.package for c in CONTESTANTS if c.package]


def missing_peers() -> list[str]:
    """The peer packages that are not installed (``pip install -e '.[bench]'`` brings them)."""
    return [c.package for c in CONTESTANTS if not c.available]


def run_once(contestant: Contestant, job: Job, *, use_async: bool = False) -> Outcome:
    """One run of ``job`` by ``contestant`` (its async form when asked or when it has no sync one)."""
    if contestant.sync is not None and not use_async:
        return contestant.sync(job)
    assert contestant.asynchronous is not None
    return asyncio.run(contestant.asynchronous(job))
