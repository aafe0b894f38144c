"""
Shortest paths: the fewest steps to each state of a machine, and runs in your world that take them.

Rationale: XState's model-based testing (``getShortestPaths`` in
``@xstate/graph``) turns a machine into one test per state, each reaching it
by the shortest route. :func:`paths_to` is that, on any
:class:`~agent_fsm.MachineSpec`'s table. For the run machine the kit goes
further and finds *runs* in your world that reach each state: it tries
scripts of one reply, then two, under a few setups each made to open one
door (a gate that allows, asks or denies; a budget at zero; an answer check
that refuses; a model that cannot be reached or is slow; a tool that fails
for good; screens that pass, refuse the task or stop at a result; a prompt
compacted from the first turn, its summarizer up or down; a tool that ends
the run), and keeps the first run that enters each state. Those runs are
:class:`Route` s: a scripted model, its limits, gate, screens, other agent
parts and decisions, replayable as a test. :func:`check_reaches_all` fails
naming every state your world cannot reach, and returns the edge coverage of
the runs it tried.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal

import attrs

from agent_fsm import (
    RUN_MACHINE,
    Edge,
    Ending,
    FallbackModel,
    Limits,
    MachineSpec,
    OutcomeUnknown,
    Price,
    Prices,
    ProviderFailure,
    RunResult,
    ScriptedModel,
    Stop,
    ToolError,
    Verdict,
    answer_message,
    as_verdict,
    ends_run,
    summarize,
    tool_call_message,
)
from agent_fsm.engine import DEFAULT_LAST_WORD, Agent, Gate, Nested, PersonAnswers, Registry, ToolCall, ToolSpec
from agent_fsm.testing._constants import gate_constants
from agent_fsm.testing._coverage import Coverage
from agent_fsm.testing._drive import (
    CANCEL,
    DEFAULT_TASK,
    GateContext,
    GateFactory,
    ManualClock,
    World,
    decide_pause,
    world_of,
)
from agent_fsm.testing._enumeration import contract_cases, plain_arguments
from agent_fsm.testing._invariants import InvariantViolation

__all__ = ["PROVIDER_DOWN", "Route", "RouteModel", "check_reaches_all", "paths_to", "routes"]

PROVIDER_DOWN: Mapping[str, Any] = {"provider_down": "the model could not be reached"}
"""A reply in a :class:`Route` standing for a model call that fails (the model raises ``ProviderFailure``)."""

_SLOW_SECONDS = 0.02
"""How long a slow reply takes on the route's :class:`ManualClock` (no real time passes), and the budgets it spends."""


def paths_to(machine: MachineSpec, state: str) -> tuple[Edge, ...]:
    """
    The shortest route through ``machine``'s table from its initial state to ``state``: its edges in order.

    Guards are not evaluated (the table alone is read): a route says which
    edges to take, :func:`routes` finds runs that take them.

    Raises:
        ValueError: ``state`` is not a state of ``machine``, or no route reaches it.
    """
    names = {s.name for s in machine.states}
    if state not in names:
        raise ValueError(f"{state!r} is not a state of machine {machine.name!r}; its states are {sorted(names)}")
    previous: dict[str, tuple[Edge, ...]] = {machine.initial: ()}
    queue = deque([machine.initial])
    while queue:
        here = queue.popleft()
        if here == state:
            return previous[here]
        for edge in machine.edges:
            if edge.source == here and edge.dest not in previous:
                previous[edge.dest] = (*previous[here], edge)
                queue.append(edge.dest)
    raise ValueError(f"no route through machine {machine.name!r} reaches {state!r} from {machine.initial!r}")


class _Summarizer:
    """The kit's summarizer for a compacting route: writes a one-line summary, or cannot be reached."""

    def __init__(self, down: bool) -> None:
        self.down = down

    def __repr__(self) -> str:
        return f"_Summarizer(down={self.down})"

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        if self.down:
            raise ProviderFailure("the kit's summarizer could not be reached")
        return answer_message("The kit's summary of the earlier turns.")


