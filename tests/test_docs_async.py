"""docs/async.md: every Python block runs as written, in order, and the README points to it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "async.md"


def test_code_blocks_run_as_written() -> None:
    """The Python blocks of docs/async.md run in order in one namespace; the refunds they make are counted."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) >= 6
    namespace: dict[str, object] = {"__name__": "docs_async"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # the doc's own code, run as a reader would
    ledger = namespace["ledger"]
    assert isinstance(ledger, list) and ledger.count(("A-1", 1200)) == 102 and ledger.count(("B-7", 9000)) == 1


def test_readme_tour_points_to_the_doc() -> None:
    assert "docs/async.md" in (ROOT / "README.md").read_text()
