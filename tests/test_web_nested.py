"""
Nested runs as people see them: the static viewer and the inbox's run page show each child run inside the call
that ran it (agent, call path, transcript, ending), at any depth, with the call a nested pause waits on marked.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from agent_fsm import RunState
from agent_fsm.cli import app as cli
from agent_fsm.store import SqliteStore, open_store
from agent_fsm.web import Reviewers, inbox_app, render_view, timeline_of
from tests.nested_world import desk_agent
from tests.web_server import serving

runner = CliRunner()
TOKEN = "ana-token-0123456789"
REVIEWERS = Reviewers.parse(f"ana:{TOKEN}")


class _Tree(HTMLParser):
    """The nested sections of a page: the call path of each, what sits inside which, and where the blocked call is."""

    def __init__(self) -> None:
        super().__init__()
        self.stack: list[str | None] = []  # one entry per open <section>: its data-calls, None if not nested
        self.sections: list[tuple[str, ...]] = []  # each nested section, as the data-calls of it and its ancestors
        self.blocked: list[tuple[str, ...]] = []  # the nested sections around each element marked blocked-call
        self.agents: list[tuple[tuple[str, ...], str]] = []
        self._agent = False

    def _open(self) -> tuple[str, ...]:
        return tuple(c for c in self.stack if c is not None)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        classes = (found.get("class") or "").split()
        if tag == "section":
            self.stack.append(found.get("data-calls") if "nested" in classes else None)
            if "nested" in classes:
                self.sections.append(self._open())
        if found.get("id") == "blocked-call":
            self.blocked.append(self._open())
        self._agent = "nested-agent" in classes

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self._agent:
            self.agents.append((self._open(), data))
            self._agent = False


def _tree(page: str) -> _Tree:
    tree = _Tree()
    tree.feed(page)
    assert tree.stack == []
    return tree


def test_the_timeline_nests_each_child_under_its_call_and_marks_the_blocked_call() -> None:
    """Two levels down: desk's d1 ran triage, whose t1 ran refunds, whose r1 waits; only r1 is marked."""
    result = desk_agent().run("refund A1")
    assert result.blocked_path == ("d1", "t1", "r1")
    top = timeline_of(result.state)
    assert top.blocked_path == result.blocked_path
    (d1,) = top.turns[0].calls
    assert d1.nested is not None and not d1.blocked and d1.verdict == "waiting"
    triage = d1.nested
    assert (triage.agent, triage.calls, triage.blocked) == ("triage", ("d1",), True)
    assert triage.run.run_id == f"{result.state.run_id}/d1"
    (t1,) = triage.run.turns[0].calls
    assert t1.nested is not None and not t1.blocked
    refunds = t1.nested
    assert (refunds.agent, refunds.calls, refunds.run.stop) == ("refunds", ("d1", "t1"), "awaiting_approval")
    (r1,) = refunds.run.turns[0].calls
    assert r1.blocked and r1.name == "refund" and '"cents": 9000' in r1.arguments
    approved = desk_agent().resume(result.state, approve=True)
    after = timeline_of(approved.state)
    inner = after.turns[0].calls[0].nested.run.turns[0].calls[0].nested  # type: ignore[union-attr]
    assert after.stop == "answered" and after.blocked_path == ()
    assert inner is not None and inner.run.stop == "answered" and not inner.blocked
    assert [t.thoughts for t in inner.run.turns] == [None, "refunded 9000"]
    assert not any(c.blocked for t in inner.run.turns for c in t.calls)


