"""
One run in flight: its plain-data state plus what it runs against, which is never saved.

The guards and effects of :mod:`agent_fsm.engine.callbacks` receive this
object; the drivers build it once per call and throw it away when the run
rests, so nothing in it can be smuggled in through a saved state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from agent_fsm.engine.checkpoint import Checkpointer
from agent_fsm.engine.events import RunEvent, StateEntered, TextDelta
from agent_fsm.engine.failures import RunError
from agent_fsm.engine.gates import Gate, deny_effects
from agent_fsm.engine.limits import Limits
from agent_fsm.engine.models import Model
from agent_fsm.engine.observe import TokenEstimator
from agent_fsm.engine.state import RunState
from agent_fsm.engine.steps import Perform
from agent_fsm.engine.tools import Registry, ToolCall, shown_to_model
from agent_fsm.engine.wire import CallIds

__all__ = ["LOG", "AnswerCheckFn", "RunContext"]

LOG = logging.getLogger("agent_fsm")
"""The library's logger: one DEBUG line per transition, nothing at INFO or above in a run that goes well."""

AnswerCheckFn = Callable[[str, RunState], Any]


class RunContext:
    """One run in flight: its state, its model, tools, gate and budgets, and who listens."""

    __slots__ = (
        "answer_check",
        "authorized",
        "call_ids",
        "checkpointer",
        "clock_start",
        "declaration_tokens",
        "declarations",
        "entered",
        "estimator",
        "gate",
        "limits",
        "model",
        "outbox",
        "perform",
        "run_id",
        "state",
        "tools",
    )

    def __init__(
        self,
        state: RunState,
        model: Model,
        tools: Registry,
        gate: Gate | None,
        limits: Limits,
        estimator: TokenEstimator,
        answer_check: AnswerCheckFn | None = None,
        checkpointer: Checkpointer | None = None,
        run_id: str | None = None,
        listening: bool = False,
    ) -> None:
        self.state = state
        # Where the run is committed (None: in memory only), and its id, from
        # which every call's idempotency key is derived.
        self.checkpointer = checkpointer
        self.run_id = run_id if run_id is not None else state.run_id
        self.answer_check = answer_check
        self.model = model
        self.tools = tools
        # Checked and rendered once per registry content, not once per run (see tools.function_declarations).
        self.declarations, self.declaration_tokens = shown_to_model(tools, estimator)
        self.gate = gate if gate is not None else deny_effects(tools)
        self.limits = limits
        self.estimator = estimator
        self.call_ids = CallIds.of(state.messages)  # ids in the transcript; new proposals never reuse one
        # The call this process just judged allowed (or a human approved); never
        # saved, so authority to run a handler cannot come from a saved state.
        self.authorized: ToolCall | None = None
        # Events wait here for the driver to deliver them (None: nobody listens, none is made).
        self.outbox: list[RunEvent] | None = [] if listening else None
        # How the run's requests are performed in place; None: they are yielded to the driver
        # (the async driver, or a listener that hears events between them). Set by the sync driver.
        self.perform: Perform | None = None
        debug = LOG.isEnabledFor(logging.DEBUG)
        self.entered: Callable[[str, str, str | None], None] | None = self._entered if listening or debug else None
        # The clock is read only under a time budget.
        self.clock_start = time.monotonic() if limits.max_seconds is not None else None

    @property
    def machine_state(self) -> str:
        return self.state.machine_state

    @machine_state.setter
    def machine_state(self, value: str) -> None:
        self.state.machine_state = value
        self.state.path.append(value)

    def _entered(self, source: str, event: str, guard: str | None) -> None:
        state = self.state
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug(
                "run %s: %s --%s [%s]--> %s (turn %d)",
                self.run_id,
                source,
                event,
                guard or "else",
                state.machine_state,
                state.turns,
            )
        if self.outbox is not None:
            self.outbox.append(
                StateEntered(self.run_id, time.time(), state.machine_state, source, event, guard, state.turns)
            )

    def post(self, event: RunEvent) -> None:
        """Post ``event`` for the driver to deliver (only called when someone listens)."""
        assert self.outbox is not None
        self.outbox.append(event)

    def delta_sink(self, live: Callable[[RunEvent], Any] | None) -> Callable[[str], None]:
        """What a streaming model calls with each text fragment under the sync driver."""
        turn = self.state.turns

        def on_delta(text: str) -> None:
            event = TextDelta(self.run_id, time.time(), turn, text)
            if live is not None:
                live(event)
            else:
                self.post(event)

        return on_delta

    def adelta_sink(self, deliver: Callable[[RunEvent], Awaitable[None]]) -> Callable[[str], Awaitable[None]]:
        """What a streaming model awaits with each text fragment under the async driver."""
        turn = self.state.turns

        async def on_delta(text: str) -> None:
            await deliver(TextDelta(self.run_id, time.time(), turn, text))

        return on_delta

    def elapsed(self) -> float:
        """Seconds this run has spent in drivers under its time budget, this call included."""
        if self.clock_start is None:
            return self.state.elapsed
        return self.state.elapsed + (time.monotonic() - self.clock_start)

    def remaining_seconds(self) -> float | None:
        """Seconds left in the time budget (``None``: no time budget)."""
        limit = self.limits.max_seconds
        return None if limit is None else limit - self.elapsed()

    def settle_clock(self) -> None:
        """Record the time spent so far in the state, as the run rests or is interrupted."""
        if self.clock_start is not None:
            now = time.monotonic()
            self.state.elapsed += now - self.clock_start
            self.clock_start = now

    def append(self, message: dict[str, Any]) -> None:
        """
        Append a message, measuring it once (token accounting stays O(n) over a run).

        The estimator's count must be a whole number >= 0; one that raises or
        answers anything else is a bug, reported with the run's state.
        """
        try:
            tokens = self.estimator(message)
        except Exception as exc:
            raise RunError(f"the token estimator raised {type(exc).__name__}: {exc}", state=self.state) from exc
        if type(tokens) is not int or tokens < 0:
            raise RunError(f"a token estimator must return a whole number >= 0; got {tokens!r}", state=self.state)
        state = self.state
        state.messages.append(message)
        state.message_tokens += tokens

    def next_prompt_tokens(self) -> int:
        """Estimated size of the prompt the next model call would send."""
        return self.state.message_tokens + self.declaration_tokens + self.state.usage_offset
