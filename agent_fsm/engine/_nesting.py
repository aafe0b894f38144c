"""
Agents inside agents: an agent run as another's tool, and a conversation handed over to another agent.

Nesting is a run inside a tool call, not a second engine. The child is a
whole run of its own agent, saved inside its parent's state under the call
that ran it (``RunState.children``), and driven as steps of the parent's
own: its model calls, gates and handlers are requests the parent's driver
performs, so a nested run works under the sync and async drivers and a
store alike, and its events reach the parent's listeners (a child's run id
is its parent's and the call's, joined by ``/``). Three rules make a
composition safe:

* **Budgets.** A child runs under its own limits, each cut to what its
  parent has left (turns, tool attempts, money, time; the prompt cap is the
  smaller of the two), so whichever is tighter binds; when it ends, what it
  spent is charged to the parent. A child always has fewer turns than its
  parent had when it proposed the call, so a composition terminates however
  deep it goes, even an agent that delegates to itself (see
  :func:`check_composition`).
* **Gates.** The parent's gate judges the call that starts a child; the
  child's gate judges every call the child makes. No effect of a child
  escapes its own gate, and an effectful child is denied by default like
  any effectful tool.
* **Pauses.** A child that pauses pauses its parent on the call that runs it
  (``RunResult.blocked_on`` is the innermost call, ``blocked_path`` leads to
  it). A decision is given at the top and judged on the way down: each
  parent's gate judges its call afresh, the paused child's gate the call it
  paused on, so an approval covers exactly the nested call, once.

A child that answers is its call's ``result`` (its typed output when it has
one); any other ending is an ``error`` naming its stop, code and reason, so
the parent's model reads why. A handoff (:meth:`agent_fsm.Agent.handoff`) is
the same nesting with the conversation as the child's task, and the parent
ends ``handed_over`` with the child's answer and code once the child ends.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import attrs

from agent_fsm.engine._boundary import Checkpointer, Intent
from agent_fsm.engine._codecs import NESTING_CEILING
from agent_fsm.engine._errors import RunError
from agent_fsm.engine._launch import Launch, continuing, deciding, recovering, result_of
from agent_fsm.engine._limits import DEFAULT_LIMITS, Limits, Stop
from agent_fsm.engine._machine import RUN_MACHINE
from agent_fsm.engine._messages import Observation
from agent_fsm.engine._run import RunContext, pause_on
from agent_fsm.engine._spending import charge_nested
from agent_fsm.engine._state import RunResult, RunState, nested_nonce
from agent_fsm.engine._steps import Steps
from agent_fsm.engine._tools import Subrun, ToolCall, ToolSpec

if TYPE_CHECKING:
    from agent_fsm.engine._agent import Agent

__all__ = [
    "Composition",
    "ConversationFilter",
    "Nested",
    "bounded_limits",
    "check_composition",
    "conversation",
    "held_limits",
    "nested_tool",
]

ConversationFilter = Callable[[list[dict[str, Any]]], Sequence[Mapping[str, Any]]]
"""What a handoff passes on: the transcript in, the messages the next agent starts from out (ending with a user's)."""


def conversation(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """
    The default handoff filter: the users' messages and the assistant's text, in order.

    The system prompt (the next agent has its own), tool calls and tool
    results stay behind: they are the handing agent's work, under contracts
    the next agent does not have. Whatever followed the last user message is
    dropped, so the next agent answers it.
    """
    kept: list[dict[str, Any]] = []
    for message in messages:
        role, content = message.get("role"), message.get("content")
        if role == "user":
            kept.append({"role": "user", "content": content})
        elif role == "assistant" and isinstance(content, str) and content:
            kept.append({"role": "assistant", "content": content})
    while kept and kept[-1]["role"] != "user":
        kept.pop()
    return kept


class Nested(Subrun):
    """
    The handler of a tool that runs another agent: :meth:`agent_fsm.Agent.as_tool` and :meth:`~agent_fsm.Agent.handoff`.

    ``agent`` is the agent that runs; ``hands_over`` makes the tool a handoff
    (the run ends as the agent's part ends); ``task`` reads the call's
    arguments as the child's task (``None``: a handoff, whose task is the
    conversation ``passes`` leaves).
    """

    __slots__ = ("agent", "hands_over", "passes", "task")

    def __init__(
        self,
        agent: Agent,
        *,
        hands_over: bool = False,
        task: Callable[[Mapping[str, Any]], str] | None = None,
        passes: ConversationFilter | None = None,
    ) -> None:
        self.agent = agent
        self.hands_over = hands_over
        self.task = task
        self.passes = passes if passes is not None else conversation

    def __repr__(self) -> str:
        kind = "handoff to" if self.hands_over else "agent"
        return f"<{kind} {self.agent.name or 'unnamed'}>"

    def steps(self, run: Any, call: ToolCall) -> Steps[Observation | None]:
        """Start, resume or go on with the child run under ``call``; its ending as the call's observation."""
        return _nested_steps(self, run, call)

    def contracts(self) -> str:
        """The nested agent's digest (its tools and rules, and those of the agents it nests in turn)."""
        digesting = _DIGESTING.__dict__.setdefault("agents", set())
        if id(self.agent) in digesting:  # an agent that nests itself: named, not digested forever
            return f"{self.hands_over:d}(recursive {self.agent.name})"
        digesting.add(id(self.agent))
        try:
            return f"{self.hands_over:d}{self.agent.digest}"
        finally:
            digesting.discard(id(self.agent))


_DIGESTING = threading.local()  # the agents whose digest is being computed, up this thread's stack


def nested_tool(
    agent: Agent,
    description: str | None,
    schema: Mapping[str, Any] | None,
    effectful: bool | None,
    *,
    hands_over: bool = False,
    passes: ConversationFilter | None = None,
) -> ToolSpec:
    """The tool that runs ``agent`` (see :meth:`agent_fsm.Agent.as_tool`, :meth:`agent_fsm.Agent.handoff`)."""
    name = agent.name or "another agent"
    if hands_over:
        given: Mapping[str, Any] = {} if schema is None else schema
        task = None
        told = description or f"Hand the conversation over to {name}, which answers the user from here on."
    elif schema is None:
        given, task = {"task": str}, _task_argument
        told = description or f"Ask {name} to carry out a task; its answer comes back as the result."
    else:
        given, task = schema, _arguments_as_task
        told = description or f"Ask {name} to carry out a task; its answer comes back as the result."
    if effectful is None:  # as careful as the most careful tool it may run: the gate must allow it
        effectful = any(spec.effectful for spec in agent.tools.values())
    handler = Nested(agent, hands_over=hands_over, task=task, passes=passes)
    return ToolSpec(told, given, handler, effectful=effectful)


def _task_argument(arguments: Mapping[str, Any]) -> str:
    return str(arguments["task"])


def _arguments_as_task(arguments: Mapping[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True)


# --- budgets ---


def bounded_limits(own: Limits, parent: Limits, state: RunState, seconds_left: float | None) -> Limits:
    """
    ``own`` limits, each cut to what the parent (``parent`` limits, ``state``) has left: the tighter binds.

    The prompt cap is per prompt, so the smaller of the two; turns, tool
    attempts and money are what the parent has not spent; time is what is
    left of the parent's clock (``seconds_left``, ``None``: no time budget).
    """
    changes: dict[str, Any] = {}
    turns = max(parent.max_turns - state.turns, 0)
    if turns < own.max_turns:
        changes["max_turns"] = turns
    if parent.max_prompt_tokens < own.max_prompt_tokens:
        changes["max_prompt_tokens"] = parent.max_prompt_tokens
    if parent.max_tool_calls is not None:
        attempts = max(parent.max_tool_calls - state.tool_attempts, 0)
        if own.max_tool_calls is None or attempts < own.max_tool_calls:
            changes["max_tool_calls"] = attempts
    if seconds_left is not None:
        seconds = max(seconds_left, 1e-9)  # spent: the child's first check ends it time_limit
        if own.max_seconds is None or seconds < own.max_seconds:
            changes["max_seconds"] = seconds
    if parent.max_cost is not None:
        money = max(parent.max_cost - state.usage.cost, Decimal(0))
        if own.max_cost is None or money < own.max_cost:
            changes["max_cost"] = money
        if own.max_output_tokens is None or own.max_output_tokens > (parent.max_output_tokens or 0):
            changes["max_output_tokens"] = parent.max_output_tokens
    return attrs.evolve(own, **changes) if changes else own


def held_limits(agent: Agent, parent: Limits) -> Limits:
    """
    The limits a run of ``agent`` nested in a fresh run held to ``parent`` starts under.

    Its machine is restricted by these (:meth:`agent_fsm.Agent.machine`): a
    parent's money, time or tool budget binds the nested run too, so it
    brings that budget's states and edges into the nested agent's machine.
    """
    own = agent.limits if agent.limits is not None else DEFAULT_LIMITS
    return bounded_limits(own, parent, RunState(), parent.max_seconds)


def _bounded(agent: Agent, run: RunContext) -> Agent:
    """``agent`` under limits bounded by the run's; priced as the run is when it has no prices of its own."""
    own = agent.limits if agent.limits is not None else DEFAULT_LIMITS
    limits = bounded_limits(own, run.limits, run.state, run.remaining_seconds())
    parent = run.agent
    prices = agent.prices
    if prices is None and run.limits.max_cost is not None and parent is not None:
        prices = parent.prices  # a money budget bounds only what is priced
    if limits is agent.limits and prices is agent.prices:
        return agent
    bounded = object.__new__(type(agent))
    bounded.__dict__.update(agent.__dict__)  # checked when it was built; the limits are checked Limits
    bounded.__dict__["limits"] = limits
    bounded.__dict__["prices"] = prices
    return bounded


# --- the child run ---


class _Within:
    """
    A child's commits, as commits of the run it is nested in: the tree is saved as one state, under the top run's id.

    An intent committed by the child is committed with the path of calls
    leading down to it, so recovery can find the effect in flight.
    """

    __slots__ = ("key", "run")

    def __init__(self, run: RunContext, key: str) -> None:
        self.run = run
        self.key = key

    def begin(self, run_id: str, state: RunState) -> None:
        self.save(run_id, state)

    def save(self, run_id: str, state: RunState, intent: Intent | None = None) -> None:
        run = self.run
        run.state.children[self.key] = state
        if intent is not None:
            intent = attrs.evolve(intent, path=f"{self.key}/{intent.path}" if intent.path else self.key)
        assert run.checkpointer is not None, "a child is stored only within a stored run"
        run.checkpointer.save(run.run_id, run.state, intent)


def _begin(nested: Nested, agent: Agent, run: RunContext, call: ToolCall, child_id: str) -> RunState:
    """A new child's state: the call's task, or, for a handoff, the conversation the filter passes on."""
    if nested.task is not None:
        return agent.start(nested.task(call.arguments or {}), run_id=child_id)
    try:
        passed = [dict(m) for m in nested.passes([dict(m) for m in run.state.messages])]
    except Exception as exc:
        raise RunError(f"the handoff filter raised {type(exc).__name__}: {exc}", state=run.state) from exc
    if not passed or passed[-1].get("role") != "user":
        raise RunError(
            "a handoff filter must leave the conversation ending with a user's message (the next agent answers it);"
            f" it left {len(passed)} messages ending with {passed[-1].get('role') if passed else 'none'!r}",
            state=run.state,
        )
    task: Any = passed[-1].get("content")  # text, or content parts as the wire format allows
    return agent.start(task, history=passed[:-1], run_id=child_id)


def _nested_steps(nested: Nested, run: RunContext, call: ToolCall) -> Steps[Observation | None]:
    state = run.state
    child = state.children.get(call.call_id) if state.children else None
    child_id = f"{state.run_id}/{call.call_id}"
    if child is None:  # the call is one attempt of the parent's, counted before the child's share is cut
        state.tool_attempts += 1
        if run.depth >= NESTING_CEILING:  # a run nested deeper could be saved but never loaded again
            return _too_deep(nested, call)
    agent = _bounded(nested.agent, run)
    store: Checkpointer | None = None if run.checkpointer is None else _Within(run, call.call_id)
    listening = run.outbox is not None
    decision, run.decision = run.decision, None
    launch: Launch
    if child is None:  # what the child spends is charged to the parent when it ends
        child = _begin(nested, agent, run, call, child_id)
        child.nonce = nested_nonce(state.nonce, call.call_id)
        state.children[call.call_id] = child
        launch = continuing(agent, child, store=store, run_id=child_id, listening=listening, fresh=True)
    elif child.machine_state == "AwaitingApproval":
        if decision is None:  # nobody decided here: the pause stands, and this run waits on it again
            pause_on(run, call, _paused_reason(nested, call, result_of(agent, child)))
            return None
        if isinstance(decision, Mapping):  # a reply reviewed whole: each of its calls decided in the child
            launch = deciding(agent, child, None, "", None, None, store, child_id, listening, reply=decision)
        else:
            approve, reason, arguments, answer = decision
            launch = deciding(agent, child, approve, reason, arguments, None, store, child_id, listening, answer)
    elif child.stop is not None:  # absorbing: a paused child was taken above
        # Ended, and committed, before a crash took this run: not charged yet (the charge and the
        # observation are made in one step, with no commit between them).
        charge_nested(state, child)
        return _ended(nested, run, call, result_of(agent, child))
    else:  # interrupted in flight by a crash: settled by the recovery rules, with its own gate
        intent, run.recovering = run.recovering, None
        launch = recovering(agent, child, store=store, run_id=child_id, intent=intent)
    context, steps = launch
    context.outbox, context.relay, context.perform = run.outbox, run.relay, run.perform
    context.depth = run.depth + 1
    try:
        result: RunResult = yield from steps
    except BaseException as exc:
        # Raised in the child (a bug, a cancellation): the state to hold is this run's, which keeps the child's.
        if getattr(exc, "state", None) is context.state:
            exc.state = state  # type: ignore[attr-defined]
        raise
    finally:
        state.children[call.call_id] = context.state  # a decision works on a copy of the paused state
    if result.stop is Stop.AWAITING_APPROVAL:
        pause_on(run, call, _paused_reason(nested, call, result))
        return None
    charge_nested(state, context.state)
    return _ended(nested, run, call, result)


def _too_deep(nested: Nested, call: ToolCall) -> Observation:
    reason = (
        f"runs nest at most {NESTING_CEILING} deep (the deepest a saved state may hold): "
        f"{nested.agent.name or 'the nested agent'} was not started"
    )
    content = {"agent": nested.agent.name, "stop": None, "code": "nesting_limit", "reason": reason}
    return Observation(call.call_id, False, "error", content)


def _paused_reason(nested: Nested, call: ToolCall, result: RunResult) -> str:
    blocked = result.blocked_on
    what = f"{blocked.name} ({'/'.join((call.call_id, *result.blocked_path))})" if blocked is not None else "a call"
    return f"{nested.agent.name or 'a nested agent'} waits on {what}: {result.reason or 'a person must decide'}"


def _ended(nested: Nested, run: RunContext, call: ToolCall, result: RunResult) -> Observation:
    """The child's ending as the call's observation (a handoff's also ends the parent: see ``handed_over``)."""
    if nested.hands_over:
        run.handed = call.call_id
    if result.stop is Stop.ANSWERED:
        content = result.state.output if result.state.output is not None else result.answer
        return Observation(call.call_id, True, "result", content)
    content = {
        "agent": nested.agent.name,
        "stop": result.stop.value,
        "code": result.code,
        "reason": result.reason,
    }
    return Observation(call.call_id, False, "error", content, permanent=result.stop is Stop.HANDOFF)


# --- the composition, checked ---


@attrs.frozen
class Composition:
    """
    What :func:`check_composition` found: the agents a run may nest, how deep, and why it terminates.

    ``edges`` are ``(agent, tool, nested agent)`` triples by agent name;
    ``recursive`` is true when an agent can nest itself (directly or not);
    ``depth_bound`` is how deep runs can nest: the longest chain of the
    graph, or, when it has a cycle, the top agent's ``max_turns`` (each level
    has fewer turns than the one above it). ``problems`` lists what would
    stop a composition from working (an unnamed agent is not one);
    ``proved`` the machines proved to terminate (the whole table, and each
    agent's as configured).
    """

    agents: tuple[str, ...]
    edges: tuple[tuple[str, str, str], ...]
    recursive: bool
    depth_bound: int
    terminates: bool
    problems: tuple[str, ...] = ()
    proved: tuple[str, ...] = ()


def _label(agent: Agent, names: dict[int, str]) -> str:
    key = id(agent)
    if key not in names:
        names[key] = agent.name or f"agent{len(names) + 1}"
    return names[key]


def check_composition(agent: Agent) -> Composition:
    """
    Prove the composition of ``agent`` and the agents it nests terminates, or say why not.

    The run machine terminates on its own (:func:`agent_fsm.engine.check_machine`),
    and so must each agent's machine as configured (:meth:`agent_fsm.Agent.machine`,
    under the limits it is held to nested): both are checked here, and a
    violation is a problem. A composition adds one edge per nesting tool. Each nested run is bounded
    by its parent's budgets and charges what it spends to them, and starts
    with fewer turns than its parent had left (the parent spent at least one
    proposing the call), so every level spends a budget of the level above
    and the depth is bounded by the top agent's ``max_turns``. What can break
    that is a registry that changes while running (an MCP list), which may
    bring nesting tools the check did not see: reported as a problem.
    """
    from agent_fsm.engine._analysis import check_machine  # the checker loads only when a composition is checked

    names: dict[int, str] = {}
    edges: list[tuple[str, str, str]] = []
    graph: dict[str, set[str]] = {}
    problems: list[str] = []
    seen: set[int] = set()
    top_limits = agent.limits if agent.limits is not None else DEFAULT_LIMITS
    todo = [(agent, top_limits)]

    proved = [f"the run machine ({len(RUN_MACHINE.states)} states)"]
    whole = check_machine(RUN_MACHINE)
    if not whole.ok:
        problems.append(str(whole))
    while todo:
        current, held = todo.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        here = _label(current, names)
        graph.setdefault(here, set())
        configured = current.machine(limits=held)
        report = check_machine(configured)
        if report.ok:
            proved.append(f"{here}'s machine as configured ({len(configured.states)} states)")
        else:
            problems.append(f"{here}'s machine as configured: " + "; ".join(v.message for v in report.violations))
        if hasattr(current.tools, "version"):
            problems.append(f"{here}'s tools follow a changing list: nesting tools added later are not checked here")
        for tool, spec in current.tools.items():
            handler = spec.handler
            if isinstance(handler, Nested):
                below = _label(handler.agent, names)
                edges.append((here, tool, below))
                graph[here].add(below)
                todo.append((handler.agent, held_limits(handler.agent, held)))
    top = _label(agent, names)
    recursive, longest = _depth(graph, top)
    bound = top_limits.max_turns if recursive else longest
    return Composition(
        agents=tuple(sorted(graph)),
        edges=tuple(edges),
        recursive=recursive,
        depth_bound=bound,
        terminates=not problems,
        problems=tuple(problems),
        proved=tuple(proved),
    )


def _depth(graph: Mapping[str, set[str]], top: str) -> tuple[bool, int]:
    """Whether the graph reachable from ``top`` has a cycle, and its longest chain of nestings (if it has none)."""
    on_path: set[str] = set()
    memo: dict[str, int] = {}
    cyclic = False

    def longest(node: str) -> int:
        nonlocal cyclic
        if node in memo:
            return memo[node]
        if node in on_path:
            cyclic = True
            return 0
        on_path.add(node)
        depth = max((1 + longest(n) for n in graph.get(node, ())), default=0)
        on_path.discard(node)
        memo[node] = depth
        return depth

    deepest = longest(top)
    return cyclic, deepest
