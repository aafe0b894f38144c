"""docs/evals.md: every Python block runs as written, prints what the page shows, and the README links it."""

from __future__ import annotations

import contextlib
import io
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "evals.md"


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_python_blocks_run_and_print_what_the_page_shows() -> None:
    """The blocks run in order in one namespace; the text blocks are what they print (token counts aside)."""
    namespace: dict[str, object] = {"__name__": "docs_evals"}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for block in _blocks("python"):
            exec(compile(block, str(DOC), "exec"), namespace)
    shown = _blocks("text")
    output = printed.getvalue()
    for text in shown:
        for line in text.strip().splitlines():
            if "tokens" not in line:
                assert line in output, line


def test_the_toml_example_is_a_dataset_as_the_reference_writes_it() -> None:
    """The TOML shown parses, and its case is the reference dataset's first, word for word."""
    [example] = _blocks("toml")
    data = tomllib.loads(example)
    reference = tomllib.loads((ROOT / "evals" / "support_desk" / "desk.eval.toml").read_text())
    assert data["case"][0] == reference["case"][0]
    assert data["defaults"] == reference["defaults"] and data["world"] == reference["world"]


def test_the_readme_points_to_the_page() -> None:
    """The README's list of what else there is links the page (tests/test_docs_site.py checks the site's nav)."""
    assert "(docs/evals.md)" in (ROOT / "README.md").read_text()
