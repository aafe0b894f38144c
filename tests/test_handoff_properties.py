"""
Handoffs and recursive compositions under random scripts and budgets: every run ends within the top agent's limits.

The kit's nested worlds are chains of agents run as tools; these are the other
two shapes a composition takes: an agent that may hand the conversation over
(the run then ends as the agent it handed to ended), and an agent that may run
itself as a tool, as deep as its budgets let it.
"""

from __future__ import annotations

from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

from agent_fsm import RUN_MACHINE, Agent, Limits, RunState, ScriptedModel, Stop, ToolSpec, Verdict
from agent_fsm.engine import DEFAULT_LAST_WORD
from agent_fsm.testing import assistant_messages, limits

_NOTE = {"text": str}


def _note(text: str) -> dict[str, Any]:
    return {"noted": text}


def _gate(kind: str) -> Any:
    return lambda call: Verdict(kind, f"the test's gate answers {kind}")  # type: ignore[arg-type]


def _depth(state: RunState) -> int:
    return 1 + max((_depth(child) for child in state.children.values()), default=0)


def _every_run(state: RunState) -> list[RunState]:
    return [state, *(run for child in state.children.values() for run in _every_run(child))]


def _decided(agent: Agent, task: str, decisions: list[bool]) -> Any:
    """Run ``task``, deciding each pause in turn (then rejecting), saving and loading the state at each."""
    result = agent.run(task)
    while result.stop is Stop.AWAITING_APPROVAL:
        loaded = RunState.from_json(result.state.to_json())
        assert loaded == result.state
        result = agent.resume(loaded, approve=decisions.pop(0) if decisions else False)
    return result


_HOLDER_TOOLS = {"note": ToolSpec("Write a note.", _NOTE, _note)}
_FRONT_SHAPE = {"note": _HOLDER_TOOLS["note"], "to_holder": Agent(ScriptedModel([]), {}).handoff()}


@given(
    front=st.lists(assistant_messages(_FRONT_SHAPE, kinds=("call", "call", "parallel", "answer")), max_size=4),
    holder=st.lists(assistant_messages(_HOLDER_TOOLS, kinds=("call", "bad_arguments", "answer")), max_size=4),
    top=limits(max_turns=(1, 10), max_prompt_tokens=(800, 6000), max_tool_calls=(1, 8)),
    own=limits(max_turns=(1, 6), max_prompt_tokens=(800, 6000), max_tool_calls=(1, 6)),
    gate=st.sampled_from(("allow", "ask", "deny")),
    decisions=st.lists(st.booleans(), max_size=3),
)
def test_a_handoff_ends_as_its_holder_ended_within_the_top_budgets(
    front: list[dict[str, Any]],
    holder: list[dict[str, Any]],
    top: Limits,
    own: Limits,
    gate: str,
    decisions: list[bool],
) -> None:
    taker = Agent(ScriptedModel(holder, last_word=DEFAULT_LAST_WORD), _HOLDER_TOOLS, name="holder", limits=own)
    tools = {"note": _HOLDER_TOOLS["note"], "to_holder": taker.handoff()}
    agent = Agent(ScriptedModel(front, last_word=DEFAULT_LAST_WORD), tools, gate=_gate(gate), limits=top, name="front")
    result = _decided(agent, "help me", list(decisions))
    state = result.state
    event(f"ended {result.stop.value}")
    assert RUN_MACHINE.state(state.machine_state).kind == "absorbing"
    assert state.turns <= top.max_turns
    assert top.max_tool_calls is None or state.tool_attempts <= top.max_tool_calls
    if result.stop is Stop.HANDED_OVER:
        held = state.children[next(reversed(state.children))]
        assert held.agent == "holder" and held.stop is not None and held.stop is not Stop.AWAITING_APPROVAL
        assert result.answer == (held.answer if held.stop is Stop.ANSWERED else None)
        assert result.code == (held.code or held.stop.value)
    for run in _every_run(state)[1:]:  # each nested run kept whole, and within its own limits
        assert run.limits is not None and run.turns <= min(run.limits.max_turns, own.max_turns)


_SELF_SHAPE = {"note": _HOLDER_TOOLS["note"], "again": Agent(ScriptedModel([]), {}).as_tool()}


@given(
    script=st.lists(assistant_messages(_SELF_SHAPE, kinds=("call", "call", "answer")), min_size=1, max_size=4),
    top=limits(max_turns=(1, 12), max_prompt_tokens=(1500, 8000), max_tool_calls=(1, 10)),
)
def test_an_agent_that_runs_itself_ends_within_its_top_budgets(script: list[dict[str, Any]], top: Limits) -> None:
    tools: dict[str, ToolSpec] = {"note": _HOLDER_TOOLS["note"]}
    agent = Agent(
        ScriptedModel(script, last_word=DEFAULT_LAST_WORD), tools, gate=_gate("allow"), limits=top, name="self"
    )
    tools["again"] = agent.as_tool()  # the registry is the agent's own mapping: it now runs itself
    result = agent.run("go")
    state = result.state
    event(f"nested {_depth(state) - 1} deep")
    assert RUN_MACHINE.state(state.machine_state).kind == "absorbing"
    assert state.turns <= top.max_turns
    assert top.max_tool_calls is None or state.tool_attempts <= top.max_tool_calls
    assert _depth(state) <= top.max_turns + 1  # each level has fewer turns than the one above it
    assert RunState.from_json(state.to_json()) == state
