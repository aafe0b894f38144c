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

from agent_fsm import _moved
from agent_fsm.engine.boundary import EXPECTED_TOOL_ERRORS, attempt, execute, judge
from agent_fsm.engine.checkpoint import Checkpointer, Intent, ToolContext
from agent_fsm.engine.compiled import CompiledMachine, compile_machine
from agent_fsm.engine.driver import (
    DEFAULT_SYSTEM_PROMPT,
    Agent,
    AnswerCheck,
    EventSink,
    aadvance,
    advance,
    aresume,
    arun,
    astream,
    resume,
    run,
    start_state,
    stream,
)
from agent_fsm.engine.effects import current_call_id
from agent_fsm.engine.endings import Ending, EndingRule
from agent_fsm.engine.errors import (
    AgentFSMError,
    DefinitionError,
    MachineDefinitionError,
    ProviderFailure,
    ToolDefinitionError,
    ToolError,
)
from agent_fsm.engine.events import (
    Ended,
    Judged,
    ModelReplied,
    ModelRequested,
    Observed,
    Paused,
    Proposed,
    RunEvent,
    StateEntered,
    TextDelta,
    event_from_json,
    event_to_json,
)
from agent_fsm.engine.failures import (
    GateError,
    HandlerError,
    InvalidTransition,
    NotPaused,
    RunError,
    StateError,
)
from agent_fsm.engine.formats import checked_formats
from agent_fsm.engine.gates import (
    Gate,
    Verdict,
    allow_all,
    as_verdict,
    ask_for_effects,
    deny_effects,
)
from agent_fsm.engine.invariants import check_run
from agent_fsm.engine.limits import Limits, Stop
from agent_fsm.engine.machine import RUN_MACHINE, Edge, MachineSpec, StateSpec
from agent_fsm.engine.models import Model, ModelReply, ScriptedModel
from agent_fsm.engine.observe import Observation, TokenEstimator, estimate_tokens
from agent_fsm.engine.state import Judgement, Pause, ProviderFault, RunResult, RunState
from agent_fsm.engine.steps import NotSynchronous
from agent_fsm.engine.tools import (
    Registry,
    ToolCall,
    ToolSpec,
    function_declarations,
    validate_call,
)
from agent_fsm.engine.wire import (
    answer_message,
    parse_tool_calls,
    tool_call_message,
    tool_message,
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
    "MachineDefinitionError",
    "RunError",
    "HandlerError",
    "GateError",
    "InvalidTransition",
    "NotPaused",
    "NotSynchronous",
    "StateError",
    "ProviderFailure",
    "ToolError",
]

_moved.install()

_ASYNC = frozenset({"RunCancelled"})


def __getattr__(name: str) -> object:
    # The async driver loads asyncio (tens of milliseconds): only when it is first used.
    if name in _ASYNC:
        from agent_fsm.engine import async_driver

        return getattr(async_driver, name)
    raise AttributeError(f"module 'agent_fsm' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _ASYNC)


__version__ = "0.1.0"
