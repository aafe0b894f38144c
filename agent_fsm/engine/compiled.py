"""
A declaration bound to its guard and effect functions: one ``transitions.Machine`` per process.

:func:`compile_machine` builds the machine once and caches it, then reads
a dispatch table off the machine's own edges (per state, its edges in
table order: guard, destination, the destination's on-enter effects).
Every run is driven through that table and passed as the single argument
guards and effects receive, so a run costs no machine of its own and a
step costs a dictionary look-up and the guards it tries.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Mapping
from typing import Any

from transitions import Machine, State

from agent_fsm.engine.errors import MachineDefinitionError
from agent_fsm.engine.failures import InvalidTransition
from agent_fsm.engine.machine import MachineSpec
from agent_fsm.engine.steps import Steps, drive

__all__ = ["CompiledMachine", "Vocabulary", "compile_machine"]


Vocabulary = Mapping[str, Callable[[Any], Any]]

# One edge as the driver takes it: guard (None: the fallback), destination,
# the destination's on-enter effects, and the event and guard names it reports.
_Row = tuple[Callable[[Any], Any] | None, str, tuple[Callable[[Any], Any], ...], str, str | None]

_GENERATOR = types.GeneratorType


class CompiledMachine:
    """
    A declaration bound to its guard and effect functions, as one shared ``transitions.Machine``.

    Every run is a plain object with a ``machine_state`` attribute (and, if
    it wants to hear of each move, an ``entered(source, event, guard)``
    method). Effects are plain functions or generators of driver requests
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
        self._auto: dict[str, tuple[_Row, ...] | None] = {}
        for s in spec.states:
            event = spec.auto_event(s.name)
            self._auto[s.name] = None if event is None else self._rows[(s.name, event)]

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

    def steps(self, run: Any, event: str | None = None) -> Steps[str]:
        """
        Fire ``event`` (if given), then each working state's automatic event, until the run rests.

        Returns the resting state. Raises InvalidTransition when no edge's
        guard held (a gap in the definition) or the state cannot take ``event``.
        """
        if event is not None:
            yield from self._one(run, event)
        entered = getattr(run, "entered", None)
        auto = self._auto
        source: str = run.machine_state
        while (rows := auto[source]) is not None:
            for row in rows:
                guard = row[0]
                if guard is None or guard(run):
                    break
            else:
                raise self._refuse(run, rows[0][3])
            _guard, dest, effects, name, label = row
            run.machine_state = dest
            if entered is not None:
                entered(source, name, label)
            for effect in effects:
                step = effect(run)
                if type(step) is _GENERATOR:
                    yield from step
            source = run.machine_state  # where the effects left the run
        return source

    def fire(self, run: Any, event: str) -> None:
        """
        Fire ``event`` for ``run``, synchronously, and nothing more.

        Raises:
            InvalidTransition: no edge's guard held (a gap in the definition).
        """
        drive(self._one(run, event))

    def _one(self, run: Any, event: str) -> Steps[None]:
        rows = self._rows.get((run.machine_state, event))
        if rows is None:
            raise self._refuse(run, event)
        for guard, dest, effects, _name, label in rows:
            if guard is None or guard(run):
                source = run.machine_state
                run.machine_state = dest
                entered = getattr(run, "entered", None)
                if entered is not None:
                    entered(source, event, label)
                for effect in effects:
                    step = effect(run)
                    if type(step) is _GENERATOR:
                        yield from step
                return
        raise self._refuse(run, event)

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
