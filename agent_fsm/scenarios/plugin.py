"""
Collect scenario specs as pytest items: every ``*.toml`` under a ``specs`` directory is one test.

Enable it from a ``conftest.py`` beside the specs (``from agent_fsm.scenarios.plugin
import pytest_collect_file``). A failing spec reports each expectation with
ok or FAILED, then the run's transcript; a malformed spec reports the file
and the key at fault, without a traceback into the loader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_fsm.engine import format_result
from agent_fsm.scenarios import (
    ScenarioResult,
    SpecFormatError,
    load_scenario,
    project_spec_modules,
    run_scenario,
)

__all__ = ["SpecFailed", "SpecFile", "SpecItem", "pytest_collect_file"]


class SpecFailed(AssertionError):
    """A spec ran and at least one expectation or required invariant did not hold."""

    def __init__(self, outcome: ScenarioResult) -> None:
        super().__init__(outcome.report())
        self.outcome = outcome


def _in_specs_dir(path: Path) -> bool:
    return path.suffix == ".toml" and "specs" in path.parts


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """Collect ``specs/**/*.toml`` files as :class:`SpecFile` collectors."""
    if _in_specs_dir(file_path):
        return SpecFile.from_parent(parent, path=file_path)
    return None


class SpecFile(pytest.File):
    """One spec file: it yields one item, named after the spec."""

    def collect(self) -> Any:
        try:
            name = load_scenario(self.path).name
        except SpecFormatError:
            name = self.path.stem  # the item still runs, and fails with the format error
        yield SpecItem.from_parent(self, name=name)


class SpecItem(pytest.Item):
    """Run one spec and fail with its expectation report when it does not pass."""

    def runtest(self) -> None:
        # The project's own worlds, as allowed in its pyproject.toml ([tool.agent_fsm] spec-modules).
        allowed, _ = project_spec_modules(self.path)
        outcome = run_scenario(load_scenario(self.path), allowed=allowed)
        if not outcome.passed:
            raise SpecFailed(outcome)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        """The expectation report and transcript, or the format error; a traceback only for a real bug."""
        if isinstance(excinfo.value, SpecFailed):
            outcome = excinfo.value.outcome
            return f"{outcome.report()}\n\n{format_result(outcome.result, outcome.effects)}"
        if isinstance(excinfo.value, SpecFormatError):
            return f"malformed spec: {excinfo.value}"
        return str(super().repr_failure(excinfo, style=style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"spec {self.name}"
