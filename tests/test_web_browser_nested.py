"""Nested runs in a real browser (headless chromium): the static viewer lays each level out inside the one above."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_fsm.web import render_view
from tests.browser import full_page_screenshot, open_browser, policy_violations
from tests.nested_world import desk_agent


@pytest.fixture(scope="module")
def browser(chromium: tuple[str, str]) -> Iterator[Any]:
    session = open_browser(*chromium)
    yield session
    session.quit()


def test_the_viewer_shows_each_level_inside_the_one_above_and_the_blocked_call_innermost(
    browser: Any, tmp_path: Path
) -> None:
    """Two nested sections, the second drawn inside the first; the marked call is visible inside the innermost."""
    page = tmp_path / "nested.html"
    page.write_text(render_view(desk_agent().run("refund A1").state), encoding="utf-8")
    browser.get(page.as_uri())
    boxes = browser.execute_script(
        """
        const box = (e) => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
        const sections = Array.from(document.querySelectorAll('section.nested'));
        const blocked = document.getElementById('blocked-call');
        return {
          sections: sections.map((s) => ({
            calls: s.dataset.calls, box: box(s), visible: s.offsetParent !== null,
            agent: s.querySelector('.nested-agent').innerText,
          })),
          blocked: box(blocked),
          blockedIn: blocked.closest('section.nested').dataset.calls,
          blockedText: blocked.innerText,
        };
        """
    )
    outer, inner = boxes["sections"]
    assert [outer["agent"], inner["agent"]] == ["triage", "refunds"]
    assert outer["visible"] and inner["visible"]
    inside = lambda a, b: a[0] > b[0] and a[1] > b[1] and a[2] <= b[2] and a[3] < b[3]
    assert inside(inner["box"], outer["box"])  # indented and enclosed
    assert boxes["blockedIn"] == "d1/t1" and inside(boxes["blocked"], inner["box"])
    assert "refund" in boxes["blockedText"] and "the run waits on this call" in boxes["blockedText"]
    assert policy_violations(browser) == []
    shot = full_page_screenshot(browser, tmp_path / "nested.png")
    assert shot.stat().st_size > 10_000
