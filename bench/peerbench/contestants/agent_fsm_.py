"""agent_fsm itself: ``agent_fsm.run`` with JSON Schema validation, the shared run machine and typed state."""

from __future__ import annotations

from agent_fsm import RunState, run
from agent_fsm.examples.support_desk import TASK

from ..scenarios import SYSTEM_PROMPT, Job, Outcome


def agent_fsm_state(job: Job) -> RunState:
    result = run(TASK, job.model, job.desk.tools, gate=job.gate, limits=job.limits, system_prompt=SYSTEM_PROMPT)
    return result.state


def run_agent_fsm(job: Job) -> Outcome:
    result = run(TASK, job.model, job.desk.tools, gate=job.gate, limits=job.limits, system_prompt=SYSTEM_PROMPT)
    state = result.state
    return Outcome(
        str(result.stop),
        result.answer,
        state.messages,
        [(o.call_id, o.ok, o.kind, o.content) for o in state.observations],
        job.desk.effects,
        state.prompt_token_log,
    )
