"""docs/people.md: its Python runs as written, and the commands it shows exist."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from agent_fsm.cli import app

DOC = Path(__file__).resolve().parent.parent / "docs" / "people.md"


def test_code_blocks_run_as_written() -> None:
    """Every Python block of the page runs, in order, in one namespace."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 4
    namespace: dict[str, object] = {"__name__": "docs_people"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)


def test_the_commands_shown_exist() -> None:
    """``agent-fsm runs answer``, ``runs review`` and ``runs cancel`` take every option the page shows."""
    text = DOC.read_text().replace("\\\n", "")
    for name in ("answer", "review", "cancel"):
        shown = re.findall(rf"agent-fsm runs {name} RUN (.*)$", text, flags=re.MULTILINE)
        assert shown, name
        helped = CliRunner().invoke(app, ["runs", name, "--help"]).stdout
        for option in re.findall(r"(--[a-z-]+)", shown[0]):
            assert option in helped, (name, option)