def _compacting(down: bool = False) -> dict[str, Any]:
    """Agent options compacting from the first turn (a summary, so a compaction may spend a turn or fail)."""
    return {"compact": summarize(_Summarizer(down), keep=1), "compact_at": 1}


class RouteModel:
    """
    Plays a route's replies in order: :data:`PROVIDER_DOWN` raises, a reply with ``wait_seconds`` is slow
    (it moves ``clock`` on by that much; with no clock, it sleeps).
    """

    def __init__(self, replies: Sequence[Mapping[str, Any]], clock: ManualClock | None = None) -> None:
        self.replies = [dict(r) for r in replies]
        self.used = 0
        self.clock = clock

    def __repr__(self) -> str:
        return f"RouteModel({self.replies!r})"

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        reply = self.replies[self.used] if self.used < len(self.replies) else answer_message("Done.")
        self.used += 1
        if reply == dict(PROVIDER_DOWN):
            raise ProviderFailure(str(PROVIDER_DOWN["provider_down"]))
        if "wait_seconds" in reply:
            if self.clock is not None:
                self.clock.advance(float(reply["wait_seconds"]))
            else:
                time.sleep(float(reply["wait_seconds"]))
            return {k: v for k, v in reply.items() if k != "wait_seconds"}
        return reply


def _refuse_answers(answer: str, state: Any) -> str:
    return "the kit's answer check refuses every answer"


Screening = Literal["none", "pass", "refuse", "stop"]
"""The kit's screens in a route: none, both passing everything, an input screen refusing, a result screen stopping."""
Failure = Literal["permanent", "unknown", "handoff", "again", "slow"]
"""
How the kit's failing tool fails: for good, with its outcome unknown, by handing the run over to another agent,
the same recoverable way every time (a repeated result), or not at all but slowly (its call takes a slow
reply's time on the route's clock).
"""


def _pass(subject: Any, state: Any) -> None:
    return None


def _refuse_tasks(task: str, state: Any) -> Ending:
    return Ending("kit_refused", "the kit's input screen refuses every task")


def _stop_results(observation: Any, state: Any) -> Ending:
    return Ending("kit_stopped", "the kit's result screen stops at every result")


_SCREENS: dict[str, dict[str, Any]] = {
    "none": {},
    "pass": {"screen_input": _pass, "screen_result": _pass},
    "refuse": {"screen_input": _refuse_tasks},
    "stop": {"screen_result": _stop_results},
}


@attrs.frozen
class Route:
    """
    A run that reaches ``path[-1]``: the replies a scripted model gives, the
    limits, the gate (yours, or a table the kit chose), the human's decisions
    at each pause, and the kit's setup (``answer_check`` refusing, a tool
    failing for good or with an outcome unknown: ``failure`` says which) where
    the state needs one.
    """

    replies: tuple[Mapping[str, Any], ...]
    limits: Limits
    gate: Gate
    decisions: tuple[bool | str, ...] = ()  # True approves, False rejects, "cancel" cancels
    refuse_answers: bool = False
    failing_tool: str | None = None
    path: tuple[str, ...] = ()
    setup: str = ""
    failure: Failure = "permanent"
    screening: Screening = "none"
    # The agent's other parts the setup chose: compact=, compact_at=, tool_rules= (none by default).
    options: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    backup: bool = False  # the replies' model is the primary of a FallbackModel whose backup answers

    def model(self, clock: ManualClock | None = None) -> RouteModel | FallbackModel:
        """A fresh model playing the replies (with a backup that answers, when the route has one) on ``clock``."""
        played = RouteModel(self.replies, clock)
        return FallbackModel(played, ScriptedModel([], last_word=DEFAULT_LAST_WORD)) if self.backup else played

    def run(self, tools_factory: Callable[[], Any], task: str = DEFAULT_TASK) -> RunResult:
        """Run the route again in a fresh world, deciding each pause as recorded (then rejecting)."""
        return _play(self, world_of(tools_factory()), task)


