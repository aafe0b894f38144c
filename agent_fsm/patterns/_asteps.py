"""
The plan's effects as driver steps, for a pattern run by the async driver.

The sync patterns call the model and cross the boundary directly. Under
:func:`agent_fsm.engine._async.adrive` the same effects are written
as steps (:mod:`agent_fsm.engine._steps`), so an ``async`` gate, handler or
model is awaited where the sync effect would have called it. Imported
only by the async entry points, so the sync patterns never load ``asyncio``.
"""

from __future__ import annotations

from typing import Any

from agent_fsm.engine import CompiledMachine, Steps, adrive, call_of
from agent_fsm.patterns._common import (
    SHARED_VOCABULARY,
    PatternResult,
    _PatternRun,
    _record,
    _reply_text,
    _result,
    _unreachable,
)

__all__ = ["ASYNC_VOCABULARY", "adrive_pattern"]


def run_next_step(run: _PatternRun) -> Steps[None]:
    """:func:`agent_fsm.patterns._common.run_next_step` as steps: the call's gate and handler may be awaited."""
    assert run.plan is not None
    step = run.plan.steps[run.next_step]
    run.next_step += 1
    call = step(dict(run.results))
    observation = yield from run.meter.attempting(call, run.tools, run.gate)
    _record(run, call, observation)


def _consulting(run: _PatternRun, prompt: str) -> Steps[str | None]:
    """:func:`agent_fsm.patterns._common._consult` as steps: the model's ``achat`` is awaited."""
    try:
        reply = yield call_of("model", run.meter.aask, run.model, [{"role": "user", "content": prompt}])
    except Exception as exc:
        _unreachable(run, exc)
        return None
    return _reply_text(run, reply)


def draft_reply(run: _PatternRun) -> Steps[None]:
    """:func:`agent_fsm.patterns._common.draft_reply` as steps."""
    assert run.plan is not None and run.plan.draft is not None
    text = yield from _consulting(run, run.plan.draft(dict(run.results)))
    if text is not None:
        run.drafts.append(text)
        run.output = text


ASYNC_VOCABULARY: dict[str, Any] = {**SHARED_VOCABULARY, "run_next_step": run_next_step, "draft_reply": draft_reply}
"""The plan's guards and effects for the async driver: the shared ones, with the waiting effects as steps."""


async def adrive_pattern(machine: CompiledMachine, run: _PatternRun) -> PatternResult:
    """Drive ``run`` with the async driver until it rests, and report its typed ending."""
    await adrive(machine.steps(run))
    return _result(machine, run)
