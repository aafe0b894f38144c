"""The minimal bare loop: one ``while`` loop, key and type checks, the incremental token count; no schema library."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from agent_fsm import estimate_tokens

from ..scenarios import DECLARATION_TOKENS, DECLARATIONS, Job, Outcome
from ..work import (
    Call,
    CallIds,
    execute_call,
    fingerprint,
    judge_call,
    not_run,
    opening,
    parse_reply,
    tool_budget_spent,
    tool_message,
)


def _bare_core(job: Job) -> Generator[list[dict[str, Any]], Any, dict[str, Any]]:
    """
    The whole run as one loop; it yields the transcript when it needs a reply.

    A generator so that the sync and the async drivers share one body; a
    ``send`` per model turn is all it adds.
    """
    limits, desk, gate = job.limits, job.desk, job.gate
    messages, tokens = opening()
    observations: list[tuple[str, bool, str, Any]] = []
    log: list[int] = []
    denials: dict[str, int] = {}
    turns = attempts = 0
    pending: list[Call] = []
    answer = None
    ids = CallIds()

    def state(stop: str) -> dict[str, Any]:
        return {
            "stop": stop,
            "answer": answer,
            "messages": messages,
            "observations": observations,
            "prompt_log": log,
            "turns": turns,
            "attempts": attempts,
            "tokens": tokens,
            "denials": denials,
            "pending": pending,
        }

    while True:
        if turns >= limits.max_turns:
            return state("step_limit")
        prompt = tokens + DECLARATION_TOKENS
        if prompt > limits.max_prompt_tokens:
            return state("token_limit")
        log.append(prompt)
        turns += 1
        message, pending = parse_reply((yield messages), turns, ids)
        messages.append(message)
        tokens += estimate_tokens(message)
        if not pending:
            answer = message["content"] or ""
            return state("answered")
        while pending:
            call = pending[0]
            if tool_budget_spent(attempts, limits):
                stop = "tool_limit"
                break
            kind, reason = judge_call(call, gate)
            if kind == "ask":
                return state("awaiting_approval")
            if kind == "allow":
                attempts += 1
                observation = execute_call(call, desk)
            else:
                key = fingerprint(call)
                denials[key] = denials.get(key, 0) + 1
                observation = (call.call_id, False, kind, reason)
            observations.append(observation)
            message = tool_message(observation)
            messages.append(message)
            tokens += estimate_tokens(message)
            pending.pop(0)
            if kind != "allow" and denials[key] >= limits.repeated_denials:
                stop = "no_progress"
                break
        else:
            continue
        while pending:  # the run stops: answer the calls it will not judge
            observation = not_run(pending.pop(0), stop)
            observations.append(observation)
            message = tool_message(observation)
            messages.append(message)
            tokens += estimate_tokens(message)
        return state(stop)


def bare_loop(job: Job) -> dict[str, Any]:
    core = _bare_core(job)
    chat = job.model.chat
    try:
        messages = next(core)
        while True:
            messages = core.send(chat(messages, DECLARATIONS))
    except StopIteration as done:
        state: dict[str, Any] = done.value
        return state


async def bare_loop_async(job: Job) -> dict[str, Any]:
    core = _bare_core(job)
    achat = job.model.achat
    try:
        messages = next(core)
        while True:
            messages = core.send(await achat(messages, DECLARATIONS))
    except StopIteration as done:
        state: dict[str, Any] = done.value
        return state


def _bare_outcome(job: Job, state: dict[str, Any]) -> Outcome:
    return Outcome(
        state["stop"], state["answer"], state["messages"], state["observations"], job.desk.effects, state["prompt_log"]
    )


def run_bare(job: Job) -> Outcome:
    return _bare_outcome(job, bare_loop(job))


async def arun_bare(job: Job) -> Outcome:
    return _bare_outcome(job, await bare_loop_async(job))
