"""
Run invariants: what every run must satisfy however the model behaved.

They read only the run's own record and the environment's effect log, so
checking them needs no re-running. Whether the model replied, and whether
the job got done, are separate matters that these leave alone: they only
say whether the run kept to the engine's rules.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from agent_fsm.engine._boundary import EffectMatch, matches_call
from agent_fsm.engine._limits import Limits, Stop
from agent_fsm.engine._machine import RUN_MACHINE
from agent_fsm.engine._state import RunResult, RunState

__all__ = ["check_run"]


# --- invariants ---


def check_run(
    result: RunResult, effects: Sequence[Any], limits: Limits, *, match: EffectMatch = matches_call
) -> dict[str, bool]:
    """
    The engine's mechanical rules, each judged on one ended (or paused) run.

    ``match(effect, observation)`` says whether an effect-log entry comes
    from the executed call behind ``observation``. The default
    (:func:`agent_fsm.engine._boundary.matches_call`) accepts an entry that
    names the call in a ``call_id`` field (see :func:`agent_fsm.current_call_id`),
    or one equal to the call's result.

    Returns:
        ``effects_authorized``: every entry of the effect log matches some call
        that was allowed and executed (a ``result`` or ``error`` observation)
        by the run or by a run nested in it (an agent run as a tool, under its
        own gate): no effect without an allowed, executed call;
        ``observations_correlated``: every tool message answers a call id
        proposed earlier in the transcript, and this run's observations and
        tool messages (those after ``state.opening``) agree one to one;
        ``bounded``: turns, tool attempts and every prompt
        sent stayed within ``limits``; ``typed_ending``: ``stop`` is a
        :class:`Stop` and agrees with the machine state the run rests in.
    """
    state = result.state
    executed = [o for each in _runs(state) for o in each.observations if o.kind in ("result", "error")]
    proposed: set[str] = set()
    correlated = True
    tool_messages = 0
    for index, message in enumerate(state.messages):
        for item in message.get("tool_calls") or ():
            proposed.add(item.get("id"))
        if message.get("role") == "tool" and index >= state.opening:
            tool_messages += 1
            correlated = correlated and message.get("tool_call_id") in proposed
    correlated = correlated and tool_messages == len(state.observations)
    resting = (
        RUN_MACHINE.state(state.machine_state).is_resting
        if state.machine_state in {s.name for s in RUN_MACHINE.states}
        else False
    )
    return {
        "effects_authorized": all(any(match(effect, o) for o in executed) for effect in effects),
        "observations_correlated": correlated,
        "bounded": (
            state.turns <= limits.max_turns
            and (limits.max_tool_calls is None or state.tool_attempts <= limits.max_tool_calls)
            and all(tokens <= limits.max_prompt_tokens for tokens in state.prompt_token_log)
        ),
        "typed_ending": isinstance(result.stop, Stop)
        and resting
        and RUN_MACHINE.stop_of(state.machine_state) is result.stop,
    }


def _runs(state: RunState) -> Iterator[RunState]:
    """The run and every run nested in it, however deep: each executed its own calls."""
    yield state
    for child in state.children.values():
        yield from _runs(child)
