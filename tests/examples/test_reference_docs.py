"""Tests that docs/reference-systems.md and the reference-system commands it shows stay true."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent_fsm.scenarios import load_scenario, run_scenario

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reference-systems.md"


def test_docs_python_blocks_run():
    """Every Python block of the reference-systems page runs, in order, in one namespace."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    assert len(blocks) == 6
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(DOC), "exec"), namespace)


def _readme_specs() -> list[str]:
    section = DOC.read_text().split("\n## Run one scenario of each\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"agent-fsm run (specs/\S+\.toml)", section)


def test_readme_names_one_spec_per_system():
    """The page runs one spec of each of the three systems."""
    assert [Path(p).parent.name for p in _readme_specs()] == ["doc_lookup", "ticket_desk", "retrieval"]


@pytest.mark.parametrize("relative", _readme_specs())
def test_readme_specs_exist_and_pass(relative):
    """Each spec the page runs exists and meets its own expectations."""
    outcome = run_scenario(load_scenario(ROOT / relative))
    assert outcome.passed, outcome.report()


def test_every_reference_spec_asserts_its_code():
    """Each spec of the five reference systems states the world's ending code, and the code held."""
    specs = sorted((ROOT / "specs").glob("*/*.toml"))
    assert len(specs) >= 55
    missing = [str(p.relative_to(ROOT)) for p in specs if "code" not in load_scenario(p).expect]
    assert missing == []


def test_the_doc_maps_every_code_the_specs_assert():
    """docs/reference-systems.md names each code a spec asserts (the mapping a reader looks up)."""
    doc = DOC.read_text()
    codes = {load_scenario(p).expect["code"] for p in (ROOT / "specs").glob("*/*.toml")}
    assert sorted(c for c in codes if f"`{c}`" not in doc) == []
