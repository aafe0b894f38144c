"""
The inbox over HTTP, served for real on 127.0.0.1: sign-in, CSRF, foreign origins and hosts, headers, decisions.

These run without a browser (httpx speaks to the real server); what a
person sees in one is in tests/test_web_browser.py.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from agent_fsm.cli import app as cli
from agent_fsm.store import SqliteStore, open_store
from agent_fsm.web import APP_POLICY, REVIEWERS_VARIABLE, Reviewers, ReviewersMissing, inbox_app
from tests.web_server import serving
from tests.web_world import start, world

TOKEN = "ana-token-0123456789"
REVIEWERS = Reviewers.parse(f"ana:{TOKEN} bo:bo-token-9876543210")


@pytest.fixture
def store_url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A SQLite store with ticket-1 paused on a 9999-cent refund."""
    monkeypatch.setenv("AGENT_FSM_REFUNDS", str(tmp_path / "refunds.jsonl"))
    with SqliteStore(tmp_path / "runs.db") as store:
        start(store, "ticket-1")
    return f"sqlite:///{tmp_path / 'runs.db'}"


@pytest.fixture
def base(store_url: str) -> Iterator[str]:
    """The inbox's base URL."""
    with serving(inbox_app(lambda: open_store(store_url), world(), reviewers=REVIEWERS, wait=10)) as url:
        yield url


def _csrf(text: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', text)
    assert found, text[:500]
    return found.group(1)


def _signed_in(base: str, name: str = "ana", token: str = TOKEN) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=20)
    form = client.get("/login")
    done = client.post("/login", data={"csrf": _csrf(form.text), "reviewer": name, "token": token})
    assert done.status_code == 303 and done.headers["location"] == "/", done.text[:300]
    return client


def _decision_form(client: httpx.Client, run_id: str = "ticket-1") -> dict[str, str]:
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    pause = re.search(r'name="pause_id" value="([^"]+)"', page.text)
    assert pause, "the run page shows no decision form"
    return {"csrf": _csrf(page.text), "pause_id": pause.group(1)}


def test_every_page_needs_a_signed_in_reviewer(base: str) -> None:
    """Signed out, pages send to the sign-in form, JSON says 401, and a decision is not taken."""
    with httpx.Client(base_url=base, timeout=20) as client:
        for path in ("/", "/runs/ticket-1"):
            response = client.get(path)
            assert response.status_code == 303 and response.headers["location"] == "/login"
        assert client.get("/runs/ticket-1/status.json").status_code == 401
        assert client.post("/runs/ticket-1/decide", data={"action": "approve"}).status_code == 303


def test_a_wrong_token_or_unknown_name_is_refused(base: str) -> None:
    """A wrong token, another reviewer's token or an unknown name gets 401 and no session."""
    with httpx.Client(base_url=base, timeout=20) as client:
        for name, token in (("ana", "wrong-token-000000000"), ("ana", "bo-token-9876543210"), ("eve", TOKEN)):
            form = client.get("/login")
            response = client.post("/login", data={"csrf": _csrf(form.text), "reviewer": name, "token": token})
            assert response.status_code == 401 and "do not match a reviewer" in response.text
        assert client.get("/").status_code == 303


def test_signing_in_replaces_the_session(base: str) -> None:
    """The session id a browser had before signing in is not the one after (no fixation)."""
    with httpx.Client(base_url=base, timeout=20) as client:
        form = client.get("/login")
        before = client.cookies["agent_fsm_session"]
        client.post("/login", data={"csrf": _csrf(form.text), "reviewer": "ana", "token": TOKEN})
        assert client.cookies["agent_fsm_session"] != before
        stolen = httpx.Client(base_url=base, timeout=20, cookies={"agent_fsm_session": before})
        assert stolen.get("/").status_code == 303


def test_a_form_without_this_sessions_csrf_token_decides_nothing(base: str, store_url: str) -> None:
    """No token, another session's token, a foreign Origin: 403 each time, and the run stays paused."""
    ana, bo = _signed_in(base), _signed_in(base, "bo", "bo-token-9876543210")
    form = _decision_form(ana)
    other = _decision_form(bo)["csrf"]
    attempts = [
        ({"pause_id": form["pause_id"], "action": "approve"}, {}),
        ({**form, "csrf": other, "action": "approve"}, {}),
        ({**form, "action": "approve"}, {"origin": "http://evil.example"}),
    ]
    for data, headers in attempts:
        response = ana.post("/runs/ticket-1/decide", data=data, headers=headers)
        assert response.status_code == 403, response.text[:300]
    with open_store(store_url) as store:
        assert store.load("ticket-1").status == "paused" and store.history("ticket-1") == []


