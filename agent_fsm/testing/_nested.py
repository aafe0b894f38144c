"""
Nested worlds: agents run as tools of agents, to a depth, under random scripts, gates, budgets and decisions.

:func:`nested_worlds` draws a chain of agents (level 0 runs level 1 as a
tool, which runs level 2, ...), each playing a random script under a random
gate and limits of its own, with an effectful tool whose every run is logged
with the run and call it came from. :func:`drive_nested` runs the top agent
and decides every pause (a person approving or rejecting, at whatever depth
the call waits), saving and loading the state at each one; and
:func:`assert_nested_invariants` checks what a composition must keep: each
level within its budgets and within what its parent had left, no effect
without its own level's gate (or a person after it asked), each decision
covering exactly the call it was given for, once, and every level's
transcript kept. A composition of your own is driven and checked the same
way when its handlers log ``run_id`` and ``call_id`` (see :class:`NestedWorld`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import attrs
from hypothesis import settings as Settings
from hypothesis import strategies as st

from agent_fsm.engine import (
    DEFAULT_LAST_WORD,
    RUN_MACHINE,
    Agent,
    Limits,
    ModelRequested,
    Nested,
    NotPaused,
    Observation,
    Registry,
    RunEvent,
    RunResult,
    RunState,
    ScriptedModel,
    Stop,
    ToolCall,
    ToolContext,
    ToolSpec,
    as_verdict,
    deny_effects,
)
from agent_fsm.testing._drive import CANCEL, DEFAULT_TASK, describe_run
from agent_fsm.testing._invariants import INVARIANTS, InvariantViolation, executed_calls
from agent_fsm.testing._search import run_property
from agent_fsm.testing._strategies import TableGate, assistant_messages, limits

__all__ = [
    "NESTED_INVARIANTS",
    "NestedDecision",
    "NestedOutcome",
    "NestedWorld",
    "assert_nested_invariants",
    "check_nesting",
    "drive_nested",
    "level_tools",
    "nested_world",
    "nested_worlds",
]

NESTED_INVARIANTS: Mapping[str, str] = {
    name: INVARIANTS[name]
    for name in (
        "ends_absorbing",
        "nested_budgets",
        "charged_to_parent",
        "effect_gated",
        "decision_covers_call",
        "decided_once",
        "children_kept",
        "state_round_trip",
    )
}
"""The invariants :func:`assert_nested_invariants` and :func:`drive_nested` check, by name."""

_NOTE = {"type": "object", "properties": {"text": {"type": "string", "maxLength": 8}}, "additionalProperties": False}
_WRITE = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["n"],
    "additionalProperties": False,
}


@attrs.define
class NestedWorld:
    """
    A composition of agents and the logs its handlers write: the ground truth of what ran where.

    ``top`` runs the others (as tools, at any depth); ``attempts`` holds an
    entry per handler run and ``effects`` one per effectful handler run, each
    a dict with ``agent`` (the agent's name), ``run_id`` and ``call_id``
    (from the handler's :class:`agent_fsm.ToolContext`), ``tool`` and
    ``arguments``. Agents are told apart by name, so each must have its own.
    """

    top: Agent
    effects: list[dict[str, Any]] = attrs.field(factory=list)
    attempts: list[dict[str, Any]] = attrs.field(factory=list)

    @property
    def agents(self) -> dict[str, Agent]:
        """Every agent of the composition by name, the top one first."""
        found: dict[str, Agent] = {}
        todo = [self.top]
        while todo:
            agent = todo.pop(0)
            name = agent.name or "top"
            if name in found:
                continue
            found[name] = agent
            todo.extend(s.handler.agent for s in agent.tools.values() if isinstance(s.handler, Nested))
        return found

    @property
    def depth(self) -> int:
        """How many agents deep the composition goes (1: the top agent nests none)."""
        return len(self.agents)


def level_tools(world: NestedWorld, level: int, below: Agent | None) -> dict[str, ToolSpec]:
    """
    Level ``level``'s registry: ``note_<level>`` (read-only), ``write_<level>`` (effectful), ``below`` as a tool.

    ``below`` (the next level's agent) is offered as ``agent_<level + 1>``.

    Both handlers log every run in ``world.attempts`` (``write`` also in
    ``world.effects``) with the run id and call id their context names.
    """
    name = f"level{level}"

    def logged(tool: str, effectful: bool) -> Callable[..., Any]:
        def handler(context: ToolContext, **arguments: Any) -> Any:
            entry: dict[str, Any] = {"agent": name, "run_id": context.run_id, "call_id": context.call_id}
            entry.update(tool=tool, arguments=arguments)
            world.attempts.append(entry)
            if effectful:
                world.effects.append(entry)
            return {"done": tool, **arguments}

        return handler

    tools = {
        f"note_{level}": ToolSpec("Write a note (changes nothing).", _NOTE, logged(f"note_{level}", False)),
        f"write_{level}": ToolSpec(
            "Write a number (an effect).", _WRITE, logged(f"write_{level}", True), effectful=True
        ),
    }
    if below is not None:
        tools[f"agent_{level + 1}"] = below.as_tool(f"Ask level {level + 1} to do a task.")
    return tools


def nested_world(
    models: Sequence[Any],
    gates: Sequence[Any],
    limits: Sequence[Limits],
) -> NestedWorld:
    """
    A fresh chain of ``len(models)`` agents: level ``i`` plays ``models[i]`` under ``gates[i]`` and ``limits[i]``.

    Level ``i`` has the tools :func:`level_tools` gives it and runs level
    ``i + 1`` as the tool ``agent_<i + 1>``.
    """
    if not (len(models) == len(gates) == len(limits)) or not models:
        raise ValueError("give one model, gate and limits per level, at least one level")
    world = NestedWorld(top=Agent(ScriptedModel([]), {}))
    below: Agent | None = None
    for level in reversed(range(len(models))):
        tools = level_tools(world, level, below)
        below = Agent(models[level], tools, gate=gates[level], limits=limits[level], name=f"level{level}")
    assert below is not None
    world.top = below
    return world


@lru_cache(maxsize=16)
def _shape(level: int, nests: bool) -> Registry:
    """A registry shaped as level ``level``'s (the strategies read only names and contracts): built once."""
    scratch = NestedWorld(top=Agent(ScriptedModel([]), {}))
    below = None
    if nests:  # a stand-in, read for its contracts only: its gate is never asked
        shaped = level_tools(scratch, level + 1, None)
        below = Agent(ScriptedModel([]), shaped, gate=deny_effects(shaped), name=f"level{level + 1}")
    return level_tools(scratch, level, below)


_REACTIONS = st.sampled_from(['"kind": "denied"', '"kind": "invalid"', '"kind": "error"'])


@lru_cache(maxsize=16)
def _level_strategies(level: int, nests: bool, max_script: int) -> tuple[st.SearchStrategy[Any], ...]:
    """A level's scripts and gates, built once: a level that nests calls its nested agent often, its gate lets it."""
    tools = _shape(level, nests)
    own = assistant_messages(tools, kinds=("call", "call", "parallel", "bad_arguments", "answer"))
    choices = [own]
    decisions = st.sampled_from(("allow", "ask", "deny", "ask", "allow_tuple", "deny_tuple"))  # ask twice as often
    table = {name: decisions for name in tools}
    if nests:
        name = f"agent_{level + 1}"
        delegation = assistant_messages({name: tools[name]}, kinds=("call",))
        choices.insert(0, delegation)
        table[name] = st.sampled_from(("allow", "allow_tuple", "ask", "deny"))  # mostly let the nested agent run
        rest = st.lists(st.one_of(choices), max_size=max(max_script - 1, 0))
        turns = st.builds(lambda first, then: [first, *then], delegation, rest)  # a level that nests does, first
    else:
        turns = st.lists(st.one_of(choices), min_size=1, max_size=max_script)
    reactions = st.dictionaries(_REACTIONS, own, max_size=1)
    models = st.builds(ScriptedModel, turns, reactions, last_word=st.just(DEFAULT_LAST_WORD))  # a script need not end
    gate = st.builds(TableGate, st.fixed_dictionaries(table), decisions)
    return models, gate


TOP_LIMITS = limits(max_turns=(4, 14), max_prompt_tokens=(1500, 8000), max_tool_calls=(2, 12))
"""The top level's limits :func:`nested_worlds` draws by default."""
LEVEL_LIMITS = limits(max_turns=(2, 8), max_prompt_tokens=(600, 8000), max_tool_calls=(1, 6))
"""A nested level's own limits :func:`nested_worlds` draws by default (its parent's bound them further)."""


def nested_worlds(
    max_depth: int = 3,
    *,
    min_depth: int = 1,
    max_script: int = 4,
    top_limits: st.SearchStrategy[Limits] = TOP_LIMITS,
    level_limits: st.SearchStrategy[Limits] = LEVEL_LIMITS,
) -> st.SearchStrategy[NestedWorld]:
    """
    Chains of ``min_depth`` to ``max_depth`` agents (see :func:`nested_world`), each drawn afresh.

    Each level plays a random script of up to ``max_script`` turns (calls of
    its tools, the nested agent's among them, several at once, refused
    arguments, answers), under a random :class:`TableGate` (allow, deny or
    ask per tool, the nested agent's tool included) and limits of its own.
    """
    if not 1 <= min_depth <= max_depth:
        raise ValueError(f"need 1 <= min_depth <= max_depth, got {min_depth} and {max_depth}")
    return _nested_worlds(max_depth, min_depth, max_script, top_limits, level_limits)


@st.composite
def _nested_worlds(
    draw: st.DrawFn,
    max_depth: int,
    min_depth: int,
    max_script: int,
    top_limits: st.SearchStrategy[Limits],
    level_limits: st.SearchStrategy[Limits],
) -> NestedWorld:
    depth = draw(st.integers(min_depth, max_depth), label="depth")
    models, gate_list, limit_list = [], [], []
    for level in range(depth):
        model_strategy, gate_strategy = _level_strategies(level, level < depth - 1, max_script)
        models.append(draw(model_strategy, label=f"model of level{level}"))
        gate_list.append(draw(gate_strategy, label=f"gate of level{level}"))
        limit_list.append(draw(top_limits if level == 0 else level_limits, label=f"limits of level{level}"))
    return nested_world(models, gate_list, limit_list)


# --- driving ---


@attrs.frozen
class NestedDecision:
    """
    A person's decision at one pause of a nested run, and what it was given for.

    ``run_id`` is the run the blocked call belongs to (the top run's id and
    the calls down to it, joined by ``/``); ``attempts`` and ``after`` are
    where the world's attempt log stood when the decision was taken and once
    the run rested again: what ran between them ran on this decision.
    """

    approve: bool
    run_id: str
    call: ToolCall
    path: tuple[str, ...]
    attempts: int
    after: int = 0


@attrs.define
class NestedOutcome:
    """A driven nested run: its result, the world, every decision and every event (of every level)."""

    result: RunResult
    world: NestedWorld
    run_id: str
    decisions: list[NestedDecision] = attrs.field(factory=list)
    events: list[RunEvent] = attrs.field(factory=list)


def _fail(name: str, detail: str) -> None:
    raise InvariantViolation(name, detail)


def _round_trip(state: RunState, where: str) -> RunState:
    text = state.to_json()
    loaded = RunState.from_json(text)
    if loaded != state or loaded.to_json() != text:
        _fail("state_round_trip", f"the state saved {where} does not load back equal")
    return loaded


def drive_nested(
    world: NestedWorld,
    decide: Callable[[RunResult], bool | str],
    *,
    task: str = DEFAULT_TASK,
    run_id: str = "run",
    max_decisions: int = 64,
) -> NestedOutcome:
    """
    Run ``world``'s top agent to its end, asking ``decide`` at every pause (approve, reject, or
    :data:`~agent_fsm.testing.CANCEL`: the run, and every run down the pause's path, ends ``cancelled``).

    Each pause is saved and loaded back (which must give the same state), the
    decision is taken on the loaded copy, and that copy is then decided again,
    which must be refused with :class:`agent_fsm.NotPaused` and run nothing.

    Raises:
        InvariantViolation: ``round_trip``, ``decided_once``, or
            ``ends_absorbing`` after ``max_decisions`` pauses.
    """
    top = world.top
    events: list[RunEvent] = []
    outcome = NestedOutcome(top.run(task, run_id=run_id, on_event=events.append), world, run_id, events=events)
    while outcome.result.stop is Stop.AWAITING_APPROVAL:
        result = outcome.result
        if len(outcome.decisions) >= max_decisions:
            _fail("ends_absorbing", f"still paused after {max_decisions} decisions:\n{describe_run(result)}")
        loaded = _round_trip(result.state, f"at pause {len(outcome.decisions) + 1}")
        assert result.blocked_on is not None, "a paused result names its blocked call"
        choice = decide(result)
        approve = choice is True
        inner = "/".join((run_id, *result.blocked_path[:-1]))
        before = len(world.attempts)
        if choice == CANCEL:
            outcome.result = top.cancel(loaded, by="kit", reason="a random cancel", on_event=outcome.events.append)
        else:
            outcome.result = top.resume(loaded, approve=approve, on_event=outcome.events.append)
        decision = NestedDecision(approve, inner, result.blocked_on, result.blocked_path, before, len(world.attempts))
        outcome.decisions.append(decision)
        snapshot = loaded.to_json()
        try:
            top.cancel(loaded, by="kit") if choice == CANCEL else top.resume(loaded, approve=approve)
        except NotPaused:
            pass
        else:
            _fail("decided_once", f"pause {result.blocked_path} was decided twice without NotPaused")
        if loaded.to_json() != snapshot or len(world.attempts) != decision.after:
            _fail("decided_once", f"a refused second decision of {result.blocked_path} changed the run or ran a call")
    _round_trip(outcome.result.state, "at the end")
    return outcome


# --- the invariants ---


def _nodes(state: RunState) -> dict[str, RunState]:
    """Every run of the tree by run id, the top first."""
    found = {state.run_id: state}
    for child in state.children.values():
        found.update(_nodes(child))
    return found


def _verdict(agent: Agent, call: ToolCall) -> str:
    gate = agent.gate if agent.gate is not None else deny_effects(agent.tools)
    return as_verdict(gate(call)).kind


def assert_nested_invariants(outcome: NestedOutcome) -> None:
    """
    Check a driven nested run against :data:`NESTED_INVARIANTS` (the top's limits are its agent's).

    Raises:
        InvariantViolation: naming the invariant, the level and the call.
    """
    try:
        _check(outcome)
    except InvariantViolation as exc:
        exc.add_note("the top run, message by message:\n" + describe_run(outcome.result))
        for decision in outcome.decisions:
            exc.add_note(f"decision: {'approve' if decision.approve else 'reject'} {decision.path}")
        raise


def _check(outcome: NestedOutcome) -> None:
    result, world = outcome.result, outcome.world
    if result.stop is Stop.AWAITING_APPROVAL or result.state.machine_state == "AwaitingApproval":
        _fail("ends_absorbing", f"the run rests paused: {result.reason}")
    agents = world.agents
    nodes = _nodes(result.state)
    own_turns: dict[str, int] = {}
    for event in outcome.events:
        if isinstance(event, ModelRequested):
            if event.run_id not in nodes:
                _fail("children_kept", f"model calls of run {event.run_id!r}, which the saved tree does not hold")
            own_turns[event.run_id] = own_turns.get(event.run_id, 0) + 1
    own_attempts: dict[str, int] = {}
    for entry in world.attempts:
        own_attempts[entry["run_id"]] = own_attempts.get(entry["run_id"], 0) + 1
    _check_tree(outcome, result.state, agents, own_turns, own_attempts, None)
    _check_effects(outcome, nodes, agents)
    _check_decisions(outcome, nodes)


def _agent_of(state: RunState, agents: Mapping[str, Agent]) -> Agent:
    agent = agents.get(state.agent or "top")
    if agent is None:
        _fail("children_kept", f"run {state.run_id!r} names agent {state.agent!r}, not one of {sorted(agents)}")
    assert agent is not None
    return agent


def _check_tree(
    outcome: NestedOutcome,
    state: RunState,
    agents: Mapping[str, Agent],
    own_turns: Mapping[str, int],
    own_attempts: Mapping[str, int],
    left: tuple[int, int | None] | None,
) -> None:
    """One run and, recursively, the runs it nested: ended, kept, charged, and within budgets."""
    agent = _agent_of(state, agents)
    own = agent.limits if agent.limits is not None else Limits()
    where = f"run {state.run_id!r} ({state.agent})"
    if not state.stop and state.machine_state not in _ABSORBING:
        _fail("ends_absorbing", f"{where} rests in {state.machine_state}, not an ending")
    turn_cap = own.max_turns if left is None else min(own.max_turns, left[0])
    attempt_cap = own.max_tool_calls
    if left is not None and left[1] is not None:
        attempt_cap = left[1] if attempt_cap is None else min(attempt_cap, left[1])
    if state.turns > turn_cap:
        _fail("nested_budgets", f"{where} made {state.turns} model calls; it had {turn_cap}")
    if attempt_cap is not None and state.tool_attempts > attempt_cap:
        _fail("nested_budgets", f"{where} made {state.tool_attempts} tool attempts; it had {attempt_cap}")
    if any(tokens > own.max_prompt_tokens for tokens in state.prompt_token_log):
        _fail("nested_budgets", f"{where} sent a prompt over its own cap of {own.max_prompt_tokens} tokens")
    nested = {name for name, spec in agent.tools.items() if isinstance(spec.handler, Nested)}
    ran = [(index, call) for index, call in executed_calls(state) if call.name in nested]
    if sorted(state.children) != sorted(call.call_id for _, call in ran):
        _fail(
            "children_kept", f"{where} ran nested calls {[c.call_id for _, c in ran]} but keeps {list(state.children)}"
        )
    turns, attempts = own_turns.get(state.run_id, 0), own_attempts.get(state.run_id, 0) + len(ran)
    spent_turns, spent_attempts = 0, 0  # by this run before each child began, from the transcript's order
    for index, call in ran:
        child = state.children[call.call_id]
        before_turns = _model_calls_before(state, index) + spent_turns
        before_attempts = _attempts_before(outcome, state, index) + spent_attempts
        parent_turns = turn_cap - before_turns
        parent_attempts = None if attempt_cap is None else attempt_cap - before_attempts
        _check_tree(outcome, child, agents, own_turns, own_attempts, (parent_turns, parent_attempts))
        _check_observed(state, call, child)
        turns += child.turns
        attempts += child.tool_attempts
        spent_turns += child.turns
        spent_attempts += child.tool_attempts
    if state.turns != turns:
        _fail("charged_to_parent", f"{where} counts {state.turns} model calls; it made {turns} with its nested runs")
    if state.tool_attempts != attempts:
        _fail("charged_to_parent", f"{where} counts {state.tool_attempts} tool attempts; {attempts} were made")


def _model_calls_before(state: RunState, index: int) -> int:
    """The run's own model calls up to the one that proposed the call answered at message ``index``."""
    return sum(1 for message in state.messages[:index] if message.get("role") == "assistant")


def _attempts_before(outcome: NestedOutcome, state: RunState, index: int) -> int:
    """The run's own attempts (handler runs and nested calls) before the call answered at message ``index``."""
    earlier = {call.call_id for i, call in executed_calls(state) if i < index}
    handled = sum(1 for e in outcome.world.attempts if e["run_id"] == state.run_id and e["call_id"] in earlier)
    return handled + sum(1 for key in state.children if key in earlier) + 1  # the nested call counts itself


def _observation(state: RunState, call_id: str) -> Observation | None:
    found = [o for o in state.observations if o.call_id == call_id]
    return found[-1] if found else None


def _check_observed(state: RunState, call: ToolCall, child: RunState) -> None:
    """The nested call's observation is the child's ending: its answer as the result, else an error naming it."""
    seen = _observation(state, call.call_id)
    if child.machine_state == "Answered":
        expected = child.output if child.output is not None else child.answer
        if seen is None or seen.kind != "result" or seen.content != expected:
            _fail("children_kept", f"nested call {call.call_id} answered {expected!r} but was observed {seen}")
    else:
        stop = RUN_MACHINE.stop_of(child.machine_state)
        content = None if seen is None else seen.content
        if not isinstance(content, Mapping) or stop is None or content.get("stop") != stop.value:
            _fail("children_kept", f"nested call {call.call_id} ended {stop} but was observed {seen}")


def _check_effects(outcome: NestedOutcome, nodes: Mapping[str, RunState], agents: Mapping[str, Agent]) -> None:
    approved = {(d.run_id, d.call.call_id) for d in outcome.decisions if d.approve}
    for effect in outcome.world.effects:
        run_id, call_id = effect["run_id"], effect["call_id"]
        state = nodes.get(run_id)
        if state is None:
            _fail("effect_gated", f"effect {effect} ran in a run the saved tree does not hold")
        assert state is not None
        if state.agent != effect["agent"]:
            _fail("effect_gated", f"effect {effect} of {effect['agent']} ran inside {state.agent}'s run {run_id!r}")
        agent = _agent_of(state, agents)
        calls = [call for _, call in executed_calls(state) if call.call_id == call_id]
        if len(calls) != 1 or calls[0].name != effect["tool"] or calls[0].arguments != effect["arguments"]:
            _fail("effect_gated", f"effect {effect} is not the one call {call_id} its run executed: {calls}")
        verdict = _verdict(agent, calls[0])
        if verdict == "deny" or (verdict == "ask" and (run_id, call_id) not in approved):
            _fail("effect_gated", f"effect {effect}: {agent.name}'s own gate says {verdict} and no person approved it")


def _check_decisions(outcome: NestedOutcome, nodes: Mapping[str, RunState]) -> None:
    attempts = outcome.world.attempts
    for decision in outcome.decisions:
        ran = attempts[decision.attempts : decision.after]
        blocked = [e for e in ran if (e["run_id"], e["call_id"]) == (decision.run_id, decision.call.call_id)]
        if len(blocked) > 1:
            _fail("decision_covers_call", f"the call decided at {decision.path} ran {len(blocked)} times")
        if blocked and not decision.approve:
            _fail("decision_covers_call", f"the call rejected at {decision.path} ran")
        if blocked and blocked[0]["arguments"] != (decision.call.arguments or {}):
            _fail("decision_covers_call", f"the call approved at {decision.path} ran with other arguments")
        state = nodes.get(decision.run_id)
        if state is None:
            _fail("decision_covers_call", f"the run decided at {decision.path} is not in the saved tree")
        assert state is not None
        call_id = decision.call.call_id
        if call_id in state.children:  # a delegation the gate asked about: approved, the nested run began
            if not decision.approve:
                _fail("decision_covers_call", f"the delegation rejected at {decision.path} ran its agent")
            continue
        seen = _observation(state, call_id)
        executed = seen is not None and seen.kind in ("result", "error")
        if decision.approve and executed != bool(blocked) and seen is not None:
            _fail("decision_covers_call", f"the call approved at {decision.path} was observed {seen} but ran {blocked}")


_ABSORBING = frozenset(s.name for s in RUN_MACHINE.states if s.kind == "absorbing")


def check_nesting(
    worlds: st.SearchStrategy[NestedWorld] | None = None,
    *,
    task: str = DEFAULT_TASK,
    settings: Settings | None = None,
) -> None:
    """
    Run Hypothesis over ``worlds`` (default :func:`nested_worlds`), a person deciding every pause at random
    (approving, rejecting or cancelling).

    Each run is driven by :func:`drive_nested` and checked by
    :func:`assert_nested_invariants`; ``settings`` default to the kit's
    (:func:`default_settings`).

    Raises:
        InvariantViolation: the first invariant a shrunk example breaks.
    """
    drawn = nested_worlds() if worlds is None else worlds

    def property_(data: st.DataObject) -> None:
        world = data.draw(drawn, label="world")
        choices: st.SearchStrategy[bool | str] = st.sampled_from((True, False, CANCEL))
        outcome = drive_nested(world, lambda result: data.draw(choices, label="decide"), task=task)
        assert_nested_invariants(outcome)

    run_property(property_, settings)
