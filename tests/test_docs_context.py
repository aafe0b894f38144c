"""docs/context.md: every Python block runs as written, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "context.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_code_blocks_run_as_written() -> None:
    """The Python blocks run in order; each asserts what the text around it says."""
    blocks = _python_blocks()
    assert len(blocks) >= 8
    namespace: dict[str, object] = {"__name__": "docs_context"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert namespace["effects"] == ["paid"]


def test_the_doc_names_every_rule_and_built_in_compaction() -> None:
    """Each tool rule and each built-in compaction the facade exports is in the doc's tables."""
    text = DOC.read_text()
    for name in ("after", "before", "at_most_once", "ends_run", "elide_results", "drop_middle", "summarize"):
        assert f"`{name}(" in text