def test_the_decision_is_recorded_under_the_signed_in_reviewer(base: str, store_url: str) -> None:
    """A form that claims another reviewer is decided as the session's reviewer; the run continues."""
    ana = _signed_in(base)
    form = _decision_form(ana)
    response = ana.post("/runs/ticket-1/decide", data={**form, "action": "reject", "reason": "no", "reviewer": "bo"})
    assert response.status_code == 303 and response.headers["location"] == "/runs/ticket-1?decided=reject"
    with open_store(store_url) as store:
        [decision] = store.history("ticket-1")
        assert (decision.reviewer, decision.decision, decision.reason) == ("ana", "reject", "no")
        assert store.load("ticket-1").status == "ended"
    again = ana.post("/runs/ticket-1/decide", data={**form, "action": "approve"})
    assert again.status_code == 409 and "Nothing was decided" in again.text


def test_a_wrong_pause_id_decides_nothing(base: str, store_url: str) -> None:
    """A pause id that is not the open one (a stale or forged page) is refused with 409."""
    ana = _signed_in(base)
    form = _decision_form(ana)
    response = ana.post("/runs/ticket-1/decide", data={**form, "pause_id": form["pause_id"] + "0", "action": "approve"})
    assert response.status_code == 409 and "is not open" in response.text
    with open_store(store_url) as store:
        assert store.load("ticket-1").status == "paused" and store.history("ticket-1") == []


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        ('{"order_id": "A-17", "amount_cents": "lots"}', "is not of type"),
        ('{"order_id": "A-17", "amount_cents": 4999, "extra": 1}', "invalid"),
        ("[1, 2]", "must be a JSON object"),
        ("{not json", "not JSON"),
    ],
)
def test_an_edit_that_breaks_the_contract_is_refused(base: str, store_url: str, arguments: str, said: str) -> None:
    """An edit is judged like a new proposal: invalid or not JSON, it is refused (422) and the run stays paused."""
    ana = _signed_in(base)
    response = ana.post("/runs/ticket-1/decide", data={**_decision_form(ana), "action": "edit", "arguments": arguments})
    assert response.status_code == 422 and said in response.text
    with open_store(store_url) as store:
        assert store.load("ticket-1").status == "paused" and store.history("ticket-1") == []


def test_every_response_carries_the_security_headers(base: str) -> None:
    """CSP without inline script, no framing, no sniffing, no caching, on pages, JSON and static files alike."""
    ana = _signed_in(base)
    for path in ("/", "/runs/ticket-1", "/runs/ticket-1/status.json", "/static/live.js", "/login"):
        headers = ana.get(path).headers
        assert headers["content-security-policy"] == APP_POLICY
        assert "'unsafe-inline'" not in APP_POLICY and "script-src 'self'" in APP_POLICY
        assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff"
    cookie = httpx.get(base + "/login", timeout=20).headers["set-cookie"]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()


def test_a_foreign_host_header_is_refused(base: str) -> None:
    """A request naming another host (DNS rebinding) gets 400 before any page."""
    assert httpx.get(base + "/login", headers={"host": "evil.example"}, timeout=20).status_code == 400


def test_the_status_stamp_changes_when_the_store_does(base: str, store_url: str) -> None:
    """The JSON the pages poll moves on when the run moves, whoever moves it."""
    ana = _signed_in(base)
    before = ana.get("/runs/ticket-1/status.json").json()
    assert before["status"] == "paused" and before["pause_id"]
    ana.post("/runs/ticket-1/decide", data={**_decision_form(ana), "action": "approve"})
    after = ana.get("/runs/ticket-1/status.json").json()
    assert after["status"] == "ended" and after["stamp"] != before["stamp"]


def test_reviewers_come_from_the_environment_with_no_default() -> None:
    """Unset, empty, short tokens, bad names and repeats are refused with a message that says what to set."""
    with pytest.raises(ReviewersMissing, match=REVIEWERS_VARIABLE):
        Reviewers.from_environment({})
    for text in ("ana:short", "ana", "<b>:0123456789abcdef", "ana:0123456789abcdef ana:0123456789abcdeg"):
        with pytest.raises(ReviewersMissing):
            Reviewers.parse(text)
    reviewers = Reviewers.parse("ana:0123456789abcdef,bo:fedcba9876543210")
    assert reviewers.check("ana", "0123456789abcdef") == "ana" and reviewers.check("bo", "0123456789abcdef") is None
    assert "0123456789abcdef" not in repr(reviewers)


