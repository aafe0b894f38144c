"""The public surface: everything in __all__ exists and is importable from agent_fsm."""

import agent_fsm


def test_all_names_exist():
    """Every name in __all__ is an attribute of the package."""
    missing = [name for name in agent_fsm.__all__ if not hasattr(agent_fsm, name)]
    assert missing == []


def test_contract_names_are_exported():
    """The names other code builds on stay exported."""
    contract = {
        "run",
        "resume",
        "ToolSpec",
        "ToolCall",
        "Observation",
        "Limits",
        "Stop",
        "RunResult",
        "RunState",
        "ScriptedModel",
        "tool_call_message",
        "answer_message",
        "Verdict",
        "allow_all",
        "check_run",
        "ToolError",
        "function_declarations",
        "checked_formats",
        "OutputSpec",
        "OutputDefinitionError",
        "AnswerRefused",
    }
    assert contract <= set(agent_fsm.__all__)


def test_no_duplicates_in_all():
    """__all__ lists each name once."""
    assert len(agent_fsm.__all__) == len(set(agent_fsm.__all__))
