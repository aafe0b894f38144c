"""
The inbox at volume: its pages served from 1,000, 10,000 and 100,000 paused runs, on SQLite on disk and PostgreSQL.

Not a test: it prints what each page costs. The target is at most 100 ms
and at most 100 kB for the first page and for any later page, whatever its
depth, and for a page filtered by tool or by agent.

The store is filled fast but with what real runs write. Twenty real runs
(five gated tools, four agents; a scripted model looks an order up, then asks
for the gated call) pause in a store; their rows, in the runs table and the
checkpoints table, are then copied with new run ids and pause ids (written
into the rows' states too) and spread over the past days, a few sharing one
``updated_at`` so that the keyset's tie-break on the run id is exercised.

Each page is asked of the inbox served for real (uvicorn on 127.0.0.1, a
reviewer signed in). The server's time is kept by a middleware around the
app, from the request's arrival to the response's last byte (the listing
and its count, through a store the inbox keeps open, and the page
rendered); the client's round
trip is printed beside it (on loopback it carries a fixed ~40 ms: the
client acknowledging the response's body late, TCP's delayed ACK). The
line also gives the listing's own time (``store.paused``, which the page
calls). A deep page is reached by its cursor, as a reviewer following
"older" links would reach it.

    PYTHONPATH=. python bench/inbox_scale.py [--sizes 1000,10000,100000] [--repeat 15] [--no-postgres]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' PostgreSQL server and uvicorn helpers

import httpx

from agent_fsm import Agent, ScriptedModel, ToolSpec, Verdict, answer_message, tool_call_message
from agent_fsm.engine import ToolCall
from agent_fsm.store import PostgresStore, SqliteStore
from agent_fsm.store.sql import SqlStore
from agent_fsm.web import Reviewers, inbox_app

TOOLS = ("refund_order", "close_account", "wire_transfer", "delete_records", "send_contract")
AGENTS = ("billing", "support", "legal", "ops")
TOKEN = "bench-token-0123456789"
PAGE_TARGET_MS, PAGE_TARGET_KB = 100.0, 100.0


def _gate(call: ToolCall) -> Verdict:
    if call.name == "lookup_order":
        return Verdict.allow("read-only")
    return Verdict.ask(f"{call.name.replace('_', ' ')} moves money or data: a person decides")


def agent_for(tool: str, name: str) -> Agent:
    """An agent that looks order A-17 up, then asks for ``tool`` (gated: the run pauses)."""
    handlers = {
        t: ToolSpec(f"{t}.", {"order_id": str, "amount_cents": int}, lambda **_: {}, effectful=True) for t in TOOLS
    }
    tools = {
        "lookup_order": ToolSpec("Look an order up.", {"order_id": str}, lambda order_id: {"status": "ok"}),
        **handlers,
    }
    model = ScriptedModel(
        [
            tool_call_message("c1", "lookup_order", {"order_id": "A-17"}),
            tool_call_message("c2", tool, {"order_id": "A-17", "amount_cents": 9999}, thought=f"I will {tool}."),
            answer_message("Done."),
        ]
    )
    return Agent(model, tools, gate=_gate, name=name)


def templates(store: SqlStore) -> list[tuple[str, str]]:
    """Twenty real paused runs; each one's run id and pause id."""
    made = []
    for index, (tool, name) in enumerate((t, a) for t in TOOLS for a in AGENTS):
        run_id = f"template-{index:02}-{uuid.uuid4().hex}"
        result = agent_for(tool, name).run(f"Handle ticket {index}.", store=store, run_id=run_id)
        assert result.stop.value == "awaiting_approval", result
        made.append((run_id, result.state.pause_id or ""))
    return made


def _columns(store: SqlStore, table: str) -> list[str]:
    if isinstance(store, SqliteStore):
        return [row[1] for row in store._connection.execute(f"PRAGMA table_info({table})").fetchall()]
    cursor = store._connection.execute(f"SELECT * FROM {table} LIMIT 0")
    return [column.name for column in cursor.description]


def fill(store: SqlStore, made: list[tuple[str, str]], count: int, start: int, now: float) -> None:
    """Copy the templates' rows ``count`` times under new ids, the ``start``-th copy onwards, older by copy number."""
    tables = {table: _columns(store, table) for table in ("agent_fsm_runs", "agent_fsm_checkpoints")}
    rows: dict[str, dict[str, list[tuple[Any, ...]]]] = {table: {} for table in tables}
    with store._transaction(write=False) as tx:
        for run_id, _ in made:
            for table, columns in tables.items():
                rows[table][run_id] = tx.rows(f"SELECT {', '.join(columns)} FROM {table} WHERE run_id = ?", (run_id,))
    out: dict[str, list[tuple[Any, ...]]] = {table: [] for table in tables}
    for number in range(start, start + count):
        run_id, pause_id = made[number % len(made)]
        new_id, new_pause = f"run-{number:07}-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
        at = now - 60 - (number // 3) * 2.0  # three runs share each moment: the tie-break on run_id is used
        for table, columns in tables.items():
            for row in rows[table][run_id]:
                copied = []
                for column, value in zip(columns, row, strict=True):
                    if isinstance(value, str):
                        value = value.replace(run_id, new_id).replace(pause_id, new_pause)
                    if column in ("updated_at", "created_at", "saved_at"):
                        value = at
                    copied.append(value)
                out[table].append(tuple(copied))
    for table, columns in tables.items():
        marks = ", ".join("?" if isinstance(store, SqliteStore) else "%s" for _ in columns)
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})"
        if isinstance(store, SqliteStore):
            with store._connection:
                store._connection.executemany(sql, out[table])
        else:
            with store._connection.cursor() as cursor:
                cursor.executemany(sql, out[table])
    if isinstance(store, PostgresStore):
        store._connection.execute("VACUUM ANALYZE agent_fsm_runs")  # what autovacuum does after a bulk load
    else:
        store._connection.execute("ANALYZE")


