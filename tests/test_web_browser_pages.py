"""
The inbox at volume in a real browser (Debian's headless chromium, driven by Selenium): pages, filters, claims.

A reviewer follows the "older" links through every page, filters by tool
and searches the gate's reason, claims a run and sees another reviewer's
claim; the page keeps its filter and page as it follows the store live.
``AGENT_FSM_SCREENSHOTS=docs/images`` refreshes the screenshot docs/inbox.md shows.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import agent_fsm.web.listing
from agent_fsm.store import SqliteStore, open_store, reject
from agent_fsm.web import inbox_app
from tests import test_web_browser as single
from tests.browser import full_page_screenshot, policy_violations, screenshot_folder, sign_in, wait_for
from tests.web_server import serving
from tests.web_world import HOSTILE_TASK, REFUND_TASK, world

TOKEN, REVIEWERS = single.TOKEN, single.REVIEWERS
browser = single.browser  # one headless chromium for the module's tests, the same fixture


@pytest.fixture
def desk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """Seven refunds and two payments paused, bo's claim on refund-3; the inbox served with pages of three runs."""
    monkeypatch.setenv("AGENT_FSM_REFUNDS", str(tmp_path / "refunds.jsonl"))
    monkeypatch.setattr(agent_fsm.web.listing, "PAGE", 3)
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with SqliteStore(tmp_path / "runs.db") as store:
        for n in range(7):
            world().run(REFUND_TASK, store=store, run_id=f"refund-{n}")
        for n in range(2):
            world().run(HOSTILE_TASK, store=store, run_id=f"pay-{n}")
        store.claim("refund-3", "bo")
    with serving(inbox_app(lambda: open_store(url), world(), reviewers=REVIEWERS, poll_seconds=0.5)) as base:
        yield {"base": base, "url": url}


def _wait(browser: Any, condition: Any) -> Any:
    return wait_for(browser, condition)


def _sign_in(browser: Any, base: str) -> None:
    sign_in(browser, base, "ana", TOKEN)


def _rows(browser: Any) -> list[str]:
    return [row.get_attribute("data-run") for row in browser.find_elements("css selector", "tr.paused-run")]


def test_a_reviewer_pages_through_the_inbox_and_filters_it(browser: Any, desk: dict[str, str]) -> None:
    """Three pages of three, each run once, the count on each; filtered by tool, then by the reason's words."""
    _sign_in(browser, desk["base"])
    assert browser.find_element("id", "total").text == "9"
    seen = [_rows(browser)]
    while browser.find_elements("id", "next-page"):
        before = browser.current_url
        browser.find_element("id", "next-page").click()
        _wait(browser, lambda b, before=before: b.current_url != before)
        seen.append(_rows(browser))
    assert [len(page) for page in seen] == [3, 3, 3]
    listed = [run_id for page in seen for run_id in page]
    assert sorted(listed) == sorted([f"refund-{n}" for n in range(7)] + ["pay-0", "pay-1"])
    browser.find_element("id", "first-page").click()
    _wait(browser, lambda b: _rows(b) == seen[0])
    browser.find_element("id", "filter-tool").send_keys("pay")
    browser.find_element("id", "filter").click()
    _wait(browser, lambda b: sorted(_rows(b)) == ["pay-0", "pay-1"] and "tool=pay" in b.current_url)
    assert browser.find_element("id", "total").text == "2"
    browser.find_element("id", "clear").click()
    _wait(browser, lambda b: len(_rows(b)) == 3)
    browser.find_element("id", "filter-q").send_keys("Payments need")
    browser.find_element("id", "filter").click()
    _wait(browser, lambda b: sorted(_rows(b)) == ["pay-0", "pay-1"])
    assert policy_violations(browser) == []


def test_a_reviewer_claims_a_run_sees_another_claim_and_the_page_keeps_its_place(
    browser: Any, desk: dict[str, str], tmp_path: Path
) -> None:
    """bo's claim shows with no claim button; ana claims refund-4 on page 2, stays there, then releases it; a run
    decided elsewhere reloads page 2 with its filter and place kept."""
    _sign_in(browser, desk["base"])
    browser.find_element("id", "next-page").click()
    _wait(browser, lambda b: "after=" in b.current_url)
    page_two = browser.current_url
    assert _rows(browser) == ["refund-5", "refund-4", "refund-3"]
    bo_row = browser.find_element("css selector", 'tr[data-run="refund-3"]')
    assert "bo until" in bo_row.text and bo_row.find_elements("css selector", "button") == []
    row = browser.find_element("css selector", 'tr[data-run="refund-4"]')
    row.find_element("css selector", "button.claim").click()
    _wait(browser, lambda b: "ana until" in b.find_element("css selector", 'tr[data-run="refund-4"]').text)
    assert browser.current_url == page_two
    full_page_screenshot(browser, screenshot_folder(tmp_path) / "inbox-pages.png")
    with open_store(desk["url"]) as store:
        claim = store.claim_of("refund-4")
        assert claim is not None and claim.reviewer == "ana"
    browser.find_element("css selector", 'tr[data-run="refund-4"] button.release').click()
    _wait(browser, lambda b: b.find_elements("css selector", 'tr[data-run="refund-4"] button.claim'))
    assert browser.current_url == page_two
    with open_store(desk["url"]) as store:
        reject(store, "refund-5", world(), reviewer="bo", reason="no")
    _wait(browser, lambda b: _rows(b) == ["refund-4", "refund-3", "refund-2"])  # reloaded live, in its place
    assert browser.current_url == page_two
    assert policy_violations(browser) == []
