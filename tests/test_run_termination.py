"""The kit's dynamic termination check, run on the engine's own run machine and on every pattern machine."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import Phase, settings
from hypothesis import strategies as st

from agent_fsm import Agent, Limits, ProviderFailure, RunState, ToolCall, ToolSpec
from agent_fsm.engine import RunContext, answer_message, start_state
from agent_fsm.engine._run import MACHINE
from agent_fsm.patterns import Plan, ScriptedReplies, route_prompt
from agent_fsm.patterns._common import _new_run, _PatternRun
from agent_fsm.patterns.agent import _MACHINE as AGENT
from agent_fsm.patterns.agent import _started
from agent_fsm.patterns.chain import _MACHINE as CHAIN
from agent_fsm.patterns.evaluator import _MACHINE as EVALUATOR
from agent_fsm.patterns.parallel import _MACHINE as PARALLEL
from agent_fsm.patterns.plan import _MACHINE as PLAN
from agent_fsm.patterns.plan import _step as planned_step
from agent_fsm.patterns.router import _MACHINE as ROUTER
from agent_fsm.testing import check_machine_terminates, gates, scripted_models

FAST = settings(max_examples=60, database=None, derandomize=True, phases=[p for p in Phase if p is not Phase.explain])

TOOLS = {
    "lookup": ToolSpec("Look a word up.", {"word": str}, lambda word: word),
    "pay": ToolSpec("Pay. Moves money.", {"cents": int}, lambda cents: cents, effectful=True),
}

# The run machine's budgets, read off a run: each only grows (see its declaration).
COUNTERS = {
    "turns": lambda run: run.state.turns,
    "pending_calls": lambda run: len(run.state.observations),  # each call of a reply answered once
    "decisions": lambda run: 0,  # a pause rests: this walk never decides one
}


def _run(model: Any, gate: Any, limits: Limits) -> RunContext:
    state: RunState = start_state("a task")
    state.limits = limits
    return RunContext(state, model, TOOLS, gate, limits, lambda message: 1)


RUNS = st.builds(
    _run,
    scripted_models(TOOLS, max_size=8),
    gates(TOOLS),
    st.builds(Limits, max_turns=st.integers(0, 6), repeated_denials=st.integers(1, 3), max_tool_calls=st.none()),
)


def test_the_run_machine_ends_along_every_path_it_takes() -> None:
    """Random scripts, gates and budgets: every walk of the run machine rests, each cycle spending turns or calls."""
    coverage = check_machine_terminates(
        MACHINE, RUNS, counters=COUNTERS, limits=lambda run: {"turns": run.limits.max_turns}, settings=FAST
    )
    assert coverage.runs >= 60


# --- the pattern machines -------------------------------------------------------
#
# Each run below is built the way its pattern builds it (``_new_run`` and the
# pattern's ``extra``), then driven through the pattern's own compiled machine.

REPLY_TEXTS = st.sampled_from(["lookup", " Pay. ", "other", "good", "not json", '{"tool": "lookup"}'])
# Valid calls, a call the contract refuses and an unknown tool; the gates drawn may still refuse the valid ones.
CALLS = st.sampled_from(
    [("lookup", {"word": "a"}), ("lookup", {"word": "b"}), ("pay", {"cents": 5}), ("lookup", {}), ("missing", {})]
)


def _reply(text: str | None) -> Any:
    return ProviderFailure("unreachable") if text is None else answer_message(text)


def replies(texts: st.SearchStrategy[str] = REPLY_TEXTS) -> st.SearchStrategy[ScriptedReplies]:
    """Scripted replies: text answers, with the odd unreachable model among them (and the default last word after)."""
    reply = st.one_of(texts, texts, texts, st.none()).map(_reply)
    return st.builds(ScriptedReplies, st.lists(reply, max_size=6))


def _every_budgeted_edge_taken(coverage: Any) -> None:
    """The walks went round every cycle the machine has: each edge that consumes a budget was taken."""
    assert [e for e in coverage.missing_edges if e.consumes] == []


def _step(name: str, arguments: dict[str, Any], index: int) -> Any:
    return planned_step(f"s{index}", name, arguments)


@st.composite
def plans(draw: st.DrawFn, *, drafts: bool | None = None) -> Plan:
    """Plans of up to four steps (valid, invalid or unknown calls), replying by draft or by compose."""
    calls = draw(st.lists(CALLS, max_size=4))
    steps = [_step(name, arguments, index) for index, (name, arguments) in enumerate(calls)]
    drafted = draw(st.booleans()) if drafts is None else drafts
    if drafted:
        return Plan(steps, draft=lambda results: "write the reply")
    return Plan(steps, compose=lambda results: "composed")


def _fresh(model: Any, gate: Any, plan: Plan | None, **extra: Any) -> _PatternRun:
    run = _new_run(model, TOOLS, gate, None, plan)
    run.extra.update(extra)
    return run


def _steps_of(run: _PatternRun) -> dict[str, int]:
    return {"steps": len(run.plan.steps) if run.plan is not None else 0}


STEPS = {"steps": lambda run: run.next_step}
# Pattern runs are cheap (no transcripts): more of them, so every budgeted cycle is gone round.
MANY = settings(FAST, max_examples=200)
GATES = gates(TOOLS)


def test_the_chain_machine_ends_along_every_path_it_takes() -> None:
    """Random plans, replies and gates: every chain run rests, its one cycle (a step) spending a step of the plan."""
    runs = st.builds(_fresh, replies(), GATES, plans())
    coverage = check_machine_terminates(CHAIN, runs, counters=STEPS, limits=_steps_of, settings=MANY)
    assert coverage.runs >= 200
    _every_budgeted_edge_taken(coverage)


def _routed(model: Any, gate: Any, branches: dict[str, Plan]) -> _PatternRun:
    return _fresh(model, gate, None, branches=branches, prompt=route_prompt("a task", list(branches)), route=None)


def test_the_router_machine_ends_along_every_path_it_takes() -> None:
    """Random branches, routes and gates: every router run rests, each step of the chosen branch spending one."""
    branches = st.dictionaries(st.sampled_from(["lookup", "pay", "other"]), plans(), min_size=1, max_size=3)
    runs = st.builds(_routed, replies(), GATES, branches)
    coverage = check_machine_terminates(
        ROUTER,
        runs,
        counters=STEPS,
        limits=lambda run: {"steps": max(len(p.steps) for p in run.extra["branches"].values())},
        settings=MANY,
    )
    assert coverage.runs >= 200
    _every_budgeted_edge_taken(coverage)


def _fanned(model: Any, gate: Any, plan: Plan, reads: list[tuple[str, dict[str, Any]]], ids: list[str]) -> _PatternRun:
    calls = tuple(ToolCall(ids[i % len(ids)], name, arguments) for i, (name, arguments) in enumerate(reads))
    return _fresh(model, gate, plan, reads=calls, max_workers=None)


def test_the_parallel_machine_ends_along_every_path_it_takes() -> None:
    """Random reads (effectful or repeated ids too), plans and gates: every fan-out rests, each step spending one."""
    reads = st.lists(CALLS, max_size=3)
    ids = st.lists(st.sampled_from(["r0", "r1", "r2"]), min_size=1, max_size=3, unique=True)
    runs = st.builds(_fanned, replies(), GATES, plans(), reads, ids)
    coverage = check_machine_terminates(PARALLEL, runs, counters=STEPS, limits=_steps_of, settings=MANY)
    assert coverage.runs >= 200
    _every_budgeted_edge_taken(coverage)


def _judged(model: Any, gate: Any, plan: Plan, max_rounds: int) -> _PatternRun:
    def criterion(text: str, results: Any) -> str | None:
        return None if text == "good" else "not good"

    return _fresh(model, gate, plan, criterion=criterion, max_rounds=max_rounds, critique=None)


def test_the_evaluator_machine_ends_along_every_path_it_takes() -> None:
    """Random drafts, plans, gates and round budgets: every evaluator run rests, each revision spending a round."""
    runs = st.builds(_judged, replies(), GATES, plans(drafts=True), st.integers(1, 4))
    coverage = check_machine_terminates(
        EVALUATOR,
        runs,
        # rounds: drafts asked for (an unreachable model's round makes no draft but is spent all the same).
        counters={"steps": lambda run: run.next_step, "rounds": lambda run: run.meter.model_calls},
        limits=lambda run: {**_steps_of(run), "rounds": run.extra["max_rounds"]},
        settings=MANY,
    )
    assert coverage.runs >= 200
    _every_budgeted_edge_taken(coverage)


PLAN_TEXTS = st.lists(CALLS, max_size=5).map(
    lambda calls: json.dumps([{"tool": name, "arguments": arguments} for name, arguments in calls])
)


def _planned(model: Any, gate: Any, replans: int, max_steps: int) -> _PatternRun:
    return _fresh(model, gate, None, task="a task", replans=replans, max_steps=max_steps, plans=0)


def test_the_plan_machine_ends_along_every_path_it_takes() -> None:
    """Random plans (and non-plans), gates and replan budgets: every run rests, each step or replan spending one."""
    runs = st.builds(_planned, replies(PLAN_TEXTS | REPLY_TEXTS), GATES, st.integers(0, 3), st.integers(1, 4))
    coverage = check_machine_terminates(
        PLAN,
        runs,
        # steps: every planned step attempted, across plans (next_step restarts with each plan);
        # replans: plans asked for after the first (the only model calls are the planner's).
        counters={"steps": lambda run: len(run.observations), "replans": lambda run: max(0, run.meter.model_calls - 1)},
        limits=lambda run: {
            "steps": run.extra["max_steps"] * (run.extra["replans"] + 1),
            "replans": run.extra["replans"],
        },
        settings=MANY,
    )
    assert coverage.runs >= 200
    _every_budgeted_edge_taken(coverage)


class _HumanAtThePause:
    """
    The agent's compiled machine with a scripted human at its pause.

    The agent machine rests in ``AwaitingApproval``; the human's decision
    (``approve`` or ``reject``, each consuming ``decisions``) is the one
    edge no driver fires. Here the next decision of the run's script is
    offered as that state's event, set on the run as :func:`resume_agent`
    sets it, and fired on the real machine; a spent script leaves the run
    resting there, as a human who has not decided yet.
    """

    def __init__(self, machine: Any) -> None:
        self.machine = machine
        self.spec = _OfferingDecisions(machine.spec, self)
        self.run: _PatternRun | None = None

    def fire(self, run: _PatternRun, event: str) -> None:
        self.run = run
        if event in ("approve", "reject"):
            run.extra["human"].pop(0)
            run.extra["decided"] += 1
            run.extra["decision"] = (event == "approve", "scripted")
        self.machine.fire(run, event)


class _OfferingDecisions:
    """A machine's declaration whose paused state offers the scripted human's next decision as its event."""

    def __init__(self, spec: Any, driver: _HumanAtThePause) -> None:
        self._spec, self._driver = spec, driver

    def __getattr__(self, name: str) -> Any:
        return getattr(self._spec, name)

    def auto_event(self, name: str) -> str | None:
        run = self._driver.run
        if name == "AwaitingApproval" and run is not None and run.extra["human"]:
            return "approve" if run.extra["human"][0] else "reject"
        return self._spec.auto_event(name)


def _delegated(model: Any, gate: Any, limits: Limits, human: list[bool]) -> _PatternRun:
    run = _started(Agent(model, TOOLS, gate=gate, limits=limits), None)
    run.extra.update(task="a task", human=human, decided=0, allowed=len(human))
    return run


def test_the_agent_machine_ends_along_every_path_it_takes() -> None:
    """Random scripts, gates, budgets and human decisions: every agent run rests, each pause decided spending one."""
    runs = st.builds(
        _delegated,
        scripted_models(TOOLS, min_size=1, max_size=6),
        gates(TOOLS) | gates(TOOLS, decisions=("ask", "allow")),  # often enough a pause to decide
        st.builds(Limits, max_turns=st.integers(0, 5), repeated_denials=st.integers(1, 3), max_tool_calls=st.none()),
        st.lists(st.booleans(), max_size=3),
    )
    coverage = check_machine_terminates(
        _HumanAtThePause(AGENT),
        runs,
        counters={"decisions": lambda run: run.extra["decided"]},
        limits=lambda run: {"decisions": run.extra["allowed"]},
        settings=MANY,
    )
    assert coverage.runs >= 200
    _every_budgeted_edge_taken(coverage)
