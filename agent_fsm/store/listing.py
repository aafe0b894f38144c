"""
The inbox at volume: paused runs listed a page at a time, filtered and counted, and the claims reviewers put on them.

A page is found by its keyset, never by an offset: the runs come newest
pause first, ordered by ``(updated_at, run_id)``, and a page's cursor is the
last pair it listed, so the next page starts with an index seek however
deep it lies. Because a run's ``updated_at`` only grows, a run decided and
paused again while someone pages moves to the front, behind the cursor:
no run is listed twice, and every run paused throughout is listed once.

A cursor is opaque but checked: it carries a checksum and the filter it
was made for, and a cursor that is damaged, forged badly or made for
another filter is refused (:class:`BadCursor`). It is not a secret: the
worst a well-forged one can do is choose where a listing starts.

A claim marks a paused run as being looked at by one reviewer until it
expires; it belongs to the pause it was taken on, so a run decided and
paused again is unclaimed. Claims are advisory: anyone may still decide.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import time
from collections.abc import Sequence
from typing import Any

import attrs

from agent_fsm.engine import RunState, blocked_call
from agent_fsm.store.errors import AlreadyDecided, BadCursor, ClaimTaken, RunNotFound
from agent_fsm.store.protocol import Transaction
from agent_fsm.store.records import Claim, RunSummary
from agent_fsm.store.rows import SUMMARY, holdable, listed, text_column

__all__ = [
    "CLAIM_SECONDS",
    "MAX_PAGE",
    "PausedFilter",
    "PausedPage",
    "claim_in",
    "claim_of",
    "inbox_columns",
    "page_in",
    "release_in",
]

MAX_PAGE = 500
"""The most runs one page may hold."""

CLAIM_SECONDS = 15 * 60.0
"""How long a claim holds unless the claimer says otherwise."""

_RUN_COLUMNS = ", ".join(f"r.{column}" for column in SUMMARY.split(", "))


def inbox_columns(state: RunState) -> tuple[str | None, str | None]:
    """
    The ``tool`` and ``agent`` columns of a run resting in ``state``: what the inbox filters on, set while paused.

    ``tool`` is the blocked call's tool (the innermost call a person decides,
    as :func:`agent_fsm.engine.blocked_call` finds it), ``agent`` the run's agent.
    """
    if state.machine_state != "AwaitingApproval" or not state.pending:
        return None, None
    return text_column(blocked_call(state)[0].name), text_column(state.agent)


@attrs.frozen
class PausedFilter:
    """
    Which paused runs a listing holds; every field left ``None`` lets all through.

    ``older_than``: paused at least that many seconds ago. ``reason``: the
    gate's reason holds this text (any case). ``claimed``: a reviewer's name
    (their live claims), ``True`` (claimed by anyone) or ``False`` (unclaimed).

    A new filter (the kind of decision a pause asks for, say) is a field
    here, a condition in :func:`_where` and, to stay fast, a column written
    with the pause and an index like the tool's; cursors follow by themselves.
    """

    agent: str | None = None
    tool: str | None = None
    older_than: float | None = None
    reason: str | None = None
    claimed: str | bool | None = None

    def __attrs_post_init__(self) -> None:
        for name in ("agent", "tool", "reason"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise TypeError(f"'{name}' must be a str or None (got {value!r} that is a {type(value).__name__}).")
        if self.older_than is not None and (
            isinstance(self.older_than, bool)
            or not isinstance(self.older_than, int | float)
            or not math.isfinite(self.older_than)
            or self.older_than < 0
        ):
            raise ValueError(f"'older_than' must be a number of seconds >= 0 (got {self.older_than!r})")
        if self.claimed is not None and not isinstance(self.claimed, str | bool):
            raise TypeError(f"'claimed' must be a reviewer's name, True, False or None (got {self.claimed!r}).")

    def fingerprint(self) -> str:
        """What a cursor made under this filter carries, so that it is refused under another."""
        text = json.dumps(attrs.astuple(self), default=repr)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


class PausedPage(list[RunSummary]):
    """
    One page of paused runs (a list of :class:`RunSummary`, each with its ``agent`` and live ``claim``).

    ``next`` is the cursor of the page after it (``None``: this is the last);
    ``total`` how many paused runs the filter lets through, when counted.
    """

    def __init__(self, runs: Sequence[RunSummary] = (), *, next: str | None = None, total: int | None = None) -> None:
        super().__init__(runs)
        self.next = next
        self.total = total


def _encode(updated_at: float, run_id: str, fingerprint: str) -> str:
    payload = base64.urlsafe_b64encode(json.dumps([updated_at, run_id, fingerprint]).encode()).decode().rstrip("=")
    return f"{payload}.{hashlib.sha256(payload.encode()).hexdigest()[:16]}"


def _decode(cursor: str, fingerprint: str) -> tuple[float, str]:
    """
    The keyset a cursor names, checked.

    Raises:
        BadCursor: the cursor is not one this store made, is damaged, or was made under another filter.
    """
    if not isinstance(cursor, str) or len(cursor) > 4096:
        raise BadCursor(f"a cursor is the text a page's 'next' gave (got {cursor!r:.60})")
    payload, _, check = cursor.partition(".")
    if hashlib.sha256(payload.encode()).hexdigest()[:16] != check:
        raise BadCursor(f"the cursor {cursor!r:.60} is damaged or was not made by a listing; start from the first page")
    try:
        data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (ValueError, RecursionError):
        raise BadCursor(f"the cursor {cursor!r:.60} cannot be read; start from the first page") from None
    if (
        not isinstance(data, list)
        or len(data) != 3
        or type(data[0]) not in (int, float)
        or not math.isfinite(data[0])
        or not isinstance(data[1], str)
        or not holdable(data[1])
        or not isinstance(data[2], str)
    ):
        raise BadCursor(f"the cursor {cursor!r:.60} does not name a place in a listing; start from the first page")
    if data[2] != fingerprint:
        raise BadCursor("the cursor was made for another filter; start from the first page of this one")
    return float(data[0]), data[1]


def _like(text: str) -> str:
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _where(chosen: PausedFilter, now: float) -> tuple[list[str], list[Any]]:
    """The conditions (on ``r``, the runs, and ``c``, the live claim joined to each) and their parameters."""
    where: list[str] = ["r.status = 'paused'"]
    params: list[Any] = []
    if chosen.tool is not None:
        where.append("r.tool = ?")
        params.append(chosen.tool)
    if chosen.agent is not None:
        where.append("r.agent = ?")
        params.append(chosen.agent)
    if chosen.older_than is not None:
        where.append("r.updated_at <= ?")
        params.append(now - chosen.older_than)
    if chosen.reason:
        where.append("LOWER(r.reason) LIKE ? ESCAPE '\\'")
        params.append(_like(chosen.reason))
    if chosen.claimed is True:
        where.append("c.reviewer IS NOT NULL")
    elif chosen.claimed is False:
        where.append("c.reviewer IS NULL")
    elif isinstance(chosen.claimed, str):
        where.append("c.reviewer = ?")
        params.append(chosen.claimed)
    return where, params


# The claim a run shows: one on its open pause, not yet expired.
_CLAIMS = (
    " FROM agent_fsm_runs r LEFT JOIN agent_fsm_claims c"
    " ON c.run_id = r.run_id AND c.pause_id = r.pause_id AND c.expires_at > ?"
)


def _unholdable(chosen: PausedFilter) -> bool:
    """Whether a filter names text no column can hold: it matches nothing."""
    texts = (chosen.agent, chosen.tool, chosen.claimed if isinstance(chosen.claimed, str) else None)
    return any(text is not None and not holdable(text) for text in texts)


def page_in(tx: Transaction, chosen: PausedFilter, *, limit: int | None, cursor: str | None, count: bool) -> PausedPage:
    """
    The page of paused runs ``chosen`` lets through, after ``cursor``: at most ``limit`` (every one if ``None``).

    Raises:
        BadCursor: ``cursor`` is not a cursor of this filter.
        ValueError: ``limit`` is not a whole number from 1 to :data:`MAX_PAGE`.
    """
    if limit is not None and (type(limit) is not int or not 1 <= limit <= MAX_PAGE):
        raise ValueError(f"a page holds 1 to {MAX_PAGE} runs (got limit={limit!r})")
    after = _decode(cursor, chosen.fingerprint()) if cursor is not None else None
    if _unholdable(chosen):
        return PausedPage(total=0 if count else None)
    now = time.time()
    where, params = _where(chosen, now)
    total = None
    if count:
        # Counted on the runs' index alone unless the filter is on claims: a join per run costs the count its speed.
        joined = chosen.claimed is not None
        counted = f"SELECT COUNT(*){_CLAIMS if joined else ' FROM agent_fsm_runs r'} WHERE {' AND '.join(where)}"
        total = int(tx.rows(counted, (now, *params) if joined else params)[0][0])
    if after is not None:
        # The first condition bounds the index range the seek starts from; the second breaks ties on the run id.
        where.append("r.updated_at <= ? AND (r.updated_at < ? OR r.run_id < ?)")
        params.extend((after[0], after[0], after[1]))
    sql = (
        f"SELECT {_RUN_COLUMNS}, r.agent, c.pause_id, c.reviewer, c.claimed_at, c.expires_at{_CLAIMS}"
        f" WHERE {' AND '.join(where)} ORDER BY r.updated_at DESC, r.run_id DESC"
    )
    if limit is not None:
        sql += f" LIMIT {limit + 1}"
    rows = tx.rows(sql, (now, *params))
    more = limit is not None and len(rows) > limit
    rows = rows[:limit] if limit is not None else rows
    runs = [_summary(row) for row in rows]
    following = None
    if more:
        last = rows[-1]
        following = _encode(float(last[9]), str(last[0]), chosen.fingerprint())
    return PausedPage(runs, next=following, total=total)


def _summary(row: Sequence[Any]) -> RunSummary:
    summary = listed(row[:11])
    agent = row[11] if isinstance(row[11], str) else None
    claim = None
    if row[13] is not None:
        claim = Claim(str(row[0]), str(row[12]), str(row[13]), float(row[14]), float(row[15]))
    return attrs.evolve(summary, agent=agent, claim=claim)


def claim_of(tx: Transaction, run_id: str) -> Claim | None:
    """The live claim on the run's open pause, if any."""
    if not holdable(run_id):
        return None
    rows = tx.rows(
        "SELECT c.run_id, c.pause_id, c.reviewer, c.claimed_at, c.expires_at FROM agent_fsm_claims c"
        " JOIN agent_fsm_runs r ON r.run_id = c.run_id AND r.pause_id = c.pause_id"
        " WHERE c.run_id = ? AND r.status = 'paused' AND c.expires_at > ?",
        (run_id, time.time()),
    )
    return Claim(rows[0][0], rows[0][1], rows[0][2], float(rows[0][3]), float(rows[0][4])) if rows else None


