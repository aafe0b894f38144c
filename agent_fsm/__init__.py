"""
agent_fsm: run tool-calling agents as an explicit finite-state machine.

A model only proposes. The engine owns the transcript, validates every
proposal against its tool's contract, consults a gate immediately before
every effect, enforces the budgets and decides when to stop; every run ends
in a typed state or pauses for a human.
"""

from ._exceptions import (
    AgentFSMError,
    DefinitionError,
    GateError,
    HandlerError,
    InvalidTransition,
    MachineDefinitionError,
    NotPaused,
    ProviderFailure,
    RunError,
    ToolDefinitionError,
    ToolError,
)
from .boundary import EXPECTED_TOOL_ERRORS, attempt, execute, judge
from .gates import Gate, Verdict, allow_all, as_verdict, ask_for_effects, deny_effects
from .invariants import check_run
from .limits import Limits, Stop
from .machine import RUN_MACHINE, CompiledMachine, Edge, MachineSpec, StateSpec, compile_machine
from .models import Model, ModelReply, ScriptedModel
from .observe import Observation, TokenEstimator, estimate_tokens
from .run import DEFAULT_SYSTEM_PROMPT, AnswerCheck, advance, resume, run, start_state
from .state import Judgement, ProviderFault, RunResult, RunState
from .tools import Registry, ToolCall, ToolSpec, function_declarations, validate_call
from .wire import answer_message, parse_tool_calls, tool_call_message, tool_message

__all__ = [
    # Running
    "run",
    "resume",
    "advance",
    "start_state",
    "Limits",
    "Stop",
    "RunResult",
    "RunState",
    "Judgement",
    "ProviderFault",
    "DEFAULT_SYSTEM_PROMPT",
    "AnswerCheck",
    # The effect boundary
    "judge",
    "execute",
    "attempt",
    "EXPECTED_TOOL_ERRORS",
    # Tools and proposals
    "ToolSpec",
    "ToolCall",
    "Registry",
    "Observation",
    "validate_call",
    "function_declarations",
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
    # Errors
    "AgentFSMError",
    "DefinitionError",
    "ToolDefinitionError",
    "MachineDefinitionError",
    "RunError",
    "HandlerError",
    "GateError",
    "InvalidTransition",
    "NotPaused",
    "ProviderFailure",
    "ToolError",
]

__version__ = "0.1.0"
