"""docs/temporal.md: every Python block runs as written, in order, against a real Temporal server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

DOC = Path(__file__).resolve().parent.parent / "docs" / "temporal.md"

pytestmark = pytest.mark.temporal


def test_code_blocks_run_as_written(temporal_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The definition, a worker and a run approved from a second client, a nested run, a patched change."""
    monkeypatch.setenv("TEMPORAL_ADDRESS", temporal_server.address)
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)
    assert len(blocks) == 4
    namespace: dict[str, object] = {"__name__": "docs_temporal"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)
    assert namespace["result"].state.turns == 3  # type: ignore[attr-defined]
    assert namespace["nested_result"].state.children["t0"].machine_state == "Answered"  # type: ignore[attr-defined]


def test_the_bench_figures_are_on_the_page() -> None:
    """The scale table is measured, not left as a placeholder."""
    text = DOC.read_text()
    assert "BENCH_TABLE" not in text and "| worker processes |" in text
