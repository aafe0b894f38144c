"""
The inbox's list of paused runs at volume: the query string read into a store listing, a page shown, a claim shown.

A page holds :data:`PAGE` runs found by the store's keyset cursor
(:meth:`agent_fsm.store.SqlStore.paused`), so the first page and the
thousandth cost the same. What a row shows of a call's arguments and the
gate's reason is cut to :data:`SHOWN` characters: a page stays small
whatever the runs hold, and the run's page shows everything.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

import attrs

from agent_fsm.store.listing import PausedPage
from agent_fsm.store.protocol import RunStore
from agent_fsm.store.records import Claim, RunSummary
from agent_fsm.web.timeline import pretty_json

__all__ = ["PAGE", "SHOWN", "Wanted", "back_to", "listed_row", "listing", "page_stamp", "read_query", "shown_claim"]

PAGE = 50
"""Paused runs on one page of the inbox."""

SHOWN = 300
"""Characters of a call's arguments, and of the gate's reason, a row of the list shows."""

_AGES = {"": None, "5m": 300.0, "1h": 3600.0, "1d": 86400.0}
_CLAIMS = ("", "mine", "unclaimed", "claimed")


@attrs.frozen
class Wanted:
    """What the inbox's query string asks for: the filters, as the form shows them, and the page's cursor."""

    tool: str = ""
    agent: str = ""
    q: str = ""
    age: str = ""
    claimed: str = ""
    cursor: str | None = None
    reviewer: str = ""

    @property
    def shown(self) -> dict[str, str]:
        """The filters as the form's fields hold them."""
        return {"tool": self.tool, "agent": self.agent, "q": self.q, "age": self.age, "claimed": self.claimed}

    def url_after(self, cursor: str | None) -> str:
        """The inbox's URL for these filters, at the page after ``cursor`` (the first page for ``None``)."""
        query = {name: value for name, value in self.shown.items() if value}
        if cursor is not None:
            query["after"] = cursor
        return "/" + (f"?{urlencode(query)}" if query else "")


def read_query(query: Mapping[str, str], reviewer: str | None) -> Wanted:
    """
    The filters and cursor an inbox URL names.

    Raises:
        ValueError: an age or claim choice the form does not offer, or a field longer than a filter needs.
    """
    fields = {name: query.get(name, "").strip() for name in ("tool", "agent", "q", "age", "claimed")}
    if any(len(value) > 200 for value in fields.values()):
        raise ValueError("a filter is at most 200 characters")
    if fields["age"] not in _AGES:
        raise ValueError(f"waiting for longer than {fields['age']!r} is not a choice; choose {', '.join(_AGES)}")
    if fields["claimed"] not in _CLAIMS:
        raise ValueError(f"claimed {fields['claimed']!r} is not a choice; choose mine, unclaimed or claimed")
    return Wanted(**fields, cursor=query.get("after") or None, reviewer=reviewer or "")


def listing(store: RunStore, wanted: Wanted) -> PausedPage:
    """The page of paused runs ``wanted`` names, counted (``BadCursor`` for a cursor not of these filters)."""
    choices: dict[str, str | bool] = {"mine": wanted.reviewer, "unclaimed": False, "claimed": True}
    claimed = choices.get(wanted.claimed)
    return store.paused(
        limit=PAGE,
        cursor=wanted.cursor,
        agent=wanted.agent or None,
        tool=wanted.tool or None,
        older_than=_AGES[wanted.age],
        reason=wanted.q or None,
        claimed=claimed,
        count=True,
    )


def _cut(text: str) -> str:
    return text if len(text) <= SHOWN else text[:SHOWN] + " …"


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def shown_claim(claim: Claim | None) -> dict[str, Any] | None:
    """A claim as a page shows it: who, and until when (UTC)."""
    if claim is None:
        return None
    return {"reviewer": claim.reviewer, "until": time.strftime("%H:%M UTC", time.gmtime(claim.expires_at))}


def listed_row(summary: RunSummary, now: float) -> dict[str, Any]:
    """One row of the inbox: the run, its blocked call's arguments and reason cut short, its wait and its claim."""
    if summary.problem is not None:
        return {"run": summary, "age": "?", "arguments": "", "reason": summary.problem, "claim": None}
    arguments = pretty_json(summary.blocked.arguments) if summary.blocked is not None else ""
    return {
        "run": summary,
        "age": _age(now - summary.updated_at),
        "arguments": _cut(arguments),
        "reason": _cut(summary.reason or ""),
        "claim": shown_claim(summary.claim),
    }


def page_stamp(page: PausedPage) -> str:
    """What changes when the page would: its runs, their versions and claims, and how many match."""
    text = "|".join(
        f"{s.run_id}:{s.version}:{s.claim.reviewer if s.claim else ''}:{s.claim.expires_at if s.claim else ''}"
        for s in page
    )
    return hashlib.sha256(f"{page.total}|{text}".encode()).hexdigest()[:16]


def back_to(back: Any, run_id: str) -> str:
    """Where a claim's form returns: a path of this inbox it came from, else the run's page."""
    if isinstance(back, str) and back.startswith("/") and not back.startswith("//") and "\\" not in back:
        return back
    return f"/runs/{quote(run_id, safe='')}"
