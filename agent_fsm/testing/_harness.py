"""
A stateful harness: Hypothesis chooses the model's next reply and the human's decisions, step by step.

Rationale: the engine's driver runs until the run rests, asking the model as
often as it needs. To let a rule decide *each* reply, the harness drives the
one live run with a turn budget of exactly the replies chosen so far: when
the run would ask for one more, it stops in ``StepLimit`` straight from
``Ready``, an edge with no effects. That stop is the harness's pause, not the
run's ending: the next reply reopens the run at ``Ready`` and the public
driver (:func:`agent_fsm.advance`, :func:`agent_fsm.resume`) carries on, so
each step costs one turn, never a replay of the whole run. When a run ends it
is replayed once from scratch with the same replies and decisions, which
checks that handlers and gates are deterministic.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, cast

import attrs
from hypothesis import HealthCheck, Phase
from hypothesis import settings as Settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agent_fsm.engine import (
    Agent,
    Gate,
    Limits,
    ProviderFailure,
    RunResult,
    RunState,
    Stop,
    ToolCall,
    deny_effects,
)
from agent_fsm.testing._constants import gate_constants
from agent_fsm.testing._drive import (
    CANCEL,
    DEFAULT_TASK,
    GateContext,
    GateFactory,
    World,
    describe_run,
    world_of,
)
from agent_fsm.testing._invariants import (
    CallMatch,
    InvariantViolation,
    assert_nothing_forbidden,
    assert_run_invariants,
    by_call,
)
from agent_fsm.testing._strategies import MessageKind, assistant_messages
from agent_fsm.testing._watchdog import _Watched

__all__ = ["RunHarness", "run_harness"]

SCRIPT_END = "script_end"
"""The provider-failure kind the harness's replay model reports when it is out of replies."""


