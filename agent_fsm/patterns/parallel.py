"""
The parallel fan-out: independent, effect-free reads dispatched together and joined by call id.

Code fires every read at once, joins the typed observations by call id
(whatever order they finish in), then walks the rest of its plan with all
of them in view. :func:`parallel` runs the reads in threads;
:func:`aparallel`, the same machine under the async driver, gathers them
on the event loop. Fanning out is safe only because the reads cannot
conflict, so a batch that holds an effectful call (or two calls with one
id, which a join by id could not tell apart) is refused whole: nothing runs.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from agent_fsm.engine import (
    CompiledMachine,
    Edge,
    Gate,
    MachineSpec,
    Model,
    Observation,
    Registry,
    StateSpec,
    Steps,
    ToolCall,
    call_of,
    compile_machine,
)
from agent_fsm.patterns._common import (
    PLAN_EDGES,
    PLAN_STATES,
    READY,
    SHARED_VOCABULARY,
    STEPS_BUDGET,
    PatternEnding,
    PatternResult,
    Plan,
    _drive,
    _new_run,
    _PatternRun,
    _record,
    continue_plan,
)
from agent_fsm.patterns.meter import Meter

__all__ = ["PARALLEL_MACHINE", "aparallel", "parallel"]

PARALLEL_MACHINE = MachineSpec(
    name="parallel",
    initial="Ready",
    budgets=STEPS_BUDGET,
    states=(
        READY,
        StateSpec(
            "Reading",
            "working",
            "The reads run concurrently; their observations are joined by call id.",
            on_enter=("dispatch_reads",),
        ),
        *PLAN_STATES,
        StateSpec(
            "FanOutRefused",
            "absorbing",
            "The batch held an effectful call or a repeated call id; nothing ran.",
            on_enter=("explain_refusal",),
            stop=PatternEnding.FAN_OUT_REFUSED.value,
        ),
    ),
    edges=(
        Edge("Ready", "fan_out", "FanOutRefused", guard="fan_out_unsafe", meaning="effectful call or repeated id"),
        Edge("Ready", "fan_out", "Reading", meaning="independent effect-free reads"),
        Edge("Reading", "join", "StepFailed", guard="step_failed", meaning="a read refused, invalid or failed"),
        *continue_plan("Reading", "join"),
        *PLAN_EDGES,
    ),
)
"""The parallel pattern's machine: fan the reads out, gather, then act."""


def _unsafe(reads: Sequence[ToolCall], run: _PatternRun) -> list[str]:
    problems = [
        f"{call.name} [{call.call_id}] is effectful"
        for call in reads
        if call.name in run.tools and run.tools[call.name].effectful
    ]
    ids = [call.call_id for call in reads]
    problems += [f"call id {i!r} is used {ids.count(i)} times" for i in sorted(set(ids)) if ids.count(i) > 1]
    return problems


def fan_out_unsafe(run: _PatternRun) -> bool:
    """Some read is effectful, or two reads share a call id."""
    return bool(_unsafe(run.extra["reads"], run))


def explain_refusal(run: _PatternRun) -> None:
    """Say why the batch was refused."""
    run.reason = "only effect-free calls with distinct ids are fanned out: " + "; ".join(
        _unsafe(run.extra["reads"], run)
    )


def dispatch_reads(run: _PatternRun) -> None:
    """Run every read at once through the boundary; record them in declared order, joined by call id."""
    reads: Sequence[ToolCall] = run.extra["reads"]
    finished: dict[str, Observation] = {}
    with ThreadPoolExecutor(max_workers=run.extra["max_workers"] or len(reads) or 1) as pool:
        futures = [pool.submit(run.meter.attempt, call, run.tools, run.gate) for call in reads]
        for future in as_completed(futures):
            observation = future.result()  # a handler's bug (HandlerError) propagates from here
            finished[observation.call_id] = observation
    for call in reads:
        _record(run, call, finished[call.call_id])


async def _gather_reads(run: _PatternRun) -> None:
    import asyncio

    from agent_fsm.engine import adrive

    reads: Sequence[ToolCall] = run.extra["reads"]
    # Every read runs to its end, as the thread pool's do; then the first bug (in declared order) propagates.
    outcomes = await asyncio.gather(
        *(adrive(run.meter.attempting(call, run.tools, run.gate)) for call in reads), return_exceptions=True
    )
    finished: dict[str, Observation] = {}
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
        finished[outcome.call_id] = outcome
    for call in reads:
        _record(run, call, finished[call.call_id])


def gather_reads(run: _PatternRun) -> Steps[None]:
    """Under the async driver: run every read at once on the event loop; record them as :func:`dispatch_reads` does."""
    yield call_of("fan-out", _gather_reads, run)


_MACHINE = compile_machine(
    PARALLEL_MACHINE,
    {
        **SHARED_VOCABULARY,
        "fan_out_unsafe": fan_out_unsafe,
        "explain_refusal": explain_refusal,
        "dispatch_reads": dispatch_reads,
    },
)


def parallel(
    reads: Sequence[ToolCall],
    plan: Plan,
    model: Model,
    tools: Registry,
    *,
    gate: Gate | None = None,
    meter: Meter | None = None,
    max_workers: int | None = None,
) -> PatternResult:
    """
    Fan ``reads`` out concurrently, join them by call id, then run ``plan`` with their results in view.

    Each read still crosses the shared effect boundary (validation and the
    gate). ``observations`` lists the reads in the order given, then the
    plan's calls. Endings: those of :func:`agent_fsm.patterns.chain`, plus
    ``fan_out_refused``.
    """
    run = _new_run(model, tools, gate, meter, plan)
    run.extra.update(reads=tuple(reads), max_workers=max_workers)
    return _drive(_MACHINE, run)


@functools.cache
def _async_machine() -> tuple[CompiledMachine, Any]:
    from agent_fsm.patterns._asteps import ASYNC_VOCABULARY, adrive_pattern

    vocabulary = {**ASYNC_VOCABULARY, "fan_out_unsafe": fan_out_unsafe, "explain_refusal": explain_refusal}
    return compile_machine(PARALLEL_MACHINE, {**vocabulary, "dispatch_reads": gather_reads}), adrive_pattern


async def aparallel(
    reads: Sequence[ToolCall],
    plan: Plan,
    model: Model,
    tools: Registry,
    *,
    gate: Gate | None = None,
    meter: Meter | None = None,
) -> PatternResult:
    """
    :func:`parallel` under the async driver: the reads are gathered on the event loop, then the plan runs.

    Same machine, same boundary, same joining by call id, same result.
    ``async`` handlers and gates are awaited, so their reads overlap; a
    plain handler runs inline on the loop, and one marked
    ``ToolSpec(blocking=True)`` in a worker thread, so it overlaps too. The
    plan's steps and its draft are awaited the same way (a model's ``achat``
    is preferred to its ``chat``).
    """
    machine, adrive_pattern = _async_machine()
    run = _new_run(model, tools, gate, meter, plan)
    run.extra.update(reads=tuple(reads), max_workers=None)
    result: PatternResult = await adrive_pattern(machine, run)
    return result
