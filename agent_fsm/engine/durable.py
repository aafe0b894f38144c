"""
One call across the effect boundary under a checkpointer: intent first, then the handler, retries for idempotent tools.

:func:`agent_fsm.engine.callbacks.execute_call` is the only caller. The
order is the guarantee: the intent of an effectful call is committed before
its handler starts, so a crash can never leave an effect with no record.
"""

from __future__ import annotations

from agent_fsm.engine.boundary import execution
from agent_fsm.engine.checkpoint import (
    Checkpointer,
    Intent,
    ToolContext,
    fingerprint,
    idempotency_key,
)
from agent_fsm.engine.limits import Limits
from agent_fsm.engine.observe import Observation
from agent_fsm.engine.state import RunState
from agent_fsm.engine.steps import Perform, Steps, pause_for
from agent_fsm.engine.tools import Registry, ToolCall

__all__ = ["commit_intent", "commit_observation", "run_call"]


def commit_intent(
    checkpointer: Checkpointer | None, run_id: str, state: RunState, call: ToolCall, tools: Registry
) -> Intent | None:
    """Commit the intent of ``call`` if it is effectful and the run is stored; the intent, or ``None``."""
    if checkpointer is None or not tools[call.name].effectful:
        return None
    intent = Intent(call.call_id, call.name, fingerprint(call), idempotency_key(run_id, state, call))
    checkpointer.save(run_id, state, intent)
    return intent


def commit_observation(checkpointer: Checkpointer | None, run_id: str, state: RunState, intent: Intent | None) -> None:
    """Commit the state holding the observation of the call whose intent was committed."""
    if checkpointer is not None and intent is not None:
        checkpointer.save(run_id, state)


def run_call(
    call: ToolCall, tools: Registry, state: RunState, run_id: str, limits: Limits, perform: Perform | None = None
) -> Steps[Observation]:
    """
    Run the head call (counting each attempt in ``state.tool_attempts``) and return its observation.

    An idempotent tool with ``retries`` is run again, under the same
    idempotency key, after an ``error`` that is not permanent, with a
    doubling back-off, while ``limits.max_tool_calls`` admits another
    attempt: every failure spends the budget like any attempt. ``perform``
    performs the requests in place (see :func:`agent_fsm.engine.steps.perform_now`).
    """
    spec = tools[call.name]
    # The key costs a digest of the call: made only for a handler that asks for its context.
    context = ToolContext(run_id, call.call_id, idempotency_key(run_id, state, call)) if spec.takes_context else None
    state.tool_attempts += 1  # counted when issued, so failed attempts spend the budget too
    observation = yield from execution(call, tools, state=state, context=context, perform=perform)
    retries = spec.retries if spec.idempotent else 0
    for attempt in range(retries):
        if observation.ok or observation.permanent:
            break
        if limits.max_tool_calls is not None and state.tool_attempts >= limits.max_tool_calls:
            break
        request = pause_for(spec.backoff * 2**attempt)
        perform(request) if perform is not None else (yield request)
        state.tool_attempts += 1
        observation = yield from execution(call, tools, state=state, context=context, perform=perform)
    return observation
