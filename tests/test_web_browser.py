"""
The inbox and the run viewer in a real browser (Debian's headless chromium, driven by Selenium).

A reviewer signs in, sees paused runs, approves, rejects with a reason and
edits arguments; the store changes and the page follows. Hostile model text
(script tags, event handlers, ``javascript:`` links, ``</textarea>``) is shown
as text and never runs. Screenshots of the pages are taken and checked;
``AGENT_FSM_SCREENSHOTS=docs/images`` refreshes the ones docs/inbox.md shows.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_fsm.engine import RUN_MACHINE
from agent_fsm.store import SqliteStore, open_store, reject
from agent_fsm.web import Reviewers, inbox_app, render_view
from tests.browser import (
    full_page_screenshot,
    open_browser,
    policy_violations,
    screenshot_folder,
    sign_in,
    textarea_json,
    wait_for,
)
from tests.web_server import serving
from tests.web_world import ANSWER, HOSTILE_TASK, IMG, NOTE, REASON, SCRIPT, THOUGHTS, slow_world, start, world

TOKEN = "ana-token-0123456789"
REVIEWERS = Reviewers.parse(f"ana:{TOKEN}")


@pytest.fixture(scope="module")
def browser(chromium: tuple[str, str]) -> Iterator[Any]:
    """One headless chromium for the module's tests."""
    session = open_browser(*chromium)
    yield session
    session.quit()


@pytest.fixture
def desk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A store with two paused refunds (ticket-1, ticket-2) and one decided run (ticket-3)."""
    monkeypatch.setenv("AGENT_FSM_REFUNDS", str(tmp_path / "refunds.jsonl"))
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with SqliteStore(tmp_path / "runs.db") as store:
        for run_id in ("ticket-3", "ticket-2", "ticket-1"):
            start(store, run_id)
        reject(store, "ticket-3", world(), reviewer="bo", reason="no")
    yield {"url": url, "ledger": tmp_path / "refunds.jsonl"}


def _serve(url: str, **options: Any) -> Any:
    return serving(inbox_app(lambda: open_store(url), world(), reviewers=REVIEWERS, poll_seconds=0.5, **options))


def _wait(browser: Any, condition: Any) -> Any:
    return wait_for(browser, condition)


def _by_id(browser: Any, element_id: str) -> Any:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.ID, element_id)


def _sign_in(browser: Any, base: str) -> None:
    sign_in(browser, base, "ana", TOKEN)


def _main_text(browser: Any) -> str:
    from selenium.webdriver.common.by import By

    return str(browser.find_element(By.TAG_NAME, "main").text)


def _refunds(ledger: Path) -> list[int]:
    """The refunds paid by the test, after the one ticket-3's run paid in the fixture."""
    paid = [json.loads(line)["refunded_cents"] for line in ledger.read_text().splitlines()] if ledger.exists() else []
    assert paid[:1] == [4999], paid
    return paid[1:]


def _assert_inert(browser: Any, scripts: list[str]) -> None:
    """No alert opened, no payload ran, no element came from model text: the page has only its own scripts."""
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - raises when no alert is open
    assert browser.execute_script("return window.__pwned === undefined")
    assert browser.execute_script("return Array.from(document.scripts).map(s => s.src)") == scripts
    injected = "img, iframe, [onerror], [onmouseover], a[href^='javascript'], main b, main textarea ~ textarea"
    assert browser.find_elements(By.CSS_SELECTOR, injected) == []
    assert policy_violations(browser) == []  # nothing even tried to run (and the pages need nothing inline)