def _failing(tools: Registry, name: str | None, failure: str, clock: ManualClock) -> Registry:
    if name is None:
        return tools
    if failure == "slow":
        spec = tools[name]

        def slow(**arguments: Any) -> Any:
            clock.advance(_SLOW_SECONDS)
            return spec.handler(**arguments)

        return {**tools, name: attrs.evolve(spec, handler=slow)}
    if failure == "handoff":  # the tool hands the conversation over to an agent that answers
        spec = tools[name]
        handler = Nested(_HOLDER, hands_over=True)
        return {**tools, name: ToolSpec(spec.description, spec.schema, handler, effectful=spec.effectful)}

    def fails(**arguments: Any) -> Any:
        if failure == "unknown":
            raise OutcomeUnknown("the kit made this tool's outcome unknown")
        if failure == "again":
            raise ToolError("the kit made this tool fail the same way again")
        raise ToolError("the kit made this tool fail for good", permanent=True)

    return {**tools, name: attrs.evolve(tools[name], handler=fails)}


def _play(route: Route, world: World, task: str, coverage: Coverage | None = None) -> RunResult:
    clock = ManualClock()  # the time budgets are read from it: a slow reply or tool takes no real time
    tools = _failing(world.tools, route.failing_tool, route.failure, clock)
    model = route.model(clock)
    check = _refuse_answers if route.refuse_answers else None
    gate = route.gate if coverage is None else coverage.counting(route.gate)
    # A world's own agent keeps its answer check, endings, prompt and estimator; the route sets the rest.
    base = world.agent if world.agent is not None else Agent(model, tools, gate=gate)
    changes: dict[str, Any] = {"model": model, "tools": tools, "gate": gate, "limits": route.limits, "clock": clock}
    changes.update(_SCREENS[route.screening])
    changes.update(route.options)
    if base.prices is None:  # every model's tokens cost something: a money budget can bind
        changes["prices"] = _PRICES
    if check is not None:
        changes["answer_check"] = check
    agent = base.replace(**changes)
    result = agent.run(task)
    decisions = list(route.decisions)
    while result.stop is Stop.AWAITING_APPROVAL:
        result = decide_pause(agent, result, decisions.pop(0) if decisions else False)
    return result


_HOLDER = Agent(
    ScriptedModel([], last_word=DEFAULT_LAST_WORD), {}, name="kit_holder"
)  # the agent a handoff hands over to: it answers
_PRICES = Prices(default=Price(Decimal(1), Decimal(1)))  # every model's tokens cost something: a budget can bind


def _table(kind: Literal["allow", "ask", "deny"]) -> Gate:
    def gate(call: ToolCall) -> Verdict:
        return Verdict(kind, f"the kit's gate answers {kind} to every call")

    gate.__qualname__ = f"{kind}_every_call"
    return gate


def _judged_arguments(tools: Registry, name: str, gate: Gate | None) -> list[tuple[str, dict[str, Any]]]:
    """
    Arguments for a call of ``name``: the simplest, or with your gate, one
    case of the enumerated contract per verdict it gives (so that ``ask`` is heard).
    """
    plain = plain_arguments(tools[name])
    if gate is None:
        return [("", plain)] if plain is not None else []
    by_kind: dict[str, dict[str, Any]] = {}
    for arguments in contract_cases(tools[name], gate_constants(tools, gate))[:2_000]:
        try:
            kind = as_verdict(gate(ToolCall("call_0", name, arguments))).kind
        except Exception:  # a gate failing on a case is not a route
            continue
        by_kind.setdefault(kind, arguments)
    if not by_kind and plain is not None:
        return [("", plain)]
    return [(f" ({kind})", arguments) for kind, arguments in sorted(by_kind.items())]


