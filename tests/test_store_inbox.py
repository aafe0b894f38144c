"""
The inbox at volume in the store: paged listings (keyset), filters, counts, cursors, and claims, on both databases.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_fsm import Agent, ScriptedModel, ToolSpec, Verdict, answer_message, tool_call_message
from agent_fsm.store import (
    AlreadyDecided,
    BadCursor,
    ClaimTaken,
    PausedPage,
    RunStore,
    SqliteStore,
    approve,
    reject,
)
from agent_fsm.store.schema import MIGRATIONS, migrate
from tests.store_versions import before_the_inbox
from tests.web_world import HOSTILE_TASK, REFUND_TASK, world

Opener = Callable[[], RunStore]


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENT_FSM_REFUNDS", str(tmp_path / "refunds.jsonl"))


def _start(store: RunStore, run_id: str, *, hostile: bool = False, name: str | None = None) -> None:
    """A real run that pauses: a refund (tool ``refund_order``) or a payment (tool ``pay``), by agent ``name``."""
    agent = attrs.evolve(world(), name=name) if name is not None else world()
    result = agent.run(HOSTILE_TASK if hostile else REFUND_TASK, store=store, run_id=run_id)
    assert result.stop.value == "awaiting_approval", result


def _all_pages(
    store: RunStore, size: int, between: Callable[[int], None] = lambda _: None, **filters: object
) -> list[str]:
    listed: list[str] = []
    page = store.paused(limit=size, **filters)  # type: ignore[arg-type]
    fetched = 0
    while True:
        assert len(page) <= size
        listed += [summary.run_id for summary in page]
        if page.next is None:
            return listed
        between(fetched)
        fetched += 1
        page = store.paused(limit=size, cursor=page.next, **filters)  # type: ignore[arg-type]


def test_pages_list_every_run_paused_throughout_exactly_once_while_others_pause_and_are_decided(opener: Opener) -> None:
    """Between page fetches runs are decided (listed ones and not yet listed ones) and new runs pause: no run is
    listed twice, and every run paused from the first page to the last is listed once."""
    store = opener()
    for n in range(17):
        _start(store, f"r{n:02}")
    other = opener()
    decided: list[str] = []
    fresh: list[str] = []

    def between(fetched: int) -> None:
        # one run already listed (the newest) and one not yet listed (the oldest) are decided; a new run pauses
        for run_id in (f"r{16 - fetched:02}", f"r{fetched:02}"):
            if run_id not in decided:
                reject(other, run_id, world(), reviewer="bo", reason="no")
                decided.append(run_id)
        fresh.append(f"new{fetched}")
        _start(other, fresh[-1])

    listed = _all_pages(store, 4, between)
    assert len(listed) == len(set(listed)), listed
    throughout = {f"r{n:02}" for n in range(17)} - set(decided)
    assert throughout <= set(listed), throughout - set(listed)
    assert not set(fresh) & set(listed)  # newer than the cursor: they wait at the front for the next listing
    assert {s.run_id for s in store.paused()} == throughout | set(fresh)


def test_paused_without_arguments_is_every_paused_run_newest_first(opener: Opener) -> None:
    """``store.paused()`` is still the whole inbox, a list (with no next page), newest pause first."""
    store = opener()
    for run_id in ("a", "b", "c"):
        _start(store, run_id)
    everything = store.paused()
    assert isinstance(everything, PausedPage) and isinstance(everything, list)
    assert [s.run_id for s in everything] == ["c", "b", "a"]
    assert everything.next is None and everything.total is None
    assert everything == store.runs("paused")[:0] + list(everything)


def test_filters_and_counts(opener: Opener) -> None:
    """Tool, agent, reason text, age and claims each keep the runs they name, and ``count`` counts them all."""
    store = opener()
    for n in range(5):
        _start(store, f"refund{n}", name="desk")
    for n in range(3):
        _start(store, f"pay{n}", hostile=True, name="payables")
    page = store.paused(limit=2, tool="pay", count=True)
    assert page.total == 3 and [s.run_id for s in page] == ["pay2", "pay1"]
    assert all(s.agent == "payables" and s.blocked is not None and s.blocked.name == "pay" for s in page)
    assert _all_pages(store, 2, tool="pay") == ["pay2", "pay1", "pay0"]
    assert store.paused(agent="desk", count=True, limit=10).total == 5
    assert store.paused(agent="nobody", count=True, limit=10).total == 0
    assert {s.run_id for s in store.paused(reason="PAYMENTS need")} == {"pay0", "pay1", "pay2"}
    assert store.paused(reason="100%_\\") == []  # LIKE's wildcards are text here
    assert store.paused(older_than=3600) == []
    assert len(store.paused(older_than=0)) == 8
    store.claim("refund3", "ana")
    store.claim("pay1", "bo")
    assert [s.run_id for s in store.paused(claimed="ana")] == ["refund3"]
    assert {s.run_id for s in store.paused(claimed=True)} == {"refund3", "pay1"}
    assert store.paused(claimed=False, count=True, limit=1).total == 6
    assert store.paused(tool="pay", claimed="bo", count=True, limit=5).total == 1
    assert store.paused(tool="nul\x00") == []


def test_bad_cursors_and_limits_are_refused(opener: Opener) -> None:
    """A damaged, forged or other filter's cursor is ``BadCursor``; a limit outside 1..500 a ``ValueError``."""
    store = opener()
    for run_id in ("a", "b", "c"):
        _start(store, run_id)
    cursor = store.paused(limit=1).next
    assert cursor is not None
    assert [s.run_id for s in store.paused(limit=1, cursor=cursor)] == ["b"]
    payload, _, check = cursor.partition(".")
    for bad in ("", "garbage", cursor[:-1] + ("0" if cursor[-1] != "0" else "1"), payload + "x." + check, "é" * 5000):
        with pytest.raises(BadCursor):
            store.paused(limit=1, cursor=bad)
    with pytest.raises(BadCursor, match="another filter"):
        store.paused(limit=1, cursor=cursor, tool="refund_order")
    for limit in (0, -1, 501, 2.5, True):
        with pytest.raises(ValueError):
            store.paused(limit=limit)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.paused(older_than=-1)


