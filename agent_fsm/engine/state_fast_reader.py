"""
The fast path of the saved-state reader: accept a plainly valid state in one pass, or decline.

:func:`quick_state` holds a saved state to exactly the rules of
:func:`~agent_fsm.engine.state_reader.read_state`, but only answers yes (the
state) or "not plainly valid" (``None``); the strict reader then finds and
words the first problem. So the common case, a state this engine wrote, pays
for boolean checks only: no dotted paths, no per-field calls, no keyword
dictionaries, and its records are built without running attrs validators the
checks here already made.

It builds records by setting their slots directly, which is only right while
the record classes have exactly the fields and validators written out here.
That is checked once at import: if a class has changed (a field added, a
validator that this module does not repeat), the fast path turns itself off
and every state goes through the strict reader.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from typing import Any

import attrs

from agent_fsm.engine.consistency import STATES
from agent_fsm.engine.endings import CODE_PATTERN
from agent_fsm.engine.observe import Observation
from agent_fsm.engine.state import Judgement, Pause, ProviderFault, RunState
from agent_fsm.engine.state_reader import BadField, read_limits
from agent_fsm.engine.tools import ToolCall

__all__ = ["ENABLED", "quick_state"]

_KINDS = ("result", "invalid", "denied", "error")
_JUDGEMENTS = ("invalid", "denied", "ask", "allow")

_STATE_FIELDS = (
    "messages", "observations", "prompt_token_log", "turns", "tool_attempts", "machine_state", "path", "pending",
    "judgement", "denials", "answer", "opening", "fault", "message_tokens", "usage_offset", "finish", "code",
    "pause_id", "limits", "pause", "run_id", "consumed", "recent_rejections", "alternation", "elapsed",
)  # fmt: skip

# Field names and the attrs validators this module repeats, class by class.
_RECORDS: dict[type, tuple[tuple[str, ...], dict[str, Any]]] = {
    Observation: (
        ("call_id", "ok", "kind", "content", "permanent", "text_form"),
        {"kind": attrs.validators.in_(_KINDS)},
    ),
    ToolCall: (("call_id", "name", "arguments", "raw_arguments", "original_id"), {}),
    Judgement: (("kind", "reason"), {"kind": attrs.validators.in_(_JUDGEMENTS)}),
    Pause: (("pause_id", "fingerprint", "reason"), {}),
    RunState: (_STATE_FIELDS, {"code": attrs.validators.optional(attrs.validators.matches_re(CODE_PATTERN.pattern))}),
}


def _plain(cls: type) -> bool:
    """Whether ``cls`` is exactly the record written out above: slots, these fields, these validators only."""
    names, checked = _RECORDS[cls]
    fields = attrs.fields(cls)
    if tuple(f.name for f in fields) != names or hasattr(cls, "__attrs_post_init__"):
        return False
    if hasattr(cls, "__attrs_pre_init__"):
        return False
    for f in fields:
        if f.converter is not None or not isinstance(getattr(cls, f.name, None), types.MemberDescriptorType):
            return False
        if f.validator is not None and repr(f.validator) != repr(checked.get(f.name)):
            return False
    return True


ENABLED = all(_plain(cls) for cls in _RECORDS) and RunState.__setattr__ is object.__setattr__
"""Whether the fast path is on (the record classes are as this module expects); else :func:`quick_state` declines."""


def _setter(cls: type, name: str) -> Callable[[Any, Any], None]:
    slot: Any = getattr(cls, name, None)
    if not isinstance(slot, types.MemberDescriptorType):  # the class has changed: never called, ENABLED is off
        return _unused
    return slot.__set__


def _unused(record: Any, value: Any) -> None:
    raise AssertionError("the fast reader is off: its record classes are not the ones it was written for")


_new = object.__new__
_obs_call_id, _obs_ok, _obs_kind, _obs_content, _obs_permanent, _obs_text_form = (
    _setter(Observation, n) for n in _RECORDS[Observation][0]
)
_call_id, _call_name, _call_arguments, _call_raw, _call_original = (_setter(ToolCall, n) for n in _RECORDS[ToolCall][0])
_judgement_kind, _judgement_reason = (_setter(Judgement, n) for n in _RECORDS[Judgement][0])
_pause_id, _pause_fingerprint, _pause_reason = (_setter(Pause, n) for n in _RECORDS[Pause][0])

_TOP = ("format", *_STATE_FIELDS)

# One shared string per name: a loaded state holds the same objects a run
# holds, not a fresh copy of "AwaitingApproval" for every step of its path
# (found by the lookup that checks the name anyway).
_STATE_NAMES = {name: name for name in STATES}
_state_name = _STATE_NAMES.__getitem__
_KIND_NAMES = {name: name for name in _KINDS}
_JUDGEMENT_NAMES = {name: name for name in _JUDGEMENTS}


def quick_state(data: dict[str, Any]) -> RunState | None:
    """
    ``data`` (a freshly parsed saved state) as a :class:`RunState` if it is plainly valid, else ``None``.

    "Plainly valid" is exactly what :func:`~agent_fsm.engine.state_reader.read_state`
    accepts, and the state built is equal to the one it builds. The parsed data is
    owned by the state afterwards (its messages are kept, not copied), so the
    caller must have parsed it for this call alone.
    """
    size = len(data)
    # The right number of fields and, below, every field found: no field missing, none unknown.
    if not ENABLED or (size != len(_TOP) and (size != len(_TOP) - 1 or "elapsed" in data)):
        return None
    try:
        return _state(data)
    except (KeyError, TypeError):  # a field or record field missing, or a name that is not even hashable
        return None


# Written out in one function, record by record: a call per field would cost
# more than the checks themselves.
def _state(data: dict[str, Any]) -> RunState | None:
    data["format"]  # its value is the caller's to check, but it must be there
    turns, tool_attempts, opening, tokens, offset, alternation, consumed = (
        data["turns"], data["tool_attempts"], data["opening"], data["message_tokens"], data["usage_offset"],
        data["alternation"], data["consumed"],
    )  # fmt: skip
    if type(turns) is not int or type(tool_attempts) is not int or type(opening) is not int:
        return None
    if type(tokens) is not int or type(offset) is not int or type(alternation) is not int:
        return None
    if turns < 0 or tool_attempts < 0 or opening < 0 or tokens < 0 or alternation < 0 or type(consumed) is not bool:
        return None
    answer, finish, code, pause_id, run_id = (
        data["answer"], data["finish"], data["code"], data["pause_id"], data["run_id"]
    )  # fmt: skip
    if (answer is not None and type(answer) is not str) or (finish is not None and type(finish) is not str):
        return None
    if (pause_id is not None and type(pause_id) is not str) or type(run_id) is not str:
        return None
    if code is not None and (type(code) is not str or CODE_PATTERN.fullmatch(code) is None):
        return None
    elapsed = data["elapsed"] if len(data) == len(_TOP) else 0.0  # absent only where the count says so
    if (type(elapsed) is not float and type(elapsed) is not int) or not 0 <= elapsed < math.inf:
        return None
    log, denials, recent = data["prompt_token_log"], data["denials"], data["recent_rejections"]
    if type(log) is not list or type(recent) is not list or len(recent) > 2 or type(denials) is not dict:
        return None
    for n in log:
        if type(n) is not int or n < 0:
            return None
    for r in recent:
        if type(r) is not str:
            return None
    for n in denials.values():
        if type(n) is not int or n < 1:
            return None
    machine_state = _state_name(data["machine_state"])  # an unknown state: KeyError
    path = data["path"]
    if type(path) is not list:
        return None
    path = list(map(_state_name, path))
    messages = data["messages"]
    if type(messages) is not list:
        return None
    for message in messages:  # kept as parsed: sharing the role names would cost more time than it saves
        if type(message) is not dict or type(message.get("role")) is not str:
            return None
    items = data["observations"]
    if type(items) is not list:
        return None
    observations = []
    for item in items:
        if type(item) is not dict or len(item) != 6:
            return None
        kind, ok, call_id, content, permanent, text_form = (
            item["kind"], item["ok"], item["call_id"], item["content"], item["permanent"], item["text_form"]
        )  # fmt: skip
        if type(kind) is not str or type(ok) is not bool or ok != (kind == "result") or type(call_id) is not str:
            return None
        if type(permanent) is not bool or type(text_form) is not bool:
            return None
        o = _new(Observation)
        _obs_call_id(o, call_id)
        _obs_ok(o, ok)
        _obs_kind(o, _KIND_NAMES[kind])  # not a kind: KeyError
        _obs_content(o, content)
        _obs_permanent(o, permanent)
        _obs_text_form(o, text_form)
        observations.append(o)
    items = data["pending"]
    if type(items) is not list:
        return None
    pending = []
    for item in items:
        if type(item) is not dict or len(item) != 5:
            return None
        call_id, name, arguments, raw, original = (
            item["call_id"], item["name"], item["arguments"], item["raw_arguments"], item["original_id"]
        )  # fmt: skip
        if type(call_id) is not str or type(name) is not str or (arguments is not None and type(arguments) is not dict):
            return None
        if (raw is not None and type(raw) is not str) or (original is not None and type(original) is not str):
            return None
        c = _new(ToolCall)
        _call_id(c, call_id)
        _call_name(c, name)
        _call_arguments(c, arguments)
        _call_raw(c, raw)
        _call_original(c, original)
        pending.append(c)
    pause: Pause | None = None
    found = data["pause"]
    if found is not None:
        if type(found) is not dict or len(found) != 3:
            return None
        fingerprint, reason, given_id = found["fingerprint"], found["reason"], found["pause_id"]
        if type(given_id) is not str or type(fingerprint) is not str or type(reason) is not str:
            return None
        if given_id == pause_id:
            given_id = pause_id  # one string for the state's and the pause's id, as a run holds it
        pause = _new(Pause)
        _pause_id(pause, given_id)
        _pause_fingerprint(pause, fingerprint)
        _pause_reason(pause, reason)
    judgement: Judgement | None = None
    found = data["judgement"]
    if found is not None:
        if type(found) is not dict or len(found) != 2:
            return None
        kind, reason = found["kind"], found["reason"]
        if type(reason) is not str:
            return None
        if pause is not None and reason == pause.reason:
            reason = pause.reason  # the gate's reason, held once
        judgement = _new(Judgement)
        _judgement_kind(judgement, _JUDGEMENT_NAMES[kind])  # not a kind: KeyError
        _judgement_reason(judgement, reason)
    fault = data["fault"]
    if fault is not None:
        fault = _fault(fault)
        if fault is None:
            return None
    limits = data["limits"]
    if limits is not None:
        try:
            limits = read_limits(limits, "limits")
        except BadField:
            return None
    state = _new(RunState)
    state.messages = messages
    state.observations = observations
    state.prompt_token_log = log
    state.turns = turns
    state.tool_attempts = tool_attempts
    state.machine_state = machine_state
    state.path = path
    state.pending = pending
    state.judgement = judgement
    state.denials = denials
    state.answer = answer
    state.opening = opening
    state.fault = fault
    state.message_tokens = tokens
    state.usage_offset = offset
    state.finish = finish
    state.code = code
    state.pause_id = pause_id
    state.limits = limits
    state.pause = pause
    state.run_id = run_id
    state.consumed = consumed
    state.recent_rejections = recent
    state.alternation = alternation
    state.elapsed = float(elapsed)
    return state


def _fault(data: Any) -> ProviderFault | None:  # rare (a run that ended provider_error): built the ordinary way
    if type(data) is not dict or len(data) != 4:
        return None
    kind, message, status, error_type = data["kind"], data["message"], data["status"], data["type"]
    if type(error_type) is not str or type(kind) is not str or type(message) is not str:
        return None
    if status is not None and (type(status) is not int or status < 0):
        return None
    return ProviderFault(error_type, kind, message, status)
