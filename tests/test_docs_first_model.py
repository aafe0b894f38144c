"""
docs/first-model.md: its examples run, against a stand-in server on loopback and, when one is configured, a real one.

The stand-in replies with exactly the moves the page shows, so the transcript
printed on the page is checked line by line against what the code prints.
Set ``AGENT_FSM_LLAMA_SERVER_URL`` (and ``AGENT_FSM_LLAMA_MODEL`` if the server
wants a name) to run the same code against a real ``llama-server``: whatever
the model does, the run ends typed and the gate holds.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from agent_fsm import Stop
from tests.providers.loopback import LoopbackServer, openai_answer, openai_tool_call

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "first-model.md"
URL = "http://127.0.0.1:8080/v1"
MODEL = 'model="qwen2.5-7b-instruct"'
REAL = os.environ.get("AGENT_FSM_LLAMA_SERVER_URL")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.S)


def _run_page(url: str, model: str | None = None) -> dict:
    """The page's Python blocks, in order, in one namespace, with the server's URL (and model) put in."""
    namespace: dict = {"__name__": "docs_first_model"}
    for block in _blocks("python"):
        assert URL in block or "format_result" in block, "a block talks to no server and prints nothing"
        code = block.replace(URL, url)
        if model is not None:
            code = code.replace(MODEL, f"model={model!r}")
        exec(compile(code, str(DOC), "exec"), namespace)  # the page's own code, run as a reader would
    return namespace


@pytest.fixture
def hermetic(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's own provider settings or proxy must not reach the stand-in."""
    for name in ("OPENAI_BASE_URL", "OPENAI_MODEL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def _moves() -> list:
    """The replies of the run the page shows: lookup, malformed refund, over-reach, right refund, answer."""
    refund = '{{"order_id": "A-17", "amount_cents": {}}}'
    return [
        openai_tool_call("call_1", "lookup_order", '{"order_id": "A-17"}'),
        openai_tool_call("call_2", "refund_order", refund.format('"all of it"')),
        openai_tool_call("call_3", "refund_order", refund.format(9999)),
        openai_tool_call("call_4", "refund_order", refund.format(4999)),
        openai_answer("Order A-17 is refunded: 4999 cents, the amount you paid."),
    ]


def test_the_page_prints_the_transcript_it_shows(hermetic: None, capsys: pytest.CaptureFixture[str]) -> None:
    """Against a stand-in replying with the page's moves, every line of the page's transcript is printed."""
    server = LoopbackServer().start()
    try:
        server.script(*_moves())
        namespace = _run_page(server.url + "/v1")
    finally:
        server.stop()
    printed = capsys.readouterr().out
    result = namespace["result"]
    assert result.stop is Stop.ANSWERED
    assert [o.kind for o in result.state.observations] == ["result", "invalid", "denied", "result"]
    assert namespace["desk"].effects == [{"order_id": "A-17", "refunded_cents": 4999}]
    assert server.requests[0].body["model"] == "qwen2.5-7b-instruct"
    [shown] = _blocks("text")
    for line in shown.strip().splitlines():
        if line.strip():
            assert line in printed, line


def test_the_spec_command_names_a_spec() -> None:
    """The page's spec command runs a spec that exists, against the server the page starts."""
    [command] = [b for b in _blocks("sh") if "agent-fsm run" in b]
    spec = re.search(r"agent-fsm run (specs/\S+)", command)
    assert spec is not None and (ROOT / spec.group(1)).exists()
    assert f"--base-url {URL}" in command


@pytest.mark.skipif(not REAL, reason="set AGENT_FSM_LLAMA_SERVER_URL to a llama-server's /v1 URL")
def test_the_page_against_a_real_server(capsys: pytest.CaptureFixture[str]) -> None:
    """Against a real model the run ends typed, never on an HTTP 500, and no refund above the gate's limit lands."""
    namespace = _run_page(str(REAL), os.environ.get("AGENT_FSM_LLAMA_MODEL", "local"))
    result = namespace["result"]
    assert isinstance(result.stop, Stop)
    assert result.state.fault is None or result.state.fault.status != 500, result.reason
    assert all(e["refunded_cents"] <= 5000 for e in namespace["desk"].effects), json.dumps(namespace["desk"].effects)
    assert "stop=" in capsys.readouterr().out