def test_the_inbox_command_will_not_start_without_reviewers(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``agent-fsm inbox`` exits 1 naming the variable when no reviewer is configured."""
    monkeypatch.delenv(REVIEWERS_VARIABLE, raising=False)
    result = CliRunner().invoke(cli, ["inbox", "--store", store_url, "--world", "tests.web_world:world"])
    assert result.exit_code == 1 and REVIEWERS_VARIABLE in result.stderr


def test_the_inbox_needs_an_agent(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Given the world's function instead of its agent, the inbox is refused at once; so is the command."""
    with pytest.raises(TypeError, match="'agent' must be an Agent .*function"):
        inbox_app(lambda: open_store(store_url), world, reviewers=REVIEWERS)  # type: ignore[arg-type]
    monkeypatch.setenv(REVIEWERS_VARIABLE, f"ana:{TOKEN}")
    result = CliRunner().invoke(cli, ["inbox", "--store", store_url, "--world", "tests.web_world:HOSTILE_TASK"])
    assert result.exit_code == 1 and "is a str, not an Agent or a function returning one" in result.stderr


def test_the_inbox_command_serves_on_loopback(store_url: str) -> None:
    """``agent-fsm inbox`` in its own process serves the sign-in page on 127.0.0.1, and a reviewer can sign in."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, REVIEWERS_VARIABLE: f"ana:{TOKEN}"}
    command = [sys.executable, "-m", "agent_fsm.cli", "inbox", "--store", store_url, "--world", "tests.web_world:world"]
    server = subprocess.Popen([*command, "--port", str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(base + "/login", timeout=2)
                break
            except httpx.TransportError:
                assert server.poll() is None and time.monotonic() < deadline, (
                    server.stderr.read() if server.stderr else ""
                )
                time.sleep(0.1)
        ana = _signed_in(base)
        assert "ticket-1" in ana.get("/").text
        ana.close()
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_an_edit_the_gate_denies_is_refused(base: str, store_url: str) -> None:
    """A valid edit is still judged by the gate: one it denies is refused with the gate's reason, nothing decided."""
    from tests.web_world import HOSTILE_TASK

    with open_store(store_url) as store:
        start(store, "pay-1", HOSTILE_TASK)
    ana = _signed_in(base)
    edit = json.dumps({"note": "all of it", "cents": 500_000})
    response = ana.post(
        "/runs/pay-1/decide", data={**_decision_form(ana, "pay-1"), "action": "edit", "arguments": edit}
    )
    assert response.status_code == 422 and "denied: payments above 100000 cents are never made" in response.text
    with open_store(store_url) as store:
        assert store.load("pay-1").status == "paused" and store.history("pay-1") == []


def test_sessions_expire_and_stay_bounded() -> None:
    """An expired session is gone; a full table drops anonymous sessions first, then the oldest signed-in ones."""
    from agent_fsm.web import Sessions

    short = Sessions(lifetime=-1)
    assert short.get(short.sign_in(None, "ana").sid) is None
    table = Sessions(limit=3)
    kept = [table.sign_in(None, "ana"), table.sign_in(None, "bo")]
    anonymous = table.new()
    newest = table.sign_in(None, "cy")
    assert table.get(anonymous.sid) is None and all(table.get(s.sid) == s for s in [*kept, newest])
    table.sign_in(None, "dee")
    assert table.get(kept[0].sid) is None and table.get(kept[1].sid) == kept[1]
    assert not table.get(kept[1].sid).csrf_matches(None) and kept[1].csrf_matches(kept[1].csrf)


def _has_security_headers(response: httpx.Response) -> bool:
    headers = response.headers
    return (
        headers.get("content-security-policy") == APP_POLICY
        and headers.get("x-frame-options") == "DENY"
        and headers.get("x-content-type-options") == "nosniff"
    )


@pytest.mark.parametrize(
    "arguments",
    [
        '{"a": ' * 100_000 + "1" + "}" * 100_000,  # nested 100,000 deep: Python's json would recurse out
        "[" * 100_000 + "]" * 100_000,
        '{"order_id": "A-17", "amount_cents": 1' + "0" * 5000 + "}",  # 5,000 digits: more than Python converts
        '{"order_id": "A-17", "amount_cents": 1e999999}',  # a float JSON writes but Python reads as inf
    ],
    ids=["deep-object", "deep-array", "long-number", "infinite-number"],
)
def test_an_edit_json_cannot_carry_is_a_422_with_the_headers(base: str, store_url: str, arguments: str) -> None:
    """Edited arguments nested absurdly deep or holding an unconvertible number: 422, headers, nothing decided."""
    ana = _signed_in(base)
    response = ana.post("/runs/ticket-1/decide", data={**_decision_form(ana), "action": "edit", "arguments": arguments})
    assert response.status_code == 422 and _has_security_headers(response), response.text[:300]
    with open_store(store_url) as store:
        assert store.load("ticket-1").status == "paused" and store.history("ticket-1") == []


def _damage(store_url: str, column: str, value: str, run_id: str = "ticket-1") -> None:
    with open_store(store_url) as store, store._transaction() as tx:
        tx.run(f"UPDATE agent_fsm_runs SET {column} = ? WHERE run_id = ?", (value, run_id))


def test_one_unreadable_blocked_column_is_one_broken_row(base: str, store_url: str) -> None:
    """The inbox and its stamp still answer; the broken row is listed with what is wrong; other runs are shown."""
    with open_store(store_url) as store:
        start(store, "ticket-2")
    _damage(store_url, "blocked", "{not json")
    ana = _signed_in(base)
    page = ana.get("/")
    assert page.status_code == 200 and _has_security_headers(page)
    assert "ticket-2" in page.text and "ticket-1" in page.text and "cannot be read" in page.text
    stamp = ana.get("/inbox.json")
    assert stamp.status_code == 200 and stamp.json()["paused"] == 2  # both wait, the unreadable one too


@pytest.mark.parametrize(("column", "value"), [("state", "{}"), ("state", "[" * 50_000), ("intent", "nope")])
def test_an_unreadable_run_is_an_error_page_with_the_headers(
    base: str, store_url: str, column: str, value: str
) -> None:
    """The run page, its stamp and a decision on a row that cannot be read: typed answers, headers on each."""
    _damage(store_url, column, value)
    ana = _signed_in(base)
    page = ana.get("/runs/ticket-1")
    assert page.status_code == 500 and _has_security_headers(page) and "cannot be read" in page.text
    stamp = ana.get("/runs/ticket-1/status.json")
    assert stamp.status_code == 500 and _has_security_headers(stamp) and "cannot be read" in stamp.json()["error"]
    form = {"csrf": _csrf(ana.get("/").text), "pause_id": "p", "action": "approve"}
    decided = ana.post("/runs/ticket-1/decide", data=form)
    assert decided.status_code in (409, 500) and _has_security_headers(decided)


def test_an_unexpected_failure_still_carries_the_headers(store_url: str) -> None:
    """Whatever breaks inside the inbox (here the agent's gate), the 500 it answers has every security header."""

    class Broken(Exception):
        """Not a failure the engine knows: it escapes the decision."""

    def broken_gate(call: object) -> object:
        raise Broken("the policy service fell over")

    broken = world().replace(gate=broken_gate)
    app = inbox_app(lambda: open_store(store_url), broken, reviewers=REVIEWERS, wait=10)
    with serving(app) as url:
        ana = _signed_in(url)
        response = ana.post("/runs/ticket-1/decide", data={**_decision_form(ana), "action": "approve"})
        assert response.status_code == 500 and _has_security_headers(response)
        assert "Traceback" not in response.text


def test_the_run_page_draws_the_agents_machine_with_the_runs_path(base: str) -> None:
    """The run page's picture is the deciding agent's machine (no states it cannot enter), the run's path on it."""
    from agent_fsm.engine import RUN_MACHINE

    machine = world().machine()
    absent = {s.name for s in RUN_MACHINE.states} - {s.name for s in machine.states}
    assert {"ScreeningInput", "Compacting", "HandedOver"} <= absent
    ana = _signed_in(base)
    page = ana.get("/runs/ticket-1").text
    ana.close()
    svg = page[page.index("<svg") : page.index("</svg>")]
    drawn = set(re.findall(r"<title>([A-Za-z]+)</title>", svg))
    assert {"Proposing", "AwaitingApproval"} <= drawn
    assert not drawn & absent, sorted(drawn & absent)


def test_the_cancel_button_ends_the_run_cancelled_under_the_signed_in_reviewer(base: str, store_url: str) -> None:
    """The run page offers a cancel form; posting it ends the run ``cancelled``, recorded as ana's ``cancel``."""
    ana = _signed_in(base)
    page = ana.get("/runs/ticket-1").text
    assert 'id="cancel"' in page and 'name="action" value="cancel"' in page
    form = _decision_form(ana)
    response = ana.post("/runs/ticket-1/decide", data={**form, "action": "cancel", "reason": "duplicate"})
    assert response.status_code == 303 and response.headers["location"] == "/runs/ticket-1?decided=cancel"
    assert "You cancelled the run" in ana.get(response.headers["location"]).text
    with open_store(store_url) as store:
        [decision] = store.history("ticket-1")
        assert (decision.reviewer, decision.decision, decision.reason) == ("ana", "cancel", "duplicate")
        stored = store.load("ticket-1")
        assert stored.status == "ended" and stored.summary.stop == "cancelled"
    again = ana.post("/runs/ticket-1/decide", data={**form, "action": "cancel"})
    assert again.status_code == 409 and "Nothing was decided" in again.text
