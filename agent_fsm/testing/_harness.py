"""
A stateful harness: Hypothesis chooses the model's next reply and the human's decisions, step by step.

Rationale: the engine's driver runs until the run rests, asking the model as
often as it needs. To let a rule decide *each* reply, the harness keeps the
replies and decisions chosen so far and replays them from a fresh world
after every step, with a model that reports a provider failure
(``kind="script_end"``) when it runs out of replies. The replayed run rests
exactly where the next reply is needed, uses only the public driver, and
every replay doubles as a determinism check: the new transcript must extend
the previous one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, cast

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agent_fsm.engine.driver import resume, run
from agent_fsm.engine.errors import ProviderFailure
from agent_fsm.engine.gates import Gate, deny_effects
from agent_fsm.engine.limits import Limits, Stop
from agent_fsm.engine.state import RunResult, RunState
from agent_fsm.engine.tools import ToolCall
from agent_fsm.testing._drive import (
    DEFAULT_TASK,
    GateFactory,
    RunContext,
    World,
    _Watched,
    describe_run,
    world_of,
)
from agent_fsm.testing._invariants import (
    InvariantViolation,
    assert_nothing_forbidden,
    assert_run_invariants,
)
from agent_fsm.testing._schema import constants_of
from agent_fsm.testing._strategies import MessageKind, assistant_messages

__all__ = ["RunHarness", "run_harness"]

SCRIPT_END = "script_end"
"""The provider-failure kind the harness's model reports when it is out of replies."""


class _Replies:
    """Plays the chosen replies in order; out of replies, the run must rest and wait for the next rule."""

    def __init__(self, replies: Sequence[dict[str, Any]]) -> None:
        self.replies = list(replies)
        self.used = 0

    def __repr__(self) -> str:
        return f"_Replies({self.replies!r})"

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        if self.used >= len(self.replies):
            raise ProviderFailure("waiting for the next reply", kind=SCRIPT_END)
        self.used += 1
        return self.replies[self.used - 1]


def _replies(*kinds: MessageKind) -> st.SearchStrategy[dict[str, Any]]:
    return st.runner().flatmap(lambda harness: harness.replies_of(kinds))


