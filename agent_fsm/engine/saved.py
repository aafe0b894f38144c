"""
The saved-state format: strict JSON out, a validating reader in, an optional HMAC signature.

A saved state is data that may have been edited, truncated or forged. It is
read field by field without coercion (:mod:`~agent_fsm.engine.state_reader`;
a state as the engine writes it in one pass, :mod:`~agent_fsm.engine.state_fast_reader`)
and its counters are checked against its transcript
(:mod:`~agent_fsm.engine.consistency`). What the reader cannot tell is whether a well-formed state is *authentic*;
a signature (``key=``) can, and the driver never takes authority from a
state either way (see docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import operator
import re
from collections.abc import Callable
from typing import Any

import attrs

from agent_fsm.engine.consistency import state_problem
from agent_fsm.engine.limits import Limits
from agent_fsm.engine.state import FORMAT, RunState
from agent_fsm.engine.state_fast_reader import quick_state
from agent_fsm.engine.state_reader import (
    CALL_EXTRA,
    OBSERVATION_EXTRA,
    STATE_EXTRA,
    BadField,
    json_kind,
    read_state,
)

__all__ = ["dump_state", "load_state"]

_SIGNED = re.compile(r'\{"signature":"([0-9a-f]{64})","state":')
_SIGNED_PREFIX = len('{"signature":"') + 64 + len('","state":')


def _key(key: Any) -> bytes:
    if not isinstance(key, bytes) or not key:
        raise TypeError(f"'key' must be non-empty bytes (got {type(key).__name__})")
    return key


def _sign(key: bytes, text: str) -> str:
    return hmac.new(key, text.encode(), hashlib.sha256).hexdigest()


def _attrs_data(value: Any) -> Any:
    return None if value is None else attrs.asdict(value)


# Fields the strict reader holds to their default's type are written out in
# _state_data; these are any added since (each saved after the ones there).
_OBSERVATION_MORE = tuple(f for f in OBSERVATION_EXTRA if f.name != "text_form")
_CALL_MORE = tuple(f for f in CALL_EXTRA if f.name != "original_id")
_STATE_MORE = tuple(f for f in STATE_EXTRA if f.name != "pause_id")
# Budgets are plain numbers and flags: read in one C call, not by attrs.asdict's recursion.
_LIMIT_NAMES = tuple(f.name for f in attrs.fields(Limits))
_limit_values = operator.attrgetter(*_LIMIT_NAMES)


def _state_data(s: RunState) -> dict[str, Any]:
    p = s.pause
    data = {
        "format": FORMAT,
        "messages": s.messages,
        "observations": [
            {
                "call_id": o.call_id,
                "ok": o.ok,
                "kind": o.kind,
                "content": o.content,
                "permanent": o.permanent,
                "text_form": o.text_form,
            }
            for o in s.observations
        ],
        "prompt_token_log": s.prompt_token_log,
        "turns": s.turns,
        "tool_attempts": s.tool_attempts,
        "machine_state": s.machine_state,
        "path": s.path,
        "pending": [
            {
                "call_id": c.call_id,
                "name": c.name,
                "arguments": c.arguments,
                "raw_arguments": c.raw_arguments,
                "original_id": c.original_id,
            }
            for c in s.pending
        ],
        "judgement": None if s.judgement is None else {"kind": s.judgement.kind, "reason": s.judgement.reason},
        "denials": s.denials,
        "answer": s.answer,
        "opening": s.opening,
        "fault": _attrs_data(s.fault),
        "message_tokens": s.message_tokens,
        "usage_offset": s.usage_offset,
        "finish": s.finish,
        "code": s.code,
        "limits": None if s.limits is None else dict(zip(_LIMIT_NAMES, _limit_values(s.limits), strict=True)),
        "pause": None if p is None else {"pause_id": p.pause_id, "fingerprint": p.fingerprint, "reason": p.reason},
        "run_id": s.run_id,
        "consumed": s.consumed,
        "recent_rejections": s.recent_rejections,
        "alternation": s.alternation,
        "elapsed": s.elapsed,
        "pause_id": s.pause_id,
    }
    if _OBSERVATION_MORE:
        for item, o in zip(data["observations"], s.observations, strict=True):
            item.update({f.name: getattr(o, f.name) for f in _OBSERVATION_MORE})
    if _CALL_MORE:
        for item, c in zip(data["pending"], s.pending, strict=True):
            item.update({f.name: getattr(c, f.name) for f in _CALL_MORE})
    for field in _STATE_MORE:
        value = getattr(s, field.name)
        data[field.name] = attrs.asdict(value) if attrs.has(type(value)) else value
    return data


_ENCODER = json.JSONEncoder(allow_nan=False)


def dump_state(state: RunState, key: bytes | None) -> str:
    """``state`` as strict JSON, signed when ``key`` is given (see :meth:`RunState.to_json`)."""
    try:
        text = _ENCODER.encode(_state_data(state))
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"the run state cannot be saved as strict JSON: {exc}") from exc
    if key is None:
        return text
    return f'{{"signature":"{_sign(_key(key), text)}","state":{text}}}'


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON (a strict saved state holds no NaN or Infinity)")


_DECODER = json.JSONDecoder(parse_constant=_no_constant)
_scan: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def load_state(text: Any, key: bytes | None) -> RunState:
    """Read and check a saved state (see :meth:`RunState.from_json`)."""
    if type(text) is not str:
        if not isinstance(text, (str, bytes, bytearray)):
            raise ValueError(f"a saved run state is JSON text; got {type(text).__name__}")
        if isinstance(text, (bytes, bytearray)):
            text = text.decode("utf-8", errors="replace")
    if key is not None:
        found = _SIGNED.match(text)
        if found is None or not text.endswith("}"):
            raise ValueError("saved run state is not signed (a key was given, so a signature is required)")
        inner = text[_SIGNED_PREFIX:-1]
        if not hmac.compare_digest(found.group(1), _sign(_key(key), inner)):
            raise ValueError("saved run state's signature does not match: it was altered, or signed with another key")
        text = inner
    try:
        data, end = _scan(text, 0)  # the whole text one JSON value, as to_json writes it
    except (StopIteration, ValueError, RecursionError):
        end = -1
    if end != len(text):  # anything else (space around it, not JSON): the decoder decides and words it
        try:
            data = _DECODER.decode(text)
        except (ValueError, RecursionError) as exc:
            raise ValueError(f"saved run state is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"not a saved agent_fsm run state: expected a JSON object, got a JSON {json_kind(data)}")
    if "signature" in data and "format" not in data:
        raise ValueError("this saved run state is signed: read it with RunState.from_json(text, key=...)")
    found_format = data.get("format")
    if found_format != FORMAT or type(found_format) is not int:
        raise ValueError(f"not a saved agent_fsm run state (format {FORMAT} expected, got {found_format!r})")
    state = quick_state(data)  # a state as this engine writes it: checked in one pass
    if state is None:  # anything else: the strict reader names the first problem
        try:
            state = read_state(data)
        except BadField as bad:
            raise ValueError(f"saved run state is malformed at {bad.path}: {bad.detail}") from None
    problem = state_problem(state)
    if problem is not None:
        raise ValueError(f"saved run state is inconsistent at {problem[0]}: {problem[1]}")
    return state
