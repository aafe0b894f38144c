"""
The agent as one value, and the functions that run it: :class:`Agent` and ``run``, ``resume``, ``advance``, ``stream``.

An :class:`Agent` holds what defines an agent (model, tools, gate, limits,
system prompt, answer check, estimator, endings); its methods take only what
belongs to one run (the task, a history, a store, a run id, a listener, a
decision). The module-level functions build an :class:`Agent` from their
arguments and delegate to it, so code written before the agent was a value
keeps working. The async twins (:meth:`Agent.arun` and friends) perform the
very same steps, awaited (:mod:`agent_fsm.engine._async`, loaded only
when first used, so a synchronous program never imports ``asyncio``).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import attrs

from agent_fsm.engine._boundary import Checkpointer, Seen
from agent_fsm.engine._context import Compactor, Summarize, ToolRule, ToolsFor
from agent_fsm.engine._endings import EndingRule
from agent_fsm.engine._errors import ToolDefinitionError, UngatedEffects
from agent_fsm.engine._events import AnswerHold, Ended, RunEvent
from agent_fsm.engine._gates import Gate, InputScreen, ResultScreen
from agent_fsm.engine._launch import (
    DEFAULT_SYSTEM_PROMPT,
    CallDecision,
    Launch,
    cancelling,
    continuing,
    deciding,
    failed,
    reply_review,
    start_state,
    starting,
)
from agent_fsm.engine._limits import DEFAULT_LIMITS, Limits, Prices, Stop
from agent_fsm.engine._machine import RUN_MACHINE, MachineSpec
from agent_fsm.engine._messages import Task, TokenEstimator
from agent_fsm.engine._models import Model, model_estimator
from agent_fsm.engine._options import ruled_out
from agent_fsm.engine._resting import rest
from agent_fsm.engine._run import AnswerCheck
from agent_fsm.engine._schema import OutputSpec, output_spec
from agent_fsm.engine._state import RunResult, RunState
from agent_fsm.engine._steps import drive, iterate, perform_now
from agent_fsm.engine._tools import NO_ANSWER, Registry, ToolCall, ToolSpec, check_registry, contract_digest

if TYPE_CHECKING:
    from agent_fsm.engine._nesting import ConversationFilter

__all__ = [
    "Agent",
    "AnswerCheck",
    "DEFAULT_SYSTEM_PROMPT",
    "EventSink",
    "aadvance",
    "advance",
    "aresume",
    "arun",
    "astream",
    "resume",
    "run",
    "start_state",
    "stream",
]


# --- driver ---

EventSink = Callable[[RunEvent], Any]
"""Receives each :class:`agent_fsm.RunEvent` as the run moves (``on_event=``); may be ``async`` under arun."""


def warn_ungated(tools: Registry, stacklevel: int) -> None:
    """
    Warn (:class:`UngatedEffects`) that the effectful tools of an agent with no gate will always be refused.

    The refusal is the secure default; the warning is so a developer can tell
    it from success before a run does. An explicit gate (even
    ``deny_effects(tools)``) silences it. ``stacklevel`` counts frames above this function's caller.
    """
    try:
        refused = sorted(str(name) for name, spec in tools.items() if getattr(spec, "effectful", False) is True)
    except AttributeError:  # not a mapping: check_registry says so where the registry is used
        return
    if refused:
        warnings.warn(
            UngatedEffects(
                f"effectful tools {refused} and no gate: the default gate refuses every call to them, and no"
                " approval can change that; pass the gate that allows them (gate=...), or"
                " gate=deny_effects(tools) if refusing them is what you mean"
            ),
            stacklevel=stacklevel + 1,
        )


def _refused(part: str, expected: str, value: Any) -> TypeError:
    return TypeError(f"'{part}' must be {expected} (got {value!r} that is a {type(value).__name__}).")


def _rules(rules: Iterable[ToolRule]) -> tuple[ToolRule, ...]:
    """Tool rules as the agent keeps them: a tuple, whatever iterable was given."""
    return tuple(rules)


# eq=False: an agent is compared by identity (its model and handlers have no
# value to compare), and so it is hashable whatever its tools mapping is.
# slots=False: the module-level functions build one per call, filling its
# __dict__ in one step (see _split); slot by slot cost a run about 2%.
@attrs.frozen(eq=False, slots=False)
class Agent:
    """
    What defines an agent, as one frozen value: build it once, run it many times.

    ``model`` only proposes; ``tools`` (name to :class:`~agent_fsm.ToolSpec`)
    are the contracts every proposal is held to; ``gate`` is consulted just
    before every effect (``None``: effect-free tools run, effectful ones are
    refused); ``limits`` are the budgets (``None``: the defaults for a new
    run, the saved ones for a run continued); ``system_prompt`` opens a run
    (``None``: :data:`DEFAULT_SYSTEM_PROMPT`, ``""``: none); ``answer_check``
    may refuse a final answer; ``estimator`` measures prompts (``None``: the
    model's own ``estimator`` when it has one, so an adapter's provider rule
    for images and files holds unasked, else :func:`estimate_tokens`; see
    :attr:`token_estimator`); ``endings``
    names the world's code for the engine's stops; ``name`` identifies the
    agent (a saved run, a Temporal worker and the store's records name it);
    ``screen_input`` reads the task before the first model call and may
    refuse it, ``screen_result`` reads every observation before the model
    does and may pass, redact or stop (see docs/screens.md);
    ``compact`` shrinks the prompt (never the transcript) when the next one
    would pass ``max_prompt_tokens`` or an earlier ``compact_at``; ``tools_for``
    (a function of the run's state) and ``tool_rules`` decide which tools each
    model call offers (see docs/context.md);
    ``output`` makes the final answer typed: a JSON Schema, a dataclass, an
    attrs class, a ``TypedDict`` or a pydantic model; the answer must be
    JSON that validates, and ``RunResult.output`` holds the value (see docs/output.md);
    ``prices`` (a :class:`~agent_fsm.Prices` table) prices each model call,
    so a run reports its cost and ``Limits(max_cost=...)`` can bound it;
    ``parallel_calls=True`` runs the effect-free calls of one reply
    concurrently (``ToolSpec(parallel=True)`` opts in one tool), with the
    observations, budgets and rules as if they ran in order (see docs/machine.md);
    ``clock`` is what ``Limits(max_seconds=...)`` reads (seconds that only go
    forward; ``None``: :func:`time.monotonic`), so a test can drive a time
    budget without sleeping (see :class:`agent_fsm.testing.ManualClock`); the
    async driver still cuts a model call in flight after the time left, in real seconds.

    A variant is :meth:`replace` (``attrs.evolve``)::

        strict = agent.replace(limits=Limits(max_turns=3))

    Raises:
        TypeError: a part is not what the engine can use (checked here, once, not at the first run).
        ToolDefinitionError: a tool name or value in ``tools`` is unusable.
        ProviderConfigError: the model's provider cannot express a tool's parameters or the output's schema.
    """

    model: Model
    tools: Registry
    gate: Gate | None = attrs.field(default=None, kw_only=True)
    limits: Limits | None = attrs.field(default=None, kw_only=True)
    system_prompt: str | None = attrs.field(default=None, kw_only=True)
    answer_check: AnswerCheck | None = attrs.field(default=None, kw_only=True)
    estimator: TokenEstimator | None = attrs.field(default=None, kw_only=True)
    endings: EndingRule | None = attrs.field(default=None, kw_only=True)
    name: str | None = attrs.field(default=None, kw_only=True)
    screen_input: InputScreen | None = attrs.field(default=None, kw_only=True)
    screen_result: ResultScreen | None = attrs.field(default=None, kw_only=True)
    compact: Compactor | Summarize | None = attrs.field(default=None, kw_only=True)
    compact_at: int | None = attrs.field(default=None, kw_only=True)
    tools_for: ToolsFor | None = attrs.field(default=None, kw_only=True)
    tool_rules: tuple[ToolRule, ...] = attrs.field(default=(), kw_only=True, converter=_rules)
    output: Any = attrs.field(default=None, kw_only=True)
    prices: Prices | None = attrs.field(default=None, kw_only=True)
    parallel_calls: bool = attrs.field(default=False, kw_only=True)
    clock: Callable[[], float] | None = attrs.field(default=None, kw_only=True)
    # The digest, and the registry's version it was computed at (see Agent.digest).
    _digest: tuple[Any, str] | None = attrs.field(init=False, default=None, repr=False, alias="_digest")

    # The checks, written out in one place: an agent is built for every call of the
    # module-level functions, so per-field validator calls would cost every run.
    def __attrs_post_init__(self) -> None:
        model = self.model
        if not callable(getattr(model, "chat", None)) and not callable(getattr(model, "achat", None)):
            raise _refused("model", "a model with a chat() or an async achat() method", model)
        check_registry(self.tools)
        if self.gate is None:
            warn_ungated(self.tools, stacklevel=3)  # above here and attrs' __init__: the caller's line
        elif not callable(self.gate):
            raise _refused("gate", "callable or None", self.gate)
        if self.limits is not None and type(self.limits) is not Limits and not isinstance(self.limits, Limits):
            raise _refused("limits", "a Limits or None", self.limits)
        if self.system_prompt is not None and not isinstance(self.system_prompt, str):
            raise _refused("system_prompt", "a str or None", self.system_prompt)
        if self.answer_check is not None and not callable(self.answer_check):
            raise _refused("answer_check", "callable or None", self.answer_check)
        if self.estimator is not None and not callable(self.estimator):
            raise _refused("estimator", "callable or None", self.estimator)
        name = self.name
        if name is not None and (type(name) is not str or not name):
            raise _refused("name", "a non-empty str or None", name)
        for part in ("screen_input", "screen_result"):
            if getattr(self, part) is not None and not callable(getattr(self, part)):
                raise _refused(part, "callable or None", getattr(self, part))
        if self.compact is not None and not callable(self.compact) and not isinstance(self.compact, Summarize):
            raise _refused("compact", "a compaction (callable), summarize(...) or None", self.compact)
        at = self.compact_at
        if at is not None and (type(at) is not int or at < 0):
            raise _refused("compact_at", "a whole number of tokens >= 0 or None", at)
        if self.tools_for is not None and not callable(self.tools_for):
            raise _refused("tools_for", "callable or None", self.tools_for)
        check_offer(self.tool_rules, self.tools)
        # A hostile schema or a type with no JSON form is refused here, once.
        output = output_spec(self.output) if self.output is not None else None
        check_tools = getattr(model, "check_tools", None)
        if callable(check_tools):  # a provider whose schema dialect is narrower refuses here, not at a run
            check_tools([spec.declaration(name) for name, spec in self.tools.items()], output)
        if self.prices is not None and not isinstance(self.prices, Prices):
            raise _refused("prices", "a Prices or None", self.prices)
        if type(self.parallel_calls) is not bool:
            raise _refused("parallel_calls", "True or False", self.parallel_calls)
        if self.clock is not None and not callable(self.clock):
            raise _refused("clock", "callable or None", self.clock)

    @property
    def ending_tools(self) -> frozenset[str]:
        """The tools whose result ends the run (``ends_run`` rules)."""
        return frozenset(r.tool for r in self.tool_rules if r.kind == "ends_run")

    @property
    def output_spec(self) -> OutputSpec | None:
        """The final answer's contract ``output`` names (``None``: the answer is free text)."""
        return None if self.output is None else output_spec(self.output)

    def machine(self, *, limits: Limits | None = None) -> MachineSpec:
        """
        The run machine as this agent can take it: only the states and edges its configuration can reach.

        Each option an agent does not take (no compaction, no screens, no
        money budget, no typed output... see :data:`agent_fsm.RUN_OPTIONS`) rules
        out the guards only it makes true; their edges, and the states only
        they reach, are left out. The driver leaves out the very same edges,
        from the same list, so every edge a run of this agent takes is an edge
        of this machine. ``limits`` are those a run is held to (default: the
        agent's, else :data:`~agent_fsm.engine._limits.DEFAULT_LIMITS`); :data:`~agent_fsm.RUN_MACHINE`
        is the whole table.
        """
        chosen = limits if limits is not None else self.limits if self.limits is not None else DEFAULT_LIMITS
        return RUN_MACHINE.without(ruled_out(self, chosen))

    @property
    def token_estimator(self) -> TokenEstimator:
        """
        What measures this agent's prompts: ``estimator`` if given, else the model's (read afresh, so a replaced
        model brings its own rule), else :func:`estimate_tokens`.
        """
        return self.estimator if self.estimator is not None else model_estimator(self.model)

    def replace(self, **changes: Any) -> Agent:
        """This agent with ``changes`` (any of its fields), checked as a new agent is."""
        return attrs.evolve(self, **changes)

    @property
    def digest(self) -> str:
        """
        A digest of the tool contracts (names, descriptions, schemas, effect and idempotency flags, tool rules).

        Two agents with the same digest offer the model the same tools under
        the same rules; a run decided by an agent of another digest is
        judged by contracts that differ from those it paused under. Computed
        once per agent (a saved run records it), and again when a registry
        that follows a changing list (one with a ``version``, such as an MCP
        server's tools) has changed since.
        """
        version = getattr(self.tools, "version", None)  # read first: it brings such a registry up to date
        cached = self._digest
        if cached is None or cached[0] != version:
            digest = contract_digest(self.tools)
            if self.tool_rules:  # rules decide what is offered and what is invalid: they are part of the contract
                import hashlib

                digest = hashlib.sha256(f"{digest}\x02{sorted(map(str, self.tool_rules))}".encode()).hexdigest()
            # One string per distinct digest, however many agents (one per call of the module-level run()) and
            # paused runs name it: each paused run records it, and 64 characters apiece add up over thousands.
            cached = (version, sys.intern(digest))
            object.__setattr__(self, "_digest", cached)
        return cached[1]

    def as_tool(
        self,
        description: str | None = None,
        *,
        schema: Mapping[str, Any] | None = None,
        effectful: bool | None = None,
    ) -> ToolSpec:
        """
        This agent as a tool of another: a call runs a whole run of this agent, nested in the caller's run.

        The call's ``task`` argument is the nested run's task (with ``schema``,
        the call's arguments, as JSON text, are). Its answer (or typed output)
        is the call's ``result``; any other ending is an ``error`` naming the
        stop, code and reason. The nested run spends the caller's budgets as
        well as its own, the tighter binding; its gate judges its own calls;
        when it pauses, the caller pauses with it (see docs/nesting.md).
        ``effectful`` defaults to whether any of this agent's tools is, so the
        caller's gate must allow the delegation as it would such a tool.
        """
        from agent_fsm.engine._nesting import nested_tool  # loaded by the first agent made a tool

        return nested_tool(self, description, schema, effectful)

    def handoff(
        self,
        description: str | None = None,
        *,
        passes: ConversationFilter | None = None,
        effectful: bool | None = None,
    ) -> ToolSpec:
        """
        A tool that hands the conversation over to this agent: the caller's part ends, this agent answers.

        ``passes`` filters what this agent is given (default
        :func:`agent_fsm.conversation`: the users' messages and the
        assistant's text, ending with the last user message, which it answers).
        The run that called it ends ``handed_over`` when this agent's part
        ends, with its answer and its code (``RunResult.code``); the run's
        ``children`` keep this agent's whole run, and its path who held it.
        """
        from agent_fsm.engine._nesting import nested_tool

        return nested_tool(self, description, None, effectful, hands_over=True, passes=passes)

    def start(self, task: Task, *, history: Sequence[Mapping[str, Any]] = (), run_id: str | None = None) -> RunState:
        """
        A new run's state in ``Ready``, as :meth:`run` begins it: opened by this agent, under its limits, named for it.

        The digest of the agent's contracts is recorded when the run is stored
        and whenever it pauses: where a decision may follow.

        For a driver of its own (a workflow engine, say) that then continues it with :meth:`advance`.
        """
        prompt = self.system_prompt
        if self.output is not None:  # say what the answer must be, for a model that cannot be asked natively
            base = DEFAULT_SYSTEM_PROMPT if prompt is None else prompt
            instruction = output_spec(self.output).instruction
            prompt = f"{base}\n\n{instruction}" if base else instruction
        state = start_state(task, system_prompt=prompt, history=history, estimator=self.token_estimator, run_id=run_id)
        state.limits = self.limits if self.limits is not None else DEFAULT_LIMITS
        state.agent = self.name  # the digest of its contracts is recorded where a decision may follow (see _rest)
        return state

    # --- one run, synchronously --------------------------------------------

    def run(
        self,
        task: Task,
        *,
        history: Sequence[Mapping[str, Any]] = (),
        store: Checkpointer | None = None,
        run_id: str | None = None,
        on_event: EventSink | None = None,
    ) -> RunResult:
        """
        Run ``task`` to a typed ending, or to a pause for a human.

        The model only proposes. Each proposal is validated against its
        tool's contract, judged by the gate immediately before execution,
        executed and observed; the budgets are checked before any work is
        admitted. ``history`` continues a conversation (earlier messages,
        e.g. ``previous.state.messages``). With ``store`` (e.g.
        :class:`agent_fsm.store.SqliteStore`) the run is committed under
        ``run_id`` when it begins, around every effectful call and whenever
        it rests (see docs/durability.md); ``run_id`` also names the run's
        state (pause ids and idempotency keys derive from it). ``on_event``
        receives each :mod:`agent_fsm.engine._events` event as the run moves.

        Returns:
            A :class:`RunResult`; ``stop`` is absorbing, or ``awaiting_approval``
            (continue with :meth:`resume`).

        Raises:
            HandlerError: a handler raised an unexpected exception (``.state`` keeps the run).
            GateError: the gate raised or answered something that is not a verdict.
            NotSynchronous: the model, gate, a handler or the answer check is ``async`` (use :meth:`arun`).
        """
        return _performed(self._starting(task, history, store, run_id, on_event is not None), on_event)

    def stream(
        self,
        task: Task,
        *,
        history: Sequence[Mapping[str, Any]] = (),
        store: Checkpointer | None = None,
        run_id: str | None = None,
        hold_answer: bool = False,
    ) -> Iterator[RunEvent]:
        """
        :meth:`run`, as an iterator of its events; the last one is :class:`agent_fsm.Ended` with the result.

        Nothing runs until the first event is asked for. A streaming model's
        text deltas arrive when its call returns (pass ``on_event=`` to
        :meth:`run` to see them as they come). ``hold_answer=True`` releases
        an answer's text only once the answer check and the typed output
        accepted it; a rejected answer's text is never released, and an
        :class:`~agent_fsm.AnswerWithheld` event says so (see :class:`~agent_fsm.engine._events.AnswerHold`).
        """
        context, steps = self._starting(task, history, store, run_id, True)
        hold = AnswerHold(context.run_id) if hold_answer else None
        try:
            for event in iterate(steps, context.outbox):
                for released in (event,) if hold is None else hold.feed(event):
                    yield _rested(released, context.run_id)
        except Exception as exc:
            failed(context, exc)
            raise
        finally:
            context.settle_clock()

    def advance(
        self,
        state: RunState,
        *,
        store: Checkpointer | None = None,
        run_id: str | None = None,
        on_event: EventSink | None = None,
    ) -> RunResult:
        """
        Drive ``state`` (modified in place) from where it is until it rests (committed to ``store``).

        A run resting in ``Proposing`` (one a gate or handler error stopped)
        has its proposal judged again here: a judgement found in a state is
        never acted on. With ``limits=None`` on the agent the limits saved
        with the run hold.

        Raises:
            StateError: the state's counters or indices disagree with its transcript.
        """
        return _performed(self._continuing(state, store, run_id, on_event is not None), on_event)

    def resume(
        self,
        state: RunState,
        *,
        approve: bool | None = None,
        reason: str = "",
        arguments: Mapping[str, Any] | None = None,
        answer: Any = NO_ANSWER,
        reply: Mapping[str, CallDecision] | None = None,
        seen: Seen | None = None,
        store: Checkpointer | None = None,
        run_id: str | None = None,
        on_event: EventSink | None = None,
    ) -> RunResult:
        """
        Decide a run paused in ``awaiting_approval``, once, and drive it on.

        ``approve=True`` judges the blocked call afresh (validated against
        this agent's tools, its gate consulted again) and the approval turns
        only an ``ask`` about that very call (its fingerprint, recorded with
        the pause) into permission: a ``deny`` still denies, a call that now
        breaks its contract is ``invalid``, and the run's ``max_tool_calls``
        still holds. ``arguments`` replaces the blocked call's arguments (a
        reviewer's edit); the edited call is validated and gated like a new
        proposal, and the approval covers it. ``approve=False`` turns the
        call into a ``denied`` observation carrying ``reason``. ``answer=VALUE``
        answers a call to a tool a person answers (:meth:`ToolSpec.person`):
        checked against its result schema (refused with :class:`AnswerRefused`,
        the pause left open, when it does not meet it), then the call's
        ``result``; such a call cannot be approved without an answer.
        ``reply={call_id: CallDecision}`` decides a reply reviewed whole: every
        call of :meth:`reply_review` once (a partial or extra decision is refused
        with :class:`DecisionRefused` before anything runs), applied in order as
        the run reaches each call, and the run committed once where it rests.

        ``state`` is marked consumed (``state.consumed``); the result holds a
        new state. ``seen(pause_id)`` lets an application refuse a second
        decision on the same pause loaded again from the same saved JSON.
        To decide a stored pause from any process, use :func:`agent_fsm.store.approve`.

        Raises:
            TypeError: ``approve`` is not a bool (and no ``answer`` is given).
            AnswerRefused: the answer does not meet the result schema, or the call is not a person's to answer.
            NotPaused: ``state`` is not awaiting approval, was resumed already, or ``seen`` says so.
            StateError: the state's counters or indices disagree with its transcript.
        """
        listening = on_event is not None
        launch = deciding(self, state, approve, reason, arguments, seen, store, run_id, listening, answer, reply)
        return _performed(launch, on_event)

    def cancel(
        self,
        state: RunState,
        *,
        by: str,
        reason: str = "",
        seen: Seen | None = None,
        store: Checkpointer | None = None,
        run_id: str | None = None,
        on_event: EventSink | None = None,
    ) -> RunResult:
        """
        Cancel a run paused in ``awaiting_approval``, once: it ends ``cancelled``, nothing more runs.

        A decision like :meth:`resume`'s (the pause consumed, ``seen`` honoured):
        the call it waited on, and any later call of the same reply, is
        answered as not run, naming ``by`` (who cancelled) and ``reason``;
        the transcript is kept whole and no model call is made. To cancel a
        stored pause from any process, use :func:`agent_fsm.store.cancel`.

        Raises:
            TypeError: ``by`` is not a non-empty str, or ``reason`` not a str.
            NotPaused: ``state`` is not awaiting approval, was decided already, or ``seen`` says so.
            StateError: the state's counters or indices disagree with its transcript.
        """
        launch = cancelling(self, state, by, reason, seen, store, run_id, on_event is not None)
        return _performed(launch, on_event)

    def reply_review(self, state: RunState) -> list[ToolCall]:
        """The calls of the reply paused ``state`` waits in that need a person: what ``resume(reply=)`` decides."""
        return reply_review(self, state)

    # --- one run, awaited ------------------------------------------------------

    async def arun(
        self,
        task: Task,
        *,
        history: Sequence[Mapping[str, Any]] = (),
        store: Checkpointer | None = None,
        run_id: str | None = None,
        on_event: EventSink | None = None,
    ) -> RunResult:
        """
        :meth:`run`, awaited: same arguments, same result, the very same steps.

        A model's ``async def achat`` is preferred to its ``chat``; ``async``
        gates, handlers, answer checks and event sinks are awaited; a
        ``blocking`` tool (or model) runs in a worker thread. Cancelling the
        task raises :class:`agent_fsm.RunCancelled` with the run's state.
        """
        from agent_fsm.engine._async import performed

        return _resting(await performed(self._starting(task, history, store, run_id, on_event is not None), on_event))

    async def astream(
        self,
        task: Task,
        *,
        history: Sequence[Mapping[str, Any]] = (),
        store: Checkpointer | None = None,
        run_id: str | None = None,
        hold_answer: bool = False,
    ) -> AsyncIterator[RunEvent]:
        """
        :meth:`arun`, as an async iterator of its events, text deltas as they arrive; the last is ``Ended``.

        The run goes on in a task of its own; leaving the loop early cancels it.
        An exception the run raised is raised here after its last event.
        ``hold_answer=True`` holds an answer's deltas until it is accepted, as :meth:`stream` does.
        """
        from agent_fsm.engine._async import streamed

        launch = self._starting(task, history, store, run_id, True)
        run = launch[0].run_id
        hold = AnswerHold(run) if hold_answer else None
        async for event in streamed(launch):
            for released in (event,) if hold is None else hold.feed(event):
                yield _rested(released, run)

    async def aadvance(
        self,
        state: RunState,
        *,
        store: Checkpointer | None = None,
        run_id: str | None = None,
        on_event: EventSink | None = None,
    ) -> RunResult:
        """:meth:`advance`, awaited: drive ``state`` on until it rests (also how a cancelled run goes on)."""
        from agent_fsm.engine._async import performed

        return _resting(await performed(self._continuing(state, store, run_id, on_event is not None), on_event))

    async def aresume(
        self,
        state: RunState,
        *,
        approve: bool | None = None,
        reason: str = "",
        arguments: Mapping[str, Any] | None = None,
        answer: Any = NO_ANSWER,
        reply: Mapping[str, CallDecision] | None = None,
        seen: Seen | None = None,
        store: Checkpointer | None = None,
        run_id: str | None = None,
        on_event: EventSink | None = None,
    ) -> RunResult:
        """
        :meth:`resume`, awaited.

        The pause is checked again after an async gate was awaited: of two
        decisions racing on one paused state, exactly one is applied.
        """
        from agent_fsm.engine._async import performed

        listening = on_event is not None
        launch = deciding(self, state, approve, reason, arguments, seen, store, run_id, listening, answer, reply)
        return _resting(await performed(launch, on_event))

    async def acancel(
        self,
        state: RunState,
        *,
        by: str,
        reason: str = "",
        seen: Seen | None = None,
        store: Checkpointer | None = None,
        run_id: str | None = None,
        on_event: EventSink | None = None,
    ) -> RunResult:
        """:meth:`cancel`, awaited."""
        from agent_fsm.engine._async import performed

        launch = cancelling(self, state, by, reason, seen, store, run_id, on_event is not None)
        return _resting(await performed(launch, on_event))

    # --- how a run is launched ---------------------------------------------------

    def _starting(
        self,
        task: Task,
        history: Sequence[Mapping[str, Any]],
        store: Checkpointer | None,
        run_id: str | None,
        listening: bool,
    ) -> Launch:
        state = self.start(task, history=history, run_id=run_id)
        return starting(self, state, store=store, run_id=run_id, listening=listening)

    def _continuing(self, state: RunState, store: Checkpointer | None, run_id: str | None, listening: bool) -> Launch:
        return continuing(self, state, store=store, run_id=run_id, listening=listening)


def check_offer(rules: Any, tools: Registry) -> None:
    """
    Refuse tool rules that are not rules, or under which a tool could never be offered (a run never end by it).

    Raises:
        ToolDefinitionError: every problem the static checker found, listed at once.
    """
    for rule in rules:
        if not isinstance(rule, ToolRule):
            raise _refused("tool_rules", "ToolRules (after, before, at_most_once, ends_run)", rule)
    if not rules:  # nothing for the static checker to find: it is loaded only for tool rules
        return
    from agent_fsm.engine._analysis import check_tool_rules

    problems = check_tool_rules(rules, tools)
    if problems:
        raise ToolDefinitionError(
            "the tool rules contradict themselves:\n  " + "\n  ".join(p.message for p in problems)
        )


def _performed(launch: Launch, on_event: EventSink | None) -> RunResult:
    context, steps = launch
    if context.outbox is None:  # nobody hears events between requests: perform them where they are made
        context.perform = perform_now
    else:  # a handler's progress is heard as it is reported, in the handler's (the driver's) thread
        context.relay = on_event
    try:
        result = drive(steps, context.outbox, on_event)
    except BaseException as exc:
        context.settle_clock()
        if getattr(exc, "state", False) is None:
            exc.state = context.state  # type: ignore[attr-defined]  # a RunError raised before it knew the run
        failed(context, exc)
        raise
    return _resting(result)


def _resting(result: RunResult) -> RunResult:
    """``result``, its state left to wait compact if the run paused: a pause may last days, thousands at a time."""
    if result.stop is Stop.AWAITING_APPROVAL:
        rest(result.state)
    return result


def _rested(event: RunEvent, run_id: str) -> RunEvent:
    """A streamed event; the run's own ``Ended`` (not a nested run's) with its result left to wait as ``_resting``."""
    if type(event) is Ended and event.run_id == run_id:
        _resting(event.result)
    return event


# --- the module-level functions: each builds the agent and delegates ------------------


class AgentParts(TypedDict, total=False):
    """The keyword arguments of the module-level functions that define the agent: :class:`Agent`'s own fields."""

    gate: Gate | None
    limits: Limits | None
    system_prompt: str | None
    answer_check: AnswerCheck | None
    estimator: TokenEstimator | None
    endings: EndingRule | None
    screen_input: InputScreen | None
    screen_result: ResultScreen | None
    output: Any
    compact: Compactor | Summarize | None
    compact_at: int | None
    tools_for: ToolsFor | None
    tool_rules: tuple[ToolRule, ...]
    prices: Prices | None
    parallel_calls: bool


class ContinueOptions(AgentParts, total=False):
    """:func:`advance`'s keywords: the agent's parts, and where the run is kept and heard."""

    store: Checkpointer | None
    run_id: str | None
    on_event: EventSink | None


class RunOptions(ContinueOptions, total=False):
    """:func:`run`'s keywords: :class:`ContinueOptions` and the conversation it continues."""

    history: Sequence[Mapping[str, Any]]


class StreamOptions(AgentParts, total=False):
    """:func:`stream`'s keywords (its events are what it yields, so no ``on_event``)."""

    history: Sequence[Mapping[str, Any]]
    store: Checkpointer | None
    run_id: str | None
    hold_answer: bool


class DecisionOptions(ContinueOptions, total=False):
    """:func:`resume`'s keywords besides ``approve``: a reviewer's reason, edited arguments, a seen-check."""

    reason: str
    arguments: Mapping[str, Any] | None
    seen: Seen | None


_PARTS = AgentParts.__optional_keys__


_DEFAULTS = {f.name: f.default for f in attrs.fields(Agent)}


def _split(model: Model, tools: Registry, options: Mapping[str, Any]) -> tuple[Agent, dict[str, Any]]:
    """
    The agent the options define, and the options that belong to one run.

    Built without :class:`Agent`'s up-front checks: the run made at once
    checks each part where it uses it (the registry when the run starts, a
    gate when it is consulted), as these functions always did, and a run of
    short tasks does not pay for every part to be checked twice.
    """
    given: dict[str, Any] = {"model": model, "tools": tools}
    per_run = {}
    for key, value in options.items():
        if key in _PARTS:
            given[key] = value
        else:
            per_run[key] = value
    if given.get("gate") is None:
        warn_ungated(tools, stacklevel=3)  # above here and run(): the caller's line
    if not _CHECKED.isdisjoint(given):  # rules are refused at definition, whoever defines the agent
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UngatedEffects)  # said above, at the caller's line
            return Agent(**given), per_run
    agent = object.__new__(Agent)
    parts = agent.__dict__
    parts.update(_DEFAULTS)
    parts.update(given)
    return agent, per_run


# The parts that change how a run is driven, checked whenever they are given (compaction, tools per turn).
_CHECKED = frozenset({"compact", "compact_at", "tools_for", "tool_rules"})


def run(task: Task, model: Model, tools: Registry, **options: Unpack[RunOptions]) -> RunResult:
    """:meth:`Agent.run` of ``Agent(model, tools, gate=..., ...)``: run ``task`` to a typed ending."""
    agent, per_run = _split(model, tools, options)
    return agent.run(task, **per_run)


def stream(task: Task, model: Model, tools: Registry, **options: Unpack[StreamOptions]) -> Iterator[RunEvent]:
    """:meth:`Agent.stream` of ``Agent(model, tools, gate=..., ...)``: :func:`run` as an iterator of its events."""
    agent, per_run = _split(model, tools, options)
    return agent.stream(task, **per_run)


def advance(state: RunState, model: Model, tools: Registry, **options: Unpack[ContinueOptions]) -> RunResult:
    """:meth:`Agent.advance`: drive ``state`` on until it rests (``limits=None`` keeps the saved limits)."""
    agent, per_run = _split(model, tools, options)
    return agent.advance(state, **per_run)


def resume(
    state: RunState, model: Model, tools: Registry, *, approve: bool, **options: Unpack[DecisionOptions]
) -> RunResult:
    """:meth:`Agent.resume`: decide a paused run once (the ``gate`` passed here judges the call afresh)."""
    agent, per_run = _split(model, tools, options)
    return agent.resume(state, approve=approve, **per_run)


async def arun(task: Task, model: Model, tools: Registry, **options: Unpack[RunOptions]) -> RunResult:
    """:meth:`Agent.arun` of ``Agent(model, tools, gate=..., ...)``: :func:`run`, awaited."""
    agent, per_run = _split(model, tools, options)
    return await agent.arun(task, **per_run)


def astream(task: Task, model: Model, tools: Registry, **options: Unpack[StreamOptions]) -> AsyncIterator[RunEvent]:
    """:meth:`Agent.astream` of ``Agent(model, tools, gate=..., ...)``: :func:`arun` as an async iterator of events."""
    agent, per_run = _split(model, tools, options)
    return agent.astream(task, **per_run)


async def aadvance(state: RunState, model: Model, tools: Registry, **options: Unpack[ContinueOptions]) -> RunResult:
    """:meth:`Agent.aadvance`: :func:`advance`, awaited."""
    agent, per_run = _split(model, tools, options)
    return await agent.aadvance(state, **per_run)


async def aresume(
    state: RunState, model: Model, tools: Registry, *, approve: bool, **options: Unpack[DecisionOptions]
) -> RunResult:
    """:meth:`Agent.aresume`: :func:`resume`, awaited."""
    agent, per_run = _split(model, tools, options)
    return await agent.aresume(state, approve=approve, **per_run)