def test_a_reviewer_approves_from_the_inbox_and_sees_the_run_end(browser: Any, desk: dict[str, Any], tmp_path) -> None:
    """Inbox -> run page -> Approve: the store records ana's approval, the refund is paid, the page shows the end."""
    shots = screenshot_folder(tmp_path)
    with _serve(desk["url"]) as base:
        _sign_in(browser, base)
        rows = _main_text(browser)
        assert "ticket-1" in rows and "ticket-2" in rows and "refund_order" in rows
        assert "refunds above 5000 cents need a person's approval" in rows and "9999" in rows
        full_page_screenshot(browser, shots / "inbox.png")
        browser.find_element("link text", "ticket-1").click()
        _wait(browser, lambda b: b.current_url.endswith("/runs/ticket-1"))
        assert _by_id(browser, "blocked-name").text == "refund_order"
        assert textarea_json(browser, "arguments") == {"order_id": "A-17", "amount_cents": 9999}
        full_page_screenshot(browser, shots / "run-paused.png")
        _by_id(browser, "approve").click()
        notice = _wait(browser, lambda b: b.find_elements("id", "notice"))[0]
        assert "You approved the call." in notice.text and "Answered" in notice.text
        with open_store(desk["url"]) as store:
            [decision] = store.history("ticket-1")
            assert (decision.decision, decision.reviewer) == ("approve", "ana")
            assert store.load("ticket-1").summary.stop == "answered"
        assert _refunds(desk["ledger"]) == [9999]
        assert browser.find_elements("id", "decide") == []
        shot = full_page_screenshot(browser, tmp_path / "approved.png")
        _check_screenshot(browser, shot, {"Ready", "Proposing", "Executing", "AwaitingApproval", "Answered"})


def _check_screenshot(browser: Any, shot: Path, visited: set[str]) -> None:
    """
    The PNG is not blank, shows the diagram's green path, and the drawn diagram is the deciding agent's machine:
    every state it can enter, the run's states among them, and none it cannot.
    """
    from PIL import Image

    with Image.open(shot) as image:
        rgb = image.convert("RGB")
        colours = rgb.getcolors(maxcolors=1 << 22) or []
        assert rgb.width == 1280 and rgb.height > 1500
    assert len(colours) > 200, "the screenshot is (nearly) blank"
    green = sum(count for count, colour in colours if colour == (0xD3, 0xF9, 0xD8))  # visited states' fill
    assert green > 2000, "no visited state is drawn in the screenshot"
    svg = browser.find_element("css selector", ".diagram svg")
    assert svg.is_displayed() and svg.size["width"] > 1000 and svg.size["height"] > 400
    drawn = {t.text for t in browser.find_elements("css selector", ".diagram svg text")}
    own = {s.name for s in world().machine().states}
    assert own <= drawn and visited <= drawn
    assert not drawn & ({s.name for s in RUN_MACHINE.states} - own)


def test_the_run_page_and_inbox_follow_a_decision_taken_elsewhere(browser: Any, desk: dict[str, Any]) -> None:
    """A rejection by another process shows up on the open run page and empties the open inbox, unclicked."""
    with _serve(desk["url"]) as base:
        _sign_in(browser, base)
        browser.get(base + "/runs/ticket-1")
        assert browser.find_elements("id", "decide")
        agent = world()
        with open_store(desk["url"]) as store:
            reject(store, "ticket-1", agent, reviewer="bo", reason="x")
        _wait(
            browser,
            lambda b: not b.find_elements("id", "decide") and "rejected by a human reviewer: x" in _main_text(b),
        )
        browser.get(base + "/")
        assert "ticket-2" in _main_text(browser)
        with open_store(desk["url"]) as store:
            reject(store, "ticket-2", agent, reviewer="bo", reason="y")
        _wait(browser, lambda b: b.find_elements("id", "no-paused"))


def test_a_decision_that_outlasts_the_request_is_followed_live(browser: Any, desk: dict[str, Any]) -> None:
    """With a slow model the request returns before the run rests; the page says so, then shows the ending."""
    app = inbox_app(lambda: open_store(desk["url"]), slow_world(), reviewers=REVIEWERS, wait=0.5, poll_seconds=0.5)
    with serving(app) as base:
        _sign_in(browser, base)
        browser.get(base + "/runs/ticket-1")
        _by_id(browser, "approve").click()
        notice = _wait(browser, lambda b: b.find_elements("id", "notice"))[0]
        assert "still moving" in notice.text
        with open_store(desk["url"]) as store:
            assert store.load("ticket-1").status == "running"  # decided, and continuing in the inbox's worker
        _wait(browser, lambda b: "Order A-17 is refunded" in _main_text(b) and not b.find_elements("id", "notice"))
        assert "answered" in _by_id(browser, "summary").text
    with open_store(desk["url"]) as store:
        assert store.load("ticket-1").summary.stop == "answered"