def claim_in(tx: Transaction, run_id: str, reviewer: str, *, pause_id: str | None, seconds: float) -> Claim:
    """
    Claim the run's open pause for ``reviewer`` for ``seconds`` (renewed if theirs already), in one statement.

    Raises:
        ClaimTaken: another reviewer holds a live claim on this pause.
        AlreadyDecided: the run is not paused (or not at ``pause_id``).
        RunNotFound: no run is stored under ``run_id``.
        ValueError: no reviewer named, or ``seconds`` is not a positive number.
    """
    if not isinstance(reviewer, str) or not reviewer.strip() or not holdable(reviewer):
        raise ValueError(f"a claim needs the reviewer's name (a non-empty str, got {reviewer!r})")
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds < 10**9:
        raise ValueError(f"a claim lasts a positive number of seconds (got {seconds!r})")
    where = "SELECT status, pause_id FROM agent_fsm_runs WHERE run_id = ?"
    found = tx.rows(where, (run_id,)) if holdable(run_id) else []
    if not found:
        raise RunNotFound(f"no run is stored under {run_id!r}")
    status, current = found[0]
    if status != "paused" or current is None:
        raise AlreadyDecided(f"run {run_id!r} is {status}, not waiting for a decision: nothing to claim")
    if pause_id is not None and pause_id != current:
        raise AlreadyDecided(f"pause {pause_id!r} of run {run_id!r} is not open (the open one is {current!r})")
    now = time.time()
    # Taken when there is no claim, or it expired, or it is on an earlier pause, or it is the claimer's own:
    # one statement, so of two reviewers racing, the database lets exactly one through.
    won = tx.run(
        "INSERT INTO agent_fsm_claims (run_id, pause_id, reviewer, claimed_at, expires_at) VALUES (?, ?, ?, ?, ?)"
        " ON CONFLICT (run_id) DO UPDATE SET pause_id = excluded.pause_id, reviewer = excluded.reviewer,"
        " claimed_at = excluded.claimed_at, expires_at = excluded.expires_at"
        " WHERE agent_fsm_claims.expires_at <= ? OR agent_fsm_claims.pause_id <> excluded.pause_id"
        " OR agent_fsm_claims.reviewer = excluded.reviewer",
        (run_id, current, reviewer, now, now + seconds, now),
    )
    if not won:
        held = tx.rows("SELECT reviewer, expires_at FROM agent_fsm_claims WHERE run_id = ?", (run_id,))
        who, until = (held[0][0], float(held[0][1])) if held else ("someone", now)
        raise ClaimTaken(
            f"run {run_id!r} is claimed by {who!r} until"
            f" {time.strftime('%H:%M:%S', time.gmtime(until))} UTC; pick another run, or wait for the claim to expire",
            reviewer=who,
            expires_at=until,
        )
    return Claim(run_id, current, reviewer, now, now + seconds)


def release_in(tx: Transaction, run_id: str, reviewer: str) -> bool:
    """Drop ``reviewer``'s claim on the run; whether they held one."""
    if not holdable(run_id) or not isinstance(reviewer, str) or not holdable(reviewer):
        return False
    return bool(tx.run("DELETE FROM agent_fsm_claims WHERE run_id = ? AND reviewer = ?", (run_id, reviewer)))
