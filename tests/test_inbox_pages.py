"""
The inbox at volume over real HTTP (uvicorn on 127.0.0.1, SQLite and PostgreSQL) and in ``agent-fsm runs list``:
pages followed by their links, filters, searches, claims, and bad cursors refused.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import agent_fsm.web.listing
from agent_fsm.store import RunStore, open_store, reject
from agent_fsm.web import APP_POLICY, Reviewers, inbox_app
from tests.cli_store import runs
from tests.web_server import serving
from tests.web_world import HOSTILE_TASK, REFUND_TASK, world

ANA = "ana-token-0123456789"
BO = "bo-token-9876543210"
REVIEWERS = Reviewers.parse(f"ana:{ANA} bo:{BO}")


@pytest.fixture(params=["sqlite", "postgres"])
def desk(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """Nine refunds and three payments paused, the inbox served with pages of four runs."""
    monkeypatch.setenv("AGENT_FSM_REFUNDS", str(tmp_path / "refunds.jsonl"))
    monkeypatch.setattr(agent_fsm.web.listing, "PAGE", 4)
    url = f"sqlite:///{tmp_path / 'runs.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_dsn")
    opener: Callable[[], RunStore] = lambda: open_store(url)
    with opener() as store:
        for n in range(9):
            assert world().run(REFUND_TASK, store=store, run_id=f"refund-{n}").stop.value == "awaiting_approval"
        for n in range(3):
            assert world().run(HOSTILE_TASK, store=store, run_id=f"pay-{n}").stop.value == "awaiting_approval"
    with serving(inbox_app(opener, world(), reviewers=REVIEWERS)) as base:
        yield {"base": base, "url": url, "open": opener}


def _signed_in(base: str, name: str, token: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=20)
    form = client.get("/login")
    done = client.post("/login", data={"csrf": _csrf(form.text), "reviewer": name, "token": token})
    assert done.status_code == 303, done.text[:300]
    return client


def _csrf(text: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', text)
    assert found, text[:500]
    return found.group(1)


def _listed(text: str) -> list[str]:
    return [html.unescape(run_id) for run_id in re.findall(r'<tr class="paused-run" data-run="([^"]+)"', text)]


def _walk(client: httpx.Client, start: str) -> tuple[list[str], list[str]]:
    """Every run listed following the pages' 'older' links from ``start``, and each page's total."""
    listed, totals, url = [], [], start
    while True:
        page = client.get(url)
        assert page.status_code == 200, page.text[:300]
        assert len(page.content) < 100_000
        listed += _listed(page.text)
        totals.append(re.search(r'<span id="total">(\d+)</span>', page.text).group(1))  # type: ignore[union-attr]
        found = re.search(r'<a href="([^"]+)" id="next-page">', page.text)
        if found is None:
            return listed, totals
        url = html.unescape(found.group(1))


def test_the_pages_list_every_paused_run_once_while_one_is_decided(desk: dict[str, Any]) -> None:
    """Pages of four, followed by their links: twelve runs, each once, the count on every page; a run decided
    between two fetches (not yet listed) is simply not listed."""
    ana = _signed_in(desk["base"], "ana", ANA)
    first = ana.get("/")
    assert first.headers["content-security-policy"] == APP_POLICY
    assert _listed(first.text) == ["pay-2", "pay-1", "pay-0", "refund-8"]  # the newest pauses first
    listed, totals = _walk(ana, "/")
    assert sorted(listed) == sorted([f"refund-{n}" for n in range(9)] + [f"pay-{n}" for n in range(3)])
    assert set(totals) == {"12"}
    with desk["open"]() as store:
        reject(store, "refund-0", world(), reviewer="bo", reason="no")
    listed, totals = _walk(ana, "/")
    assert len(listed) == len(set(listed)) == 11 and "refund-0" not in listed and set(totals) == {"11"}


def test_filters_and_search_page_too(desk: dict[str, Any]) -> None:
    """By tool, by the reason's text (any case) and by claim: only those runs, counted, paged with the filter kept."""
    ana = _signed_in(desk["base"], "ana", ANA)
    listed, totals = _walk(ana, "/?tool=pay")
    assert sorted(listed) == ["pay-0", "pay-1", "pay-2"] and totals == ["3"]
    listed, totals = _walk(ana, "/?tool=refund_order")
    assert len(listed) == 9 and totals == ["9"] * 3
    listed, _ = _walk(ana, "/?q=PAYMENTS+NEED")
    assert sorted(listed) == ["pay-0", "pay-1", "pay-2"]
    assert _walk(ana, "/?age=1d")[0] == []
    assert _walk(ana, "/?claimed=mine")[0] == []
    assert ana.get("/?age=forever").status_code == 400
    stamp = ana.get("/inbox.json?tool=pay").json()
    assert stamp["paused"] == 3