class _Replies:
    """Plays the chosen replies in order; out of replies, it reports a provider failure."""

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
    set ``recheck_gate = False`` otherwise). ``match`` (a static method
    ``match(effect, call)``) ties the world's own effect-log entries to calls,
    as in :func:`check_gate_contains`.
    """

    limits: ClassVar[Limits] = Limits()
    task: ClassVar[str] = DEFAULT_TASK
    forbidden: ClassVar[Callable[[ToolCall], bool] | None] = None
    recheck_gate: ClassVar[bool] = True
    match: ClassVar[CallMatch | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # As Hypothesis sets up a state machine's test case, but without the
        # explain phase: it replays a failing program hundreds of times, which
        # for whole runs takes several times longer than finding and shrinking
        # the failure (a @settings decorator on the subclass still wins).
        cls.TestCase.settings = Settings(
            deadline=None, suppress_health_check=list(HealthCheck), phases=[p for p in Phase if p is not Phase.explain]
        )

    def make_world(self) -> Any:
        """A fresh world: an :class:`agent_fsm.Agent`, a registry, or an object with ``.tools`` and ``.effects``."""
        raise NotImplementedError("override make_world() (or build the harness with run_harness(tools_factory, ...))")

    def make_gate(self, context: GateContext) -> Gate:
        """The gate under test, for a fresh world (default: the world's agent's own, else effects denied)."""
        agent = self.world.agent
        return agent.gate if agent is not None and agent.gate is not None else deny_effects(context.tools)

    def __init__(self) -> None:
        super().__init__()
        self._new_run()

    # --- the live run ----------------------------------------------------------

    def _new_run(self) -> None:
        self.replies: list[dict[str, Any]] = []
        self.decisions: list[tuple[bool | str, bool]] = []  # (approve, or CANCEL; resumed from a JSON copy)
        self.world: World = world_of(self.make_world())
        self.context = GateContext(self.world.tools, self.world.effects)
        self.gate: Gate = self.make_gate(self.context)
        self.state: RunState = self._agent(_Replies([]), self.limits).start(self.task)
        self.result: RunResult | None = None
        self.checked_limits: Limits = self.limits
        self.approved: tuple[str, ...] = ()

    def _agent(self, model: Any, limits: Limits, world: World | None = None, gate: Gate | None = None) -> Agent:
        """
        The world's agent (its answer check, endings, prompt and estimator hold), or one of its tools,
        with the harness's model, the gate under test and ``limits`` in their place.
        """
        world = self.world if world is None else world
        judge = self.gate if gate is None else gate
        base = world.agent if world.agent is not None else Agent(model, world.tools, gate=judge)
        return base.replace(model=model, gate=judge, limits=limits)

    def _limits_for(self, replies: int) -> Limits:
        """The real limits with a turn budget of at most ``replies`` more model calls."""
        return attrs.evolve(self.limits, max_turns=min(self.limits.max_turns, self.state.turns + replies))

    def _rested(self, result: RunResult, limits: Limits) -> None:
        self.state, self.result, self.checked_limits = result.state, result, limits

    def _reopen(self) -> None:
        """Undo the harness's pause: the run goes back to ``Ready``, where it stopped for want of a reply."""
        if self.result is not None and self.waiting:
            assert self.state.path and self.state.path[-1] == "StepLimit", "the pause is a StepLimit entered from Ready"
            self.state.path.pop()
            self.state.machine_state = "Ready"

    def _propose(self, reply: dict[str, Any]) -> None:
        self._reopen()
        self.replies.append(reply)
        limits = self._limits_for(1)
        model = _Watched(_Replies([reply]), self.context)
        self._rested(self._agent(model, limits).advance(self.state), limits)

    def _decide(self, approve: bool | str, via_json: bool) -> None:
        assert self.result is not None and self.result.blocked_on is not None
        self.decisions.append((approve, via_json))
        if approve is True:
            self.approved = (*self.approved, self.result.blocked_on.call_id)
        state = RunState.from_json(self.state.to_json()) if via_json else self.state
        limits = self._limits_for(0)
        agent = self._agent(_Watched(_Replies([]), self.context), limits)
        if approve == CANCEL:
            self._rested(agent.cancel(state, by="harness", reason="a random cancel"), limits)
        else:
            self._rested(agent.resume(state, approve=bool(approve)), limits)

    def _check_replay(self) -> None:
        """
        Replay the run from a fresh world with the same replies and decisions, on the async driver:
        the transcript must agree, so every step also holds the two drivers to one behaviour.
        """
        if self.result is None:
            return
        replayed = asyncio.run(self._replayed())
        if replayed.state.messages != self.state.messages:
            raise InvariantViolation(
                "deterministic_replay",
                "replaying the same replies and decisions gave a different transcript\n"
                f"live:\n{describe_run(self.result)}\nreplayed:\n{describe_run(replayed)}",
            )

    async def _replayed(self) -> RunResult:
        live = self.world
        try:  # make_gate reads self.world: the fresh one while its gate is made
            self.world = world = world_of(self.make_world())
            context = GateContext(world.tools, world.effects)
            gate = self.make_gate(context)
        finally:
            self.world = live
        agent = self._agent(_Watched(_Replies(self.replies), context), self.limits, world, gate)
        replayed = await agent.arun(self.task)
        for approve, _ in self.decisions:
            if replayed.stop is not Stop.AWAITING_APPROVAL:
                break
            if approve == CANCEL:
                replayed = await agent.acancel(replayed.state, by="harness", reason="a random cancel")
            else:
                replayed = await agent.aresume(replayed.state, approve=bool(approve))
        return replayed

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
            constants = gate_constants(self.world.tools, self.gate, type(self).forbidden)
            cache[kinds] = assistant_messages(self.world.tools, kinds=kinds, constants=constants)
        return cast("st.SearchStrategy[dict[str, Any]]", cache[kinds])

    @property
    def waiting(self) -> bool:
        """The run rests where it needs the model's next reply (fresh, or stopped by the harness's turn budget)."""
        if self.result is None:
            return True
        return self.result.stop is Stop.STEP_LIMIT and self.state.turns < self.limits.max_turns

    @property
    def paused(self) -> bool:
        """The gate asked a human about the blocked call."""
        return self.result is not None and self.result.stop is Stop.AWAITING_APPROVAL

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

    @precondition(lambda self: self.paused)
    @rule(via_json=st.booleans())
    def cancel(self, via_json: bool) -> None:
        """A person cancels the run at its pause: it ends ``cancelled``."""
        self._decide(CANCEL, via_json)

    @precondition(lambda self: not self.waiting and not self.paused)
    @rule()
    def start_new_run(self) -> None:
        """The run ended: check it replays the same, then start another in a fresh world."""
        self._check_replay()
        self._new_run()

    # --- invariants ------------------------------------------------------------

    @invariant()
    def run_invariants_hold(self) -> None:
        """Every invariant of the run so far, and the forbidden-effect predicate if one is set."""
        result = self.result
        if result is None:
            return
        try:
            assert_run_invariants(
                result,
                self.world.effects,
                self.checked_limits,
                tools=self.world.tools,
                gate=self.gate if self.recheck_gate else None,
                approved=self.approved,
                match=None if type(self).match is None else by_call(type(self).match, result.state),  # type: ignore[arg-type]
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
    match: CallMatch | None = None,
    name: str = "ConfiguredRunHarness",
) -> type[RunHarness]:
    """
    A :class:`RunHarness` subclass for ``tools_factory`` and a gate (or a
    ``gate_factory`` taking a :class:`GateContext`); its ``TestCase`` is a pytest test.
    """
    if gate is not None and gate_factory is not None:
        raise TypeError("give at most one of gate= and gate_factory=")

    def make_world(self: RunHarness) -> Any:
        return tools_factory()

    def make_gate(self: RunHarness, context: GateContext) -> Gate:
        if gate_factory is not None:
            return gate_factory(context)
        return gate if gate is not None else deny_effects(context.tools)

    namespace = {
        "make_world": make_world,
        "make_gate": make_gate,
        "limits": limits,
        "forbidden": staticmethod(forbidden) if forbidden is not None else None,
        "recheck_gate": recheck_gate,
        "match": staticmethod(match) if match is not None else None,
    }
    return type(name, (RunHarness,), namespace)
