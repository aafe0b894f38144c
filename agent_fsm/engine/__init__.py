"""
The kernel: the run machine and everything a run needs, with no optional dependency.

Users import from the :mod:`agent_fsm` facade; applications (diagrams,
scenarios, patterns, providers, store, temporal, web, the testing kit, the
CLI) import the names below. The modules behind them are private, one concept
each, layered so that each imports only those above it in this list::

    _errors       every exception the kernel raises, the tree drawn in its docstring
    _json         plain JSON data: what arrives is checked, what handlers return is stored
    _schema       a tool's JSON Schema: checked when defined, compiled once (linear-time patterns, formats);
                  typed output: output= as one such schema, an answer read and built into the caller's value
    _limits       the budgets, and the typed reasons a run stops
    _endings      a world's own ending codes on top of the typed stops
    _tools        tool contracts, calls and their one digest, the registry
    _steps        where a run waits on the world (requests), and the sync way of waiting
    _machine      THE TABLE: the run machine's states and edges as data, and a table bound to its functions
    _messages     observations, token estimates, the wire format and its never-raising parser
    _models       what the engine needs of a model, and the scripted stand-in
    _context      what a model call is shown: the prompt apart from the transcript (compacted), the tools offered
    _codecs       the kinds of saved fields: each one's writer, strict rule and fast rule
    _saved        the saved form of a record, derived from its fields' declarations: writer, readers, signature
    _state        the run's state and result, each field declaring how it is saved; their invariants
    _resting      the compact form a paused run's state rests in until it is used
    _events       run events as plain data
    _spending     what a run spends: each call charged, the worst case checked before it, caps, denials, repeats,
                  the last word
    _gates        gates and screens: the judges the engine consults, and their verdicts
    _boundary     the effect boundary: validate, gate, execute; approvals; intents and checkpoints
    _invariants   what every run must satisfy
    _analysis     the static checker: termination proved from the table
    _options      which states and edges each option of an agent brings (Agent.machine, the driven table)
    _run          THE LOOP: the run in flight, the machine's guards and effects
    _launch       the seam: a run set going, rested, decided once, recovered after a crash
    _nesting      agents inside agents: an agent as a tool, a handoff; bounded budgets, nested pauses
    _async        the async way of waiting (the only module that imports asyncio, loaded on first use)
    _agent        the Agent value and the module-level functions that delegate to it
    _policy       a narrow decide(task, observations) interface adapted onto a model

A reader starts at :mod:`~agent_fsm.engine._machine` (what a run may do) and
then the banner of :mod:`~agent_fsm.engine._run` (how it does it).
"""

from typing import TYPE_CHECKING

