"""
Durable runs: a store that keeps every run, its pauses and its effects, across processes and crashes.

    store = SqliteStore("runs.db")
    agent = Agent(model, tools, gate=gate)
    result = agent.run(task, store=store, run_id="ticket-42")
    # ... any process, later, with the same agent:
    for waiting in store.paused():
        approve(store, waiting.run_id, agent, reviewer="ana")  # or reject, answer, cancel
    recover(store, agent)  # after a crash
    fork(store, "ticket-42", at=1, new_run_id="ticket-42b")  # a new run from an earlier checkpoint
    Session(store, agent, "chat-7").run("and then?")  # a conversation continued across stored runs

The guarantees (what is exactly-once, what needs an idempotent tool, what
a person decides) are stated in docs/durability.md.
"""

from agent_fsm.engine import OUTCOME_UNKNOWN, Checkpointer, Intent, ToolContext
from agent_fsm.store.errors import (
    AlreadyDecided,
    BadCursor,
    ClaimTaken,
    DamagedRun,
    DatabaseError,
    RunExists,
    RunNotFound,
    RunTakenOver,
    SchemaError,
    StoreError,
)
from agent_fsm.store.forks import fork
from agent_fsm.store.inbox import (
    DifferentAgent,
    agent_mismatch,
    answer,
    approve,
    cancel,
    decide_reply,
    reject,
    reply_of,
)
from agent_fsm.store.listing import MAX_PAGE, PausedFilter, PausedPage
from agent_fsm.store.postgres import PostgresStore
from agent_fsm.store.protocol import RunStore
from agent_fsm.store.records import Checkpoint, Claim, Decision, Effect, Fork, RunSummary, StoredRun
from agent_fsm.store.recovery import Recovered, recover
from agent_fsm.store.sessions import Session, SessionBusy
from agent_fsm.store.sql import SqlStore
from agent_fsm.store.sqlite import SqliteStore
from agent_fsm.store.url import open_store

__all__ = [
    # Stores
    "RunStore",
    "SqliteStore",
    "PostgresStore",
    "SqlStore",
    "open_store",
    # Records
    "RunSummary",
    "PausedPage",
    "PausedFilter",
    "MAX_PAGE",
    "Claim",
    "StoredRun",
    "Decision",
    "Effect",
    "Checkpoint",
    "Fork",
    "Intent",
    "ToolContext",
    "Checkpointer",
    # Deciding and recovering
    "DifferentAgent",
    "agent_mismatch",
    "answer",
    "approve",
    "cancel",
    "decide_reply",
    "reply_of",
    "reject",
    "recover",
    "Recovered",
    "fork",
    "OUTCOME_UNKNOWN",
    # Conversations
    "Session",
    "SessionBusy",
    # Errors
    "StoreError",
    "RunNotFound",
    "RunExists",
    "AlreadyDecided",
    "RunTakenOver",
    "SchemaError",
    "DamagedRun",
    "DatabaseError",
    "BadCursor",
    "ClaimTaken",
]