class Timed:
    """ASGI middleware keeping each request's server time: from the request's arrival to its response's last byte."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.times: list[float] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        began = time.perf_counter()
        await self.app(scope, receive, send)
        if scope["type"] == "http":
            self.times.append((time.perf_counter() - began) * 1000)


def _serving(open_store: Callable[[], SqlStore], timed: Timed) -> Any:
    from tests.web_server import serving

    return serving(timed)


def _client(base: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=60)
    form = client.get("/login").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form).group(1)  # type: ignore[union-attr]
    assert client.post("/login", data={"csrf": csrf, "reviewer": "ana", "token": TOKEN}).status_code == 303
    return client


def _deep_cursor(store: SqlStore, depth: int, **filters: Any) -> str | None:
    """The cursor a reviewer reaches after ``depth`` runs, walked in pages of 500."""
    cursor, seen = None, 0
    while seen < depth:
        page = store.paused(limit=min(500, depth - seen), cursor=cursor, **filters)
        seen += len(page)
        if page.next is None:
            return None
        cursor = page.next
    return cursor


def _time_page(client: httpx.Client, timed: Timed, url: str, repeat: int) -> tuple[float, float, float, float, int]:
    """The server's median, 90th percentile and worst time for the page, the client's median round trip, its size."""
    trips, size = [], 0
    del timed.times[:]
    for _ in range(repeat):
        began = time.perf_counter()
        response = client.get(url)
        trips.append((time.perf_counter() - began) * 1000)
        assert response.status_code == 200, response.text[:300]
        size = len(response.content)
    times = sorted(timed.times)
    return statistics.median(times), times[max(0, int(len(times) * 0.9) - 1)], times[-1], statistics.median(trips), size


def _time_listing(store: SqlStore, repeat: int, **options: Any) -> float:
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        store.paused(limit=50, count=True, **options)
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def measure(name: str, open_store: Callable[[], SqlStore], sizes: list[int], repeat: int) -> list[str]:
    """The table's lines for one database, growing the store through ``sizes``."""
    store = open_store()
    made = templates(store)
    lines, filled, now = [], len(made), time.time()
    reviewers = Reviewers.parse(f"ana:{TOKEN}")
    timed = Timed(inbox_app(open_store, agent_for(TOOLS[0], AGENTS[0]), reviewers=reviewers))
    with _serving(open_store, timed) as base:
        client = _client(base)
        for size in sizes:
            fill(store, made, size - filled, filled, now)
            filled = size
            pages: list[tuple[str, str, dict[str, Any]]] = [("first page", "/", {})]
            for label, depth in (("page at the middle", size // 2), ("last page", size - 25)):
                cursor = _deep_cursor(store, depth)
                if cursor is not None:
                    pages.append((label, f"/?{httpx.QueryParams({'after': cursor})}", {"cursor": cursor}))
            for key, value in (("tool", TOOLS[2]), ("agent", AGENTS[1])):
                pages.append((f"{key}={value}, first page", f"/?{key}={value}", {key: value}))
                cursor = _deep_cursor(store, size // 10, **{key: value})
                if cursor is not None:
                    query = httpx.QueryParams({key: value, "after": cursor})
                    pages.append((f"{key}={value}, deep page", f"/?{query}", {key: value, "cursor": cursor}))
            for label, url, options in pages:
                median, p90, worst, trip, length = _time_page(client, timed, url, repeat)
                listing = _time_listing(store, repeat, **options)
                met = "yes" if p90 <= PAGE_TARGET_MS and length <= PAGE_TARGET_KB * 1000 else "NO"
                line = (
                    f"| {name} | {size:,} | {label} | {median:.1f} | {p90:.1f} | {worst:.1f} | {trip:.1f}"
                    f" | {listing:.1f} | {length / 1000:.1f} | {met} |"
                )
                lines.append(line)
                print(line, flush=True)
        client.close()
    store.close()
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--no-postgres", action="store_true")
    options = parser.parse_args(argv)
    sizes = [int(size) for size in options.sizes.split(",")]
    print(
        "| database | paused runs | page | server ms, median | p90 | worst | round trip ms | store.paused ms | kB"
        " | p90 ≤100 ms, ≤100 kB |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "runs.db"
        measure("SQLite", lambda: SqliteStore(path), sizes, options.repeat)
    if options.no_postgres:
        return
    from tests.postgres_server import PostgresServer, find_bin

    bin_dir = find_bin()
    if bin_dir is None:
        print("PostgreSQL is not installed: its lines are missing", file=sys.stderr)
        return
    server = PostgresServer(bin_dir).start()
    try:
        dsn = server.new_database()
        measure("PostgreSQL", lambda: PostgresStore(dsn), sizes, options.repeat)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