from agent_fsm.engine._agent import Agent, EventSink, aadvance, advance, aresume, arun, astream, resume, run, stream
from agent_fsm.engine._boundary import (
    EXPECTED_TOOL_ERRORS,
    MAX_PROGRESS_MESSAGE,
    OUTCOME_UNKNOWN,
    Checkpointer,
    EffectMatch,
    Intent,
    Seen,
    ToolContext,
    attempt,
    attempting,
    current_call_id,
    execute,
    executing,
    execution,
    judge,
    matches_call,
    report_progress,
)
from agent_fsm.engine._context import (
    Compaction,
    Compactor,
    PromptEntry,
    PromptWindow,
    StandIn,
    Summarize,
    ToolRule,
    ToolsFor,
    after,
    at_most_once,
    before,
    drop_middle,
    elide_results,
    ends_run,
    prompt_problem,
    protected,
    sent_messages,
    summarize,
)
from agent_fsm.engine._endings import CODE_PATTERN, Ending, EndingRule
from agent_fsm.engine._errors import (
    AgentFSMError,
    AlreadyDecided,
    AnswerRefused,
    ApprovalNeeded,
    DecisionRefused,
    DefinitionError,
    GateError,
    HandlerError,
    InvalidTransition,
    MachineDefinitionError,
    NotPaused,
    NotSynchronous,
    OutcomeUnknown,
    OutputDefinitionError,
    ProviderFailure,
    RunError,
    ScreenError,
    ScriptExhausted,
    StateError,
    ToolDefinitionError,
    ToolError,
    UngatedApproval,
    UngatedEffects,
)
from agent_fsm.engine._events import (
    AnswerWithheld,
    Charged,
    Compacted,
    Ended,
    FellBack,
    Judged,
    ModelReplied,
    ModelRequested,
    Observed,
    Paused,
    Proposed,
    RateWaited,
    RunEvent,
    Screened,
    StateEntered,
    TextDelta,
    ToolProgress,
    ToolsOffered,
    event_from_json,
    event_to_json,
)
from agent_fsm.engine._gates import (
    Gate,
    InputScreen,
    Redact,
    ResultScreen,
    ScreenVerdict,
    Verdict,
    allow_all,
    as_verdict,
    ask_for_effects,
    deny_effects,
    task_of,
)
from agent_fsm.engine._invariants import check_run
from agent_fsm.engine._json import DEPTH_CEILING, nesting_exceeds
from agent_fsm.engine._launch import (
    DEFAULT_SYSTEM_PROMPT,
    CallDecision,
    answered_by,
    check_answer,
    check_reply,
    continue_run,
    refuse_ungated,
    reply_data,
    reply_of,
    reply_strands,
    settle_intent,
    start_state,
)
from agent_fsm.engine._limits import Limits, Price, Prices, RateLimit, Stop, Usage
from agent_fsm.engine._machine import RUN_MACHINE, CompiledMachine, Edge, MachineSpec, StateSpec, compile_machine
from agent_fsm.engine._messages import (
    MAX_PART_BYTES,
    ContentPartError,
    File,
    Image,
    Observation,
    TokenEstimator,
    answer_message,
    assistant_text,
    content_text,
    estimate_tokens,
    format_result,
    format_transcript,
    has_parts,
    image_tokens,
    media_estimator,
    normalise_reply,
    parse_tool_calls,
    placeholder,
    to_json_data,
    tool_call_message,
    tool_message,
)
from agent_fsm.engine._models import (
    DEFAULT_LAST_WORD,
    FALLBACK_KINDS,
    FallbackModel,
    Model,
    ModelReply,
    ScriptedModel,
    wrapped_estimator,
)
from agent_fsm.engine._options import RUN_OPTIONS, RunOption
from agent_fsm.engine._run import AnswerCheck, RunContext
from agent_fsm.engine._schema import OUTPUT_INVALID, OutputSpec, checked_formats, compile_pattern, output_spec
from agent_fsm.engine._spending import call_spent
from agent_fsm.engine._state import (
    GROWING,
    Judgement,
    Pause,
    ProviderFault,
    RunResult,
    RunState,
    ScreenRecord,
    StateWriter,
    blocked_call,
    new_nonce,
)
from agent_fsm.engine._steps import Steps, call_of, is_awaitable
from agent_fsm.engine._tools import (
    ASKED,
    NO_ANSWER,
    OpenQuestion,
    PersonAnswers,
    QuestionReply,
    Registry,
    Subrun,
    ToolCall,
    ToolSpec,
    call_fingerprint,
    check_registry,
    contract_digest,
    function_declarations,
    validate_call,
)

if TYPE_CHECKING:
    from agent_fsm.engine._analysis import (
        MachineReport,
        Violation,
        check_machine,
        check_tool_rules,
        cycles,
        unchecked_spending,
    )
    from agent_fsm.engine._async import RunCancelled, acontinue_run, adrive
    from agent_fsm.engine._nesting import (
        Composition,
        ConversationFilter,
        Nested,
        bounded_limits,
        check_composition,
        conversation,
        held_limits,
    )
    from agent_fsm.engine._policy import (
        DECISION_ERRORS,
        DecisionPolicy,
        FinalDecision,
        named,
        observations_of,
        string_fields,
    )

