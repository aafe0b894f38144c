"""
Human approval: what a pause asks about, and what an approval covers.

An approval is never read from saved data as authority. A pause records the
fingerprint of the exact call the gate asked about; on resume the call is
validated against the current registry and the gate is consulted again, and
the human's "yes" turns only a fresh ``ask`` about that same fingerprint into
permission. A ``deny`` still denies, a broken contract is still ``invalid``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from agent_fsm.engine.boundary import judging
from agent_fsm.engine.gates import Gate
from agent_fsm.engine.state import Judgement, Pause, RunState
from agent_fsm.engine.steps import Steps, drive
from agent_fsm.engine.tools import Registry, ToolCall

__all__ = ["Seen", "approved_judgement", "approved_judging", "call_fingerprint", "open_pause"]

Seen = Callable[[str], bool]
"""
``seen(pause_id)``: ``True`` if this pause was already decided (resume then
refuses), ``False`` after recording it as decided now. Record and answer in
one atomic step (a set under a lock, a unique key in a database).
"""


def call_fingerprint(call: ToolCall) -> str:
    """
    A digest of the call id, tool name and canonical arguments: equal exactly for the same call.

    Canonical means sorted keys and no whitespace, so key order in the
    model's text does not matter; the call id is included so an approval of
    one call never covers an identical proposal made later.
    """
    arguments = call.arguments if call.arguments is not None else {"<unparsed>": call.raw_arguments}
    item = [call.call_id, call.name, arguments]
    try:
        text = "".join(_encode(item, 0))
    except RecursionError:  # a cycle (or nesting too deep): the checking encoder says which
        text = _CANONICAL.encode(item)
    return hashlib.sha256(text.encode()).hexdigest()


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=repr)
# The same encoding, built once rather than per call as JSONEncoder.encode does;
# without cycle markers, so it holds no state between calls or threads.
_C_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)  # CPython's; absent in a pure-Python json
_encode: Callable[[object, int], Sequence[str]] = (
    _C_ENCODER(None, repr, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, True)
    if _C_ENCODER is not None
    else lambda item, _level: [_CANONICAL.encode(item)]
)


def open_pause(state: RunState, call: ToolCall, reason: str) -> Pause:
    """The pause for ``call``: an id unique to this run and ordinal, bound to the call's fingerprint."""
    ordinal = state.path.count("AwaitingApproval") + 1
    return Pause(f"{state.run_id}.{ordinal}", call_fingerprint(call), reason)


def approved_judgement(
    call: ToolCall, tools: Registry, gate: Gate, covers: str | None, *, state: RunState | None = None
) -> Judgement:
    """Judge ``call`` afresh under a human's approval of ``covers`` (see :func:`approved_judging`)."""
    return drive(approved_judging(call, tools, gate, covers, state=state))


def approved_judging(
    call: ToolCall, tools: Registry, gate: Gate, covers: str | None, *, state: RunState | None = None
) -> Steps[Judgement]:
    """
    Judge ``call`` afresh, as if newly proposed, with a human's approval of the fingerprint ``covers``.

    The approval turns an ``ask`` into ``allow`` only when ``call`` is the
    call approved; a changed call (edited state) asked about again is
    refused, since nobody approved it.
    """
    judgement = yield from judging(call, tools, gate, state=state)
    if judgement.kind != "ask":
        return judgement
    if covers is not None and call_fingerprint(call) == covers:
        return Judgement("allow", f"approved by a human reviewer ({judgement.reason})")
    return Judgement("denied", f"not run: the approval does not cover this call as it stands ({judgement.reason})")
