"""docs/output.md: every Python block runs as written, and what it prints is what the page shows."""

from __future__ import annotations

import contextlib
import io
import re
import sys
import types
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "output.md"


def _blocks(kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_code_blocks_run_as_written_and_print_what_the_page_shows() -> None:
    """The Python blocks run in order in one namespace; the retry example prints the text block after it."""
    blocks = _blocks("python")
    assert len(blocks) >= 4
    module = types.ModuleType("docs_output")  # a real module: a dataclass looks its module up by name
    sys.modules[module.__name__] = module
    printed = []
    try:
        for block in blocks:
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(block, str(DOC), "exec"), module.__dict__)
            printed.append(out.getvalue())
    finally:
        del sys.modules[module.__name__]
    assert printed[1] == _blocks("text")[0]
    assert printed[2].count("OutputDefinitionError") == 2


def test_the_page_is_in_the_docs_nav() -> None:
    """The site lists the page among its guides."""
    build = (DOC.parent / "build.py").read_text()
    assert '"output.md"' in build
