"""
Running a parsed spec: build its world and its agent, run, apply the human decisions, judge every expectation.

The world is imported only from an allowlist of module prefixes; everything
else a spec names is looked up in the world's own tables, so running a spec
from anywhere executes no code the spec text chose.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import attrs

from agent_fsm import Agent
from agent_fsm.engine import (
    EventSink,
    Gate,
    Model,
    RunResult,
    ScriptedModel,
    Stop,
    allow_all,
    ask_for_effects,
    check_run,
    deny_effects,
    to_json_data,
)
from agent_fsm.scenarios.allowed import ALLOWED_ENVIRONMENT_PREFIXES, allowed_packages
from agent_fsm.scenarios.environment import Environment
from agent_fsm.scenarios.format import (
    BUILTIN_GATES,
    REFERENCE,
    Scenario,
    SpecFormatError,
)

__all__ = [
    "ALLOWED_ENVIRONMENT_PREFIXES",
    "Expectation",
    "ScenarioResult",
    "build_agent",
    "build_model",
    "evaluate_expectations",
    "load_environment",
    "run_scenario",
]


@attrs.frozen
class Expectation:
    """One claim of a spec: what was ``expected``, the ``actual`` value, whether it ``held``."""

    name: str
    expected: Any
    actual: Any
    held: bool

    def line(self, label: str | None = None) -> str:
        """``ok      name: actual`` or ``FAILED  name: expected X, got Y``."""
        label = self.name if label is None else label
        if self.held:
            return f"ok      {label}: {_show(self.actual)}"
        return f"FAILED  {label}: expected {_show(self.expected)}, got {_show(self.actual)}"


@attrs.frozen
class ScenarioResult:
    """
    A finished scenario: the run, the world's effect log, each expectation and each invariant.

    ``invariants`` are the run invariants of :func:`agent_fsm.check_run` as
    expectations; they count toward :attr:`passed` unless the spec set
    ``expect.invariants = false``.
    """

    scenario: Scenario
    result: RunResult
    effects: list[Any]
    expectations: tuple[Expectation, ...]
    invariants: tuple[Expectation, ...]
    # Who proposed: the spec's policy (or "scripted turns"), and the provider and model name when a real one ran.
    policy: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def failures(self) -> list[Expectation]:
        """The expectations (and the invariants, unless the spec made them advisory) that did not hold."""
        required = self.invariants if self.scenario.expect.get("invariants", True) else ()
        return [e for e in (*self.expectations, *required) if not e.held]

    @property
    def passed(self) -> bool:
        """Every expectation held, and every invariant too when the spec requires them."""
        return not self.failures

    def report(self) -> str:
        """One line per expectation and invariant, with ok or FAILED."""
        lines = [f"scenario {self.scenario.name}: {'passed' if self.passed else 'FAILED'}"]
        lines += ["  " + e.line() for e in self.expectations]
        optional = "" if self.scenario.expect.get("invariants", True) else " (not required)"
        lines += ["  " + e.line(f"invariant {e.name}{optional}") for e in self.invariants]
        return "\n".join(lines)

    def to_data(self) -> dict[str, Any]:
        """The saved trace: spec name, the run state, the effect log and every expectation."""

        def entry(e: Expectation) -> dict[str, Any]:
            return {
                "name": e.name,
                "expected": to_json_data(e.expected),
                "actual": to_json_data(e.actual),
                "held": e.held,
            }

        return {
            "spec": self.scenario.name,
            "path": self.scenario.path,
            "stop": self.result.stop.value,
            "code": self.result.code,
            "reason": self.result.reason,
            "passed": self.passed,
            "policy": dict(self.policy),
            "state": json.loads(self.result.state.to_json()),
            "effects": to_json_data(list(self.effects)),
            "expectations": [entry(e) for e in self.expectations],
            "invariants": [entry(e) for e in self.invariants],
        }


def _show(value: Any) -> str:
    if isinstance(value, Stop):
        return value.value
    if isinstance(value, str):
        return repr(value)
    return repr(to_json_data(value))


# --- running -------------------------------------------------------------------


def load_environment(
    reference: str, *, path: str | Path = "<spec>", allowed: Sequence[str] = ALLOWED_ENVIRONMENT_PREFIXES
) -> Environment:
    """
    Build the world a spec names as ``"module:function"``.

    Only modules equal to, or inside, one of the ``allowed`` packages are
    imported: a spec cannot make the engine import arbitrary code.

    Raises:
        SpecFormatError: the reference is malformed, outside the allowlist,
            names nothing, or does not build an :class:`~agent_fsm.scenarios.environment.Environment`.
    """
    match = REFERENCE.match(reference)
    if match is None:
        raise SpecFormatError(path, "environment", f'expected "package.module:function", got {reference!r}')
    module_name, attr = match["module"], match["attr"]
    if not any(module_name == p or module_name.startswith(p + ".") for p in allowed):
        raise SpecFormatError(
            path, "environment", f"module {module_name!r} is outside the allowed packages {list(allowed)}"
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise SpecFormatError(path, "environment", f"no module {module_name!r}: {exc}") from exc
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise SpecFormatError(path, "environment", f"{module_name} has no function {attr!r}")
    environment = factory()
    if not isinstance(environment, Environment):
        raise SpecFormatError(
            path, "environment", f"{reference} returned {type(environment).__name__}, expected an agent_fsm Environment"
        )
    return environment


def build_model(scenario: Scenario, environment: Environment) -> Model:
    """
    The model a spec describes: its script, or a fresh named model of the environment.

    Raises:
        SpecFormatError: ``model.name`` is not a key of ``environment.models``.
    """
    spec = scenario.model
    if spec.name is None:
        return ScriptedModel(spec.turns, spec.reactions)
    factory = environment.models.get(spec.name)
    if factory is None:
        raise SpecFormatError(
            scenario.path,
            "model.name",
            f"{spec.name!r} is not a model of this environment; expected one of {sorted(environment.models)}",
        )
    return factory()


def build_agent(scenario: Scenario, environment: Environment, *, model: Model | None = None) -> Agent:
    """
    The agent a spec runs: ``environment``'s world with the spec's gate, limits, system prompt and model.

    ``model`` replaces the spec's model. The same agent makes every
    ``[[resume]]`` decision, so its gate judges each approved call again.

    Raises:
        SpecFormatError: the spec's gate or ``model.name`` is not one of ``environment``'s.
    """
    gate = _gate(scenario, environment)
    agent = environment.agent(
        model if model is not None else build_model(scenario, environment),
        gate=gate,
        limits=scenario.limits,
        system_prompt=scenario.system_prompt,
    )
    if scenario.prices is not None:
        agent = agent.replace(prices=scenario.prices)
    if scenario.tool_caps:
        unknown = sorted(set(scenario.tool_caps) - set(agent.tools))
        if unknown:
            raise SpecFormatError(scenario.path, "tool_caps", f"{unknown} are not tools of this environment")
        tools = dict(agent.tools)
        for name, cap in scenario.tool_caps.items():
            tools[name] = attrs.evolve(tools[name], max_calls=cap)
        agent = agent.replace(tools=tools)
    return agent


def _gate(scenario: Scenario, environment: Environment) -> Gate | None:
    name = scenario.gate
    if name is None:
        return None  # the engine's secure default: effect-free tools run, effectful ones are refused
    if name in environment.gates:
        return environment.gates[name]
    if name == "allow_all":
        return allow_all
    if name == "deny_effects":
        return deny_effects(environment.tools)
    if name == "ask_for_effects":
        return ask_for_effects(environment.tools)
    known = sorted({*environment.gates, *BUILTIN_GATES})
    raise SpecFormatError(scenario.path, "gate", f"{name!r} is not a gate of this environment; expected one of {known}")


def evaluate_expectations(
    scenario: Scenario, result: RunResult, environment: Environment, used: int = 0
) -> list[Expectation]:
    """
    Judge a finished run against the spec's ``[expect]`` table: one :class:`Expectation` per claim.

    ``used`` is how many ``[[resume]]`` decisions were applied; fewer than the
    spec lists is itself a failed expectation. The evals (:mod:`agent_fsm.evals`)
    score a case written as a spec through this same function.

    Raises:
        SpecFormatError: ``expect.checks`` names a check the environment does not have.
    """
    expect = scenario.expect
    state = result.state
    found: list[Expectation] = [Expectation("stop", expect["stop"], result.stop, result.stop is expect["stop"])]
    if "code" in expect:
        found.append(Expectation("code", expect["code"], result.code, result.code == expect["code"]))
    answer = result.answer or ""
    for needle in expect.get("answer_contains", ()):
        found.append(Expectation(f"answer contains {needle!r}", needle, result.answer, needle in answer))
    reason = result.reason or ""
    for needle in expect.get("reason_contains", ()):
        found.append(Expectation(f"reason contains {needle!r}", needle, result.reason, needle in reason))
    if "effects" in expect:
        actual = to_json_data(list(environment.effects))
        found.append(Expectation("effects", expect["effects"], actual, actual == expect["effects"]))
    counters = {"turns": state.turns, "tool_attempts": state.tool_attempts, "observations": len(state.observations)}
    for key, actual_count in counters.items():
        if key in expect:
            found.append(Expectation(key, expect[key], actual_count, actual_count == expect[key]))
    if "cost" in expect:
        spent = format(result.usage.cost, "f")
        found.append(Expectation("cost", expect["cost"], spent, Decimal(spent) == Decimal(expect["cost"])))
    if "observation_kinds" in expect:
        kinds = [o.kind for o in state.observations]
        found.append(
            Expectation("observation_kinds", expect["observation_kinds"], kinds, kinds == expect["observation_kinds"])
        )
    for name, truth in expect.get("checks", {}).items():
        check = environment.checks.get(name)
        if check is None:
            raise SpecFormatError(
                scenario.path,
                f"expect.checks.{name}",
                f"not a check of this environment; expected one of {sorted(environment.checks)}",
            )
        actual_truth = bool(check(result))
        found.append(Expectation(f"check {name}", truth, actual_truth, actual_truth is truth))
    if used < len(scenario.resumes):
        found.append(Expectation("resume decisions used", len(scenario.resumes), used, False))
    return found


def run_scenario(
    scenario: Scenario, *, model: Model | None = None, allowed: Sequence[str] = (), on_event: EventSink | None = None
) -> ScenarioResult:
    """
    Run a scenario in a fresh world and judge it.

    Each ``[[resume]]`` decision is applied, in order, while the run is
    awaiting approval; a decision left unused is reported as a failed
    expectation. ``model`` replaces the spec's model (the hook for running
    the same scenario against a real provider). ``allowed`` names packages
    whose worlds the spec may name besides :data:`ALLOWED_ENVIRONMENT_PREFIXES`
    (your own, say ``("bookings.worlds",)``). ``on_event`` receives the
    events of the run and of each resumption (see :mod:`agent_fsm.engine._events`).

    Raises:
        SpecFormatError: a name in the spec (gate, model, check, environment)
            does not resolve.
        ValueError: an entry of ``allowed`` is not a dotted package name.
    """
    environment = load_environment(scenario.environment, path=scenario.path, allowed=allowed_packages(allowed))
    servers = _join_mcp(scenario, environment)
    try:
        return _run_loaded(scenario, environment, model, on_event)
    finally:
        for server in servers:
            server.close()


def _join_mcp(scenario: Scenario, environment: Environment) -> list[Any]:
    # Each [[mcp]] server the world names is opened and its tools joined to the world's (a name offered twice
    # is refused, never shadowed). The server is used through the methods it has (open, tools, close), so
    # scenarios need not import agent_fsm.mcp, an application of the same layer.
    opened: list[Any] = []
    try:
        for index, use in enumerate(scenario.mcp):
            factory = environment.mcp.get(use.server)
            if factory is None:
                known = sorted(environment.mcp)
                raise SpecFormatError(
                    scenario.path, f"mcp[{index}].server", f"{use.server!r} is not a server of this world; {known}"
                )
            server = factory()
            opened.append(server)
            server.open()
            tools = server.tools(allow=list(use.allow) if use.allow is not None else None, prefix=use.prefix)
            clash = sorted(set(tools) & set(environment.tools))
            if clash:
                raise SpecFormatError(
                    scenario.path, f"mcp[{index}]", f"tools {clash} are the world's already; give the server a prefix"
                )
            environment.tools = {**environment.tools, **tools}
    except BaseException:
        for server in opened:
            server.close()
        raise
    return opened


def _run_loaded(
    scenario: Scenario, environment: Environment, model: Model | None, on_event: EventSink | None
) -> ScenarioResult:
    agent = build_agent(scenario, environment, model=model)
    policy = {
        "name": scenario.model.name or "scripted turns",
        "provider": getattr(model, "provider", type(model).__name__) if model is not None else "scripted",
        "model": None if getattr(model, "model", None) is None else str(getattr(model, "model", "")),
    }
    result = agent.run(scenario.task, history=scenario.history, on_event=on_event)
    used = 0
    while result.stop is Stop.AWAITING_APPROVAL and used < len(scenario.resumes):
        decision = scenario.resumes[used]
        used += 1
        result = agent.resume(result.state, approve=decision.approve, reason=decision.reason, on_event=on_event)
    expectations = evaluate_expectations(scenario, result, environment, used)
    invariants = check_run(result, environment.effects, scenario.limits)
    return ScenarioResult(
        scenario=scenario,
        result=result,
        effects=list(environment.effects),
        expectations=tuple(expectations),
        invariants=tuple(Expectation(name, True, held, held) for name, held in invariants.items()),
        policy=policy,
    )
