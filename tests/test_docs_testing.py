"""docs/testing.md: every Python block runs as written, and its invariant table matches the kit."""

from __future__ import annotations

import os
import re
from pathlib import Path

from hypothesis import settings

from agent_fsm.testing import INVARIANTS

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "testing.md"
README_SECTION = "## What else is there"


def _python_blocks(text: str | None = None) -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text() if text is None else text, flags=re.DOTALL)


def _readme_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(README_SECTION)
    following = text.find("\n## ", start + len(README_SECTION))
    return text[start : following if following != -1 else len(text)]


def test_code_blocks_run_as_written() -> None:
    """The Python blocks of docs/testing.md run in order in one namespace, under a deterministic profile."""
    blocks = _python_blocks()
    assert len(blocks) >= 5
    # the profile conftest.py loaded, restored afterwards
    active = os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev")
    settings.register_profile(
        "docs", parent=settings.get_profile(active), derandomize=True, database=None, max_examples=100
    )
    settings.load_profile("docs")
    try:
        namespace: dict[str, object] = {"__name__": "docs_testing"}
        for block in blocks:
            exec(compile(block, str(DOC), "exec"), namespace)
    finally:
        settings.load_profile(active)
    assert "TestDeskRun" in namespace and "failure" in namespace
    printed = _abridged(namespace["coverage"].report())  # type: ignore[attr-defined]
    assert _shape(_coverage_sample()) == _shape(printed), (
        f"docs/testing.md's coverage sample is not what its run prints; it prints:\n{printed}"
    )


def _coverage_sample() -> str:
    """The text block of docs/testing.md's "Coverage you can see": what ``coverage.report()`` printed."""
    section = DOC.read_text().split("## Coverage you can see", 1)[1]
    return section.split("```text\n", 1)[1].split("```", 1)[0].rstrip("\n")


def _shape(report: str) -> list[str]:
    """
    The report with the counts that vary from run to run as ``N``: the gate's verdicts, the tools, the boundaries.

    Which edges and states the search reaches does not vary (the sample's
    machine lines are compared exactly); how many of its drawn calls the gate
    allows, and which sums it hits, change with the tests run before it.
    """
    machine, _, rest = report.partition("\n  gate verdicts: ")
    varying = re.sub(r"\d+(, \d+)*", "N", rest).splitlines()
    # one line per value the search missed: how many vary too, so a run of equal lines counts once
    return [*machine.splitlines(), *(line for i, line in enumerate(varying) if i == 0 or line != varying[i - 1])]


def _abridged(report: str) -> str:
    """``report`` as the page shows it: of the edges never taken, the first two, ``...``, and the last."""
    lines = report.splitlines()
    never = [i for i, line in enumerate(lines) if line.startswith("    never taken: ")]
    if len(never) > 3:
        lines[never[2] : never[-1]] = ["    ..."]
    return "\n".join(lines)


def test_ten_line_example_is_about_ten_lines() -> None:
    """The first example, a user's gate under test, stays about ten lines of code."""
    first = [line for line in _python_blocks()[0].splitlines() if line.strip()]
    assert len(first) <= 12


def test_invariant_table_lists_every_invariant() -> None:
    """Every invariant the kit can report is described in the doc's table, and nothing else is."""
    listed = set(re.findall(r"^\| `([a-z_]+)` \|", DOC.read_text(), flags=re.MULTILINE))
    assert listed == set(INVARIANTS)


def test_readme_points_to_the_doc() -> None:
    """The README's list of what else is there links docs/testing.md under the kit's name."""
    section = _readme_section()
    assert "[Testing your own gates and models](docs/testing.md)" in section
