"""
The watchdog on a driven run: a driver that asks the model far past its turn budget is stopped, not waited for.
"""

from __future__ import annotations

import json
from typing import Any

from agent_fsm.engine import Limits, Model, content_text, has_parts, wrapped_estimator
from agent_fsm.testing._invariants import InvariantViolation

__all__ = ["Runaway", "runaway_violation", "watchdog_calls"]


class Runaway(BaseException):
    """
    The watchdog's signal: a driver asked the model more often than its limits allow.

    A ``BaseException``, so that no ``except Exception`` in a driver (the
    engine's own turns a model's exception into a run error) can swallow it
    and loop on; :func:`drive` turns it into an :class:`InvariantViolation`.
    """

    def __init__(self, asked: int, messages: list[dict[str, Any]]) -> None:
        super().__init__(asked)
        self.asked = asked
        self.messages = messages


class _Watched:
    """
    A model that shows the transcript it is asked about to the run's context,
    and stops a run that asks it more than ``max_calls`` times (the watchdog).
    """

    def __init__(self, model: Model, context: Any, max_calls: int | None = None) -> None:
        self.model = model
        self.context = context
        self.max_calls = max_calls
        self.calls = 0

    # The wrapped model's token estimate, so an agent given this measures prompts as it would the model.
    estimator = wrapped_estimator("model")

    def __repr__(self) -> str:
        return repr(self.model)

    def chat(self, messages: Any, tools: Any = ()) -> Any:
        self.context.messages = messages
        self.calls += 1
        if self.max_calls is not None and self.calls > self.max_calls:
            raise Runaway(self.calls, list(messages))
        return self.model.chat(messages, tools)


def watchdog_calls(limits: Limits) -> int:
    """The most model calls the kit lets any driver make under ``limits`` before it stops the run."""
    return 4 * (limits.max_turns + 4)


def runaway_violation(runaway: Runaway, limits: Limits) -> InvariantViolation:
    lines = [
        f"  [{i}] {m.get('role')}: {content_text(m['content']) if has_parts(m) else json.dumps(m.get('content'))}"[:80]
        for i, m in enumerate(runaway.messages)
    ]
    return InvariantViolation(
        "bounded_run",
        f"the driver asked the model {runaway.asked} times under max_turns={limits.max_turns} and had not"
        " stopped; the transcript so far:\n" + "\n".join(lines[-30:]),
    )