def test_claims_are_seen_expire_and_are_renewed(opener: Opener) -> None:
    """A claim shows on the run to others; another reviewer is refused until it expires; the claimer renews it."""
    first, second = opener(), opener()
    _start(first, "t1")
    claim = first.claim("t1", "ana", seconds=1.0)
    seen = second.paused()[0].claim
    assert seen == second.claim_of("t1") and seen is not None and seen.reviewer == "ana"
    with pytest.raises(ClaimTaken, match="'ana'") as taken:
        second.claim("t1", "bo")
    assert taken.value.reviewer == "ana"
    renewed = first.claim("t1", "ana", seconds=0.5)
    assert renewed.claimed_at >= claim.claimed_at
    time.sleep(0.6)
    assert second.claim_of("t1") is None and second.paused()[0].claim is None
    assert second.claim("t1", "bo").reviewer == "bo"
    assert not first.release("t1", "ana") and first.release("t1", "bo")
    assert second.claim_of("t1") is None


def test_a_claim_belongs_to_its_pause(opener: Opener) -> None:
    """Once the pause is decided, the claim is gone from the run; claiming a run not paused is refused."""
    store = opener()
    _start(store, "t1")
    store.claim("t1", "ana")
    with pytest.raises(AlreadyDecided):
        store.claim("t1", "ana", pause_id="not-the-pause")
    reject(store, "t1", world(), reviewer="ana", reason="no")
    assert store.claim_of("t1") is None
    with pytest.raises(AlreadyDecided):
        store.claim("t1", "bo")


def _grab(store: RunStore, who: str, run_id: str, start: threading.Barrier, won: list[str], lost: list[str]) -> None:
    start.wait()
    try:
        store.claim(run_id, who)
        won.append(who)
    except ClaimTaken:
        lost.append(who)


