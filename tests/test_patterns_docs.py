"""The workflow-pattern docs: the page's comparison is the command's output, and the page's examples run."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from agent_fsm.cli import app
from agent_fsm.examples.compare import compare_rows, format_table

ROOT = Path(__file__).resolve().parent.parent


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    following = text.find("\n## ", start + 1)
    return text[start : following if following != -1 else len(text)]


def test_readme_table_is_the_compare_commands_current_output():
    """The table pasted in docs/patterns.md equals what `agent-fsm compare` prints now."""
    section = _section((ROOT / "docs" / "patterns.md").read_text(), "## Five patterns and a plan on one task")
    table = "\n".join(line for line in section.splitlines() if line.startswith("|"))
    output = CliRunner().invoke(app, ["compare"])
    assert output.exit_code == 0, output.output
    assert table == output.output.strip()
    assert "agent-fsm compare" in section


def test_compare_command_prints_the_rows():
    """The command prints exactly the formatted comparison rows."""
    output = CliRunner().invoke(app, ["compare"])
    assert output.output.strip() == format_table(compare_rows())


def test_docs_examples_run():
    """Every python block of docs/patterns.md runs, in order, in one namespace."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "patterns.md").read_text(), re.S)
    assert len(blocks) >= 2
    namespace: dict[str, object] = {}
    for block in blocks:
        exec(compile(block, "docs/patterns.md", "exec"), namespace)
