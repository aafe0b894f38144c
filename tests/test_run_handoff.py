"""The ``handoff`` ending: a tool that fails permanently stops the run before any further tool runs."""

from __future__ import annotations

import json

from agent_fsm import (
    RUN_MACHINE,
    Limits,
    RunResult,
    RunState,
    ScriptedModel,
    Stop,
    ToolError,
    ToolSpec,
    allow_all,
    answer_message,
    attempt,
    check_run,
    run,
    tool_call_message,
)
from agent_fsm.engine import ToolCall, check_machine


def _tools(calls: list[str]) -> dict[str, ToolSpec]:
    def fetch(doc: str) -> str:
        calls.append(doc)
        if doc == "locked":
            raise ToolError("permission denied for this manual", permanent=True)
        if doc == "slow":
            raise ToolError("the manual service timed out")
        return f"text of {doc}"

    return {"fetch": ToolSpec("Fetch a document.", {"doc": str}, fetch)}


def _fetch_then_answer(first: str, second: str) -> tuple[RunResult, list[str]]:
    """Run a model that fetches ``first``, then ``second``, then answers; return the handler's calls too."""
    calls: list[str] = []
    model = ScriptedModel(
        [
            tool_call_message("c1", "fetch", {"doc": first}),
            tool_call_message("c2", "fetch", {"doc": second}),
            answer_message("done"),
        ]
    )
    return run("read it", model, _tools(calls), gate=allow_all), calls


def test_permanent_tool_error_ends_handoff() -> None:
    """A permanent ToolError ends the run ``handoff`` and the model is not asked again."""
    result, calls = _fetch_then_answer("locked", "other")
    assert result.stop is Stop.HANDOFF
    assert result.state.machine_state == "Handoff"
    assert result.state.turns == 1
    assert calls == ["locked"]
    assert result.state.tool_attempts == 1
    last = result.state.observations[-1]
    assert (last.kind, last.ok, last.permanent) == ("error", False, True)
    assert "permission denied" in (result.reason or "")
    assert result.answer is None
    assert all(check_run(result, [], Limits()).values())


def test_transient_tool_error_leaves_the_next_step_to_the_model() -> None:
    """A plain ToolError is an ordinary error observation: the run goes on."""
    result, calls = _fetch_then_answer("slow", "manual")
    assert result.stop is Stop.ANSWERED
    assert [o.permanent for o in result.state.observations] == [False, False]
    assert calls == ["slow", "manual"]


def test_handoff_skips_the_rest_of_the_reply() -> None:
    """Calls after the permanent failure in the same reply are never executed."""
    calls: list[str] = []
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "fetch", "arguments": json.dumps({"doc": "locked"})}},
            {"id": "b", "type": "function", "function": {"name": "fetch", "arguments": json.dumps({"doc": "x"})}},
        ],
    }
    result = run("read both", ScriptedModel([message]), _tools(calls), gate=allow_all)
    assert result.stop is Stop.HANDOFF
    assert calls == ["locked"]
    assert [(o.call_id, o.kind) for o in result.state.observations] == [("a", "error"), ("b", "denied")]
    assert result.state.observations[1].content == "not run: the run stopped (handoff)"


def test_permanent_flag_reaches_the_wire_and_survives_a_round_trip() -> None:
    """The model reads the flag in the tool message, and a saved state keeps it."""
    result = run(
        "read it", ScriptedModel([tool_call_message("c1", "fetch", {"doc": "locked"})]), _tools([]), gate=allow_all
    )
    wire = json.loads(result.state.messages[-1]["content"])
    assert wire["permanent"] is True
    restored = RunState.from_json(result.state.to_json())
    assert restored == result.state
    assert restored.observations[-1].permanent is True


def test_attempt_marks_permanent_failures_too() -> None:
    """The shared boundary used by workflow patterns reports the same flag."""
    observation = attempt(ToolCall("c1", "fetch", {"doc": "locked"}), _tools([]), allow_all)
    assert observation.permanent is True
    assert attempt(ToolCall("c2", "fetch", {"doc": "slow"}), _tools([]), allow_all).permanent is False


def test_handoff_state_is_absorbing_and_the_machine_still_terminates() -> None:
    """The new state is absorbing, reports ``handoff``, and the static checker still passes."""
    assert RUN_MACHINE.state("Handoff").kind == "absorbing"
    assert RUN_MACHINE.stop_of("Handoff") is Stop.HANDOFF
    report = check_machine(RUN_MACHINE)
    assert report.ok, str(report)
