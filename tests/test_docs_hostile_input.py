"""docs/hostile-input.md: every Python block runs as written, and its format list is the one enforced."""

from __future__ import annotations

import re
from pathlib import Path

from agent_fsm import checked_formats

DOC = Path(__file__).resolve().parent.parent / "docs" / "hostile-input.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_code_blocks_run_as_written() -> None:
    """The Python blocks run in order in one namespace; each asserts what the text around it says."""
    blocks = _python_blocks()
    assert len(blocks) >= 6
    namespace: dict[str, object] = {"__name__": "docs_hostile_input"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert namespace["paid"] == []


def test_the_doc_names_every_checked_format() -> None:
    """Each format the engine checks is named in the doc's Schemas section."""
    text = DOC.read_text()
    assert all(f"`{name}`" in text for name in checked_formats())