def test_two_reviewers_racing_for_one_claim_one_wins(opener: Opener) -> None:
    """Eight stores (eight connections) claim the same pause at once, twenty times over: exactly one wins each time."""
    setup = opener()
    runs = [f"race{n}" for n in range(20)]
    for run_id in runs:
        _start(setup, run_id)
    stores = [opener() for _ in range(8)]
    for run_id in runs:
        won: list[str] = []
        lost: list[str] = []
        start = threading.Barrier(len(stores))
        threads = [
            threading.Thread(target=_grab, args=(s, f"rev{i}", run_id, start, won, lost)) for i, s in enumerate(stores)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(won) == 1 and len(lost) == 7, (won, lost)
        claim = setup.claim_of(run_id)
        assert claim is not None and claim.reviewer == won[0]


def test_an_older_database_gets_the_inbox_columns(tmp_path: Path) -> None:
    """A store written before the inbox's migration is migrated: its paused runs are filtered by tool and agent."""
    path = tmp_path / "runs.db"
    store = SqliteStore(path)
    _start(store, "old", hostile=True, name="payables")
    with store._transaction() as tx:  # the database as the migration before this one left it
        before_the_inbox(tx, 6)
    store.close()
    reopened = SqliteStore(path)
    with reopened._transaction() as tx:
        assert migrate(tx, MIGRATIONS) == len(MIGRATIONS)
    [found] = reopened.paused(tool="pay", agent="payables")
    assert found.run_id == "old"


def test_a_claimed_run_can_still_be_decided_by_anyone(opener: Opener) -> None:
    """Claims are advisory: bo approves the run ana claimed, and the claim goes with the pause."""
    store = opener()
    _start(store, "t1")
    store.claim("t1", "ana")
    approve(store, "t1", world(), reviewer="bo")
    assert store.claim_of("t1") is None and store.paused() == []


def _twice() -> Agent:
    """An agent asking for a gated payment twice: approved once, its run pauses again (later: at the front)."""
    pay = ToolSpec("Pay.", {"cents": int}, lambda cents: {"paid": cents}, effectful=True)
    model = ScriptedModel(
        [
            tool_call_message("p1", "pay", {"cents": 5000}),
            tool_call_message("p2", "pay", {"cents": 6000}),
            answer_message("Paid."),
        ]
    )
    return Agent(model, {"pay": pay}, gate=lambda call: Verdict.ask("every payment needs a person"))


# Between two page fetches: pause a new run, or decide the n-th paused run (newest first) one way or the other.
_MOVES = st.lists(
    st.tuples(st.sampled_from(["pause", "approve", "reject"]), st.integers(min_value=0, max_value=30)),
    max_size=12,
)


@settings(max_examples=max(settings().max_examples // 10, 10), deadline=None, database=None)
@given(start=st.integers(min_value=0, max_value=12), size=st.integers(min_value=1, max_value=4), moves=_MOVES)
def test_no_run_is_listed_twice_and_none_paused_throughout_is_missed(
    tmp_path_factory: pytest.TempPathFactory, start: int, size: int, moves: list[tuple[str, int]]
) -> None:
    """Whatever happens between page fetches (runs paused, approved and so paused again at the front, rejected),
    a listing holds no run twice and every run paused from its first page to its last."""
    store = SqliteStore(tmp_path_factory.mktemp("pages") / "runs.db")
    agent, made = _twice(), 0

    def pause() -> None:
        nonlocal made
        assert agent.run("Pay the supplier.", store=store, run_id=f"r{made:03}").stop.value == "awaiting_approval"
        made += 1

    for _ in range(start):
        pause()
    before = {s.run_id for s in store.paused()}
    touched: set[str] = set()
    remaining = list(moves)

    def between(_: int) -> None:
        if not remaining:
            return
        move, index = remaining.pop(0)
        waiting = store.paused()
        if move == "pause" or not waiting:
            pause()
            return
        run_id = waiting[index % len(waiting)].run_id
        touched.add(run_id)
        if move == "approve":
            approve(store, run_id, agent, reviewer="ana")
        else:
            reject(store, run_id, agent, reviewer="ana", reason="no")

    listed = _all_pages(store, size, between)
    assert len(listed) == len(set(listed)), listed
    assert before - touched <= set(listed)
    store.close()
