"""
agent_fsm: run tool-calling agents as an explicit finite-state machine.

A model only proposes. The engine owns the transcript, validates every
proposal against its tool's contract, consults a gate immediately before
every effect, enforces the budgets and decides when to stop; every run ends
in a typed state or pauses for a human.

This module is the facade: every name a user needs, re-exported from the
kernel (:mod:`agent_fsm.engine`). The applications built on the kernel are
subpackages imported by name when wanted: :mod:`agent_fsm.diagrams`,
:mod:`agent_fsm.scenarios`, :mod:`agent_fsm.patterns`,
:mod:`agent_fsm.providers`, :mod:`agent_fsm.store`, :mod:`agent_fsm.testing`, :mod:`agent_fsm.cli`
and :mod:`agent_fsm.examples`.
"""

from agent_fsm import engine
from agent_fsm.engine import (
    DEFAULT_SYSTEM_PROMPT,
    EXPECTED_TOOL_ERRORS,
    RUN_MACHINE,
    Agent,
    AgentFSMError,
    AnswerCheck,
    Checkpointer,
    CompiledMachine,
    DefinitionError,
    Edge,
    Ended,
    Ending,
    EndingRule,
    EventSink,
    Gate,
    GateError,
    HandlerError,
    Intent,
    InvalidTransition,
    Judged,
    Judgement,
    Limits,
    MachineDefinitionError,
    MachineSpec,
    Model,
    ModelReplied,
    ModelReply,
    ModelRequested,
    NotPaused,
    NotSynchronous,
    Observation,
    Observed,
    OutcomeUnknown,
    OutputDefinitionError,
    OutputSpec,
    Pause,
    Paused,
    Proposed,
    ProviderFailure,
    ProviderFault,
    Registry,
    RunError,
    RunEvent,
    RunResult,
    RunState,
    ScriptedModel,
    StateEntered,
    StateError,
    StateSpec,
    Stop,
    TextDelta,
    TokenEstimator,
    ToolCall,
    ToolContext,
    ToolDefinitionError,
    ToolError,
    ToolSpec,
    Verdict,
    aadvance,
    advance,
    allow_all,
    answer_message,
    aresume,
    arun,
    as_verdict,
    ask_for_effects,
    astream,
    attempt,
    check_run,
    checked_formats,
    compile_machine,
    current_call_id,
    deny_effects,
    estimate_tokens,
    event_from_json,
    event_to_json,
    execute,
    function_declarations,
    judge,
    parse_tool_calls,
    resume,
    run,
    start_state,
    stream,
    tool_call_message,
    tool_message,
    validate_call,
)

__all__ = [
    # The agent, and running it
    "Agent",
    "run",
    "resume",
    "advance",
    "stream",
    "start_state",
    # Running from async code (the async runner loads asyncio on first use only)
    "arun",
    "aresume",
    "aadvance",
    "astream",
    "RunCancelled",
    # Run events
    "EventSink",
    "RunEvent",
    "StateEntered",
    "ModelRequested",
    "ModelReplied",
    "TextDelta",
    "Proposed",
    "Judged",
    "Observed",
    "Paused",
    "Ended",
    "event_to_json",
    "event_from_json",
    "Limits",
    "OutputSpec",
    "Stop",
    "Ending",
    "EndingRule",
    "RunResult",
    "RunState",
    "Judgement",
    "Pause",
    "ProviderFault",
    "DEFAULT_SYSTEM_PROMPT",
    "AnswerCheck",
    # The effect boundary
    "judge",
    "execute",
    "attempt",
    "EXPECTED_TOOL_ERRORS",
    # Durable runs (the stores themselves are in agent_fsm.store)
    "Checkpointer",
    "Intent",
    "ToolContext",
    # Tools and proposals
    "ToolSpec",
    "ToolCall",
    "Registry",
    "Observation",
    "validate_call",
    "function_declarations",
    "checked_formats",
    # Gates
    "Gate",
    "Verdict",
    "allow_all",
    "deny_effects",
    "ask_for_effects",
    "as_verdict",
    # Models and the wire format
    "Model",
    "ModelReply",
    "ScriptedModel",
    "tool_call_message",
    "answer_message",
    "tool_message",
    "parse_tool_calls",
    "TokenEstimator",
    "estimate_tokens",
    # Machines
    "RUN_MACHINE",
    "MachineSpec",
    "StateSpec",
    "Edge",
    "CompiledMachine",
    "compile_machine",
    # Verification
    "check_run",
    "current_call_id",
    # Errors
    "AgentFSMError",
    "DefinitionError",
    "ToolDefinitionError",
    "OutputDefinitionError",
    "MachineDefinitionError",
    "RunError",
    "HandlerError",
    "GateError",
    "InvalidTransition",
    "NotPaused",
    "NotSynchronous",
    "OutcomeUnknown",
    "StateError",
    "ProviderFailure",
    "ToolError",
]


def __getattr__(name: str) -> object:
    # RunCancelled is the async runner's, which loads asyncio: the engine imports it when it is first asked for.
    if name == "RunCancelled":
        return engine.RunCancelled
    raise AttributeError(f"module 'agent_fsm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "RunCancelled"])


__version__ = "0.1.0"
