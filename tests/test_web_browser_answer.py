"""
The answer form in a real browser (headless chromium, driven by Selenium): the browser refuses what HTML can
check (a required field left empty, a number out of bounds), and a valid answer ends the run as the call's result.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_fsm.store import SqliteStore, open_store
from agent_fsm.web import Reviewers, inbox_app
from tests.browser import open_browser, policy_violations
from tests.test_web_answer import shop
from tests.test_web_browser import _wait
from tests.web_server import serving

TOKEN = "ana-token-0123456789"
REVIEWERS = Reviewers.parse(f"ana:{TOKEN}")


@pytest.fixture(scope="module")
def browser(chromium: tuple[str, str]) -> Iterator[Any]:
    """One headless chromium for the module's tests."""
    session = open_browser(*chromium)
    yield session
    session.quit()


def test_a_reviewer_answers_in_the_browser(browser: Any, tmp_path: Path) -> None:
    """Empty and out-of-bounds answers are stopped by the browser; a chosen size and count end the run."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with SqliteStore(tmp_path / "runs.db") as store:
        shop().run("order", store=store, run_id="o-1")
    app = inbox_app(lambda: open_store(url), shop(), reviewers=REVIEWERS, poll_seconds=0.5)
    with serving(app) as base:
        browser.delete_all_cookies()
        browser.get(base + "/")
        browser.find_element(By.ID, "reviewer").send_keys("ana")
        browser.find_element(By.ID, "token").send_keys(TOKEN)
        browser.find_element(By.ID, "sign-in").click()
        _wait(browser, lambda b: b.current_url == base + "/")
        browser.get(base + "/runs/o-1")
        count = browser.find_element(By.ID, "answer-count")
        browser.find_element(By.ID, "answer").click()  # nothing filled: the required count stops the form
        assert browser.execute_script("return arguments[0].validity.valueMissing", count)
        count.send_keys("9")
        browser.find_element(By.ID, "answer").click()
        assert browser.execute_script("return arguments[0].validity.rangeOverflow", count)
        assert browser.current_url == base + "/runs/o-1"  # nothing was sent
        with open_store(url) as store:
            assert store.history("o-1") == []
        count.clear()
        count.send_keys("3")
        Select(browser.find_element(By.ID, "answer-size")).select_by_value("L")
        browser.find_element(By.ID, "answer").click()
        notice = _wait(browser, lambda b: b.find_elements(By.ID, "notice"))[0]
        assert "You answered the call" in notice.text and "Answered" in notice.text
        assert policy_violations(browser) == []
    with open_store(url) as store:
        (decision,) = store.history("o-1")
        assert (decision.decision, decision.reviewer) == ("answer", "ana")
        assert store.load("o-1").state.observations[0].content == {"size": "L", "count": 3, "gift": False}