def test_a_rejection_carries_the_reviewers_reason_to_the_model(browser: Any, desk: dict[str, Any]) -> None:
    """Reject with a reason (its markup stays text): the store keeps it; the transcript shows what the model read."""
    reason = "over the <i>limit</i> & not agreed"
    with _serve(desk["url"]) as base:
        _sign_in(browser, base)
        browser.get(base + "/runs/ticket-1")
        _by_id(browser, "reason").send_keys(reason)
        _by_id(browser, "reject").click()
        _wait(browser, lambda b: b.find_elements("id", "notice"))
        assert f"rejected by a human reviewer: {reason} (decided by ana)" in _main_text(browser)
        _assert_inert(browser, [base + "/static/live.js"])
    with open_store(desk["url"]) as store:
        [decision] = store.history("ticket-1")
        assert (decision.decision, decision.reviewer, decision.reason) == ("reject", "ana", reason)
    assert _refunds(desk["ledger"]) == [4999]  # the model's second, smaller refund was within policy


def test_an_edit_that_breaks_the_schema_is_refused_with_the_reason(
    browser: Any, desk: dict[str, Any], tmp_path
) -> None:
    """An edit to a string amount shows the contract's reason and decides nothing; a valid edit is then approved."""
    with _serve(desk["url"]) as base:
        _sign_in(browser, base)
        browser.get(base + "/runs/ticket-1")
        area = _by_id(browser, "arguments")
        area.clear()
        area.send_keys('{"order_id": "A-17", "amount_cents": "lots"}')
        _by_id(browser, "edit").click()
        message = _wait(browser, lambda b: b.find_elements("id", "error-message"))[0].text
        assert "'lots' is not of type 'integer'" in message and "Nothing was decided" in message
        full_page_screenshot(browser, screenshot_folder(tmp_path) / "edit-refused.png")
        with open_store(desk["url"]) as store:
            assert store.load("ticket-1").status == "paused" and store.history("ticket-1") == []
        _by_id(browser, "back").click()
        area = _wait(browser, lambda b: b.find_elements("id", "arguments"))[0]
        area.clear()
        area.send_keys('{"order_id": "A-17", "amount_cents": 4999}')
        _by_id(browser, "edit").click()
        assert "edited arguments" in _wait(browser, lambda b: b.find_elements("id", "notice"))[0].text
        assert "Order A-17 is refunded: 4999 cents" in _main_text(browser)
        assert "ana approved the call with edited arguments" in _main_text(browser)
        shot = full_page_screenshot(browser, screenshot_folder(tmp_path) / "run-answered.png")
        _check_screenshot(browser, shot, {"Ready", "Proposing", "Executing", "AwaitingApproval", "Answered"})
    with open_store(desk["url"]) as store:
        [decision] = store.history("ticket-1")
        assert decision.arguments == {"order_id": "A-17", "amount_cents": 4999}
    assert _refunds(desk["ledger"]) == [4999]


def test_a_stale_page_decides_nothing(browser: Any, desk: dict[str, Any]) -> None:
    """Approving from a page whose pause was decided meanwhile gives a clear 'no longer open' page, no decision."""
    with serving(inbox_app(lambda: open_store(desk["url"]), world(), reviewers=REVIEWERS, poll_seconds=600)) as base:
        _sign_in(browser, base)
        browser.get(base + "/runs/ticket-1")
        with open_store(desk["url"]) as store:
            reject(store, "ticket-1", world(), reviewer="bo", reason="no")
        _by_id(browser, "approve").click()
        title = _wait(browser, lambda b: b.find_elements("css selector", "#error h1"))[0].text
        assert title == "This pause is no longer open"
        assert "the page was stale" in _by_id(browser, "error-message").text
    with open_store(desk["url"]) as store:
        assert [d.reviewer for d in store.history("ticket-1")] == ["bo"]
    assert _refunds(desk["ledger"]) == [4999]  # only the model's own smaller refund, after bo's rejection


