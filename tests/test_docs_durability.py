"""docs/durability.md: every Python block runs as written, in order, and every command it shows exists."""

from __future__ import annotations

import os
import re
from pathlib import Path

from typer.testing import CliRunner

from agent_fsm.cli import app

DOC = Path(__file__).resolve().parent.parent / "docs" / "durability.md"


def test_code_blocks_run_as_written(capsys, monkeypatch) -> None:
    """The examples (a stored run, the inbox, a SIGKILLed process recovered, forks) run in one namespace."""
    monkeypatch.setenv("AGENT_FSM_REFUNDS", os.environ.get("AGENT_FSM_REFUNDS", ""))  # restored afterwards
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 6
    namespace: dict[str, object] = {"__name__": "docs_durability"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert "is ended, not waiting for a decision" in capsys.readouterr().out
    assert namespace["recovered"].interrupted == "call_2"  # type: ignore[attr-defined]
    assert namespace["later"].state.run_id == "inv-1-later"  # type: ignore[attr-defined]
    assert namespace["refunded"] == [("O-1", 900)]


def test_the_commands_shown_exist() -> None:
    """Each ``agent-fsm runs`` subcommand on the page is one the CLI has, with the options shown."""
    shown = re.findall(r"^agent-fsm runs (\w+)(.*?)(?:\s+#.*)?$", DOC.read_text(), flags=re.MULTILINE)
    assert {name for name, _ in shown} == {"list", "show", "approve", "reject", "cancel", "recover", "export", "fork"}
    runner = CliRunner()
    for name, rest in shown:
        helped = runner.invoke(app, ["runs", name, "--help"])
        assert helped.exit_code == 0, helped.output
        for option in re.findall(r"(--[a-z-]+|-o)\b", rest.split("&&")[0]):
            assert option in helped.output, (name, option)
