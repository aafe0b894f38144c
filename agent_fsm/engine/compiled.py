"""
A declaration bound to its guard and effect functions: one ``transitions.Machine`` per process.

:func:`compile_machine` builds the machine once and caches it; every run is
passed to the machine's events as the model, never attached to it, so a run
costs no machine of its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from transitions import Event, Machine, State, Transition

from agent_fsm.engine.errors import MachineDefinitionError
from agent_fsm.engine.failures import InvalidTransition
from agent_fsm.engine.machine import MachineSpec

__all__ = ["CompiledMachine", "Vocabulary", "compile_machine"]


Vocabulary = Mapping[str, Callable[[Any], Any]]


# The two classes below are transitions' documented extension points
# (Machine.transition_cls / event_cls). The stock Transition.execute logs
# every step and resolves each callback by name; on the engine's hot path,
# a few transitions per model turn, that cost as much as the turn's real
# work. A compiled machine only ever declares guards and on-enter effects
# as plain functions of the run, so these keep exactly that and nothing else.


class _GuardedTransition(Transition):
    """A transition whose guards and destination effects are functions of the run."""

    effects: tuple[Callable[[Any], Any], ...] = ()

    def execute(self, event_data: Any) -> bool:
        run = event_data.model
        for condition in self.conditions:
            if condition.func(run) != condition.target:  # type: ignore[operator]  # compiled to callables
                return False
        run.machine_state = self.dest
        for effect in self.effects:
            effect(run)
        return True


class _DirectEvent(Event):
    """An event fired straight at its transitions: the shared machine is never queued."""

    def trigger(self, model: Any, *args: Any, **kwargs: Any) -> bool:
        candidates = self.transitions.get(getattr(model, self.machine.model_attribute))
        if candidates is None:  # not a source of this event: let transitions raise its MachineError
            return super().trigger(model, *args, **kwargs)
        return any(transition.execute(_FiredEvent(model)) for transition in candidates)  # type: ignore[arg-type]


class _FiredEvent:
    """The one thing a guarded transition reads from its event: the run."""

    __slots__ = ("model",)

    def __init__(self, model: Any) -> None:
        self.model = model


class _SharedMachine(Machine):
    transition_cls = _GuardedTransition
    event_cls = _DirectEvent


class CompiledMachine:
    """
    A declaration bound to its guard and effect functions, as one shared ``transitions.Machine``.

    Every run is a plain object with a ``machine_state`` attribute; it is
    passed to each event as the model (and as the single argument guards and
    effects receive), so no per-run machine or ``add_model`` is needed.
    """

    def __init__(self, spec: MachineSpec, vocabulary: Vocabulary) -> None:
        missing = sorted(spec.names() - set(vocabulary))
        if missing:
            raise MachineDefinitionError(f"machine {spec.name!r}: no function given for {missing}")
        self.spec = spec
        states = [
            State(
                s.name,
                on_enter=[vocabulary[n] for n in s.on_enter],
                final=s.kind == "absorbing",
            )
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
        self.machine = _SharedMachine(
            model=None,  # runs are never attached: each is passed to the event it triggers
            states=states,
            transitions=transitions,
            initial=spec.initial,
            auto_transitions=False,  # no implicit to_<state>() triggers: every move is an edge of the table
            send_event=False,  # guards and effects receive the run itself, the only trigger argument
            model_attribute="machine_state",
            ignore_invalid_triggers=False,  # an event the state cannot take is a bug and raises
            queued=False,  # shared by all runs; the driver is the only caller, effects never trigger
        )
        for event in self.machine.events.values():
            for candidates in event.transitions.values():
                for transition in candidates:
                    assert transition.dest is not None, "every edge has a destination"
                    transition.effects = tuple(self.machine.get_state(transition.dest).on_enter)  # type: ignore[attr-defined]
        self._events = {name: self.machine.events[name] for name in {e.event for e in spec.edges}}
        self._auto = {s.name: spec.auto_event(s.name) for s in spec.states}

    def fire(self, run: Any, event: str) -> None:
        """
        Fire ``event`` for ``run``.

        Raises:
            InvalidTransition: no edge's guard held (a gap in the definition).
        """
        source = run.machine_state
        if not self._events[event].trigger(run, run):
            raise InvalidTransition(
                f"machine {self.spec.name!r}: no edge for event {event!r} from {source!r} had a guard that held",
                state=getattr(run, "state", None),
                machine_state=source,
                event=event,
            )

    def advance(self, run: Any) -> str:
        """Fire the automatic event of each working state until the run rests; return that state."""
        auto = self._auto
        while (event := auto[run.machine_state]) is not None:
            self.fire(run, event)
        resting: str = run.machine_state
        return resting


@functools.cache
def _compile_cached(spec: MachineSpec, vocabulary_items: tuple[tuple[str, Any], ...]) -> CompiledMachine:
    return CompiledMachine(spec, dict(vocabulary_items))


def compile_machine(spec: MachineSpec, vocabulary: Vocabulary) -> CompiledMachine:
    """Compile ``spec`` once per process (cached on the spec and the functions given)."""
    return _compile_cached(spec, tuple(sorted(vocabulary.items())))
