"""docs/mcp.md: every Python block runs as written, in order, against the real mcp-server-git and mcp-server-time."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_fsm.cli import app
from tests.test_mcp import _node_server

DOC = Path(__file__).resolve().parent.parent / "docs" / "mcp.md"


def test_code_blocks_run_as_written() -> None:
    """The git agent (its commit approved through the store), combine and prefixes, progress, async, elicitation."""
    pytest.importorskip("mcp_server_git", reason="mcp-server-git is in the test extra: pip install -e '.[test]'")
    pytest.importorskip("mcp_server_time", reason="mcp-server-time is in the test extra: pip install -e '.[test]'")
    _node_server()  # the elicitation example runs the npm server-everything
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 5
    namespace: dict[str, object] = {"__name__": "docs_mcp"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)


def test_the_table_is_the_code() -> None:
    """The annotation table on the page says what agent_fsm.mcp.treatment does."""
    from mcp_types import ToolAnnotations

    from agent_fsm.mcp import treatment

    row = r"^\| `?([a-z ]+?)`?(?: or absent)? \| `?([a-z ]+?)`?(?: or absent)? \| (yes|no) \|"
    rows = re.findall(row, DOC.read_text(), re.M)
    assert len(rows) == 3
    for read_only, idempotent, effectful in rows:
        hints = ToolAnnotations(read_only_hint=read_only == "true", idempotent_hint=idempotent == "true")
        assert treatment(hints)[0] is (effectful == "yes")
    assert treatment(None) == (True, False)


def test_the_command_shown_exists() -> None:
    """``agent-fsm mcp list`` is a command, with the options the page names."""
    helped = CliRunner().invoke(app, ["mcp", "list", "--help"])
    assert helped.exit_code == 0 and "--url" in helped.output and "--header" in helped.output
