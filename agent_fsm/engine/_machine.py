"""
Machines as data: a declaration (:class:`MachineSpec`) and the run machine's table.

A :class:`MachineSpec` is only a declaration: states, edges, budgets. It is
immutable and checked when created. Diagrams, the static checker and the
engine all read the same declaration; :class:`CompiledMachine` (below) turns
it into the running ``transitions`` machine.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

import attrs
from transitions import Machine, State

from agent_fsm.engine._errors import InvalidTransition, MachineDefinitionError
from agent_fsm.engine._limits import Stop
from agent_fsm.engine._steps import Steps, drive

__all__ = ["CompiledMachine", "Vocabulary", "compile_machine", "Edge", "MachineSpec", "RUN_MACHINE", "StateSpec"]


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
    state); whether the machine terminates is :func:`agent_fsm.engine.check_machine`'s
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
    # How a budget is checked before it is spent, for the proof (see agent_fsm.engine._analysis): the guards
    # that stop the run before the spending edge is tried (each guards an earlier edge of its state, to a
    # resting state): the budget's own exhaustion first, then every limit bounding the same work; or the
    # guard that holds only while some is left (on the spending edge, or on every edge into its state).
    # A budget declared in neither is trusted as labelled.
    spent_guards: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict, hash=False)
    left_guards: Mapping[str, str] = attrs.field(factory=dict, hash=False)
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
        for checks in (self.spent_guards, self.left_guards):
            problems += [
                f"budget {b!r} has a check but is not declared in budgets=" for b in checks if b not in self.budgets
            ]
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

    def without(self, guards: Iterable[str]) -> MachineSpec:
        """
        This declaration with the edges guarded by ``guards`` left out, and the states no longer reachable.

        For a configuration that makes those guards false for good: what is
        left is every state and edge such a run can take (the driver leaves
        the same edges out, see :meth:`CompiledMachine.without`). Budgets no
        edge left spends are dropped with their checks.
        """
        gone = frozenset(guards)
        kept = [e for e in self.edges if e.guard is None or e.guard not in gone]
        reached = {self.initial}
        frontier = [self.initial]
        while frontier:
            here = frontier.pop()
            for edge in kept:
                if edge.source == here and edge.dest not in reached:
                    reached.add(edge.dest)
                    frontier.append(edge.dest)
        edges = tuple(e for e in kept if e.source in reached)
        spent = {e.consumes for e in edges if e.consumes is not None}
        # A guard ruled out is no check to ask for: the limit it tests does not bind this configuration.
        return attrs.evolve(
            self,
            states=tuple(s for s in self.states if s.name in reached),
            edges=edges,
            budgets={k: v for k, v in self.budgets.items() if k in spent},
            spent_guards={k: tuple(g for g in v if g not in gone) for k, v in self.spent_guards.items() if k in spent},
            left_guards={k: v for k, v in self.left_guards.items() if k in spent},
        )

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
# callbacks of states. Both are defined in agent_fsm.engine._run.
# ---------------------------------------------------------------------------

RUN_MACHINE = MachineSpec(
    name="run",
    initial="Ready",
    budgets={
        "turns": "model calls, at most Limits.max_turns",
        "pending_calls": "calls left in the current reply; only a new turn refills them",
        "decisions": "a person's decisions: the run rests until each is made, and each is made once",
        "task_screen": "the task is screened once, before the first model call",
        "output_retries": "answers sent back as invalid typed output, at most Limits.output_retries",
        "fallbacks": "models left in a FallbackModel's chain this turn; only a reply refills them",
    },
    # A model call is admitted only once every limit bounding it is checked: turns first, the proof's own.
    spent_guards={"turns": ("turn_budget_spent", "prompt_over_budget", "time_spent", "cost_over_budget")},
    left_guards={
        "pending_calls": "calls_pending",
        "task_screen": "task_unscreened",
        "output_retries": "output_retry_left",
        "fallbacks": "can_fall_back",
    },
    states=(
        StateSpec("Ready", "working", "Between turns; budgets are checked on leaving it."),
        StateSpec(
            "ScreeningInput",
            "working",
            "The input screen reads the task before the first model call.",
            on_enter=("screen_task",),
        ),
        StateSpec(
            "Compacting",
            "working",
            "The next prompt would pass its budget: the agent's compaction shrinks the prompt (never the transcript).",
            on_enter=("compact_prompt",),
        ),
        StateSpec(
            "Proposing",
            "working",
            "The next proposal is taken (from the current reply, or by asking the model) and judged.",
            on_enter=("take_proposal",),
        ),
        StateSpec(
            "WrappingUp",
            "working",
            "The last model call the turn budget admits: no tools offered, the model told to answer now.",
            on_enter=("ask_last_word",),
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
            "ScreeningResult",
            "working",
            "The result screen reads the latest observation before the model does: pass, redact or stop.",
            on_enter=("screen_observation",),
        ),
        StateSpec(
            "OutputInvalid",
            "working",
            "The answer is not valid typed output; what failed goes back to the model as invalid.",
            on_enter=("return_invalid_output",),
        ),
        StateSpec(
            "AwaitingApproval",
            "paused",
            "The gate asked for a human, or the call's result is a person's; resume() approves, edits, rejects or"
            " answers the blocked call.",
            stop=Stop.AWAITING_APPROVAL.value,
        ),
        StateSpec(
            "TakingAnswer",
            "working",
            "A person's answer, valid against the call's result schema, becomes the call's result.",
            on_enter=("take_answer",),
        ),
        StateSpec("Answered", "absorbing", "The model answered.", on_enter=("record_answer",), stop="answered"),
        StateSpec(
            "AnswerRejected",
            "absorbing",
            "The model answered and the answer check refused it, or its typed output stayed invalid.",
            on_enter=("record_answer",),
            stop="answer_rejected",
        ),
        StateSpec(
            "StepLimit",
            "absorbing",
            "max_turns model calls were made.",
            on_enter=("close_pending",),
            stop="step_limit",
        ),
        StateSpec("TokenLimit", "absorbing", "The next prompt would exceed max_prompt_tokens.", stop="token_limit"),
        StateSpec("CostLimit", "absorbing", "The next model call's worst case would pass max_cost.", stop="cost_limit"),
        StateSpec(
            "NoProgress",
            "absorbing",
            "The same rejected proposal kept coming back, or an allowed call its same result.",
            on_enter=("name_repeat", "close_pending"),
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
            "Refused",
            "absorbing",
            "The input screen refused the task; no model call was made.",
            stop="refused",
        ),
        StateSpec(
            "Intercepted",
            "absorbing",
            "A result screen stopped the run; the model never read the observation.",
            on_enter=("close_pending",),
            stop="intercepted",
        ),
        StateSpec(
            "Handoff",
            "absorbing",
            "A tool failed permanently; no further tool runs.",
            on_enter=("close_pending",),
            stop="handoff",
        ),
        StateSpec(
            "ToolEnded",
            "absorbing",
            "A tool declared to end the run returned a result.",
            on_enter=("close_pending",),
            stop="tool_ended",
        ),
        StateSpec(
            "HandedOver",
            "absorbing",
            "The agent handed the conversation to another, whose ending is the run's.",
            on_enter=("close_pending", "record_handover"),
            stop="handed_over",
        ),
        StateSpec(
            "Cancelled",
            "absorbing",
            "A person cancelled the run at a pause: the calls it waited on answered as not run.",
            on_enter=("close_pending",),
            stop="cancelled",
        ),
    ),
    edges=(
        Edge("Ready", "next_turn", "StepLimit", guard="turn_budget_spent", meaning="max_turns reached"),
        Edge("Ready", "next_turn", "Compacting", guard="compaction_due", meaning="next prompt passes compact_at"),
        Edge("Ready", "next_turn", "TokenLimit", guard="prompt_over_budget", meaning="next prompt exceeds budget"),
        Edge("Ready", "next_turn", "TimeLimit", guard="time_spent", meaning="time budget spent"),
        Edge(
            "Ready",
            "next_turn",
            "ScreeningInput",
            guard="task_unscreened",
            consumes="task_screen",
            meaning="an input screen reads the task first",
        ),
        Edge("Ready", "next_turn", "CostLimit", guard="cost_over_budget", meaning="worst case passes max_cost"),
        Edge(
            "Ready",
            "next_turn",
            "WrappingUp",
            guard="last_turn_due",
            consumes="turns",
            meaning="the budget admits one more model call: the last word",
        ),
        Edge("Ready", "next_turn", "Proposing", consumes="turns", meaning="budget admits another model call"),
        Edge("ScreeningInput", "screened", "Refused", guard="task_refused", meaning="the input screen refused"),
        Edge("ScreeningInput", "screened", "Ready", meaning="the task passed"),
        Edge(
            "Compacting", "compacted", "StepLimit", guard="turn_budget_spent", meaning="a summary spent the last turn"
        ),
        Edge("Compacting", "compacted", "ProviderError", guard="provider_failed", meaning="the summary call failed"),
        Edge("Compacting", "compacted", "TokenLimit", guard="prompt_over_budget", meaning="compaction cannot fit"),
        Edge("Compacting", "compacted", "TimeLimit", guard="time_spent", meaning="time budget spent"),
        Edge("Compacting", "compacted", "CostLimit", guard="cost_over_budget", meaning="worst case passes max_cost"),
        Edge(
            "Compacting",
            "compacted",
            "WrappingUp",
            guard="last_turn_due",
            consumes="turns",
            meaning="the compacted prompt leaves one more model call: the last word",
        ),
        Edge("Compacting", "compacted", "Proposing", consumes="turns", meaning="the compacted prompt fits"),
        Edge("WrappingUp", "judge", "ProviderError", guard="provider_failed", meaning="model call failed"),
        Edge(
            "WrappingUp", "judge", "CostLimit", guard="wrapped_for_cost", meaning="a call proposed at the money's end"
        ),
        Edge("WrappingUp", "judge", "TimeLimit", guard="wrapped_for_time", meaning="a call proposed at the time's end"),
        Edge(
            "WrappingUp",
            "judge",
            "TokenLimit",
            guard="wrapped_for_tokens",
            meaning="a call proposed at the prompt's end",
        ),
        Edge("WrappingUp", "judge", "StepLimit", guard="calls_pending", meaning="a call proposed all the same"),
        Edge("WrappingUp", "judge", "AnswerRejected", guard="answer_refused", meaning="answer check refused"),
        Edge("WrappingUp", "judge", "Answered", meaning="the last word, coded wrap_up"),
        Edge("Proposing", "judge", "TimeLimit", guard="time_spent", meaning="time budget spent"),
        Edge(
            "Proposing",
            "judge",
            "Proposing",
            guard="can_fall_back",
            consumes="fallbacks",
            meaning="a listed failure: the next model, if the budgets admit it",
        ),
        Edge("Proposing", "judge", "ProviderError", guard="provider_failed", meaning="model call failed"),
        Edge("Proposing", "judge", "OutputInvalid", guard="output_retry_left", meaning="invalid output, retry left"),
        Edge("Proposing", "judge", "AnswerRejected", guard="answer_refused", meaning="answer check refused"),
        Edge("Proposing", "judge", "Answered", guard="reply_has_no_calls", meaning="plain assistant message"),
        Edge("Proposing", "judge", "ToolLimit", guard="tool_budget_spent", meaning="no tool attempts left"),
        # An allowed call, the common case, is tried first: the judgements below exclude one another.
        Edge(
            "Proposing",
            "judge",
            "AwaitingApproval",
            guard="answer_needed",
            meaning="gate allows a call whose result a person gives",
        ),
        Edge("Proposing", "judge", "Executing", guard="call_allowed", meaning="gate allows"),
        Edge("Proposing", "judge", "AwaitingApproval", guard="approval_needed", meaning="gate asks a human"),
        Edge("Proposing", "judge", "Denied", guard="tool_cap_reached", meaning="the tool's max_calls are spent"),
        Edge("Proposing", "judge", "Denied", guard="call_rejected", meaning="invalid, unknown or denied"),
        Edge(
            "Executing",
            "observe",
            "AwaitingApproval",
            guard="approval_needed",
            meaning="the effect may have happened, or the tool asks first",
        ),
        Edge("Executing", "observe", "HandedOver", guard="handed_over", meaning="the agent it handed over to ended"),
        Edge("Executing", "observe", "Handoff", guard="failed_permanently", meaning="the tool cannot recover"),
        Edge("Executing", "observe", "ToolEnded", guard="ended_by_tool", meaning="a tool that ends the run returned"),
        Edge("Executing", "observe", "ScreeningResult", guard="result_unscreened", meaning="a result screen reads it"),
        Edge("Executing", "observe", "NoProgress", guard="result_repeated", meaning="same call, same result again"),
        Edge(
            "Executing",
            "observe",
            "Proposing",
            guard="calls_pending",
            consumes="pending_calls",
            meaning="next call of the same reply",
        ),
        Edge("Executing", "observe", "Ready", meaning="typed observation appended"),
        Edge("TakingAnswer", "observe", "ToolEnded", guard="ended_by_tool", meaning="an answer that ends the run"),
        Edge(
            "TakingAnswer", "observe", "ScreeningResult", guard="result_unscreened", meaning="a result screen reads it"
        ),
        Edge(
            "TakingAnswer",
            "observe",
            "Proposing",
            guard="calls_pending",
            consumes="pending_calls",
            meaning="next call of the same reply",
        ),
        Edge("TakingAnswer", "observe", "Ready", meaning="the answer appended as the call's result"),
        Edge("Denied", "observe", "NoProgress", guard="denial_repeated", meaning="same proposal rejected again"),
        Edge("Denied", "observe", "ScreeningResult", guard="result_unscreened", meaning="a result screen reads it"),
        Edge(
            "Denied",
            "observe",
            "Proposing",
            guard="calls_pending",
            consumes="pending_calls",
            meaning="next call of the same reply",
        ),
        Edge("Denied", "observe", "Ready", meaning="below repeat threshold"),
        Edge(
            "ScreeningResult", "screened", "Intercepted", guard="screen_stopped", meaning="the screen stopped the run"
        ),
        Edge("ScreeningResult", "screened", "NoProgress", guard="result_repeated", meaning="same call, same result"),
        Edge(
            "ScreeningResult",
            "screened",
            "Proposing",
            guard="calls_pending",
            consumes="pending_calls",
            meaning="passed or redacted; next call of the same reply",
        ),
        Edge("ScreeningResult", "screened", "Ready", meaning="passed or redacted"),
        Edge(
            "OutputInvalid",
            "observe",
            "Ready",
            consumes="output_retries",
            meaning="what failed appended; the model answers again",
        ),
        Edge(
            "AwaitingApproval",
            "approve",
            "Executing",
            consumes="decisions",
            meaning="a human approved the call, judged afresh",
        ),
        Edge(
            "AwaitingApproval",
            "answer",
            "TakingAnswer",
            guard="answer_given",
            consumes="decisions",
            meaning="a person answered the call, the answer valid against its result schema",
        ),
        Edge("AwaitingApproval", "reject", "Denied", meaning="a human rejected the call, or it failed afresh"),
        Edge("AwaitingApproval", "cancel", "Cancelled", consumes="decisions", meaning="a person cancelled the run"),
    ),
)
"""The run machine: every state a run can be in and every edge, read by the driver, the diagrams and the checker."""


# --- the compiled machine: a declaration bound to its functions, one per process ---

Vocabulary = Mapping[str, Callable[[Any], Any]]

# One edge as the driver takes it: guard (None: the fallback), destination,
# the destination's on-enter effects, and the event and guard names it reports.
_Row = tuple[Callable[[Any], Any] | None, str, tuple[Callable[[Any], Any], ...], str, str | None]

_GENERATOR = types.GeneratorType

# A dispatch table: the rows of each (state, event), and of each working state's own event (None: resting).
_Table = tuple[dict[tuple[str, str], tuple[_Row, ...]], dict[str, tuple[_Row, ...] | None]]


class CompiledMachine:
    """
    A declaration bound to its guard and effect functions, as one shared ``transitions.Machine``.

    Every run is a plain object with a ``machine_state`` attribute (and, if
    it wants to hear of each move, an ``entered(source, event, guard)``
    method). A run that keeps its place in another object names it as
    ``where``: the machine then moves ``where.machine_state`` and appends
    each state entered to ``where.path``, plain attributes read and written
    in place. Effects are plain functions or generators of driver requests
    (see :mod:`agent_fsm.engine._steps`): :meth:`steps` serves both drivers.
    """

    def __init__(self, spec: MachineSpec, vocabulary: Vocabulary) -> None:
        missing = sorted(spec.names() - set(vocabulary))
        if missing:
            raise MachineDefinitionError(f"machine {spec.name!r}: no function given for {missing}")
        self.spec = spec
        states = [
            State(s.name, on_enter=[vocabulary[n] for n in s.on_enter], final=s.kind == "absorbing")
            for s in spec.states
        ]
        transitions = [
            {
                "trigger": e.event,
                "source": e.source,
                "dest": e.dest,
                "conditions": [vocabulary[e.guard]] if e.guard else [],
            }
            for e in spec.edges
        ]
        self.machine = Machine(
            model=None,  # runs are never attached: each is driven through the table below
            states=states,
            transitions=transitions,
            initial=spec.initial,
            auto_transitions=False,  # no implicit to_<state>() triggers: every move is an edge of the table
            send_event=False,
            model_attribute="machine_state",
            ignore_invalid_triggers=False,
            queued=False,
        )
        self._rows = self._read_rows()
        self._auto = self._auto_rows(self._rows)
        self._without: dict[frozenset[str], _Table] = {frozenset(): (self._rows, self._auto)}

    def _auto_rows(self, rows: dict[tuple[str, str], tuple[_Row, ...]]) -> dict[str, tuple[_Row, ...] | None]:
        auto: dict[str, tuple[_Row, ...] | None] = {}
        for s in self.spec.states:
            event = self.spec.auto_event(s.name)
            auto[s.name] = None if event is None else rows[(s.name, event)]
        return auto

    def without(self, guards: frozenset[str]) -> _Table:
        """
        The dispatch table with the edges guarded by ``guards`` left out, built once per set.

        For a run whose configuration makes those guards false for good (no
        compaction, no screen, no money budget...): leaving their edges out
        changes no move the run can make, only the predicates tried on the way.
        A run offers it as ``run.table``; the declaration is untouched.
        """
        found = self._without.get(guards)
        if found is None:
            rows = {key: tuple(r for r in row if r[4] not in guards) for key, row in self._rows.items()}
            found = self._without[guards] = (rows, self._auto_rows(rows))
        return found

    def _read_rows(self) -> dict[tuple[str, str], tuple[_Row, ...]]:
        """The dispatch table, read off the ``transitions`` machine's events, in table order."""
        rows: dict[tuple[str, str], tuple[_Row, ...]] = {}
        for name, event in self.machine.events.items():
            for source, candidates in event.transitions.items():
                found: list[_Row] = []
                for transition in candidates:
                    assert transition.dest is not None, "every edge has a destination"
                    guard = transition.conditions[0].func if transition.conditions else None
                    effects = tuple(self.machine.get_state(transition.dest).on_enter)
                    label = getattr(guard, "__name__", None) if guard is not None else None
                    found.append((guard, transition.dest, effects, name, label))  # type: ignore[arg-type]
                rows[(source, name)] = tuple(found)
        return rows

    def _refuse(self, run: Any, event: str) -> InvalidTransition:
        source = run.machine_state
        if (source, event) in self._rows:
            detail = "had a guard that held"
        else:
            detail = "exists (it is not a source of that event)"
        return InvalidTransition(
            f"machine {self.spec.name!r}: no edge for event {event!r} from {source!r} {detail}",
            state=getattr(run, "state", None),
            machine_state=source,
            event=event,
        )

    def steps(self, run: Any, event: str | None = None, *, onward: bool = True) -> Steps[str]:
        """
        Fire ``event`` (if given), then, ``onward``, each working state's automatic event until the run rests.

        This is the dispatch loop, the only one: per move, the first edge whose
        guard holds, the run moved, each on-enter effect run (a generator
        effect's requests yielded to the driver). Returns the state reached.
        Raises InvalidTransition when no edge's guard held (a gap in the
        definition) or the state cannot take ``event``.
        """
        # Where the run's place is kept: a RunContext names its state, whose path records each state entered.
        where = getattr(run, "where", None)
        if where is None:
            where = run
            path = None
        else:
            path = where.path
        source: str = where.machine_state
        table = getattr(run, "table", None)
        by_event, auto = (self._rows, self._auto) if table is None else table
        if event is None:
            rows = auto[source]
        else:
            rows = by_event.get((source, event))
            if rows is None:
                raise self._refuse(run, event)
        entered = getattr(run, "entered", None)
        while rows is not None:
            for row in rows:
                guard = row[0]
                if guard is None or guard(run):
                    break
            else:
                raise self._refuse(run, rows[0][3])
            _guard, dest, effects, name, label = row
            where.machine_state = dest
            if path is not None:
                path.append(dest)
            if entered is not None:
                entered(source, name, label)
            for effect in effects:
                step = effect(run)
                if type(step) is _GENERATOR:
                    yield from step
            source = where.machine_state  # where the effects left the run
            rows = auto[source] if onward else None
        return source

    def fire(self, run: Any, event: str) -> None:
        """
        Fire ``event`` for ``run``, synchronously, and nothing more.

        Raises:
            InvalidTransition: no edge's guard held (a gap in the definition).
        """
        drive(self.steps(run, event, onward=False))

    def advance(self, run: Any) -> str:
        """Fire the automatic event of each working state until the run rests, synchronously; return that state."""
        if self._auto[run.machine_state] is None:
            resting: str = run.machine_state
            return resting
        return drive(self.steps(run))


@functools.cache
def _compile_cached(spec: MachineSpec, vocabulary_items: tuple[tuple[str, Any], ...]) -> CompiledMachine:
    return CompiledMachine(spec, dict(vocabulary_items))


def compile_machine(spec: MachineSpec, vocabulary: Vocabulary) -> CompiledMachine:
    """Compile ``spec`` once per process (cached on the spec and the functions given)."""
    return _compile_cached(spec, tuple(sorted(vocabulary.items())))
