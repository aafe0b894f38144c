"""Burr: a graph built once, an ``Application`` built per run; immutable ``State``, ``Condition``s on the edges."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

from agent_fsm import estimate_tokens

from ..scenarios import DECLARATION_TOKENS, DECLARATIONS, Job, Outcome
from ..work import (
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

_BURR_ENDINGS = ("answered", "step_limit", "token_limit", "no_progress", "tool_limit", "awaiting_approval")


# Burr's State is immutable, and each update deep-copies the fields it
# writes (State.apply_operation): appending one message copies the whole
# transcript, so a Burr run costs O(n^2) in its length. That is measured
# as it is; the wanderer shows it.


@cache
def _burr_graph() -> Any:
    from burr.core import Condition, GraphBuilder, State, action, default

    @action(reads=[], writes=[])
    def ready(state: State[Any]) -> State[Any]:
        """Where a run starts: the budgets are checked on leaving it."""
        return state

    @action(
        reads=["messages", "tokens", "turns", "attempts", "pending", "ids"],
        writes=["messages", "tokens", "turns", "prompt_log", "pending", "verdict"],
    )
    def propose(state: State[Any], job: Job) -> State[Any]:
        pending = state["pending"]
        if not pending:
            turns = state["turns"] + 1
            reply = job.model.chat(state["messages"], DECLARATIONS)
            message, pending = parse_reply(reply, turns, state["ids"])
            state = state.append(prompt_log=state["tokens"] + DECLARATION_TOKENS, messages=message).update(
                turns=turns, tokens=state["tokens"] + estimate_tokens(message), pending=pending
            )
        verdict = None
        if pending and not tool_budget_spent(state["attempts"], job.limits):
            verdict = judge_call(pending[0], job.gate)
        return state.update(verdict=verdict)

    @action(
        reads=["pending", "tokens", "attempts"],
        writes=["observations", "messages", "tokens", "pending", "verdict", "attempts"],
    )
    def execute(state: State[Any], job: Job) -> State[Any]:
        observation = execute_call(state["pending"][0], job.desk)
        message = tool_message(observation)
        return state.append(observations=observation, messages=message).update(
            tokens=state["tokens"] + estimate_tokens(message),
            pending=state["pending"][1:],
            verdict=None,
            attempts=state["attempts"] + 1,
        )

    @action(
        reads=["pending", "tokens", "verdict", "denials"],
        writes=["observations", "messages", "tokens", "pending", "verdict", "denials"],
    )
    def deny(state: State[Any]) -> State[Any]:
        call = state["pending"][0]
        kind, reason = state["verdict"]
        key = fingerprint(call)
        observation = (call.call_id, False, kind, reason)
        message = tool_message(observation)
        return state.append(observations=observation, messages=message).update(
            tokens=state["tokens"] + estimate_tokens(message),
            pending=state["pending"][1:],
            verdict=None,
            denials={**state["denials"], key: state["denials"].get(key, 0) + 1},
        )

    def ending(stop: str) -> Any:
        @action(
            reads=["messages", "pending", "tokens"],
            writes=["stop", "answer", "observations", "messages", "pending", "tokens"],
        )
        def end(state: State[Any]) -> State[Any]:
            state = state.update(stop=stop)
            if stop == "answered":
                return state.update(answer=state["messages"][-1]["content"] or "")
            if stop in ("no_progress", "tool_limit"):
                for call in state["pending"]:
                    observation = not_run(call, stop)
                    message = tool_message(observation)
                    state = state.append(observations=observation, messages=message).update(
                        tokens=state["tokens"] + estimate_tokens(message)
                    )
                state = state.update(pending=[])
            return state

        return end

    def when_(keys: list[str], test: Callable[[Any], bool], name: str) -> Condition:
        return Condition(keys, test, name=name)

    turn_spent = when_(["turns", "limits"], lambda s: s["turns"] >= s["limits"].max_turns, "turn_budget_spent")
    over_budget = when_(
        ["tokens", "limits"],
        lambda s: s["tokens"] + DECLARATION_TOKENS > s["limits"].max_prompt_tokens,
        "prompt_over_budget",
    )
    pending = when_(["pending"], lambda s: bool(s["pending"]), "calls_pending")
    no_calls = when_(["pending"], lambda s: not s["pending"], "reply_has_no_calls")
    no_verdict = when_(["verdict"], lambda s: s["verdict"] is None, "tool_budget_spent")
    rejected = when_(["verdict"], lambda s: s["verdict"][0] in ("invalid", "denied"), "call_rejected")
    ask = when_(["verdict"], lambda s: s["verdict"][0] == "ask", "approval_needed")
    repeated = when_(
        ["denials", "limits"],
        lambda s: any(n >= s["limits"].repeated_denials for n in s["denials"].values()),
        "denial_repeated",
    )

    def next_turn(source: str) -> list[tuple[str, str, Any]]:
        return [(source, "step_limit", turn_spent), (source, "token_limit", over_budget), (source, "propose", default)]

    return (
        GraphBuilder()  # type: ignore[no-untyped-call]
        .with_actions(ready=ready, propose=propose, execute=execute, deny=deny, **{s: ending(s) for s in _BURR_ENDINGS})
        .with_transitions(
            *next_turn("ready"),
            ("propose", "answered", no_calls),
            ("propose", "tool_limit", no_verdict),
            ("propose", "deny", rejected),
            ("propose", "awaiting_approval", ask),
            ("propose", "execute", default),
            ("execute", "propose", pending),
            *next_turn("execute"),
            ("deny", "no_progress", repeated),
            ("deny", "propose", pending),
            *next_turn("deny"),
        )
        .build()
    )


def run_burr(job: Job) -> Outcome:
    from burr.core import ApplicationBuilder

    messages, tokens = opening()
    app: Any = (
        ApplicationBuilder()  # type: ignore[no-untyped-call]
        .with_graph(_burr_graph())
        .with_entrypoint("ready")
        .with_state(
            messages=messages,
            observations=[],
            prompt_log=[],
            tokens=tokens,
            turns=0,
            attempts=0,
            denials={},
            pending=[],
            verdict=None,
            answer=None,
            stop=None,
            limits=job.limits,
            ids=CallIds(),  # updated in place, as LangGraph's: see GraphState
        )
        .build()
    )
    _, _, state = app.run(halt_after=list(_BURR_ENDINGS), inputs={"job": job})
    return Outcome(
        state["stop"], state["answer"], state["messages"], state["observations"], job.desk.effects, state["prompt_log"]
    )