def test_hostile_text_is_shown_as_text_and_never_runs(browser: Any, tmp_path: Path, monkeypatch) -> None:
    """Script tags, handlers, javascript: links and </textarea> in task, thoughts, arguments, reason and answer."""
    monkeypatch.setenv("AGENT_FSM_REFUNDS", str(tmp_path / "refunds.jsonl"))
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with SqliteStore(tmp_path / "runs.db") as store:
        start(store, "hostile-1", HOSTILE_TASK)
    with _serve(url) as base:
        own = [base + "/static/live.js"]
        _sign_in(browser, base)
        assert REASON in _main_text(browser) and "</textarea>" in _main_text(browser)
        _assert_inert(browser, own)
        browser.get(base + "/runs/hostile-1")
        text = _main_text(browser)
        for shown in (HOSTILE_TASK, THOUGHTS, REASON, SCRIPT, IMG):
            assert shown in text
        assert textarea_json(browser, "arguments") == {"note": NOTE, "cents": 5000}
        _assert_inert(browser, own)
        full_page_screenshot(browser, screenshot_folder(tmp_path) / "hostile.png")
        _by_id(browser, "edit").click()  # the textarea as it is, </textarea> and all, sent back intact
        _wait(browser, lambda b: b.find_elements("id", "notice"))
        assert ANSWER in _main_text(browser)
        _assert_inert(browser, own)
    with open_store(url) as store:
        assert store.history("hostile-1")[0].arguments == {"note": NOTE, "cents": 5000}
        state = store.load("hostile-1").state
    page = tmp_path / "hostile.html"
    page.write_text(render_view(state), encoding="utf-8")
    browser.get(page.as_uri())
    assert ANSWER in _main_text(browser) and THOUGHTS in _main_text(browser)
    _assert_inert(browser, [])


def test_the_policy_stops_script_even_where_escaping_fails(browser: Any, tmp_path: Path, monkeypatch) -> None:
    """With autoescaping switched off on purpose, the markup gets in but the Content-Security-Policy blocks it."""
    import jinja2

    from agent_fsm.web import pages
    from agent_fsm.web.timeline import pretty_json

    unsafe = jinja2.Environment(
        loader=jinja2.PackageLoader("agent_fsm.web", "templates"), undefined=jinja2.StrictUndefined, autoescape=False
    )
    unsafe.filters["pretty"] = pretty_json
    monkeypatch.setattr(pages, "_environment", lambda: unsafe)
    monkeypatch.setenv("AGENT_FSM_REFUNDS", str(tmp_path / "refunds.jsonl"))
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with SqliteStore(tmp_path / "runs.db") as store:
        start(store, "hostile-1", HOSTILE_TASK)
        state = store.load("hostile-1").state
    with _serve(url) as base:
        _sign_in(browser, base)
        policy_violations(browser)  # forget the sign-in pages' reports
        browser.get(base + "/runs/hostile-1")
        assert browser.find_elements("css selector", "main img")  # the markup got in ...
        assert browser.execute_script("return window.__pwned === undefined")  # ... and ran nothing
        assert any("script-src 'self'" in v for v in policy_violations(browser))
    page = tmp_path / "unescaped.html"
    page.write_text(render_view(state), encoding="utf-8")
    browser.get(page.as_uri())
    assert browser.find_elements("css selector", "main img")
    assert browser.execute_script("return window.__pwned === undefined")
    assert any("Content Security Policy" in v for v in policy_violations(browser))


def test_the_cancel_form_ends_the_run_cancelled(browser: Any, desk: dict[str, Any]) -> None:
    """Cancel the run with a reason: the page says so, the store keeps ana's ``cancel``, no refund is made."""
    with _serve(desk["url"]) as base:
        _sign_in(browser, base)
        browser.get(base + "/runs/ticket-1")
        _by_id(browser, "cancel-reason").send_keys("customer withdrew")
        _by_id(browser, "cancel").click()
        _wait(browser, lambda b: b.find_elements("id", "notice"))
        assert "You cancelled the run" in _main_text(browser)
        assert "cancelled by ana: customer withdrew" in _main_text(browser)
    with open_store(desk["url"]) as store:
        [decision] = store.history("ticket-1")
        assert (decision.decision, decision.reviewer, decision.reason) == ("cancel", "ana", "customer withdrew")
        assert store.load("ticket-1").summary.stop == "cancelled"
    assert _refunds(desk["ledger"]) == []
