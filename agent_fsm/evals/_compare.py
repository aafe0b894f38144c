"""
Two reports side by side: which cases regressed, which improved, by how much, with both intervals.

A case *regressed* when its pass rate fell by more than ``threshold``
(``0.0``: any fall) and *improved* when it rose by more; a case in only one
report is ``added`` or ``removed``. The intervals are shown so a reader can
tell a real move from noise: with few repeats they overlap widely, and the
remedy is more repeats, not a lower threshold.
"""

from __future__ import annotations

from typing import Literal

import attrs

from agent_fsm.evals._report import EvalReport

__all__ = ["CaseChange", "Comparison", "compare_reports"]

Verdict = Literal["regressed", "improved", "same", "added", "removed"]


@attrs.frozen
class CaseChange:
    """One case across two reports: both pass rates and intervals, the change, and the verdict."""

    name: str
    verdict: Verdict
    before: float | None
    after: float | None
    before_interval: tuple[float, float] | None
    after_interval: tuple[float, float] | None

    @property
    def delta(self) -> float:
        """After minus before (0 when the case is in only one report)."""
        if self.before is None or self.after is None:
            return 0.0
        return self.after - self.before

    def line(self) -> str:
        """One line for a terminal: the verdict, the rates, the change and the intervals."""

        def rate(value: float | None, interval: tuple[float, float] | None) -> str:
            if value is None or interval is None:
                return "-"
            return f"{value:.0%} [{interval[0]:.2f}, {interval[1]:.2f}]"

        return (
            f"{self.verdict:<9}  {self.name}: {rate(self.before, self.before_interval)} -> "
            f"{rate(self.after, self.after_interval)} ({self.delta:+.0%})"
        )


@attrs.frozen
class Comparison:
    """Every case's change from ``before`` to ``after`` and the threshold a fall must pass to count."""

    before: str
    after: str
    threshold: float
    changes: tuple[CaseChange, ...]

    @property
    def regressions(self) -> list[CaseChange]:
        """The cases whose pass rate fell past the threshold."""
        return [c for c in self.changes if c.verdict == "regressed"]

    @property
    def improvements(self) -> list[CaseChange]:
        """The cases whose pass rate rose past the threshold."""
        return [c for c in self.changes if c.verdict == "improved"]

    def text(self) -> str:
        """A terminal summary: one line per case, then the counts."""
        lines = [f"{self.before} -> {self.after} (threshold {self.threshold:.0%})"]
        lines += ["  " + change.line() for change in self.changes]
        lines.append(f"{len(self.regressions)} regressed, {len(self.improvements)} improved")
        return "\n".join(lines)


def compare_reports(before: EvalReport, after: EvalReport, *, threshold: float = 0.0) -> Comparison:
    """
    Compare ``after`` with ``before`` case by case.

    Raises:
        ValueError: ``threshold`` is not a pass rate from 0 to 1.
    """
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold is a pass-rate change from 0 to 1 (got {threshold!r})")
    old = {case.name: case for case in before.cases}
    new = {case.name: case for case in after.cases}
    changes = []
    for name in [*old, *(n for n in new if n not in old)]:
        a, b = old.get(name), new.get(name)
        verdict: Verdict
        if a is None:
            verdict = "added"
        elif b is None:
            verdict = "removed"
        elif b.pass_rate < a.pass_rate - threshold:
            verdict = "regressed"
        elif b.pass_rate > a.pass_rate + threshold:
            verdict = "improved"
        else:
            verdict = "same"
        changes.append(
            CaseChange(
                name,
                verdict,
                None if a is None else a.pass_rate,
                None if b is None else b.pass_rate,
                None if a is None else a.interval,
                None if b is None else b.interval,
            )
        )
    return Comparison(before.name, after.name, threshold, tuple(changes))