def test_view_draws_the_tree_as_nested_sections(tmp_path: Path) -> None:
    """agent-fsm view: a section per nested run inside its parent's, the blocked call inside the innermost one."""
    paused = desk_agent().run("refund A1").state
    trace = tmp_path / "run.json"
    trace.write_text(paused.to_json(), encoding="utf-8")
    result = runner.invoke(cli, ["view", str(trace), "-o", str(tmp_path / "run.html")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "run.html").read_text(encoding="utf-8")
    tree = _tree(page)
    assert tree.sections == [("d1",), ("d1", "d1/t1")]
    assert tree.agents == [(("d1",), "triage"), (("d1", "d1/t1"), "refunds")]
    assert tree.blocked == [("d1", "d1/t1")]
    assert page.count("awaiting_approval") >= 3  # each level's ending
    assert f"{paused.run_id}/d1/t1" in page  # the innermost run's id


def test_a_handoff_shows_the_agent_that_took_over() -> None:
    """The child a handoff ran is a nested section under the handing call, with its answer as the ending."""
    from agent_fsm import Agent, ScriptedModel, answer_message, tool_call_message

    billing = Agent(ScriptedModel([answer_message("billing: <b>fine</b>")]), {}, name="billing")
    front = Agent(ScriptedModel([tool_call_message("h1", "to_billing", {})]), {"to_billing": billing.handoff()})
    ended = front.run("is my invoice ok?")
    assert ended.stop.value == "handed_over"
    page = render_view(ended.state)
    tree = _tree(page)
    assert tree.agents == [(("h1",), "billing")]
    assert "billing: &lt;b&gt;fine&lt;/b&gt;" in page and "<b>fine</b>" not in page
    assert tree.blocked == []


@pytest.fixture
def nested_store(tmp_path: Path) -> Iterator[str]:
    """A SQLite store with run nest-1 paused two levels down."""
    with SqliteStore(tmp_path / "runs.db") as store:
        result = desk_agent().run("refund A1", store=store, run_id="nest-1")
        assert result.blocked_path == ("d1", "t1", "r1")
    yield f"sqlite:///{tmp_path / 'runs.db'}"


def _csrf(text: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', text)
    assert found, text[:500]
    return found.group(1)


def test_the_inbox_run_page_shows_the_tree_and_decides_the_nested_call(nested_store: str) -> None:
    """Over real HTTP: the decision card names the innermost call and its path; approving it runs that call."""
    served = inbox_app(lambda: open_store(nested_store), desk_agent(), reviewers=REVIEWERS, wait=10)
    with serving(served) as base, httpx.Client(base_url=base, timeout=20) as client:
        form = client.get("/login")
        signed = client.post("/login", data={"csrf": _csrf(form.text), "reviewer": "ana", "token": TOKEN})
        assert signed.status_code == 303
        page = client.get("/runs/nest-1")
        assert page.status_code == 200
        text = page.text
        assert re.search(r'id="blocked-name">refund<', text)
        assert re.search(r'id="blocked-path">.*<code>d1 / t1 / r1</code>', text)
        assert re.search(r'id="blocked-arguments">[^<]*&#34;cents&#34;: 9000', text)
        assert 'id="edit-form"' in text and "nested agent" in text  # an edit is of the innermost call
        tree = _tree(text)
        assert tree.sections == [("d1",), ("d1", "d1/t1")]
        assert tree.blocked == [("d1", "d1/t1")]
        pause = re.search(r'name="pause_id" value="([^"]+)"', text)
        assert pause
        decision = {"csrf": _csrf(text), "pause_id": pause.group(1), "action": "approve"}
        decided = client.post("/runs/nest-1/decide", data=decision)
        assert decided.status_code == 303, decided.text[:500]
        after = client.get("/runs/nest-1").text
    assert 'id="decide"' not in after and 'id="blocked-call"' not in after
    assert _tree(after).sections == [("d1",), ("d1", "d1/t1")]
    with SqliteStore(Path(nested_store.removeprefix("sqlite:///"))) as store:
        state: RunState = store.load("nest-1").state
    assert state.stop is not None and state.stop.value == "answered"
    refund = state.children["d1"].children["t1"].observations[0]
    assert refund.content == {"refunded": 9000, "order": "A1"}


def test_the_inbox_edits_the_nested_call_under_the_nested_agents_gate(nested_store: str) -> None:
    """An edited approval of a call two levels down runs the edited call once, as the nested agent's gate allows."""
    served = inbox_app(lambda: open_store(nested_store), desk_agent(), reviewers=REVIEWERS, wait=10)
    with serving(served) as base, httpx.Client(base_url=base, timeout=20) as client:
        form = client.get("/login")
        client.post("/login", data={"csrf": _csrf(form.text), "reviewer": "ana", "token": TOKEN})
        text = client.get("/runs/nest-1").text
        pause = re.search(r'name="pause_id" value="([^"]+)"', text)
        assert pause
        edit = {"csrf": _csrf(text), "pause_id": pause.group(1), "action": "edit"}
        malformed = client.post("/runs/nest-1/decide", data={**edit, "arguments": '{"order": "A1"}'})
        assert malformed.status_code == 422  # the nested tool's contract refuses it; nothing is decided
        edited = client.post("/runs/nest-1/decide", data={**edit, "arguments": '{"order": "A1", "cents": 4000}'})
        assert edited.status_code == 303, edited.text[:500]
    with SqliteStore(Path(nested_store.removeprefix("sqlite:///"))) as store:
        state: RunState = store.load("nest-1").state
    assert state.stop is not None and state.stop.value == "answered"
    refunds = state.children["d1"].children["t1"]
    assert [o.content for o in refunds.observations] == [{"refunded": 4000, "order": "A1"}]