def test_a_bad_cursor_is_a_400_page_and_a_cursor_of_another_filter_too(desk: dict[str, Any]) -> None:
    """A damaged ``after``, or one taken from another filter's page, is refused with a link to the first page."""
    ana = _signed_in(desk["base"], "ana", ANA)
    following = re.search(r'<a href="([^"]+)" id="next-page">', ana.get("/").text)
    assert following is not None
    cursor = re.search(r"after=([^&\"]+)", html.unescape(following.group(1))).group(1)  # type: ignore[union-attr]
    for url in ("/?after=nonsense", "/?after=" + cursor[:-2] + "zz", "/?tool=pay&after=" + cursor):
        page = ana.get(url)
        assert page.status_code == 400 and "cannot be found" in page.text and "first page" in page.text
        assert page.headers["x-frame-options"] == "DENY"
    assert ana.get("/inbox.json?after=nonsense").status_code == 400


def test_a_claim_is_seen_by_others_refused_to_them_and_released(desk: dict[str, Any]) -> None:
    """ana claims refund-8 from the list; bo sees it claimed and cannot claim it; the run page shows it; released."""
    ana, bo = _signed_in(desk["base"], "ana", ANA), _signed_in(desk["base"], "bo", BO)
    page = ana.get("/?tool=refund_order").text
    row = page[page.index('data-run="refund-8"') :]
    pause = re.search(r'name="pause_id" value="([^"]+)"', row).group(1)  # type: ignore[union-attr]
    form = {"csrf": _csrf(page), "pause_id": pause, "back": "/?tool=refund_order"}
    without = ana.post("/runs/refund-8/claim", data={**form, "csrf": "forged"})
    assert without.status_code == 403
    done = ana.post("/runs/refund-8/claim", data=form)
    assert done.status_code == 303 and done.headers["location"] == "/?tool=refund_order"
    seen = bo.get("/").text
    assert "ana until" in seen[seen.index('data-run="refund-8"') :].split("</tr>")[0]
    taken = bo.post("/runs/refund-8/claim", data={**form, "csrf": _csrf(seen)})
    assert taken.status_code == 409 and "claimed by &#39;ana&#39;" in taken.text
    assert "claimed by ana until" in bo.get("/runs/refund-8").text
    assert _listed(ana.get("/?claimed=mine").text) == ["refund-8"]
    assert _listed(bo.get("/?claimed=mine").text) == []
    offsite = ana.post("/runs/refund-8/release", data={**form, "back": "//evil.example/"})
    assert offsite.status_code == 303 and offsite.headers["location"] == "/runs/refund-8"
    assert "not claimed" in bo.get("/runs/refund-8").text
    with desk["open"]() as store:
        assert store.claim_of("refund-8") is None


def test_runs_list_pages_and_filters(desk: dict[str, Any]) -> None:
    """``agent-fsm runs list --limit N`` prints a page and the next page's cursor; a bad cursor is one line, exit 1."""
    code, out, _ = runs("list", "--store", desk["url"], "--limit", "5", "--tool", "refund_order")
    assert code == 0 and out.count("  paused  ") == 5
    cursor = re.search(r"next page: --cursor (\S+)", out).group(1)  # type: ignore[union-attr]
    assert "9 paused run(s) match" in out
    code, out, _ = runs("list", "--store", desk["url"], "--limit", "5", "--tool", "refund_order", "--cursor", cursor)
    assert code == 0 and out.count("  paused  ") == 4 and "next page" not in out
    code, _, err = runs("list", "--store", desk["url"], "--limit", "5", "--cursor", cursor)
    assert code == 1 and err.startswith("error: the cursor was made for another filter") and err.count("\n") == 1
    code, _, err = runs("list", "--store", desk["url"], "--limit", "0")
    assert code == 1 and "1 to 500" in err
    code, _, err = runs("list", "--store", desk["url"], "--status", "ended", "--limit", "5")
    assert code == 1 and "paused runs" in err


def test_pages_read_through_stores_kept_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ten pages in a row open one store; a request whose store raised (a bad cursor) gets it closed, not reused."""
    monkeypatch.setenv("AGENT_FSM_REFUNDS", str(tmp_path / "refunds.jsonl"))
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with open_store(url) as store:
        world().run(REFUND_TASK, store=store, run_id="refund-0")
    opened: list[RunStore] = []

    def opener() -> RunStore:
        opened.append(open_store(url))
        return opened[-1]

    with serving(inbox_app(opener, world(), reviewers=REVIEWERS)) as base:
        ana = _signed_in(base, "ana", ANA)
        for _ in range(10):
            assert _listed(ana.get("/").text) == ["refund-0"]
        assert len(opened) == 1
        assert ana.get("/?after=nonsense").status_code == 400
        assert ana.get("/").status_code == 200 and len(opened) == 2
