"""docs/budgets.md: every Python block runs as written, and the edges it lists are the machine's own."""

from __future__ import annotations

import re
from pathlib import Path

from agent_fsm import RUN_MACHINE

DOC = Path(__file__).resolve().parent.parent / "docs" / "budgets.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_code_blocks_run_as_written() -> None:
    """The Python blocks run in order in one namespace; each asserts what the text around it says."""
    blocks = _python_blocks()
    assert len(blocks) >= 5
    namespace: dict[str, object] = {"__name__": "docs_budgets"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert namespace["moved"] == [25_000]


def test_the_edges_listed_are_edges_of_the_run_machine() -> None:
    """Each `source --event[guard]--> dest` in the table is an edge of RUN_MACHINE, as written."""
    listed = re.findall(r"`(\w+) --(\w+)\[(\w+)\]--> (\w+)`", DOC.read_text())
    assert len(listed) == 4
    edges = {(e.source, e.event, e.guard, e.dest) for e in RUN_MACHINE.edges}
    assert set(listed) <= edges
