"""
Machines as data: a declaration (:class:`MachineSpec`) and the run machine's table.

A :class:`MachineSpec` is only a declaration: states, edges, budgets. It is
immutable and checked when created. Diagrams, the static checker and the
engine all read the same declaration; :mod:`agent_fsm.engine.compiled` turns
it into the running ``transitions`` machine.
"""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import textwrap
import types
from collections.abc import Callable, Mapping
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
        "decisions": "a person's decisions: the run rests until each is made, and each is made once",
        "task_screen": "the task is screened once, before the first model call",
        "output_retries": "answers sent back as invalid typed output, at most Limits.output_retries",
        "fallbacks": "models left in a FallbackModel's chain this turn; only a reply refills them",
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
            "The gate asked for a human; resume() approves or rejects the blocked call.",
            stop=Stop.AWAITING_APPROVAL.value,
        ),
        StateSpec("Answered", "absorbing", "The model answered.", on_enter=("record_answer",), stop="answered"),
        StateSpec(
            "AnswerRejected",
            "absorbing",
            "The model answered and the answer check refused it, or its typed output stayed invalid.",
            on_enter=("record_answer",),
            stop="answer_rejected",
        ),
        StateSpec("StepLimit", "absorbing", "max_turns model calls were made.", stop="step_limit"),
        StateSpec("TokenLimit", "absorbing", "The next prompt would exceed max_prompt_tokens.", stop="token_limit"),
        StateSpec("CostLimit", "absorbing", "The next model call's worst case would pass max_cost.", stop="cost_limit"),
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
        Edge("Compacting", "compacted", "Proposing", consumes="turns", meaning="the compacted prompt fits"),
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
        Edge("AwaitingApproval", "reject", "Denied", meaning="a human rejected the call, or it failed afresh"),
    ),
)
"""The run machine: every state a run can be in and every edge, read by the driver, the diagrams and the checker."""


# --- the compiled machine: a declaration bound to its functions, one per process ---

Vocabulary = Mapping[str, Callable[[Any], Any]]

# One edge as the driver takes it: guard (None: the fallback), destination,
# the destination's on-enter effects, and the event and guard names it reports.
_Row = tuple[Callable[[Any], Any] | None, str, tuple[Callable[[Any], Any], ...], str, str | None]

_GENERATOR = types.GeneratorType

# Picks the row a move takes: the first whose guard holds, or None when none does.
_Choose = Callable[[Any], "_Row | None"]
# A dispatch table: the chain of each (state, event), and of each working state's own event (None: resting).
_Table = tuple[dict[tuple[str, str], _Choose], dict[str, _Choose | None]]
_NONE: frozenset[str] = frozenset()


# --- guard chains: one function per source state and event ---------------------------------------
#
# A move tries the guards of its state's edges in table order. Calling each
# guard is most of what a move costs, so each chain of rows is compiled into
# one function, built the first time a table is used: every guard that is a
# plain ``return`` of an expression over its one argument (with assignments
# before it, if any) is read from its source and written out in place, in
# table order; any other callable is called as it is. A guard stays a pure
# predicate declared once; the chain only saves the calls. The source read is
# checked against the guard's own code (compiled again, the bytecode must
# match), so an edited file or a decorated guard is called, never misread.


# A guard taking *args or **kwargs, or a generator or coroutine function, is called as it is.
_NOT_PLAIN = (
    inspect.CO_VARARGS
    | inspect.CO_VARKEYWORDS
    | inspect.CO_GENERATOR
    | inspect.CO_COROUTINE
    | inspect.CO_ITERABLE_COROUTINE
    | inspect.CO_ASYNC_GENERATOR
)