def _alphabet(tools: Registry, gate: Gate | None) -> list[tuple[str, Mapping[str, Any]]]:
    """The replies routes are made of: an answer, valid calls of each tool, refused ones, two calls at once."""
    replies: list[tuple[str, Mapping[str, Any]]] = [("answer", answer_message("Done."))]
    valid: list[Mapping[str, Any]] = []
    for index, name in enumerate(sorted(tools, key=lambda n: not tools[n].effectful)):
        for label, arguments in _judged_arguments(tools, name, gate):
            message = tool_call_message(f"call_{index}", name, arguments)
            valid.append(message)
            replies.append((f"call {name}{label}", message))
    unknown = tool_call_message("call_u", "no_such_tool", {})
    replies.append(("unknown tool", unknown))
    if valid:
        first = valid[0]["tool_calls"][0]
        second = {**first, "id": "call_v"}
        replies.append(("two calls", {"role": "assistant", "content": None, "tool_calls": [first, second]}))
        replies.append(
            (
                "unknown, then a call",
                {"role": "assistant", "content": None, "tool_calls": [unknown["tool_calls"][0], first]},
            )
        )
    replies.append(("provider down", PROVIDER_DOWN))
    replies.append(("slow answer", {**answer_message("Done, slowly."), "wait_seconds": _SLOW_SECONDS}))
    return replies


_money_for_one = Limits(max_turns=3, max_output_tokens=1_000_000, max_cost=Decimal("1.5"), wrap_up=True)
"""The first call's worst case (the output cap, a unit at :data:`_PRICES`) fits once, not twice: it is the wrap-up."""

_time_for_one = Limits(max_turns=3, max_seconds=_SLOW_SECONDS * 2.5, wrap_up=True)
"""After a slow tool's turn less time is left than two turns at that pace: the next call is the wrap-up."""

_Setup = tuple[str, Limits, bool, str | None, Failure, Gate, Screening, Mapping[str, Any], bool]


