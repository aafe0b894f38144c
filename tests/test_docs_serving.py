"""docs/serving.md: its A2A example runs against a live server, and its mapping table names every stop."""

from __future__ import annotations

import asyncio
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agent_fsm import Agent, Stop
from agent_fsm.serve import Clients, serve_app
from agent_fsm.store import open_store
from tests.ledger_world import ledger_agent
from tests.test_serve_sessions import Counting
from tests.web_server import serving

DOC = Path(__file__).resolve().parents[1] / "docs" / "serving.md"
TOKEN = "ui-token-0123456789abcdef"


def test_the_a2a_example_runs_against_a_live_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The page's A2A client example, pointed at a live server, reaches the pause of a gated payment."""
    pytest.importorskip("a2a.client")
    [block] = [b for b in _blocks() if "a2a.client" in b]
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    app = serve_app(
        ledger_agent(tmp_path / "l.jsonl"), lambda: open_store(url), clients=Clients.parse(f"ui:{TOKEN}:start+read")
    )
    with serving(app) as base:
        source = block.replace("http://127.0.0.1:8766", base).replace(
            "Pay invoice BIG-1", "Pay and send a receipt for: BIG-1"
        )
        namespace: dict[str, Any] = {"token": TOKEN}
        exec(compile("async def example():\n" + textwrap.indent(source, "    "), str(DOC), "exec"), namespace)
        asyncio.run(namespace["example"]())
    assert "TASK_STATE_INPUT_REQUIRED" in capsys.readouterr().out


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_the_session_example_continues_its_conversation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's session example runs as shown, and its second run sees the first exchange."""
    [block] = [b for b in _blocks() if "Session(" in b]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"agent": Agent(Counting(), {})}
    exec(compile(block, str(DOC), "exec"), namespace)
    assert namespace["chat"].run_ids() == ["ticket-42~1", "ticket-42~2"]
    assert namespace["chat"].store.load("ticket-42~2").state.answer == "2 turns"


def test_the_mapping_table_names_every_stop() -> None:
    """Each Stop appears in the table of how each protocol says a run's ending."""
    table = DOC.read_text().split("## How each protocol says a run's ending", 1)[1].split("\n## ", 1)[0]
    missing = [stop.value for stop in Stop if f"`{stop.value}`" not in table]
    assert missing == []
