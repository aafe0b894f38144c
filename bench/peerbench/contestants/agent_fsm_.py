"""agent_fsm itself: ``run`` and ``arun``, with JSON Schema validation, the shared run machine and typed state."""

from __future__ import annotations

from typing import Any

from agent_fsm import RunState, arun, run
from agent_fsm.examples.support_desk import TASK

from ..scenarios import SYSTEM_PROMPT, Job, Outcome


def agent_fsm_state(job: Job) -> RunState:
    result = run(TASK, job.model, job.desk.tools, gate=job.gate, limits=job.limits, system_prompt=SYSTEM_PROMPT)
    return result.state


def _outcome(job: Job, result: Any) -> Outcome:
    state = result.state
    return Outcome(
        str(result.stop),
        result.answer,
        state.messages,
        [(o.call_id, o.ok, o.kind, o.content) for o in state.observations],
        job.desk.effects,
        state.prompt_token_log,
    )


def run_agent_fsm(job: Job) -> Outcome:
    result = run(TASK, job.model, job.desk.tools, gate=job.gate, limits=job.limits, system_prompt=SYSTEM_PROMPT)
    return _outcome(job, result)


async def arun_agent_fsm(job: Job) -> Outcome:
    """The async driver: the model's ``achat`` is awaited; the gate and the handlers are plain functions."""
    result = await arun(TASK, job.model, job.desk.tools, gate=job.gate, limits=job.limits, system_prompt=SYSTEM_PROMPT)
    return _outcome(job, result)
