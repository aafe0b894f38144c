"""Specs for users' worlds: run_scenario(allowed=) and [tool.agent_fsm] spec-modules."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agent_fsm.scenarios import (
    ALLOWED_ENVIRONMENT_PREFIXES,
    SpecFormatError,
    allowed_packages,
    project_spec_modules,
    run_scenario,
    scenario_from_data,
)

SPEC = {
    "name": "user/world",
    "environment": "deskworld_x.worlds:environment",
    "task": "Look up A-1.",
    "model": {"turns": [{"answer": "nothing to do"}]},
    "expect": {"stop": "answered"},
}


@pytest.fixture
def user_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A package of the user's, importable, with one world."""
    (tmp_path / "deskworld_x").mkdir()
    (tmp_path / "deskworld_x" / "__init__.py").write_text("")
    (tmp_path / "deskworld_x" / "worlds.py").write_text(
        "from agent_fsm.scenarios import Environment\n\ndef environment():\n    return Environment(tools={})\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("deskworld_x")]:
        del sys.modules[name]


def test_run_scenario_refuses_a_users_world_by_default(user_package: Path) -> None:
    """Without allowed=, only agent_fsm.examples may be named."""
    with pytest.raises(SpecFormatError, match="outside the allowed packages"):
        run_scenario(scenario_from_data(SPEC))


def test_run_scenario_allowed_runs_a_users_world(user_package: Path) -> None:
    """allowed=("deskworld_x",) lets the spec name the user's package and its submodules."""
    outcome = run_scenario(scenario_from_data(SPEC), allowed=("deskworld_x",))
    assert outcome.passed and outcome.result.answer == "nothing to do"


def test_allowed_packages_keeps_ours_and_refuses_wildcards() -> None:
    """The built-in packages stay allowed; names that would read as 'everything' are refused."""
    assert allowed_packages(["a.b"]) == (*ALLOWED_ENVIRONMENT_PREFIXES, "a.b")
    for bad in ("", "*", ".", "a.", "a b"):
        with pytest.raises(ValueError, match="dotted package name"):
            allowed_packages([bad])


def test_project_spec_modules_reads_the_nearest_pyproject(tmp_path: Path) -> None:
    """The nearest pyproject.toml above a spec is read; a bad value names the key."""
    (tmp_path / "specs" / "deep").mkdir(parents=True)
    spec = tmp_path / "specs" / "deep" / "a.toml"
    spec.write_text("")
    (tmp_path / "pyproject.toml").write_text('[tool.agent_fsm]\nspec-modules = ["deskworld_x", "other.pkg"]\n')
    assert project_spec_modules(spec) == (("deskworld_x", "other.pkg"), tmp_path / "pyproject.toml")
    (tmp_path / "pyproject.toml").write_text('[tool.agent_fsm]\nspec-modules = "deskworld_x"\n')
    with pytest.raises(SpecFormatError, match="spec-modules"):
        project_spec_modules(spec)
