"""
The one-call checks: each runs Hypothesis itself over whole runs driven by :func:`drive`.

:func:`check_gate_contains`, :func:`check_policy_ends` and
:func:`check_driver` fail with an :class:`InvariantViolation` whose message
names the invariant, and whose notes carry the shrunk run, message by message,
and the :class:`Coverage` of the search; each returns that coverage when it passes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from typing import Any

from hypothesis import settings as Settings
from hypothesis import strategies as st

from agent_fsm import ScriptedModel, answer_message, as_verdict, tool_call_message
from agent_fsm.engine import DEFAULT_LAST_WORD, Gate, Limits, Model, Registry, Stop, ToolCall
from agent_fsm.testing._constants import gate_constants
from agent_fsm.testing._coverage import Coverage
from agent_fsm.testing._drive import (
    CANCEL,
    Driver,
    GateContext,
    GateFactory,
    Outcome,
    _gate_of,
    describe_run,
    drive,
    world_of,
)
from agent_fsm.testing._enumeration import contract_cases
from agent_fsm.testing._invariants import (
    CallMatch,
    InvariantViolation,
    assert_nothing_forbidden,
    assert_run_invariants,
    by_call,
)
from agent_fsm.testing._search import run_property, searched
from agent_fsm.testing._strategies import MessageKind, scripted_models
from agent_fsm.testing._strategies import gates as gate_tables
from agent_fsm.testing._strategies import limits as limit_ranges
from agent_fsm.testing._targeting import targets

__all__ = ["check_driver", "check_gate_contains", "check_policy_ends"]

GATE_PROBE_KINDS: tuple[MessageKind, ...] = ("call", "call", "call", "parallel", "bad_arguments")
"""
The message kinds :func:`check_gate_contains` proposes by default: the ones
that can reach a gate, a single valid call three times as often as the others (a
kind listed twice is drawn twice as often).
"""


def _assert_invariants(
    outcome: Outcome,
    limits: Limits,
    match: CallMatch | None,
    *,
    gate: Gate | None = None,
    approved: Collection[str] = (),
) -> None:
    """
    :func:`assert_run_invariants` on one driven run, with its effects and tools; ``match`` is
    tied to the run's executed calls (``None`` keeps the default convention).
    """
    assert_run_invariants(
        outcome.result,
        outcome.world.effects,
        limits,
        tools=outcome.world.tools,
        gate=gate,
        approved=approved,
        match=None if match is None else by_call(match, outcome.result.state),
    )


def _annotated(outcome: Outcome, check: Callable[[], None]) -> None:
    try:
        check()
    except InvariantViolation as exc:
        exc.add_note("the run, message by message:\n" + describe_run(outcome.result))
        raise


def _models_strategy(models: Any, tools: Registry, constants: tuple[Any, ...] = ()) -> st.SearchStrategy[Model]:
    if models is None:
        return scripted_models(tools, constants=constants)
    if isinstance(models, st.SearchStrategy):
        return models
    if callable(models):
        return st.builds(models)
    raise TypeError(f"models must be a strategy of models or a zero-argument factory; got {models!r}")


def _limits_strategy(limits: Limits | st.SearchStrategy[Limits]) -> st.SearchStrategy[Limits]:
    return limits if isinstance(limits, st.SearchStrategy) else st.just(limits)


def check_gate_contains(
    gate: Gate | None,
    tools_factory: Callable[[], Any],
    forbidden: Callable[[ToolCall], bool],
    *,
    gate_factory: GateFactory | None = None,
    models: Any = None,
    limits: Limits | st.SearchStrategy[Limits] = Limits(),
    approve: bool = False,
    settings: Settings | None = None,
    exhaustive: bool = True,
    targeted: bool = True,
    match: CallMatch | None = None,
    report: bool = False,
) -> Coverage:
    """
    Check that ``gate`` never lets a call through that ``forbidden(call)`` marks, whatever the model proposes.

    Models default to :func:`scripted_models` over the registry proposing
    what can reach a gate (valid calls, alone or several at once, with
    thoughts, among some refused arguments), trying the constants the gate and
    ``forbidden`` compare against (:func:`constants_of`) wherever an argument
    can take them. When the gate asks a human, the human rejects
    (``approve=False``, so only the gate's own allowances are examined) or approves (and the
    approved calls are the human's responsibility). The run invariants are
    checked as well.

    With ``exhaustive`` (the default), every combination of each contract's
    finite part (enums, booleans, small ranges, bounds and the constants,
    line items adding up to each constant: :func:`contract_cases`) is put to
    the gate first, when there are at most :data:`MAX_CASES` of them; a call
    the gate allows and ``forbidden`` marks is then confirmed by a real run.

    With ``targeted`` (the default), once the random search has passed, every
    mined boundary value of every argument is put to the gate with the other
    arguments combined from what the gate can tell apart (enum members, a
    week of real dates, the gate's other constants, the bounds), and every
    value no run reached is driven by a real run; one that still cannot be
    reached is listed in the coverage report with the reason.

    ``match(effect, call)`` ties an entry of the world's own effect log to
    the executed call it came from (default: the entry names the call's id,
    or equals its result), so a world logging its own shape needs no reshaping.

    Returns:
        The :class:`Coverage` of the search (printed when ``report`` is true,
        and added to a failure's notes).

    Raises:
        InvariantViolation: ``forbidden_effect`` with the offending call, or any
            run invariant; its notes hold the shrunk run, message by message.
    """
    tools = world_of(tools_factory()).tools
    constants = gate_constants(tools, gate, gate_factory, forbidden)
    coverage = Coverage.of_tools(tools, constants)
    if models is None:
        # Only well-formed calls reach a gate: spend the examples on them (a
        # sprinkling of refused arguments keeps the transcript realistic).
        # Reactions to denials add nothing a further turn cannot propose, and
        # every choice they cost is paid again at each shrinking step.
        models = scripted_models(
            tools,
            kinds=GATE_PROBE_KINDS,
            min_size=1,
            max_size=4,
            constants=constants,
            max_reactions=0,
        )
    model_strategy = _models_strategy(models, tools)
    limit_strategy = _limits_strategy(limits)

    def checked(model: Model, chosen_limits: Limits) -> None:
        outcome = drive(
            model,
            world_of(tools_factory()),
            gate=gate,
            gate_factory=gate_factory,
            limits=chosen_limits,
            decide=lambda call: approve,
            coverage=coverage,
        )

        def check() -> None:
            assert_nothing_forbidden(outcome.result.state, forbidden, outcome.approved)
            _assert_invariants(outcome, chosen_limits, match, approved=outcome.approved)

        _annotated(outcome, check)

    def property_(data: st.DataObject) -> None:
        checked(data.draw(model_strategy, label="model"), data.draw(limit_strategy, label="limits"))

    def search() -> None:
        if exhaustive:
            found = _enumerated_counterexample(tools_factory, gate, gate_factory, forbidden, constants)
            if found is not None:
                try:
                    checked(
                        ScriptedModel(
                            [tool_call_message("call_0", found.name, found.arguments or {})],
                            last_word=DEFAULT_LAST_WORD,  # the one call is what is checked; then it answers
                        ),
                        _fixed(limits),
                    )
                except InvariantViolation as exc:
                    exc.add_note("found by enumerating the finite part of the contract, before any random search")
                    raise
        run_property(property_, settings)
        if targeted:
            _reach_boundaries(
                tools_factory, gate, gate_factory, forbidden, constants, coverage, checked, _fixed(limits)
            )

    return searched(coverage, report, search)


def _one_call(call: ToolCall) -> ScriptedModel:
    """A model proposing ``call``, then answering."""
    return ScriptedModel([tool_call_message(call.call_id, call.name, call.arguments or {}), answer_message("done")])


def _reach_boundaries(
    tools_factory: Callable[[], Any],
    gate: Gate | None,
    gate_factory: GateFactory | None,
    forbidden: Callable[[ToolCall], bool],
    constants: tuple[Any, ...],
    coverage: Coverage,
    checked: Callable[[Model, Limits], None],
    limits: Limits,
) -> None:
    """The targeted phase (:mod:`agent_fsm.testing._targeting`): confirm a counterexample, reach the rest."""
    world, chosen = _asked_directly(tools_factory, gate, gate_factory)
    for target in targets(world.tools, coverage.boundaries, constants, chosen, forbidden):
        if target.counterexample is not None:
            try:
                checked(_one_call(target.counterexample), limits)
            except InvariantViolation as exc:
                exc.add_note(
                    f"found by targeting the boundary {target.label} = {target.value!r} after the random search"
                )
                raise
        if target.value in coverage.reached.get(target.label, set()):
            continue
        if target.accepted is None:
            coverage.unreachable.setdefault(target.label, {})[target.value] = target.why_unreachable
        else:
            checked(_one_call(ToolCall("call_0", target.label.partition(".")[0], target.accepted)), limits)
    for label, values in coverage.missing_boundaries.items():
        if label.startswith("sum("):
            why = "a sum over line items: left to the enumeration and the random search"
            coverage.unreachable.setdefault(label, {}).update({v: why for v in values})


def _asked_directly(
    tools_factory: Callable[[], Any], gate: Gate | None, gate_factory: GateFactory | None
) -> tuple[Any, Gate]:
    """A fresh world and the gate as it judges there, to be asked without a run (a find is confirmed by one)."""
    world = world_of(tools_factory())
    return world, _gate_of(gate, gate_factory, GateContext(world.tools, world.effects), world.agent)


def _fixed(limits: Limits | st.SearchStrategy[Limits]) -> Limits:
    return limits if isinstance(limits, Limits) else Limits()


def _enumerated_counterexample(
    tools_factory: Callable[[], Any],
    gate: Gate | None,
    gate_factory: GateFactory | None,
    forbidden: Callable[[ToolCall], bool],
    constants: tuple[Any, ...],
) -> ToolCall | None:
    """
    The first call of the contracts' enumerated cases (:func:`contract_cases`)
    that ``forbidden`` marks and the gate, asked in a fresh world, allows.

    Only the gate and the predicate are called here, thousands of times in
    well under a second; the caller confirms a find with a real run, so a gate
    that reads the run's context is judged where it really decides.
    """
    world, chosen = _asked_directly(tools_factory, gate, gate_factory)
    for name, tool in world.tools.items():
        for arguments in contract_cases(tool, constants):
            call = ToolCall("call_0", name, arguments, json.dumps(arguments))
            try:
                if forbidden(call) and as_verdict(chosen(call)).kind == "allow":
                    return call
            except Exception:  # a gate or predicate failing here is the random search's to report
                continue
    return None


def check_policy_ends(
    models: Any,
    tools_factory: Callable[[], Any],
    stops: Collection[Stop | str],
    *,
    gate: Gate | None = None,
    gate_factory: GateFactory | None = None,
    limits: Limits | st.SearchStrategy[Limits] = Limits(),
    driver: Driver | None = None,
    settings: Settings | None = None,
    match: CallMatch | None = None,
    report: bool = False,
) -> Coverage:
    """
    Check that a model or policy always ends in one of ``stops`` within ``limits``.

    ``models`` is a zero-argument factory or a strategy of models. With no
    gate given, gates are drawn (:func:`gates`: each tool allowed, denied or
    sent to a human); at each pause a human approves or rejects at random, or cancels
    when ``cancelled`` is one of ``stops``.
    ``match``, ``report`` and the coverage returned are as for :func:`check_gate_contains`.

    Raises:
        InvariantViolation: ``expected_stop``, or any run invariant.
    """
    expected = {Stop(s) for s in stops}
    tools = world_of(tools_factory()).tools
    constants = gate_constants(tools, gate, gate_factory)
    coverage = Coverage.of_tools(tools, constants)
    model_strategy = _models_strategy(models, tools, constants)
    limit_strategy = _limits_strategy(limits)
    drawn_gates = gate is None and gate_factory is None
    # A person at a pause approves or rejects; they cancel too when the run may end cancelled.
    choices: st.SearchStrategy[bool | str] = st.sampled_from(
        (True, False, CANCEL) if Stop.CANCELLED in expected else (True, False)
    )

    def property_(data: st.DataObject) -> None:
        model = data.draw(model_strategy, label="model")
        chosen_limits = data.draw(limit_strategy, label="limits")
        chosen_gate = data.draw(gate_tables(tools), label="gate") if drawn_gates else gate
        outcome = drive(
            model,
            world_of(tools_factory()),
            gate=chosen_gate,
            gate_factory=gate_factory,
            limits=chosen_limits,
            decide=lambda call: data.draw(choices, label=f"decide {call.call_id}"),
            driver=driver,
            coverage=coverage,
        )

        def check() -> None:
            stop = outcome.result.stop
            if stop not in expected:
                raise InvariantViolation(
                    "expected_stop",
                    f"the run ended {getattr(stop, 'value', stop)!r} ({outcome.result.reason}); expected one of "
                    f"{sorted(s.value for s in expected)}",
                )
            _assert_invariants(outcome, chosen_limits, match, approved=outcome.approved)

        _annotated(outcome, check)

    return searched(coverage, report, lambda: run_property(property_, settings))


def check_driver(
    driver: Driver,
    tools_factory: Callable[[], Any],
    *,
    gate: Gate | None = None,
    models: Any = None,
    limits: Limits | st.SearchStrategy[Limits] | None = None,
    settings: Settings | None = None,
    match: CallMatch | None = None,
    report: bool = False,
) -> Coverage:
    """
    Check a hand-written run loop against the run invariants, as the engine is checked.

    ``driver`` is called like :func:`agent_fsm.run` on random scripted models
    and limits; with no ``gate`` given, gates are drawn that allow or deny
    each tool (a loop without a pause cannot honour ``ask``). Every executed
    call must pass its contract and the gate, and every budget must hold.
    ``match``, ``report`` and the coverage returned are as for :func:`check_gate_contains`.

    Raises:
        InvariantViolation: the first invariant the loop breaks.
    """
    tools = world_of(tools_factory()).tools
    constants = gate_constants(tools, gate)
    coverage = Coverage.of_tools(tools, constants)
    model_strategy = _models_strategy(models, tools, constants)
    limit_strategy = _limits_strategy(limits if limits is not None else limit_ranges())
    gate_strategy = (
        st.just(gate) if gate is not None else gate_tables(tools, decisions=("allow", "deny", "allow_tuple"))
    )

    def property_(data: st.DataObject) -> None:
        model = data.draw(model_strategy, label="model")
        chosen_limits = data.draw(limit_strategy, label="limits")
        chosen_gate = data.draw(gate_strategy, label="gate")
        outcome = drive(
            model, world_of(tools_factory()), gate=chosen_gate, limits=chosen_limits, driver=driver, coverage=coverage
        )
        _annotated(outcome, lambda: _assert_invariants(outcome, chosen_limits, match, gate=chosen_gate))

    return searched(coverage, report, lambda: run_property(property_, settings))
