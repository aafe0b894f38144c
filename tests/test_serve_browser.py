"""
docs/serving.md's page in a real browser (Debian's headless chromium, driven by Selenium) against a live server.

The page is the HTML block of the docs, served as it is from its own origin on
127.0.0.1 (only the API's address put in), the API allowing that origin. It
starts a run, shows its calls as they come while the run still goes, shows the
pause, and a click on Approve decides it; the run goes on to its answer in the
same page, and the ledger has the payment once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

from agent_fsm.serve import Clients, serve_app
from agent_fsm.store import open_store
from tests.browser import open_browser, wait_for
from tests.ledger_world import read_ledger, task_for
from tests.serve_world import agent
from tests.web_server import serving

DOC = Path(__file__).resolve().parents[1] / "docs" / "serving.md"
TOKEN = "page-token-0123456789abcdef"


@pytest.fixture
def browser(chromium: tuple[str, str]) -> Iterator[Any]:
    """A headless chromium."""
    session = open_browser(*chromium)
    yield session
    session.quit()


def _page() -> str:
    [page] = [b for b in re.findall(r"```html\n(.*?)```", DOC.read_text(), flags=re.DOTALL) if "/events" in b]
    return page


def _texts(browser: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    return [item.text for item in browser.find_elements(By.CSS_SELECTOR, "#events li")]


def test_the_docs_page_streams_a_run_shows_its_pause_and_decides_it(
    tmp_path: Path, browser: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Calls shown while the run goes, the pause asked, Approve clicked: the run ends answered, paid once."""
    from selenium.webdriver.common.by import By

    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv("AGENT_FSM_LEDGER", str(ledger))
    monkeypatch.setenv("AGENT_FSM_SLOW", "0.3")  # a run long enough to be seen going
    served: dict[str, str] = {}  # the page, once the API's address is known

    async def page(request: Any) -> HTMLResponse:
        return HTMLResponse(served["page"])

    with serving(Starlette(routes=[Route("/", page)])) as site:
        url = f"sqlite:///{tmp_path / 'runs.db'}"
        app = serve_app(
            agent(),
            lambda: open_store(url),
            clients=Clients.parse(f"page:{TOKEN}:start+read+decide"),
            cors_origins=(site,),
        )
        with serving(app) as api:
            served["page"] = _page().replace("http://127.0.0.1:8766", api)
            browser.get(site + "/")
            browser.find_element(By.ID, "token").send_keys(TOKEN)
            browser.find_element(By.ID, "task").send_keys(task_for(["A-1", "BIG-1"]))
            browser.find_element(By.TAG_NAME, "button").click()
            wait_for(browser, lambda b: any(t.startswith("calls lookup") for t in _texts(b)))
            run_id = browser.find_element(By.ID, "run").text
            read = httpx.get(f"{api}/runs/{run_id}", headers={"authorization": f"Bearer {TOKEN}"}).json()
            assert read["status"] == "running"  # shown as it came, the run still going
            asks = wait_for(
                browser, lambda b: b.find_element(By.ID, "pause").is_displayed() and b.find_element(By.ID, "asks")
            )
            assert asks.text.startswith("pay waits for you: large invoices need a person")
            assert not [e for e in read_ledger(ledger) if e["event"] == "effect" and e["args"]["invoice"] == "BIG-1"]
            browser.find_element(By.ID, "approve").click()
            wait_for(browser, lambda b: any(t.startswith("ended:") for t in _texts(b)))
            shown = _texts(browser)
    assert shown[-1] == "ended: Handled 2 invoices." and "page decided: approve" in shown
    assert [t.split(" ")[1] for t in shown if t.startswith("calls")] == ["lookup", "pay", "send_receipt"] * 2
    paid = [e["args"]["invoice"] for e in read_ledger(ledger) if e["event"] == "effect" and e["tool"] == "pay"]
    assert paid == ["A-1", "BIG-1"]
    logged = browser.get_log("browser")
    severe = [e["message"] for e in logged if e["level"] == "SEVERE" and "favicon.ico" not in e["message"]]
    assert severe == []
