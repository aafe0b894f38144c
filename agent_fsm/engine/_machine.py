r"""
[machine]
Machines as data: a declaration (:class:`MachineSpec`) and the run machine's table.

A :class:`MachineSpec` is only a declaration: states, edges, budgets. It is
immutable and checked when created. Diagrams, the static checker and the
engine all read the same declaration; :mod:`agent_fsm.engine.compiled` turns
it into the running ``transitions`` machine.


"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

import attrs

from agent_fsm.engine._errors import MachineDefinitionError
from agent_fsm.engine._limits import Stop

__all__ = ["Edge", "MachineSpec", "RUN_MACHINE", "StateSpec"]


# --- machine ---

StateKind = Literal["working", "absorbing", "paused"]


@attrs.frozen
class StateSpec:
    """One state: its kind, what holds while a run is in it, and what happens on entry."""

    name: str
    kind: StateKind = attrs.field(validator=attrs.validators.in_(("working", "absorbing", "paused")))
    doc: str = ""
    on_enter: tuple[str, ...] = ()
    stop: str | None = None  # the typed ending a run in this state reports

    @property
    def is_resting(self) -> bool:
        """Absorbing or paused: the driver stops here."""
        return self.kind != "working"


@attrs.frozen
class Edge:
    """
    One transition: ``source --event [guard]--> dest``.

    Edges of one source and event are tried in table order and the first
    whose guard holds is taken, so an unguarded edge is the fallback.
    ``consumes`` names the budget this edge spends; the static checker
    requires every cycle to pass through such an edge.
    """

    source: str
    event: str
    dest: str
    guard: str | None = None
    consumes: str | None = None
    meaning: str = ""


@attrs.frozen
class MachineSpec:
    """
    A machine declaration: states, edges, the initial state and named budgets.

    Only consistency is checked here (names, budgets, one event per working
    state); whether the machine terminates is :func:`agent_fsm.engine.analysis.check_machine`'s
    question, so a broken machine can still be declared and examined.

    Raises:
        MachineDefinitionError: every inconsistency found, listed at once
            (duplicate or undeclared states, a working state with no edge or
            several events, undeclared budgets, a resting state without a stop).
    """

    name: str
    initial: str
    states: tuple[StateSpec, ...]
    edges: tuple[Edge, ...]
    budgets: Mapping[str, str] = attrs.field(factory=dict, hash=False)
    # The states by name, built once: drivers look states up several times a run.
    _index: dict[str, StateSpec] = attrs.field(init=False, repr=False, eq=False, hash=False, alias="_index")

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "_index", {s.name: s for s in self.states})
        problems: list[str] = []
        names = [s.name for s in self.states]
        seen: set[str] = set()
        for name in names:
            if name in seen:
                problems.append(f"state {name!r} is declared twice")
            seen.add(name)
        if self.initial not in seen:
            problems.append(f"initial state {self.initial!r} is not declared")
        for edge in self.edges:
            for end in (edge.source, edge.dest):
                if end not in seen:
                    problems.append(f"edge {edge.source} --{edge.event}--> {edge.dest} names undeclared state {end!r}")
            if edge.consumes is not None and edge.consumes not in self.budgets:
                problems.append(
                    f"edge {edge.source} --{edge.event}--> {edge.dest} consumes undeclared budget {edge.consumes!r}"
                    f" (declare it in budgets=)"
                )
        for state in self.states:
            if state.kind == "working":
                events = {e.event for e in self.edges if e.source == state.name}
                if len(events) != 1:
                    problems.append(
                        f"working state {state.name!r} must leave by exactly one event, has {sorted(events) or 'none'}"
                    )
            if state.kind != "working" and state.stop is None:
                problems.append(f"{state.kind} state {state.name!r} names no stop")
        if problems:
            raise MachineDefinitionError(f"machine {self.name!r} is inconsistent:\n  " + "\n  ".join(problems))

    def state(self, name: str) -> StateSpec:
        """The declared state called ``name``."""
        return self._index[name]

    def auto_event(self, name: str) -> str | None:
        """The event the driver fires from working state ``name`` (``None`` for resting states)."""
        if self.state(name).kind != "working":
            return None
        return next(e.event for e in self.edges if e.source == name)

    def ending_of(self, name: str) -> str | None:
        """The ending state ``name`` reports, as declared (``None`` for working states)."""
        return self.state(name).stop

    def stop_of(self, name: str) -> Stop | None:
        """
        The ending of state ``name`` as a :class:`Stop`, or ``None`` while working.

        For machines whose endings are run stops (the run machine); other
        machines declare endings of their own, read with :meth:`ending_of`.
        """
        stop = self.state(name).stop
        return None if stop is None else Stop(stop)

    def names(self, *, guards: bool = True, effects: bool = True) -> set[str]:
        """Every guard and effect name the declaration uses."""
        found: set[str] = set()
        if guards:
            found |= {e.guard for e in self.edges if e.guard}
        if effects:
            found |= {name for s in self.states for name in s.on_enter}
        return found


# ---------------------------------------------------------------------------
# The run machine. One row per edge, grouped by source state: read it as the
# diagram. Guards are pure predicates over the run; effects are the on-enter
# callbacks of states. Both are defined in agent_fsm.engine.callbacks.
# ---------------------------------------------------------------------------

RUN_MACHINE = MachineSpec(
    name="run",
    initial="Ready",
    budgets={
        "turns": "model calls, at most Limits.max_turns",
        "pending_calls": "calls left in the current reply; only a new turn refills them",
    },
    states=(
        StateSpec("Ready", "working", "Between turns; budgets are checked on leaving it."),
        StateSpec(
            "Proposing",
            "working",
            "The next proposal is taken (from the current reply, or by asking the model) and judged.",
            on_enter=("take_proposal",),
        ),
        StateSpec(
            "Executing",
            "working",
            "One validated, allowed call is crossing the effect boundary.",
            on_enter=("execute_call",),
        ),
        StateSpec(
            "Denied",
            "working",
            "A proposal was malformed, unknown or refused; its reason goes back to the model.",
            on_enter=("record_rejection",),
        ),
        StateSpec(
            "AwaitingApproval",
            "paused",
            "The gate asked for a human; resume() approves or rejects the blocked call.",
            stop=Stop.AWAITING_APPROVAL.value,
        ),
        StateSpec("Answered", "absorbing", "The model answered.", on_enter=("record_answer",), stop="answered"),
        StateSpec(
            "AnswerRejected",
            "absorbing",
            "The model answered and the answer check refused it.",
            on_enter=("record_answer",),
            stop="answer_rejected",
        ),
        StateSpec("StepLimit", "absorbing", "max_turns model calls were made.", stop="step_limit"),
        StateSpec("TokenLimit", "absorbing", "The next prompt would exceed max_prompt_tokens.", stop="token_limit"),
        StateSpec(
            "NoProgress",
            "absorbing",
            "The same rejected proposal kept coming back.",
            on_enter=("close_pending",),
            stop="no_progress",
        ),
        StateSpec(
            "ToolLimit",
            "absorbing",
            "A call was proposed with the tool budget spent.",
            on_enter=("close_pending",),
            stop="tool_limit",
        ),
        StateSpec("ProviderError", "absorbing", "The model could not be reached.", stop="provider_error"),
        StateSpec(
            "TimeLimit",
            "absorbing",
            "The max_seconds time budget was spent.",
            on_enter=("close_pending",),
            stop="time_limit",
        ),
        StateSpec(
            "Handoff",
            "absorbing",
            "A tool failed permanently; no further tool runs.",
            on_enter=("close_pending",),
            stop="handoff",
        ),
    ),
    edges=(
        Edge("Ready", "next_turn", "StepLimit", guard="turn_budget_spent", meaning="max_turns reached"),
        Edge("Ready", "next_turn", "TokenLimit", guard="prompt_over_budget", meaning="next prompt exceeds budget"),
        Edge("Ready", "next_turn", "TimeLimit", guard="time_spent", meaning="time budget spent"),
        Edge("Ready", "next_turn", "Proposing", consumes="turns", meaning="budget admits another model call"),
        Edge("Proposing", "judge", "TimeLimit", guard="time_spent", meaning="time budget spent"),
        Edge("Proposing", "judge", "ProviderError", guard="provider_failed", meaning="model call failed"),
        Edge("Proposing", "judge", "AnswerRejected", guard="answer_refused", meaning="answer check refused"),
        Edge("Proposing", "judge", "Answered", guard="reply_has_no_calls", meaning="plain assistant message"),
        Edge("Proposing", "judge", "ToolLimit", guard="tool_budget_spent", meaning="no tool attempts left"),
        Edge("Proposing", "judge", "Denied", guard="call_rejected", meaning="invalid, unknown or denied"),
        Edge("Proposing", "judge", "AwaitingApproval", guard="approval_needed", meaning="gate asks a human"),
        Edge("Proposing", "judge", "Executing", guard="call_allowed", meaning="gate allows"),
        Edge("Executing", "observe", "Handoff", guard="failed_permanently", meaning="the tool cannot recover"),
        Edge(
            "Executing",
            "observe",
            "Proposing",
            guard="calls_pending",
            consumes="pending_calls",
            meaning="next call of the same reply",
        ),
        Edge("Executing", "observe", "Ready", meaning="typed observation appended"),
        Edge("Denied", "observe", "NoProgress", guard="denial_repeated", meaning="same proposal rejected again"),
        Edge(
            "Denied",
            "observe",
            "Proposing",
            guard="calls_pending",
            consumes="pending_calls",
            meaning="next call of the same reply",
        ),
        Edge("Denied", "observe", "Ready", meaning="below repeat threshold"),
        Edge("AwaitingApproval", "approve", "Executing", meaning="a human approved the call, judged afresh"),
        Edge("AwaitingApproval", "reject", "Denied", meaning="a human rejected the call, or it failed afresh"),
    ),
)
"""The run machine: every state a run can be in and every edge, read by the driver, the diagrams and the checker."""
