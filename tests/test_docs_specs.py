"""docs/specs.md: every TOML example is a spec that holds, and every Python example runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent_fsm.scenarios import load_scenario, run_scenario

REPO = Path(__file__).resolve().parents[1]
DOC = (REPO / "docs" / "specs.md").read_text(encoding="utf-8")


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC, flags=re.DOTALL)


TOML = _blocks("toml")
PYTHON = _blocks("python")


def test_the_doc_has_examples() -> None:
    """The page shows several specs and several Python examples."""
    assert len(TOML) >= 4 and len(PYTHON) >= 3


@pytest.mark.parametrize("index", range(len(TOML)))
def test_toml_examples_are_specs_that_hold(tmp_path: Path, index: int) -> None:
    """Each TOML block loads and every expectation in it holds."""
    path = tmp_path / f"example_{index}.toml"
    path.write_text(TOML[index], encoding="utf-8")
    outcome = run_scenario(load_scenario(path))
    assert outcome.passed, outcome.report()


def test_python_examples_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python blocks run in order from the repository root without raising."""
    monkeypatch.chdir(REPO)
    namespace: dict[str, object] = {}
    for block in PYTHON:
        exec(compile(block, "docs/specs.md", "exec"), namespace)
    assert "outcome" in namespace