def _setups(tools: Registry, gates: Sequence[tuple[str, Gate]], first_prompt: int) -> Iterator[_Setup]:
    """
    Each gate under the plain limits, then under one changed budget or fault at a time.

    ``first_prompt`` is the size of this world's first prompt: a prompt budget one token under it refuses a
    normal first call and admits the wrap-up, which sends no tool declarations (where they outweigh its note).
    """
    base = Limits(max_turns=3)
    repeating = attrs.evolve(base, repeated_results=2)
    last_word = attrs.evolve(base, max_turns=1, wrap_up=True)  # the first call is the wrap-up
    changes: list[tuple[str, Limits, bool, str | None, Failure]] = [
        ("", base, False, None, "permanent"),
        ("max_turns=1", attrs.evolve(base, max_turns=1), False, None, "permanent"),
        ("max_prompt_tokens=1", attrs.evolve(base, max_prompt_tokens=1), False, None, "permanent"),
        ("max_tool_calls=0", attrs.evolve(base, max_tool_calls=0), False, None, "permanent"),
        ("repeated_denials=1", attrs.evolve(base, repeated_denials=1), False, None, "permanent"),
        ("max_seconds=1e-9", attrs.evolve(base, max_seconds=1e-9), False, None, "permanent"),
        (
            "max_seconds just under a slow reply",
            attrs.evolve(base, max_seconds=_SLOW_SECONDS / 2),
            False,
            None,
            "permanent",
        ),
        ("an answer check refusing every answer", base, True, None, "permanent"),
        ("wrap_up, max_turns=1", last_word, False, None, "permanent"),
        ("wrap_up, max_turns=1, an answer check refusing every answer", last_word, True, None, "permanent"),
        ("max_cost=0", attrs.evolve(base, max_output_tokens=1, max_cost=Decimal(0)), False, None, "permanent"),
        ("wrap_up, money for one worst case", _money_for_one, False, None, "permanent"),
        (
            "wrap_up, max_prompt_tokens just under the first prompt",
            attrs.evolve(last_word, max_turns=3, max_prompt_tokens=max(first_prompt - 1, 0)),
            False,
            None,
            "permanent",
        ),
    ]
    first = min(tools, key=lambda n: (not tools[n].effectful, n)) if tools else None
    if first is not None:
        changes.append((f"{first} failing for good", base, False, first, "permanent"))
        if tools[first].effectful:  # only an effect can leave its outcome unknown
            changes.append((f"{first} with its outcome unknown", base, False, first, "unknown"))
        changes.append((f"{first} handing the conversation over to another agent", base, False, first, "handoff"))
        changes.append((f"{first} failing the same way, repeated_results=2", repeating, False, first, "again"))
        changes.append((f"wrap_up, {first} slow, time for its turn and a half", _time_for_one, False, first, "slow"))
    # Agent options opening the doors of the context and the tools of each turn.
    agent_changes: list[tuple[str, Limits, Mapping[str, Any]]] = [
        ("compacting from the first turn", base, _compacting()),
        ("compacting, its summarizer down", base, _compacting(down=True)),
        ("compacting, max_prompt_tokens=1", attrs.evolve(base, max_prompt_tokens=1), _compacting()),
        # The summary of the two turns a script makes spends the third: the fourth and last is the wrap-up.
        ("wrap_up, max_turns=4, compacting from the first turn", attrs.evolve(last_word, max_turns=4), _compacting()),
        ("compacting, max_seconds=1e-9", attrs.evolve(base, max_seconds=1e-9), _compacting()),
        (
            "compacting, max_cost=0",
            attrs.evolve(base, max_output_tokens=1, max_cost=Decimal(0)),
            _compacting(),
        ),
        ("a typed output (a JSON object)", base, {"output": {"type": "object"}}),
    ]
    if first is not None:
        agent_changes.append((f"{first} ends the run", base, {"tool_rules": (ends_run(first),)}))
    for (label, limits, refuse, failing, failure), (gate_label, gate) in itertools.product(changes, gates):
        named = ", ".join(x for x in (gate_label, label) if x)
        yield (named, limits, refuse, failing, failure, gate, "none", {}, False)
    screened: list[tuple[str, Screening]] = [
        ("screens passing everything", "pass"),
        ("an input screen refusing every task", "refuse"),
        ("a result screen stopping at every result", "stop"),
    ]
    for (label, screening), (gate_label, gate) in itertools.product(screened, gates):
        yield (f"{gate_label}, {label}", base, False, None, "permanent", gate, screening, {}, False)
    for gate_label, gate in gates if first is not None else ():  # a repeated result, read by a result screen first
        label = f"{gate_label}, screens passing everything, {first} failing the same way, repeated_results=2"
        yield (label, repeating, False, first, "again", gate, "pass", {}, False)
    for (label, limits, options), (gate_label, gate) in itertools.product(agent_changes, gates):
        named = ", ".join(x for x in (gate_label, label) if x)
        yield (named, limits, False, None, "permanent", gate, "none", options, False)
    for gate_label, gate in gates:  # the provider down, and a backup model that answers
        label = ", ".join(x for x in (gate_label, "a backup model") if x)
        yield (label, base, False, None, "permanent", gate, "none", {}, True)


