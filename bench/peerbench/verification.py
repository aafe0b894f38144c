"""Verification before timing: every contestant ends, acts and records exactly as agent_fsm does."""

from __future__ import annotations

from collections.abc import Sequence

from .contestants import Contestant, run_once
from .contestants.agent_fsm_ import agent_fsm_state, run_agent_fsm
from .contestants.bare import bare_loop
from .scenarios import PAUSED, Mismatch, Outcome, Scenario, new_job, verify


def reference(scenario: Scenario) -> Outcome:
    return run_agent_fsm(new_job(scenario))


def verify_all(contestants: Sequence[Contestant], scenario: Scenario) -> None:
    """
    Run every contestant (and every async form) once on ``scenario`` and compare it with agent_fsm.

    Raises:
        Mismatch: the first contestant whose ending, effects or record differ.
    """
    want = reference(scenario)
    for contestant in contestants:
        if contestant.sync is not None:
            verify(want, contestant.sync(new_job(scenario)), contestant.name, scenario.title)
        if contestant.asynchronous is not None:
            got = run_once(contestant, new_job(scenario), use_async=True)
            verify(want, got, f"{contestant.name} (async)", scenario.title)


def verify_paused() -> None:
    """The bare loop pauses where agent_fsm does, with the same record and the same call waiting."""
    engine_job, job = new_job(PAUSED), new_job(PAUSED)
    state, bare = agent_fsm_state(engine_job), bare_loop(job)
    if state.machine_state != "AwaitingApproval" or bare["stop"] != "awaiting_approval":
        raise Mismatch(f"both must pause: agent_fsm is in {state.machine_state}, the bare loop ended {bare['stop']}")
    got = Outcome("paused", None, bare["messages"], bare["observations"], job.desk.effects, bare["prompt_log"])
    want = Outcome(
        "paused",
        None,
        state.messages,
        [(o.call_id, o.ok, o.kind, o.content) for o in state.observations],
        engine_job.desk.effects,
        state.prompt_token_log,
    )
    verify(want, got, "bare loop", PAUSED.title)
    head, waiting = state.pending[0], bare["pending"][0]
    if (head.call_id, head.name, head.arguments) != (waiting.call_id, waiting.name, waiting.arguments):
        raise Mismatch(f"bare loop waits on {waiting!r}, agent_fsm on {head!r}")
