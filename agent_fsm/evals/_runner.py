"""
The runner: every case, ``repeat`` times, concurrently on the async driver, under one shared budget.

Each run gets a fresh world (``world()``), its own model (the case's factory
called with the run's seed, a replayed cassette, or the spec's model), and
the case's limits bounded by what the eval's :class:`EvalBudget` has left
(see :mod:`~agent_fsm.evals._budget`). A run that cannot be funded whole
waits for runs in flight to give back what they did not spend; once nothing
is in flight and no turn can be funded, the remaining runs are recorded as
``budget_spent`` and not started.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any, TypedDict, Unpack

import attrs

from agent_fsm.engine import Agent, Checkpointer, Limits, Model, RunError, RunResult, Stop, Usage
from agent_fsm.evals._budget import BUDGET_SPENT, EvalBudget, Ledger, Share
from agent_fsm.evals._dataset import Case, Dataset
from agent_fsm.evals._evaluators import Judged
from agent_fsm.evals._report import CaseReport, EvalReport, RunRecord
from agent_fsm.scenarios import Environment, build_agent, build_model, load_environment
from agent_fsm.testing import ReplayModel

__all__ = ["EvalOptions", "World", "arun_eval", "run_eval", "world_from_reference"]

World = Callable[[], Environment]
"""Builds a fresh world for one run (the function a spec's ``environment`` names)."""

NO_BUDGET = EvalBudget()
"""No shared ceiling: each run is bounded by its own limits only."""


def world_from_reference(reference: str, allowed: Sequence[str] = ()) -> World:
    """
    The world ``"module:function"`` names, imported only from the allowed packages (as a spec's).

    Raises:
        SpecFormatError: the reference is malformed, outside the allowlist or builds no environment.
    """
    from agent_fsm.scenarios import allowed_packages

    packages = allowed_packages(allowed)
    load_environment(reference, allowed=packages)  # fail now, not in every run
    return lambda: load_environment(reference, allowed=packages)


def _model(case: Case, environment: Environment, seed: int) -> Model | None:
    if case.model_factory is not None:
        return case.model_factory(seed)
    if case.cassette is not None:
        return ReplayModel(case.cassette)
    if case.model is not None:
        return build_model(case.as_scenario(), environment)
    return None


@attrs.define
class _Eval:
    dataset: Dataset
    world: World
    ledger: Ledger
    seed: int
    store: Checkpointer | None = None
    condition: asyncio.Condition = attrs.field(factory=asyncio.Condition)
    stopped: bool = False

    async def share(self, limits: Limits, floor: Decimal) -> Share | None:
        """Wait until the run's share can be set aside whole, or nothing is in flight; ``None``: budget spent."""
        async with self.condition:
            while True:
                if self.stopped:
                    return None
                bounded = self.ledger.bounded(limits, floor)
                if bounded == limits or (bounded is not None and self.ledger.in_flight == 0):
                    share = self.ledger.take(bounded, floor)
                    assert share is not None
                    return share
                if bounded is None and self.ledger.in_flight == 0:
                    self.stopped = True
                    self.condition.notify_all()
                    return None
                await self.condition.wait()

    async def settle(self, share: Share, turns: int, usage: Any) -> None:
        async with self.condition:
            self.ledger.settle(share, turns, usage)
            self.condition.notify_all()

    async def one(self, case: Case, repeat: int) -> RunRecord:
        environment = self.world()
        scenario = case.as_scenario()
        model = _model(case, environment, self.seed + repeat)
        agent: Agent = build_agent(scenario, environment, model=model)
        if case.output is not None:
            agent = agent.replace(output=case.output)
        limits = agent.limits if agent.limits is not None else Limits()
        if self.ledger.budget.max_cost is not None and agent.prices is None:
            raise ValueError(
                f"case {case.name!r}: the eval has a money budget but the agent has no Prices, so its cost is unknown"
            )
        share = await self.share(limits, _first_call_floor(agent, limits))
        if share is None:
            return RunRecord(case.name, repeat, None, None, 0, 0, Decimal(0), skipped=BUDGET_SPENT)
        agent = agent.replace(limits=share.limits)
        try:
            result, used = await _drive(agent, case, scenario.resumes, self.store)
        except RunError as exc:
            # The run failed loudly (a model that raised, a cassette that holds no such request): a failed run of
            # the case, not of the eval. What it spent is unknown: its whole share counts, so the budget holds.
            await self.settle(share, share.turns, _whole(share))
            return RunRecord(
                case.name, repeat, None, None, share.turns, share.tokens, share.cost,
                error=f"{type(exc).__name__}: {exc}",
            )  # fmt: skip
        except BaseException:
            # Cancelled, or a set-up mistake raised: the share is charged whole at once (no await: a cancelled
            # task may not wait for the lock), and the error goes on.
            self.ledger.settle(share, share.turns, _whole(share))
            raise
        await self.settle(share, result.state.turns, result.usage)
        judged = Judged(result, list(environment.effects), environment, scenario, used, self.ledger)
        scores = tuple(evaluator.evaluate(judged) for evaluator in case.evaluators)
        return RunRecord(
            case=case.name,
            repeat=repeat,
            stop=result.stop.value,
            code=result.code,
            turns=result.state.turns,
            tokens=result.usage.tokens,
            cost=result.usage.cost,
            scores=scores,
            run_id=result.state.run_id,
        )


def _whole(share: Share) -> Usage:
    """A share as spent in full: what a run that failed is charged, its spending being unknown."""
    return Usage(input_tokens=share.tokens, cost=share.cost)


def _first_call_floor(agent: Agent, limits: Limits) -> Decimal:
    """The least any first model call of the run may cost: its whole reply cap at the cheapest output price."""
    if agent.prices is None or limits.max_output_tokens is None:
        return Decimal(0)
    table = [*agent.prices.models.values(), *([agent.prices.default] if agent.prices.default else [])]
    if not table:
        return Decimal(0)
    return min(price.worst_case(0, limits.max_output_tokens) for price in table)


async def _drive(agent: Agent, case: Case, resumes: Sequence[Any], store: Checkpointer | None) -> tuple[RunResult, int]:
    # A stored run is found by its id: each run of the eval gets a fresh one.
    run_id = None if store is None else uuid.uuid4().hex
    result = await agent.arun(case.task, history=case.history, store=store, run_id=run_id)
    used = 0
    while result.stop is Stop.AWAITING_APPROVAL and used < len(resumes):
        decision = resumes[used]
        used += 1
        result = await agent.aresume(
            result.state, approve=decision.approve, reason=decision.reason, store=store, run_id=run_id
        )
    return result, used


async def arun_eval(
    dataset: Dataset,
    world: World | None = None,
    *,
    repeat: int | None = None,
    budget: EvalBudget = NO_BUDGET,
    concurrency: int = 4,
    seed: int = 0,
    allowed: Sequence[str] = (),
    store: Checkpointer | None = None,
) -> EvalReport:
    """
    Run every case of ``dataset`` ``repeat`` times (the dataset's by default), ``concurrency`` runs at once.

    ``world`` builds a fresh world per run; by default the dataset's
    ``world`` reference is imported (from ``allowed`` packages besides the
    project's own, as for specs). ``budget`` is shared by every run: turns,
    tokens and money summed over the whole eval never pass it. ``seed`` is
    added to each repeat's index and handed to a case's ``model_factory``.
    ``store`` keeps every run (:mod:`agent_fsm.store`), so the HTML report
    can link each to its page (``report_html(report, run_href=...)``).

    Raises:
        ValueError: no world is given or named; the budget has a money ceiling
            and an agent has no prices, or a case has no ``max_output_tokens``.
    """
    if world is None:
        if dataset.world is None:
            raise ValueError(f"dataset {dataset.name!r} names no world; pass world= (a function building one)")
        world = world_from_reference(dataset.world, allowed)
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency must be a whole number >= 1 (got {concurrency!r})")
    times = dataset.repeat if repeat is None else repeat
    state = _Eval(dataset, world, Ledger(budget), seed, store)
    gate = asyncio.Semaphore(concurrency)

    async def bounded(case: Case, index: int) -> RunRecord:
        async with gate:
            return await state.one(case, index)

    jobs = [(case, index) for index in range(times) for case in dataset.cases]
    records = await asyncio.gather(*(bounded(case, index) for case, index in jobs))
    by_case: dict[str, list[RunRecord]] = {case.name: [] for case in dataset.cases}
    for record in records:
        by_case[record.case].append(record)
    spent = state.ledger.spent
    return EvalReport(
        name=dataset.name,
        cases=tuple(
            CaseReport(case.name, tuple(sorted(by_case[case.name], key=lambda r: r.repeat)), case.metadata)
            for case in dataset.cases
        ),
        repeat=times,
        spent_turns=state.ledger.turns_spent,
        spent_tokens=spent.tokens,
        spent_cost=spent.cost,
        budget={
            "max_turns": budget.max_turns,
            "max_tokens": budget.max_tokens,
            "max_cost": None if budget.max_cost is None else format(budget.max_cost, "f"),
        },
        stopped=state.stopped,
        judge_cost=state.ledger.judge_cost,
    )


class EvalOptions(TypedDict, total=False):
    """The keyword options of :func:`arun_eval`, which :func:`run_eval` passes on unchanged."""

    repeat: int | None
    budget: EvalBudget
    concurrency: int
    seed: int
    allowed: Sequence[str]
    store: Checkpointer | None


def run_eval(dataset: Dataset, world: World | None = None, **options: Unpack[EvalOptions]) -> EvalReport:
    """:func:`arun_eval` from synchronous code (it starts an event loop of its own); the same options."""
    return asyncio.run(arun_eval(dataset, world, **options))
