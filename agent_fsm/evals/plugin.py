"""
Collect eval datasets as pytest items: every ``*.eval.toml`` file is a collector, each of its cases one test.

Nothing is collected until a ``conftest.py`` enables it (``from agent_fsm.evals.plugin import
pytest_collect_file``); the plugin registers no entry point, so installing agent_fsm changes no
project's collection. A case runs ``repeat`` times (the dataset's) and passes when its pass
rate reaches the dataset's ``threshold``; a failing case reports each failed run's scores and
reasons. Keep datasets outside a ``specs`` directory: there every ``*.toml`` is a spec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_fsm.evals._dataset import Dataset, cases_named, load_dataset
from agent_fsm.evals._report import CaseReport
from agent_fsm.evals._runner import run_eval, world_from_reference
from agent_fsm.scenarios import SpecFormatError, project_spec_modules

__all__ = ["CaseFailed", "DatasetFile", "EvalCaseItem", "pytest_collect_file"]

SUFFIX = ".eval.toml"


class CaseFailed(AssertionError):
    """A case's pass rate fell short of the dataset's threshold."""

    def __init__(self, case: CaseReport, threshold: float) -> None:
        lines = [f"case {case.name}: {case.passed}/{len(case.runs)} runs passed, threshold {threshold:.0%}"]
        for run in case.runs:
            if run.passed:
                continue
            why = run.skipped or run.error or f"ended {run.stop} ({run.code})"
            lines.append(f"  run {run.repeat + 1}: {why}")
            lines += [f"    FAILED  {s.name}: {s.reason}" for s in run.scores if not s.passed]
        super().__init__("\n".join(lines))


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    """Collect ``*.eval.toml`` files as :class:`DatasetFile` collectors."""
    if file_path.name.endswith(SUFFIX):
        return DatasetFile.from_parent(parent, path=file_path)
    return None


class DatasetFile(pytest.File):
    """One dataset: one item per case, named after it."""

    def collect(self) -> Any:
        try:
            dataset = load_dataset(self.path)
        except SpecFormatError as exc:
            yield EvalCaseItem.from_parent(self, name=self.path.name, dataset=None, problem=exc)
            return
        for case in dataset.cases:
            yield EvalCaseItem.from_parent(self, name=case.name, dataset=dataset, problem=None)


class EvalCaseItem(pytest.Item):
    """Run one case of a dataset and fail with its failed runs' reasons when its pass rate is short."""

    def __init__(self, *, dataset: Dataset | None, problem: SpecFormatError | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.dataset = dataset
        self.problem = problem

    def runtest(self) -> None:
        if self.problem is not None:
            raise self.problem
        assert self.dataset is not None
        allowed, _ = project_spec_modules(self.path)
        if self.dataset.world is None:
            raise SpecFormatError(self.path, "world", "a dataset run by pytest names its world")
        world = world_from_reference(self.dataset.world, allowed)
        report = run_eval(cases_named(self.dataset, [self.name]), world)
        case = report.cases[0]
        if case.pass_rate < self.dataset.threshold:
            raise CaseFailed(case, self.dataset.threshold)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        """The case's failed runs, or the format error; a traceback only for a real bug."""
        if isinstance(excinfo.value, (CaseFailed, SpecFormatError)):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style=style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"eval case {self.name}"
