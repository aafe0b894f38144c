"""A headless Debian chromium driven by Selenium through the system's chromium-driver (nothing is downloaded)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

WIDTH = 1280
TIMEOUT = 10  # seconds any wait in the browser tests may take


def open_browser(browser: str, driver: str) -> Any:
    """A headless chromium at 1280 px wide, with bounded page-load and script timeouts."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root, where chromium's sandbox cannot start
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={WIDTH},900",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        "--lang=en-US",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # console messages, CSP violations among them
    session = webdriver.Chrome(service=Service(driver), options=options)
    session.set_page_load_timeout(30)
    session.set_script_timeout(TIMEOUT)
    return session


def full_page_screenshot(session: Any, path: Path) -> Path:
    """Grow the window to the page's height (at most 4000 px) and save a PNG of it."""
    height = session.execute_script("return document.documentElement.scrollHeight")
    chrome = session.execute_script("return window.outerHeight - window.innerHeight")  # the window's own bars
    session.set_window_size(WIDTH, min(int(height) + int(chrome), 4000))
    path.parent.mkdir(parents=True, exist_ok=True)
    assert session.save_screenshot(str(path)), path
    session.set_window_size(WIDTH, 900)
    return path


def screenshot_folder(fallback: Path) -> Path:
    """Where screenshots go: ``$AGENT_FSM_SCREENSHOTS`` (docs/images to refresh the docs), else ``fallback``."""
    return Path(os.environ.get("AGENT_FSM_SCREENSHOTS") or fallback)


def policy_violations(session: Any) -> list[str]:
    """The Content-Security-Policy violations the browser reported since the last call (each read once)."""
    return [e["message"] for e in session.get_log("browser") if "Content Security Policy" in e["message"]]


def textarea_json(session: Any, element_id: str) -> Any:
    """The JSON a textarea holds, as the browser sees its value."""
    from selenium.webdriver.common.by import By

    return json.loads(session.find_element(By.ID, element_id).get_attribute("value"))


def wait_for(session: Any, condition: Any) -> Any:
    """Wait (up to ``TIMEOUT``) until ``condition(session)`` holds; its value."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # A live page swaps its <main> as the store moves: an element found just before a swap is asked again.
    waiting = WebDriverWait(session, TIMEOUT, poll_frequency=0.1, ignored_exceptions=[StaleElementReferenceException])
    return waiting.until(condition)


def sign_in(session: Any, base: str, name: str, token: str) -> None:
    """Sign in to the inbox at ``base`` as ``name`` with a fresh session, and wait for the inbox."""
    session.delete_all_cookies()
    session.get(base + "/")
    session.find_element("id", "reviewer").send_keys(name)
    session.find_element("id", "token").send_keys(token)
    session.find_element("id", "sign-in").click()
    wait_for(session, lambda s: s.current_url == base + "/")