__all__ = [
    "after",
    "at_most_once",
    "before",
    "check_tool_rules",
    "Compacted",
    "Compaction",
    "Compactor",
    "drop_middle",
    "elide_results",
    "ends_run",
    "PromptEntry",
    "prompt_problem",
    "PromptWindow",
    "protected",
    "sent_messages",
    "StandIn",
    "summarize",
    "Summarize",
    "ToolRule",
    "ToolsFor",
    "ToolsOffered",
    "AlreadyDecided",
    "AnswerRefused",
    "ApprovalNeeded",
    "NO_ANSWER",
    "PersonAnswers",
    "OpenQuestion",
    "QuestionReply",
    "ASKED",
    "CallDecision",
    "answered_by",
    "check_answer",
    "check_reply",
    "reply_data",
    "reply_of",
    "reply_strands",
    "Charged",
    "FALLBACK_KINDS",
    "FallbackModel",
    "wrapped_estimator",
    "FellBack",
    "Price",
    "Prices",
    "Usage",
    "DecisionRefused",
    "DEPTH_CEILING",
    "nesting_exceeds",
    "DECISION_ERRORS",
    "aadvance",
    "acontinue_run",
    "adrive",
    "advance",
    "Agent",
    "AnswerWithheld",
    "AgentFSMError",
    "allow_all",
    "answer_message",
    "AnswerCheck",
    "aresume",
    "arun",
    "as_verdict",
    "ask_for_effects",
    "assistant_text",
    "astream",
    "attempt",
    "attempting",
    "call_fingerprint",
    "contract_digest",
    "call_of",
    "check_machine",
    "check_registry",
    "check_run",
    "checked_formats",
    "Checkpointer",
    "CODE_PATTERN",
    "compile_machine",
    "compile_pattern",
    "CompiledMachine",
    "continue_run",
    "current_call_id",
    "report_progress",
    "MAX_PROGRESS_MESSAGE",
    "cycles",
    "DecisionPolicy",
    "DEFAULT_LAST_WORD",
    "DEFAULT_SYSTEM_PROMPT",
    "DefinitionError",
    "deny_effects",
    "Edge",
    "EffectMatch",
    "Ended",
    "Ending",
    "EndingRule",
    "estimate_tokens",
    "ContentPartError",
    "File",
    "Image",
    "MAX_PART_BYTES",
    "content_text",
    "has_parts",
    "image_tokens",
    "media_estimator",
    "placeholder",
    "event_from_json",
    "event_to_json",
    "EventSink",
    "execute",
    "executing",
    "execution",
    "EXPECTED_TOOL_ERRORS",
    "FinalDecision",
    "format_result",
    "format_transcript",
    "function_declarations",
    "Gate",
    "GateError",
    "HandlerError",
    "Intent",
    "InputScreen",
    "InvalidTransition",
    "is_awaitable",
    "judge",
    "Judged",
    "Judgement",
    "Limits",
    "OutputSpec",
    "output_spec",
    "OUTPUT_INVALID",
    "MachineDefinitionError",
    "MachineReport",
    "MachineSpec",
    "matches_call",
    "Model",
    "ModelReplied",
    "ModelReply",
    "ModelRequested",
    "RateLimit",
    "RateWaited",
    "named",
    "normalise_reply",
    "NotPaused",
    "NotSynchronous",
    "OutcomeUnknown",
    "Observation",
    "observations_of",
    "Observed",
    "OUTCOME_UNKNOWN",
    "parse_tool_calls",
    "Pause",
    "Paused",
    "Proposed",
    "ProviderFailure",
    "ProviderFault",
    "Redact",
    "Registry",
    "ResultScreen",
    "resume",
    "run",
    "RUN_MACHINE",
    "RUN_OPTIONS",
    "RunOption",
    "RunCancelled",
    "RunContext",
    "RunError",
    "RunEvent",
    "RunResult",
    "RunState",
    "ScreenError",
    "ScriptExhausted",
    "ScreenRecord",
    "Screened",
    "ScreenVerdict",
    "ScriptedModel",
    "Seen",
    "refuse_ungated",
    "settle_intent",
    "start_state",
    "StateEntered",
    "StateError",
    "StateSpec",
    "StateWriter",
    "GROWING",
    "Steps",
    "Stop",
    "stream",
    "string_fields",
    "task_of",
    "TextDelta",
    "ToolProgress",
    "to_json_data",
    "TokenEstimator",
    "tool_call_message",
    "tool_message",
    "ToolCall",
    "ToolContext",
    "ToolDefinitionError",
    "OutputDefinitionError",
    "ToolError",
    "UngatedApproval",
    "UngatedEffects",
    "ToolSpec",
    "validate_call",
    "Verdict",
    "Violation",
    "unchecked_spending",
    "Composition",
    "ConversationFilter",
    "Nested",
    "Subrun",
    "blocked_call",
    "call_spent",
    "new_nonce",
    "bounded_limits",
    "check_composition",
    "conversation",
    "held_limits",
]

_ASYNC = frozenset({"RunCancelled", "acontinue_run", "adrive"})
# The decision-policy adapter: a plain run never uses it, so it is loaded when first asked for.
_POLICY = frozenset({"DECISION_ERRORS", "DecisionPolicy", "FinalDecision", "named", "observations_of", "string_fields"})

# The static checker: a run never needs it (tool rules are checked by the function that takes them).
_ANALYSIS = frozenset(
    {"MachineReport", "Violation", "check_machine", "check_tool_rules", "cycles", "unchecked_spending"}
)
# Agents inside agents: loaded by the first agent made a tool or a handoff, or when first asked for.
_NESTING = frozenset(
    {
        "Composition",
        "ConversationFilter",
        "Nested",
        "bounded_limits",
        "check_composition",
        "conversation",
        "held_limits",
    }
)


def __getattr__(name: str) -> object:
    # The async runner loads asyncio (tens of milliseconds): only when it is first used.
    if name in _ASYNC:
        from agent_fsm.engine import _async

        return getattr(_async, name)
    if name in _POLICY:
        from agent_fsm.engine import _policy

        return getattr(_policy, name)
    if name in _ANALYSIS:
        from agent_fsm.engine import _analysis

        return getattr(_analysis, name)
    if name in _NESTING:
        from agent_fsm.engine import _nesting

        return getattr(_nesting, name)
    raise AttributeError(f"module 'agent_fsm.engine' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _ASYNC | _POLICY | _ANALYSIS | _NESTING)
