"""docs/nesting.md: every Python block runs as written, and the edge it names is the run machine's own."""

from __future__ import annotations

import re
from pathlib import Path

from agent_fsm import RUN_MACHINE

DOC = Path(__file__).resolve().parent.parent / "docs" / "nesting.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_code_blocks_run_as_written() -> None:
    """The Python blocks run in order in one namespace; each asserts what the text around it says."""
    blocks = _python_blocks()
    assert len(blocks) >= 10
    namespace: dict[str, object] = {"__name__": "docs_nesting"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert namespace["refunded"] == []  # the last example paused, and nothing was refunded while it waits


def test_the_edge_named_is_an_edge_of_the_run_machine() -> None:
    """The handoff's edge, as the page writes it, is in RUN_MACHINE."""
    listed = re.findall(r"`(\w+) --(\w+)\[(\w+)\]--> (\w+)`", DOC.read_text())
    assert listed == [("Executing", "observe", "handed_over", "HandedOver")]
    edges = {(e.source, e.event, e.guard, e.dest) for e in RUN_MACHINE.edges}
    assert set(listed) <= edges
