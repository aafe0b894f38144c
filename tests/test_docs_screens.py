"""docs/screens.md: every Python block runs as written, and the figures it states are the pinned ones."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_screens import FALSE_POSITIVES

DOC = Path(__file__).resolve().parent.parent / "docs" / "screens.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_code_blocks_run_as_written() -> None:
    """The Python blocks run in order in one namespace; each asserts what the text around it says."""
    blocks = _python_blocks()
    assert len(blocks) >= 6
    namespace: dict[str, object] = {"__name__": "docs_screens"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert namespace["refunds"] == []


def test_the_false_positive_counts_are_the_pinned_ones() -> None:
    """The page states the counts tests/test_screens.py pins, for both shipped screens."""
    text = DOC.read_text()
    assert f"**{FALSE_POSITIVES['injection']} of 95** for\n`injection_screen()`" in text
    assert f"**{FALSE_POSITIVES['secret']} of 95** for `secret_redactor()`" in text
