"""
LangGraph: a ``StateGraph`` compiled once, a ``TypedDict`` state with ``operator.add`` reducers.

Model, desk and gate travel in the runtime context, never in the state.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, TypedDict

from agent_fsm import Limits, estimate_tokens

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


class GraphState(TypedDict):
    """LangGraph's state: the run's data, messages and logs accumulated by reducers."""

    messages: Annotated[list[dict[str, Any]], operator.add]
    observations: Annotated[list[tuple[str, bool, str, Any]], operator.add]
    prompt_log: Annotated[list[int], operator.add]
    tokens: int
    turns: int
    attempts: int
    denials: dict[str, int]
    pending: list[Call]
    verdict: tuple[str, str] | None
    answer: str | None
    stop: str | None
    limits: Limits
    # One registry per run, updated in place: copying the set on every turn
    # would only add to the framework's cost, not show it.
    ids: CallIds


@dataclass
class GraphContext:
    """What a LangGraph run runs against (never part of its state)."""

    job: Job


def _initial_graph_state(job: Job) -> dict[str, Any]:
    messages, tokens = opening()
    return {
        "messages": messages,
        "observations": [],
        "prompt_log": [],
        "tokens": tokens,
        "turns": 0,
        "attempts": 0,
        "denials": {},
        "pending": [],
        "verdict": None,
        "answer": None,
        "stop": None,
        "limits": job.limits,
        "ids": CallIds(),
    }


def _graph_judge(pending: list[Call], attempts: int, job: Job) -> tuple[str, str] | None:
    if not pending or tool_budget_spent(attempts, job.limits):
        return None
    return judge_call(pending[0], job.gate)


def _graph_reply(state: Any, reply: Any, job: Job) -> dict[str, Any]:
    """The update a model reply makes: the turn counted, the message appended, its calls pending and judged."""
    turns = state["turns"] + 1
    message, pending = parse_reply(reply, turns, state["ids"])
    return {
        "prompt_log": [state["tokens"] + DECLARATION_TOKENS],
        "turns": turns,
        "messages": [message],
        "tokens": state["tokens"] + estimate_tokens(message),
        "pending": pending,
        "verdict": _graph_judge(pending, state["attempts"], job),
    }


def _graph_observe(state: Any, observation: tuple[str, bool, str, Any], **more: Any) -> dict[str, Any]:
    message = tool_message(observation)
    return {
        "observations": [observation],
        "messages": [message],
        "tokens": state["tokens"] + estimate_tokens(message),
        "pending": state["pending"][1:],
        "verdict": None,
        **more,
    }


def _graph_next_turn(state: Any) -> str:
    """Where a run goes between turns: an ending if a budget says so, else the model."""
    limits = state["limits"]
    if state["turns"] >= limits.max_turns:
        return "step_limit"
    if state["tokens"] + DECLARATION_TOKENS > limits.max_prompt_tokens:
        return "token_limit"
    return "propose"


def _graph_after_proposal(state: Any) -> str:
    if not state["pending"]:
        return "answered"
    verdict = state["verdict"]
    if verdict is None:
        return "tool_limit"
    return {"invalid": "deny", "denied": "deny", "ask": "awaiting_approval", "allow": "execute"}[verdict[0]]


def _graph_after_execution(state: Any) -> str:
    return "judge" if state["pending"] else _graph_next_turn(state)


def _graph_after_denial(state: Any) -> str:
    threshold = state["limits"].repeated_denials
    if any(count >= threshold for count in state["denials"].values()):
        return "no_progress"
    return _graph_after_execution(state)


def _as_is(fn: Callable[..., Any]) -> Callable[..., Any]:
    return fn


def _on_loop(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` as an ``async def`` with the same signature (LangGraph reads it to pass the runtime)."""

    @functools.wraps(fn)
    async def node(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return node


@cache
def _langgraph(asynchronous: bool) -> Any:
    from langgraph.graph import END, START, StateGraph
    from langgraph.runtime import Runtime

    def propose(state: GraphState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
        job = runtime.context.job
        return _graph_reply(state, job.model.chat(state["messages"], DECLARATIONS), job)

    async def apropose(state: GraphState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
        job = runtime.context.job
        return _graph_reply(state, await job.model.achat(state["messages"], DECLARATIONS), job)

    def judge(state: GraphState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
        """The next call of the same reply."""
        job = runtime.context.job
        return {"verdict": _graph_judge(state["pending"], state["attempts"], job)}

    def execute(state: GraphState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
        observation = execute_call(state["pending"][0], runtime.context.job.desk)
        return _graph_observe(state, observation, attempts=state["attempts"] + 1)

    def deny(state: GraphState) -> dict[str, Any]:
        call = state["pending"][0]
        verdict = state["verdict"]
        assert verdict is not None
        key = fingerprint(call)
        denials = {**state["denials"], key: state["denials"].get(key, 0) + 1}
        return _graph_observe(state, (call.call_id, False, verdict[0], verdict[1]), denials=denials)

    def ending(stop: str) -> Any:
        def end(state: GraphState) -> dict[str, Any]:
            update: dict[str, Any] = {"stop": stop}
            if stop == "answered":
                update["answer"] = state["messages"][-1]["content"] or ""
            elif stop in ("no_progress", "tool_limit"):
                closing = [not_run(call, stop) for call in state["pending"]]
                messages = [tool_message(o) for o in closing]
                update.update(
                    observations=closing,
                    messages=messages,
                    pending=[],
                    tokens=state["tokens"] + sum(estimate_tokens(m) for m in messages),
                )
            return update

        return end

    # Under ainvoke LangGraph runs a plain function in a thread pool, so the
    # async graph has every node and router as an ``async def`` (the way to
    # write it for asyncio); only the model call awaits anything.
    native = _on_loop if asynchronous else _as_is
    graph = StateGraph(GraphState, context_schema=GraphContext)
    graph.add_node("propose", apropose if asynchronous else propose)
    graph.add_node("judge", native(judge))
    graph.add_node("execute", native(execute))
    graph.add_node("deny", native(deny))
    endings = ("answered", "step_limit", "token_limit", "no_progress", "tool_limit", "awaiting_approval")
    for stop in endings:
        graph.add_node(stop, native(ending(stop)))
        graph.add_edge(stop, END)
    turn = ["propose", "step_limit", "token_limit"]
    graph.add_conditional_edges(START, native(_graph_next_turn), turn)
    proposal = ["answered", "tool_limit", "deny", "awaiting_approval", "execute"]
    graph.add_conditional_edges("propose", native(_graph_after_proposal), proposal)
    graph.add_conditional_edges("judge", native(_graph_after_proposal), proposal)
    graph.add_conditional_edges("execute", native(_graph_after_execution), ["judge", *turn])
    graph.add_conditional_edges("deny", native(_graph_after_denial), ["no_progress", "judge", *turn])
    return graph.compile()


def _graph_outcome(job: Job, state: dict[str, Any]) -> Outcome:
    return Outcome(
        state["stop"], state["answer"], state["messages"], state["observations"], job.desk.effects, state["prompt_log"]
    )


def _graph_config(job: Job) -> dict[str, Any]:
    return {"recursion_limit": 4 * job.limits.max_turns + 50}


def run_langgraph(job: Job) -> Outcome:
    state = _langgraph(False).invoke(_initial_graph_state(job), _graph_config(job), context=GraphContext(job))
    return _graph_outcome(job, state)


async def arun_langgraph(job: Job) -> Outcome:
    state = await _langgraph(True).ainvoke(_initial_graph_state(job), _graph_config(job), context=GraphContext(job))
    return _graph_outcome(job, state)
