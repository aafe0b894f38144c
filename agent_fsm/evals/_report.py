"""
What an eval found: each run's scores, each case's pass rate with its interval, the budget spent.

The report is data (``to_data``/``from_data`` round-trip through JSON) and
renders itself as a terminal table; the HTML page and the comparison of two
reports live beside it (:mod:`~agent_fsm.evals._html`, :mod:`~agent_fsm.evals._compare`).

The pass rate's interval is Wilson's score interval at 95 %: unlike the
normal approximation it stays inside [0, 1] and is not zero-width at 0 or N
passes out of N, which is where small evals live.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs

from agent_fsm.evals._evaluators import Score

__all__ = ["REPORT_FORMAT", "CaseReport", "EvalReport", "RunRecord", "wilson_interval"]

REPORT_FORMAT = "agent_fsm.eval-report/1"
"""The ``format`` field of every saved report."""

_Z95 = 1.959963984540054  # the two-sided 95 % normal quantile


def wilson_interval(passed: int, runs: int, z: float = _Z95) -> tuple[float, float]:
    """Wilson's score interval for ``passed`` successes of ``runs`` (95 % by default); ``(0, 1)`` for no runs."""
    if runs == 0:
        return 0.0, 1.0
    p = passed / runs
    denominator = 1 + z * z / runs
    centre = (p + z * z / (2 * runs)) / denominator
    half = z * math.sqrt(p * (1 - p) / runs + z * z / (4 * runs * runs)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@attrs.frozen
class RunRecord:
    """
    One run of one case: how it ended, what it spent, each evaluator's score.

    ``skipped`` is ``"budget_spent"`` for a run the shared budget could not
    fund (it did not start, and counts as not passed); ``error`` is the text of
    an exception the run raised (it counts as not passed, its whole share as spent).
    """

    case: str
    repeat: int
    stop: str | None
    code: str | None
    turns: int
    tokens: int
    cost: Decimal
    scores: tuple[Score, ...] = ()
    run_id: str | None = None
    skipped: str | None = None
    error: str | None = None

    @property
    def passed(self) -> bool:
        """The run started, raised nothing, and every evaluator passed."""
        return self.skipped is None and self.error is None and all(s.passed for s in self.scores)

    def to_data(self) -> dict[str, Any]:
        """The JSON form (money as decimal text)."""
        return {
            "case": self.case,
            "repeat": self.repeat,
            "stop": self.stop,
            "code": self.code,
            "turns": self.turns,
            "tokens": self.tokens,
            "cost": format(self.cost, "f"),
            "scores": [s.to_data() for s in self.scores],
            "run_id": self.run_id,
            "skipped": self.skipped,
            "error": self.error,
            "passed": self.passed,
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> RunRecord:
        """Read the JSON form back."""
        return cls(
            case=data["case"],
            repeat=data["repeat"],
            stop=data["stop"],
            code=data["code"],
            turns=data["turns"],
            tokens=data["tokens"],
            cost=Decimal(data["cost"]),
            scores=tuple(Score(s["name"], s["value"], s["passed"], s["reason"]) for s in data["scores"]),
            run_id=data.get("run_id"),
            skipped=data.get("skipped"),
            error=data.get("error"),
        )


@attrs.frozen
class CaseReport:
    """A case's runs, its pass rate with Wilson's 95 % interval, and the mean of each evaluator's score."""

    name: str
    runs: tuple[RunRecord, ...]
    metadata: Mapping[str, Any] = attrs.field(factory=dict, hash=False)

    @property
    def passed(self) -> int:
        """How many runs passed."""
        return sum(r.passed for r in self.runs)

    @property
    def pass_rate(self) -> float:
        """Passed runs over runs (0 with no runs)."""
        return self.passed / len(self.runs) if self.runs else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        """Wilson's 95 % interval of the pass rate."""
        return wilson_interval(self.passed, len(self.runs))

    def means(self) -> dict[str, float]:
        """Each evaluator's mean score over the runs that were scored."""
        values: dict[str, list[float]] = {}
        for run in self.runs:
            for score in run.scores:
                if score.value is not None:  # a judge the budget could not pay for gave no score
                    values.setdefault(score.name, []).append(score.value)
        return {name: sum(v) / len(v) for name, v in values.items()}


@attrs.frozen
class EvalReport:
    """
    A whole eval: the cases, the budget and what was spent, and whether the budget stopped it.

    ``stopped`` says the shared budget ran out and the runs marked ``budget_spent`` were not started.
    ``judge_cost`` is the part of ``spent_cost`` the LLM judges' own calls spent (their turns and tokens
    are in ``spent_turns`` and ``spent_tokens`` too).
    """

    name: str
    cases: tuple[CaseReport, ...]
    repeat: int
    spent_turns: int
    spent_tokens: int
    spent_cost: Decimal
    budget: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    stopped: bool = False
    judge_cost: Decimal = Decimal(0)

    def case(self, name: str) -> CaseReport:
        """The case named ``name``."""
        for case in self.cases:
            if case.name == name:
                return case
        raise KeyError(f"no case {name!r} in report {self.name!r}")

    @property
    def runs(self) -> list[RunRecord]:
        """Every run of every case."""
        return [run for case in self.cases for run in case.runs]

    @property
    def pass_rate(self) -> float:
        """Passed runs over all runs."""
        runs = self.runs
        return sum(r.passed for r in runs) / len(runs) if runs else 0.0

    def to_data(self) -> dict[str, Any]:
        """The JSON form of the whole report."""
        return {
            "format": REPORT_FORMAT,
            "name": self.name,
            "repeat": self.repeat,
            "stopped": self.stopped,
            "budget": dict(self.budget),
            "spent": {
                "turns": self.spent_turns,
                "tokens": self.spent_tokens,
                "cost": format(self.spent_cost, "f"),
                "judge_cost": format(self.judge_cost, "f"),
            },
            "cases": [
                {
                    "name": c.name,
                    "metadata": dict(c.metadata),
                    "passed": c.passed,
                    "runs_count": len(c.runs),
                    "pass_rate": c.pass_rate,
                    "interval": list(c.interval),
                    "runs": [r.to_data() for r in c.runs],
                }
                for c in self.cases
            ],
        }

    def to_json(self) -> str:
        """The report as indented JSON text."""
        return json.dumps(self.to_data(), indent=2, sort_keys=True)

    def save(self, path: str | Path) -> None:
        """Write the JSON form to ``path``."""
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> EvalReport:
        """
        Read a report's JSON form.

        Raises:
            ValueError: it is not a report of this format.
        """
        if not isinstance(data, Mapping) or data.get("format") != REPORT_FORMAT:
            raise ValueError(f"not an eval report (expected format {REPORT_FORMAT!r})")
        try:
            return cls(
                name=data["name"],
                repeat=data["repeat"],
                stopped=data["stopped"],
                budget=data.get("budget", {}),
                spent_turns=data["spent"]["turns"],
                spent_tokens=data["spent"]["tokens"],
                spent_cost=Decimal(data["spent"]["cost"]),
                judge_cost=Decimal(data["spent"].get("judge_cost", "0")),
                cases=tuple(
                    CaseReport(c["name"], tuple(RunRecord.from_data(r) for r in c["runs"]), c.get("metadata", {}))
                    for c in data["cases"]
                ),
            )
        except (KeyError, TypeError, ArithmeticError) as exc:
            raise ValueError(f"malformed eval report: {exc!r}") from exc

    @classmethod
    def load(cls, path: str | Path) -> EvalReport:
        """
        Read a report saved with :meth:`save`.

        Raises:
            ValueError: the file is not JSON or not a report.
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: cannot read an eval report: {exc}") from exc
        return cls.from_data(data)

    def table(self) -> str:
        """A terminal table: one row per case (pass rate, interval, mean scores), then the totals and budget."""
        names = sorted({name for case in self.cases for name in case.means()})
        header = ["case", "passed", "rate", "95% interval", *names]
        rows = [
            [
                case.name,
                f"{case.passed}/{len(case.runs)}",
                f"{case.pass_rate:.0%}",
                f"[{case.interval[0]:.2f}, {case.interval[1]:.2f}]",
                *(f"{case.means()[n]:.2f}" if n in case.means() else "-" for n in names),
            ]
            for case in self.cases
        ]
        widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
        lines = [_row(header, widths), _row(["-" * w for w in widths], widths)]
        lines += [_row(row, widths) for row in rows]
        total = sum(r.passed for r in self.runs)
        lines.append("")
        lines.append(f"{self.name}: {total}/{len(self.runs)} runs passed ({self.pass_rate:.0%})")
        lines.append(
            f"spent {self.spent_turns} turns, {self.spent_tokens} tokens, cost {self.spent_cost}"
            + (f" of budget {_budget_text(self.budget)}" if any(v is not None for v in self.budget.values()) else "")
        )
        skipped = sum(r.skipped is not None for r in self.runs)
        if self.stopped:
            lines.append(f"budget spent: {skipped} runs not started")
        return "\n".join(lines)


def _row(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def _budget_text(budget: Mapping[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in budget.items() if v is not None) or "none"