class RunHarness(RuleBasedStateMachine):
    """
    Drive runs turn by turn under your registry, gate and limits, checking the invariants after every step.

    Subclass it and override :meth:`make_world` (and :meth:`make_gate`,
    ``limits``, ``forbidden`` as needed), or build the subclass with
    :func:`run_harness`; then expose ``TestCase`` to pytest::

        class DeskRun(RunHarness):
            limits = Limits(max_turns=6)

            def make_world(self):
                return make_support_desk()

            def make_gate(self, context):
                return refund_gate

        TestDeskRun = DeskRun.TestCase

    Rules propose a valid call, arguments the contract refuses, broken JSON,
    an unknown tool, several calls at once, or an answer; when the gate asks,
    rules approve or reject (once from the state saved to JSON and loaded
    back); an ended run makes way for a new one. After every step the run
    satisfies :func:`assert_run_invariants` (with the gate re-asked about
    every executed call, so the gate must be a function of the call alone;
    set ``recheck_gate = False`` otherwise).
    """

    limits: ClassVar[Limits] = Limits()
    task: ClassVar[str] = DEFAULT_TASK
    forbidden: ClassVar[Callable[[ToolCall], bool] | None] = None
    recheck_gate: ClassVar[bool] = True

    def make_world(self) -> Any:
        """A fresh world: a registry, or an object with ``.tools`` and ``.effects``."""
        raise NotImplementedError("override make_world() (or build the harness with run_harness(tools_factory, ...))")

    def make_gate(self, context: RunContext) -> Gate:
        """The gate under test, for a fresh world (default: the secure default, effects denied)."""
        return deny_effects(context.tools)

    def __init__(self) -> None:
        super().__init__()
        self.replies: list[dict[str, Any]] = []
        self.decisions: list[tuple[bool, bool]] = []  # (approve, resumed from a JSON copy)
        self.world: World = world_of(self.make_world())
        self.gate: Gate = self.make_gate(RunContext(self.world.tools, self.world.effects))
        self.result: RunResult | None = None
        self.approved: tuple[str, ...] = ()
        self._replay()

    # --- replay ------------------------------------------------------------

    def _replay(self) -> None:
        world = world_of(self.make_world())
        context = RunContext(world.tools, world.effects)
        gate = self.make_gate(context)
        model = _Watched(_Replies(self.replies), context)
        result = run(self.task, model, world.tools, gate=gate, limits=self.limits)
        approved: list[str] = []
        for approve, via_json in self.decisions:
            assert result.stop is Stop.AWAITING_APPROVAL and result.blocked_on is not None
            if approve:
                approved.append(result.blocked_on.call_id)
            state = RunState.from_json(result.state.to_json()) if via_json else result.state
            result = resume(state, model, world.tools, approve=approve, gate=gate, limits=self.limits)
        previous = self.result
        self.world, self.gate, self.result, self.approved = world, gate, result, tuple(approved)
        if previous is not None:
            old, new = previous.state.messages, result.state.messages
            if new[: len(old)] != old:
                raise InvariantViolation(
                    "deterministic_replay",
                    "replaying the same replies and decisions gave a different transcript\n"
                    f"before:\n{describe_run(previous)}\nafter:\n{describe_run(result)}",
                )

    def replies_of(self, kinds: tuple[MessageKind, ...]) -> st.SearchStrategy[dict[str, Any]]:
        """
        Replies of ``kinds`` for this harness's registry, trying the constants
        the gate and ``forbidden`` compare against; built once per harness
        class (strategies are costly to build).
        """
        cls = type(self)
        cache = cls.__dict__.get("_reply_strategies")
        if cache is None:
            cache = {}
            cls._reply_strategies = cache
        if kinds not in cache:
            constants = constants_of(self.gate, type(self).forbidden)
            cache[kinds] = assistant_messages(self.world.tools, kinds=kinds, constants=constants)
        return cast("st.SearchStrategy[dict[str, Any]]", cache[kinds])

    @property
    def waiting(self) -> bool:
        """The run rests where it needs the model's next reply."""
        fault = self.result.state.fault if self.result is not None else None
        return fault is not None and fault.kind == SCRIPT_END

    @property
    def paused(self) -> bool:
        """The gate asked a human about the blocked call."""
        return self.result is not None and self.result.stop is Stop.AWAITING_APPROVAL

    def _propose(self, reply: dict[str, Any]) -> None:
        self.replies.append(reply)
        self._replay()

    def _decide(self, approve: bool, via_json: bool) -> None:
        self.decisions.append((approve, via_json))
        self._replay()

    # --- rules ---------------------------------------------------------------

    @precondition(lambda self: self.waiting)
    @rule(reply=_replies("call"))
    def propose_valid_call(self, reply: dict[str, Any]) -> None:
        """The model proposes a call its contract accepts."""
        self._propose(reply)

    @precondition(lambda self: self.waiting)
    @rule(reply=_replies("bad_arguments", "bad_json"))
    def propose_invalid_call(self, reply: dict[str, Any]) -> None:
        """The model proposes arguments the contract refuses, or text that is not a JSON object."""
        self._propose(reply)

    @precondition(lambda self: self.waiting)
    @rule(reply=_replies("unknown_tool"))
    def propose_unknown_tool(self, reply: dict[str, Any]) -> None:
        """The model names a tool outside the registry."""
        self._propose(reply)

    @precondition(lambda self: self.waiting)
    @rule(reply=_replies("parallel"))
    def propose_several_calls(self, reply: dict[str, Any]) -> None:
        """The model proposes several calls in one message."""
        self._propose(reply)

    @precondition(lambda self: self.waiting)
    @rule(reply=_replies("answer"))
    def answer(self, reply: dict[str, Any]) -> None:
        """The model answers in plain text."""
        self._propose(reply)

    @precondition(lambda self: self.paused)
    @rule(via_json=st.booleans())
    def approve(self, via_json: bool) -> None:
        """A human approves the blocked call (possibly resuming a copy loaded from JSON)."""
        self._decide(True, via_json)

    @precondition(lambda self: self.paused)
    @rule(via_json=st.booleans())
    def reject(self, via_json: bool) -> None:
        """A human rejects the blocked call."""
        self._decide(False, via_json)

    @precondition(lambda self: not self.waiting and not self.paused)
    @rule()
    def start_new_run(self) -> None:
        """The run ended; start another in a fresh world."""
        self.replies, self.decisions, self.result = [], [], None
        self._replay()

    # --- invariants ------------------------------------------------------------

    @invariant()
    def run_invariants_hold(self) -> None:
        """Every invariant of the run so far, and the forbidden-effect predicate if one is set."""
        assert self.result is not None
        result = self.result
        try:
            assert_run_invariants(
                result,
                self.world.effects,
                self.limits,
                tools=self.world.tools,
                gate=self.gate if self.recheck_gate else None,
                approved=self.approved,
            )
            forbidden = type(self).forbidden
            if forbidden is not None:
                assert_nothing_forbidden(result.state, forbidden, self.approved)
        except InvariantViolation as exc:
            exc.add_note("the run, message by message:\n" + describe_run(result))
            raise


def run_harness(
    tools_factory: Callable[[], Any],
    *,
    gate: Gate | None = None,
    gate_factory: GateFactory | None = None,
    limits: Limits = Limits(),
    forbidden: Callable[[ToolCall], bool] | None = None,
    recheck_gate: bool = True,
    name: str = "ConfiguredRunHarness",
) -> type[RunHarness]:
    """
    A :class:`RunHarness` subclass for ``tools_factory`` and a gate (or a
    ``gate_factory`` taking a :class:`RunContext`); its ``TestCase`` is a pytest test.
    """
    if gate is not None and gate_factory is not None:
        raise TypeError("give at most one of gate= and gate_factory=")

    def make_world(self: RunHarness) -> Any:
        return tools_factory()

    def make_gate(self: RunHarness, context: RunContext) -> Gate:
        if gate_factory is not None:
            return gate_factory(context)
        return gate if gate is not None else deny_effects(context.tools)

    namespace = {
        "make_world": make_world,
        "make_gate": make_gate,
        "limits": limits,
        "forbidden": staticmethod(forbidden) if forbidden is not None else None,
        "recheck_gate": recheck_gate,
    }
    return type(name, (RunHarness,), namespace)