def routes(
    tools_factory: Callable[[], Any],
    *,
    gate: Gate | None = None,
    gate_factory: GateFactory | None = None,
    max_replies: int = 2,
    task: str = DEFAULT_TASK,
    coverage: Coverage | None = None,
) -> dict[str, Route]:
    """
    For each state of the run machine that a run in this world can enter, the
    shortest :class:`Route` found to it (fewest replies, then fewest decisions).

    With no gate given, the kit's gates are tried (allowing, asking, denying
    every call); with yours, only yours. Scripts of up to ``max_replies``
    replies are tried, stopping once every edge of the run machine has been taken.
    """
    probe = world_of(tools_factory())
    if gate is not None and gate_factory is not None:
        raise TypeError("give at most one of gate= and gate_factory=")
    fixed = (
        gate if gate is not None else (gate_factory(GateContext(probe.tools, probe.effects)) if gate_factory else None)
    )
    gates = (
        [("your gate", fixed)] if fixed is not None else [(f"{k} gate", _table(k)) for k in ("allow", "ask", "deny")]
    )
    seen = coverage if coverage is not None else Coverage.of_tools(probe.tools)
    alphabet = _alphabet(probe.tools, fixed)
    found: dict[str, Route] = {}
    first = _play(
        Route((answer_message("Done."),), Limits(max_turns=1), _table("allow")), world_of(tools_factory()), task
    )
    setups = list(_setups(probe.tools, gates, first.state.prompt_token_log[0] if first.state.turns else 0))
    for length in range(1, max_replies + 1):
        for words in itertools.product(alphabet, repeat=length):
            replies = tuple(reply for _, reply in words)
            for label, limits, refuse, failing, failure, chosen, screening, options, backup in setups:
                for decisions in ((), (True,), (False,), (CANCEL,)):
                    route = Route(
                        replies,
                        limits,
                        chosen,
                        decisions,
                        refuse,
                        failing,
                        setup=label,
                        failure=failure,
                        screening=screening,
                        options=options,
                        backup=backup,
                    )
                    world = world_of(tools_factory())
                    if gate_factory is not None:
                        route = attrs.evolve(route, gate=gate_factory(GateContext(world.tools, world.effects)))
                    result = _play(route, world, task, seen)
                    seen.record_run(result, world.tools)
                    path = (RUN_MACHINE.initial, *result.state.path)
                    for state in path:
                        if state not in found:
                            found[state] = attrs.evolve(route, path=path[: path.index(state) + 1])
                    paused = any(s == "AwaitingApproval" for s in path)
                    if not paused:
                        break  # no pause: the decisions change nothing
            if not seen.missing_edges:
                return found
    return found


def check_reaches_all(
    tools_factory: Callable[[], Any],
    *,
    gate: Gate | None = None,
    gate_factory: GateFactory | None = None,
    states: Sequence[str] | None = None,
    max_replies: int = 2,
    report: bool = False,
) -> Coverage:
    """
    Check that runs in this world reach every state of the run machine (or each of ``states``).

    ``TakingAnswer`` is wanted only of a world with a tool a person answers.

    Returns:
        The :class:`Coverage` of the runs tried (on the support desk, every edge).

    Raises:
        InvariantViolation: ``reachable_state``, naming each state no run entered
            and the shortest route through the table that it would take.
    """
    probe = world_of(tools_factory())
    wanted = list(states) if states is not None else [s.name for s in RUN_MACHINE.states]
    coverage = Coverage.of_tools(probe.tools)
    table = RUN_MACHINE
    if not any(isinstance(spec.handler, PersonAnswers) for spec in probe.tools.values()):
        # Only a tool a person answers brings TakingAnswer and its edges: not this world's to reach.
        table = RUN_MACHINE.without(("answer_needed", "answer_given"))
        coverage.count_against(table)
        wanted = [name for name in wanted if states is not None or name != "TakingAnswer"]
    found = routes(tools_factory, gate=gate, gate_factory=gate_factory, max_replies=max_replies, coverage=coverage)
    coverage.publish(report)
    missing = [s for s in wanted if s not in found]
    if missing:
        lines = []
        for state in missing:
            route = " -> ".join([table.initial, *(e.dest for e in paths_to(table, state))])
            guards = ", ".join(e.guard or "(no guard)" for e in paths_to(table, state))
            lines.append(f"  {state}: by the table {route} (guards: {guards})")
        failure = InvariantViolation(
            "reachable_state",
            f"no run in this world entered {', '.join(missing)} within {max_replies} replies:\n" + "\n".join(lines),
        )
        failure.add_note(coverage.report())
        raise failure
    return coverage
