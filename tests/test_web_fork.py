"""The run page of a forked run, served for real on 127.0.0.1: where it left its parent, and a parent's forks."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import markupsafe
import pytest

from agent_fsm.store import SqliteStore, fork, open_store
from agent_fsm.web import Reviewers, inbox_app
from tests.web_server import serving
from tests.web_world import start, world

TOKEN = "ana-token-0123456789"
REVIEWERS = Reviewers.parse(f"ana:{TOKEN}")
HOSTILE_ID = '<img src=x onerror="alert(1)">'


@pytest.fixture
def store_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """ticket-1 paused on a refund, and two forks of its pause: one named in plain words, one in hostile markup."""
    monkeypatch.setenv("AGENT_FSM_REFUNDS", str(tmp_path / "refunds.jsonl"))
    with SqliteStore(tmp_path / "runs.db") as store:
        start(store, "ticket-1")
        pause = store.checkpoints("ticket-1")[-1].point
        fork(store, "ticket-1", at=pause, new_run_id="ticket-1-retry")
        fork(store, "ticket-1", at=0, new_run_id=HOSTILE_ID)
    return f"sqlite:///{tmp_path / 'runs.db'}"


@pytest.fixture
def client(store_url: str) -> Iterator[httpx.Client]:
    """A reviewer signed in to the inbox."""
    with serving(inbox_app(lambda: open_store(store_url), world(), reviewers=REVIEWERS, wait=10)) as base:
        client = httpx.Client(base_url=base, timeout=20)
        form = client.get("/login")
        csrf = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert csrf is not None
        done = client.post("/login", data={"csrf": csrf.group(1), "reviewer": "ana", "token": TOKEN})
        assert done.status_code == 303
        yield client


def test_a_forked_run_links_to_its_parent_and_the_point(client: httpx.Client, store_url: str) -> None:
    """The fork's page names the parent (a link to its page) and the checkpoint; its own pause can be decided."""
    page = client.get("/runs/ticket-1-retry")
    assert page.status_code == 200
    mark = re.search(r'<p class="notice fork" id="fork-mark">(.*?)</p>', page.text, re.S)
    assert mark is not None
    with SqliteStore(store_url.removeprefix("sqlite:///")) as store:
        point = store.checkpoints("ticket-1")[-1].point
    assert 'href="/runs/ticket-1" id="fork-parent">ticket-1</a>' in mark.group(1)
    assert f'<strong id="fork-point">{point}</strong>' in mark.group(1)
    assert 'name="pause_id" value="ticket-1-retry.1"' in page.text  # the fork's own pause, decided on its own page
    assert client.get("/runs/ticket-1").status_code == 200


def test_a_parent_lists_its_forks_and_a_run_that_is_no_fork_shows_no_mark(client: httpx.Client) -> None:
    """The parent's page links each fork with its point; it carries no fork mark of its own."""
    page = client.get("/runs/ticket-1").text
    assert 'id="fork-mark"' not in page
    forks = re.search(r'<p class="muted" id="forks">(.*?)</p>', page, re.S)
    assert forks is not None
    assert '<a href="/runs/ticket-1-retry">ticket-1-retry</a>' in forks.group(1)
    assert HOSTILE_ID not in page and str(markupsafe.escape(HOSTILE_ID)) in page  # an id is text, never markup


def test_a_hostile_run_id_in_a_fork_mark_stays_text(client: httpx.Client) -> None:
    """A fork whose own id is markup has a page that shows it escaped, its parent link intact."""
    page = client.get("/runs/" + httpx.URL("/").copy_with(path="/" + HOSTILE_ID).raw_path.decode()[1:])
    assert page.status_code == 200
    assert HOSTILE_ID not in page.text and 'id="fork-parent">ticket-1</a>' in page.text
