"""The run page's answer form over real HTTP: generated from the result schema, checked again by the server."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent_fsm import Agent, ScriptedModel, ToolSpec, allow_all, answer_message, tool_call_message
from agent_fsm.store import SqliteStore, open_store
from agent_fsm.web import Reviewers, inbox_app
from tests.test_web_inbox import _csrf, _signed_in
from tests.web_server import serving

REVIEWERS = Reviewers.parse("ana:ana-token-0123456789")
ORDER = {
    "type": "object",
    "properties": {
        "size": {"enum": ["S", "M", "L"]},
        "count": {"type": "integer", "minimum": 1, "maximum": 5},
        "gift": {"type": "boolean"},
        "note": {"type": "string"},
    },
    "required": ["size", "count"],
    "additionalProperties": False,
}


def shop() -> Agent:
    """A shop whose ``ask`` tool a person answers."""
    script = [tool_call_message("q1", "ask", {"question": "Which size, how many?"}), answer_message("Ordered.")]
    tools = {"ask": ToolSpec.person("Ask the customer.", {"question": str}, result=ORDER)}
    return Agent(ScriptedModel(script), tools, gate=allow_all, name="shop")


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    """A SQLite store with run o-1 paused on the shop's question."""
    with SqliteStore(tmp_path / "runs.db") as store:
        shop().run("order", store=store, run_id="o-1")
    return f"sqlite:///{tmp_path / 'runs.db'}"


@pytest.fixture
def base(store_url: str) -> Iterator[str]:
    with serving(inbox_app(lambda: open_store(store_url), shop(), reviewers=REVIEWERS, wait=10)) as url:
        yield url


def _form(client: httpx.Client) -> tuple[str, dict[str, str]]:
    page = client.get("/runs/o-1")
    pause = re.search(r'name="pause_id" value="([^"]+)"', page.text)
    assert page.status_code == 200 and pause
    return page.text, {"csrf": _csrf(page.text), "pause_id": pause.group(1), "action": "answer"}


def test_the_form_is_generated_from_the_result_schema(base: str) -> None:
    """A choice for the enum, a bounded whole-number box, a check box, a text box; required marked; no approve."""
    ana = _signed_in(base)
    page, _ = _form(ana)
    assert re.search(r'<select name="answer.size" id="answer-size" required>', page)
    assert all(f'<option value="{size}">{size}</option>' in page for size in "SML")
    assert re.search(r'type="number" name="answer.count" id="answer-count" step="1" min="1" max="5" required', page)
    assert 'type="checkbox" name="answer.gift"' in page and 'type="text" name="answer.note" id="answer-note">' in page
    assert 'id="approve"' not in page and 'id="edit"' not in page and 'id="reject"' in page


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"answer.size": "XL", "answer.count": "2"}, "is not one of"),
        ({"answer.size": "M", "answer.count": "9"}, "maximum"),
        ({"answer.size": "M", "answer.count": "two"}, "not a number"),
        ({"answer.size": "M"}, "not a number"),
    ],
)
def test_the_server_checks_the_answer_again(base: str, store_url: str, fields: dict[str, Any], said: str) -> None:
    """A form that skips the browser's checks is refused with 422 and decides nothing."""
    ana = _signed_in(base)
    _, form = _form(ana)
    refused = ana.post("/runs/o-1/decide", data={**form, **fields})
    assert refused.status_code == 422 and said in refused.text
    with open_store(store_url) as store:
        assert store.load("o-1").status == "paused" and store.history("o-1") == []


def test_a_valid_answer_is_recorded_and_the_run_goes_on(base: str, store_url: str) -> None:
    """The typed answer is the call's result, recorded under the signed-in reviewer; the run ends answered."""
    ana = _signed_in(base)
    _, form = _form(ana)
    done = ana.post("/runs/o-1/decide", data={**form, "answer.size": "M", "answer.count": "2", "answer.gift": "on"})
    assert done.status_code == 303 and done.headers["location"] == "/runs/o-1?decided=answer"
    with open_store(store_url) as store:
        (decision,) = store.history("o-1")
        assert (decision.reviewer, decision.decision) == ("ana", "answer")
        stored = store.load("o-1")
        assert stored.status == "ended"
        assert stored.state.observations[0].content == {"size": "M", "count": 2, "gift": True}


def test_a_whole_reply_is_reviewed_from_the_run_page(tmp_path: Path) -> None:
    """The run page lists the reply's calls that need a person; a partial review is a 422, a whole one decides."""
    from tests.test_people_reply import make_agent

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    written: list[int] = []
    with SqliteStore(tmp_path / "runs.db") as store:
        make_agent(written).run("work", store=store, run_id="o-1")
    with serving(inbox_app(lambda: open_store(url), make_agent(written), reviewers=REVIEWERS, wait=10)) as base:
        ana = _signed_in(base)
        page, form = _form(ana)
        assert 'id="review"' in page and all(f"<code>{c}</code>" in page for c in ("w1", "q1", "w2"))
        form["action"] = "reply"
        partial = ana.post("/runs/o-1/decide", data={**form, "reply": '{"w1": {"approve": true}}'})
        assert partial.status_code == 422 and "undecided" in partial.text and written == []
        whole = '{"w1": {"approve": true}, "q1": {"answer": 2}, "w2": {"reject": "once"}}'
        done = ana.post("/runs/o-1/decide", data={**form, "reply": whole})
        assert done.status_code == 303 and done.headers["location"] == "/runs/o-1?decided=reply"
    assert written == [1]
    with open_store(url) as store:
        (decision,) = store.history("o-1")
        assert (decision.decision, decision.reviewer) == ("reply", "ana")
        assert store.load("o-1").status == "ended"


def test_a_nested_reply_is_reviewed_whole_from_the_run_page(tmp_path: Path) -> None:
    """A pause inside a nested agent: the page lists its calls as ``n1/...`` with the lead's; one form decides all."""
    import json

    from tests.test_people_reply_nested import make_lead

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    paid: list[int] = []
    written: list[int] = []
    with SqliteStore(tmp_path / "runs.db") as store:
        make_lead(paid, written).run("settle", store=store, run_id="o-1")
    with serving(inbox_app(lambda: open_store(url), make_lead(paid, written), reviewers=REVIEWERS, wait=10)) as base:
        ana = _signed_in(base)
        page, form = _form(ana)
        assert 'id="review"' in page and all(f"<code>{c}</code>" in page for c in ("n1/c1", "n1/c2", "n1/q3", "w2"))
        whole = {
            "n1/c1": {"arguments": {"n": 5}},
            "n1/c2": {"reject": "once"},
            "n1/q3": {"answer": 3},
            "w2": {"approve": True},
        }
        done = ana.post("/runs/o-1/decide", data={**form, "action": "reply", "reply": json.dumps(whole)})
        assert done.status_code == 303, done.text[:300]
    assert paid == [5] and written == [7]
    with open_store(url) as store:
        assert store.load("o-1").summary.stop == "answered"
