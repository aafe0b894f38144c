"""
Evals: score an agent over a dataset of cases, run by run, within one budget, and report what changed.

The parts are kept apart, so a new evaluator or a new report form touches one of them:

* :mod:`~agent_fsm.evals._dataset`: :class:`Case` and :class:`Dataset`, written in Python or read by
  :func:`load_dataset` from TOML whose cases are scenario specs (the format of :mod:`agent_fsm.scenarios`);
* :mod:`~agent_fsm.evals._evaluators`: each evaluator returns a :class:`Score` with its reason
  (ending, effects, typed output, trajectory, machine path, budgets, the spec's ``[expect]``, the user's
  own function, an LLM :class:`Judge`);
* :mod:`~agent_fsm.evals._budget`: :class:`EvalBudget`, shared by every run and never passed;
* :mod:`~agent_fsm.evals._runner`: :func:`run_eval` / :func:`arun_eval`, cases concurrently on the
  async driver, each repeated with its pass rate and Wilson interval;
* :mod:`~agent_fsm.evals._report`, :mod:`~agent_fsm.evals._html`, :mod:`~agent_fsm.evals._compare`:
  the report as a terminal table, JSON and an offline HTML page, and two reports compared;
* :mod:`~agent_fsm.evals.plugin`: a pytest plugin making each case a test item (enabled from a conftest).

Real models are replayed offline from the testing kit's cassettes (:class:`agent_fsm.testing.RecordingModel`,
:class:`agent_fsm.testing.ReplayModel`): a case's ``cassette`` names one.
"""

from agent_fsm.evals._budget import BUDGET_SPENT, EvalBudget, Ledger, Share
from agent_fsm.evals._compare import CaseChange, Comparison, compare_reports
from agent_fsm.evals._dataset import Case, Dataset, ModelFactory, load_dataset
from agent_fsm.evals._evaluators import (
    Budgets,
    Check,
    Effects,
    Ending,
    Evaluator,
    Expectations,
    Judge,
    Judged,
    JudgeError,
    MachinePath,
    Output,
    Score,
    ToolCallPattern,
    Trajectory,
    TrajectoryMode,
    proposed_calls,
)
from agent_fsm.evals._html import report_html
from agent_fsm.evals._report import REPORT_FORMAT, CaseReport, EvalReport, RunRecord, wilson_interval
from agent_fsm.evals._runner import EvalOptions, World, arun_eval, run_eval, world_from_reference

__all__ = [
    # dataset
    "Case",
    "Dataset",
    "ModelFactory",
    "load_dataset",
    # evaluators
    "Budgets",
    "Check",
    "Effects",
    "Ending",
    "Evaluator",
    "Expectations",
    "Judge",
    "JudgeError",
    "Judged",
    "MachinePath",
    "Output",
    "Score",
    "ToolCallPattern",
    "Trajectory",
    "TrajectoryMode",
    "proposed_calls",
    # budget and runner
    "BUDGET_SPENT",
    "EvalBudget",
    "Ledger",
    "Share",
    "EvalOptions",
    "World",
    "arun_eval",
    "run_eval",
    "world_from_reference",
    # reports
    "REPORT_FORMAT",
    "CaseChange",
    "CaseReport",
    "Comparison",
    "EvalReport",
    "RunRecord",
    "compare_reports",
    "report_html",
    "wilson_interval",
]