@functools.cache
def _inline(guard: Callable[[Any], Any]) -> tuple[tuple[str, ...], str] | None:
    """``guard``'s body as lines of statements and a final test, over ``run``; ``None`` if it must be called."""
    code = getattr(guard, "__code__", None)
    if (
        type(guard) is not types.FunctionType
        or code is None
        or code.co_argcount != 1
        or code.co_kwonlyargcount
        or code.co_flags & _NOT_PLAIN
        or guard.__closure__
        or guard.__defaults__
    ):
        return None
    last = max((end for _, end, _, _ in code.co_positions() if end is not None), default=None)
    lines = linecache.getlines(code.co_filename)
    if last is None or not lines:
        return None
    text = textwrap.dedent("".join(lines[code.co_firstlineno - 1 : last]))
    try:
        tree = ast.parse(text)
        function = tree.body[0]
        if not isinstance(function, ast.FunctionDef) or function.name != guard.__name__ or function.decorator_list:
            return None
        compiled = compile(tree, code.co_filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, IndexError):
        return None
    again = next((c for c in compiled.co_consts if isinstance(c, types.CodeType)), None)
    if again is None or any(
        getattr(again, a) != getattr(code, a) for a in ("co_code", "co_consts", "co_names", "co_varnames")
    ):
        return None  # the file no longer holds this guard's code
    return _rewritten(function, [line.encode() for line in text.splitlines()])


def _rewritten(function: ast.FunctionDef, source: list[bytes]) -> tuple[tuple[str, ...], str] | None:
    """
    The body's text with its argument named ``run`` and its locals given names of their own; ``None`` if not plain.

    The text is the guard's own (its lines, as UTF-8, where the tree's offsets point), each name replaced in place.
    """
    body = function.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if not body or not isinstance(body[-1], ast.Return) or body[-1].value is None:
        return None
    local: dict[str, str] = {function.args.args[0].arg: "run"}
    for statement in body[:-1]:
        if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1):
            return None
        target = statement.targets[0]
        if not isinstance(target, ast.Name):
            return None
        local.setdefault(target.id, f"_{function.name}_{target.id}")
    renames: list[tuple[int, int, int, str]] = []
    for node in ast.walk(function):
        if isinstance(node, _OWN_SCOPE):
            return None  # a scope or a binding of its own: called, not written out
        if isinstance(node, ast.Name):
            if node.id in local:
                renames.append((node.lineno, node.col_offset, node.end_col_offset or 0, local[node.id]))
            elif node.id.startswith(("_row", "_guard")) or node.id in ("choose", "chain"):
                return None  # a global the chain's own names would hide
    *statements, last = body
    texts = [_segment(source, node, renames) for node in (*statements, last.value)]  # type: ignore[attr-defined]
    return tuple(texts[:-1]), texts[-1]


def _segment(source: list[bytes], node: ast.AST, renames: list[tuple[int, int, int, str]]) -> str:
    """``node``'s text in ``source``, with the names in ``renames`` (line, start, end, new name) replaced."""
    first, start = node.lineno, node.col_offset  # type: ignore[attr-defined]
    end_line, end = node.end_lineno, node.end_col_offset  # type: ignore[attr-defined]
    lines = source[first - 1 : end_line]
    lines[-1] = lines[-1][:end]
    for line, begin, stop, new in sorted(renames, reverse=True):  # from the end: earlier offsets stay true
        if first <= line <= end_line and (line, begin) >= (first, start):
            i = line - first
            lines[i] = lines[i][:begin] + new.encode() + lines[i][stop:]
    lines[0] = lines[0][start:]
    return b"\n".join(lines).decode()


_OWN_SCOPE = (
    ast.Lambda,
    ast.comprehension,
    ast.NamedExpr,
    ast.Yield,
    ast.YieldFrom,
    ast.Await,
    ast.Global,
    ast.Nonlocal,
)


def _no_row(run: Any) -> None:
    return None


