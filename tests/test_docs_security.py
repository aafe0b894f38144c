"""docs/security.md: every Python block runs as written, and the README points to it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "security.md"
README_SECTION = "## Security"


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_code_blocks_run_as_written() -> None:
    """The Python blocks of docs/security.md run in order in one namespace."""
    blocks = _python_blocks(DOC.read_text())
    assert len(blocks) >= 4
    namespace: dict[str, object] = {"__name__": "docs_security"}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)  # the doc's own code, run as a reader would
    assert namespace["ledger"] == [
        {"call_id": "c1", "account": "ACME", "cents": 50},
        {"call_id": "c1", "account": "ACME", "cents": 50},
    ]


def test_doc_answers_the_four_questions_and_links_hostile_input() -> None:
    """The page says what a gate sees, what an approval covers, what a saved state is trusted for, what a store adds."""
    text = DOC.read_text()
    for heading in (
        "## What a gate sees",
        "## What an approval covers",
        "## What a saved state may and may not be trusted for",
        "## What needs a store",
    ):
        assert heading in text
    assert "(hostile-input.md)" in text


def test_readme_section_points_to_the_doc() -> None:
    """The README's security section links docs/security.md."""
    readme = (ROOT / "README.md").read_text()
    start = readme.index(README_SECTION)
    following = readme.find("\n## ", start + len(README_SECTION))
    section = readme[start : following if following != -1 else len(readme)]
    assert "docs/security.md" in section