def _chain(rows: tuple[_Row, ...], title: str, inline: bool = True) -> _Choose:
    """
    The rows' guards as one function, tried in table order: the first row whose guard holds (``None``: none).

    Guards written out run in the globals of the module that holds them: the
    chain takes the globals most of them share; a guard of another module is
    called. A chain whose text does not compile calls every guard instead.
    """
    if not rows:
        return _no_row
    inlined = [None if row[0] is None or not inline else _inline(row[0]) for row in rows]
    homes = [row[0].__globals__ for row, body in zip(rows, inlined, strict=True) if body is not None]  # type: ignore[union-attr]
    home = max(homes, key=lambda g: sum(h is g for h in homes)) if homes else {}
    names = [f"_row{i}" for i in range(len(rows))] + [f"_guard{i}" for i in range(len(rows))]
    lines = [f"def chain({', '.join(names)}):"]
    lines.append("    def choose(run):")
    for i, (row, body) in enumerate(zip(rows, inlined, strict=True)):
        guard = row[0]
        if guard is None:
            lines.append(f"        return _row{i}")
            break
        if body is None or guard.__globals__ is not home:
            lines.append(f"        if _guard{i}(run):")
        else:
            statements, test = body
            lines.extend(f"        {statement}" for statement in statements)
            lines.append(f"        if ({test}):")
        lines.append(f"            return _row{i}")
    else:
        lines.append("        return None")
    lines.append("    return choose")
    source = "\n".join(lines) + "\n"
    filename = f"<guards of {title}>"
    try:
        maker = next(c for c in compile(source, filename, "exec").co_consts if isinstance(c, types.CodeType))
    except SyntaxError:
        return _chain(rows, title, inline=False)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)  # tracebacks show the chain
    choose: _Choose = types.FunctionType(maker, home)(*rows, *(row[0] for row in rows))
    choose.__qualname__ = f"guards of {title}"
    return choose


class CompiledMachine:
    """
    A declaration bound to its guard and effect functions, as one shared ``transitions.Machine``.

    Every run is a plain object with a ``machine_state`` attribute (and, if
    it wants to hear of each move, an ``entered(source, event, guard)``
    method). A run that keeps its place in another object names it as
    ``where``: the machine then moves ``where.machine_state`` and appends
    each state entered to ``where.path``, plain attributes read and written
    in place. Effects are plain functions or generators of driver requests
    (see :mod:`agent_fsm.engine.steps`): :meth:`steps` serves both drivers.
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
        # The dispatch tables, per set of guards left out: built on first use (see without).
        self._without: dict[frozenset[str], _Table] = {}
        self._chains: dict[tuple[_Row, ...], _Choose] = {}

    def _table(self, rows: dict[tuple[str, str], tuple[_Row, ...]]) -> _Table:
        """Each (state, event)'s rows as one chain of guards, and each working state's chain for its own event."""
        name = self.spec.name
        chains = {}
        for key, row in rows.items():
            chain = self._chains.get(row)  # tables that leave out other guards share the chains they agree on
            if chain is None:
                chain = self._chains[row] = _chain(row, f"{name}: {key[0]} --{key[1]}-->")
            chains[key] = chain
        auto: dict[str, _Choose | None] = {}
        for s in self.spec.states:
            event = self.spec.auto_event(s.name)
            auto[s.name] = None if event is None else chains[(s.name, event)]
        return chains, auto

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
            found = self._without[guards] = self._table(rows)
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

    def _refuse(self, run: Any, event: str | None) -> InvalidTransition:
        """No edge for ``event`` (``None``: the state's own event) from where the run is."""
        source = run.machine_state
        if event is None:
            event = self.spec.auto_event(source) or ""
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
        by_event, auto = self.without(_NONE) if table is None else table
        if event is None:
            choose = auto[source]
        else:
            choose = by_event.get((source, event))
            if choose is None:
                raise self._refuse(run, event)
        entered = getattr(run, "entered", None)
        while choose is not None:
            row = choose(run)
            if row is None:
                raise self._refuse(run, event)
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
            event = None
            choose = auto[source] if onward else None
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
        if self.spec.state(run.machine_state).is_resting:
            resting: str = run.machine_state
            return resting
        return drive(self.steps(run))


@functools.cache
def _compile_cached(spec: MachineSpec, vocabulary_items: tuple[tuple[str, Any], ...]) -> CompiledMachine:
    return CompiledMachine(spec, dict(vocabulary_items))


def compile_machine(spec: MachineSpec, vocabulary: Vocabulary) -> CompiledMachine:
    """Compile ``spec`` once per process (cached on the spec and the functions given)."""
    return _compile_cached(spec, tuple(sorted(vocabulary.items())))
