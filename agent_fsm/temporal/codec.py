"""
What crosses between the workflow, its activities and its clients, as plain JSON data.

Nothing is pickled: a call, an observation, a model reply, a verdict and a
provider's failure travel as small dicts, a run's state as its own strict
JSON (:meth:`RunState.to_json`), checked again when it is read. This
module imports nothing from Temporal.
"""

from __future__ import annotations

import json
from typing import Any

import attrs

from agent_fsm.engine import ModelReply, Observation, ProviderFailure, RunResult, RunState, Stop, ToolCall, Verdict

__all__ = [
    "call_data",
    "call_of",
    "fault_data",
    "fault_of",
    "observation_data",
    "observation_of",
    "reply_data",
    "reply_of",
    "result_json",
    "result_of",
    "verdict_data",
    "verdict_of",
]


def call_data(call: ToolCall) -> dict[str, Any]:
    """A validated call as data (its arguments are a JSON object by then)."""
    return {"call_id": call.call_id, "name": call.name, "arguments": call.arguments, "raw": call.raw_arguments}


def call_of(data: dict[str, Any]) -> ToolCall:
    """The call :func:`call_data` described."""
    return ToolCall(data["call_id"], data["name"], data["arguments"], data.get("raw"))


def observation_data(observation: Observation) -> dict[str, Any]:
    """An observation as data."""
    return {
        "call_id": observation.call_id,
        "ok": observation.ok,
        "kind": observation.kind,
        "content": observation.content,
        "permanent": observation.permanent,
        "text_form": observation.text_form,
        "media": list(observation.media),
    }


def observation_of(data: dict[str, Any]) -> Observation:
    """The observation :func:`observation_data` described."""
    return Observation(
        data["call_id"],
        data["ok"],
        data["kind"],
        data["content"],
        permanent=data["permanent"],
        text_form=data["text_form"],
        media=tuple(data.get("media", ())),
    )


def reply_data(reply: Any) -> dict[str, Any]:
    """
    What a model returned (a message or a :class:`ModelReply`), as data for the workflow to judge.

    Every figure the provider reported travels (the usage a run's cost is computed from, the model that
    answered); a whole number too large for JSON goes as text, which the workflow refuses as any bad figure.
    """
    if isinstance(reply, ModelReply):
        data = attrs.asdict(reply, recurse=False)
        data["message"] = dict(reply.message)
        for name, value in data.items():
            if type(value) is int and not -(10**18) < value < 10**18:
                data[name] = f"a whole number of {value.bit_length()} bits"
        return data
    return {"message": reply}


def reply_of(data: dict[str, Any]) -> Any:
    """The reply :func:`reply_data` described: a :class:`ModelReply` when the provider reported on it."""
    if "prompt_tokens" in data:  # a history written before the other figures travelled holds only these
        return ModelReply(**data)
    return data["message"]


def fault_data(exc: OSError) -> dict[str, Any]:
    """A provider's failure (any ``OSError``) as data: its type's name, kind, status and message."""
    return {
        "type": type(exc).__name__,
        "kind": getattr(exc, "kind", "timeout" if isinstance(exc, TimeoutError) else "transport"),
        "status": getattr(exc, "status", None),
        "message": str(exc),
    }


_FAULT_TYPES: dict[str, type[ProviderFailure]] = {"ProviderFailure": ProviderFailure}


def fault_of(data: dict[str, Any]) -> ProviderFailure:
    """
    The failure :func:`fault_data` described, raised in the workflow so the run ends ``provider_error``.

    It is a :class:`ProviderFailure` of the same type name, kind, status and
    message, so ``state.fault`` reads exactly as it would in-process.
    """
    name = data["type"]
    kind = _FAULT_TYPES.get(name)
    if kind is None:
        kind = _FAULT_TYPES[name] = type(name, (ProviderFailure,), {"__doc__": f"A remote {name}."})
    return kind(data["message"], kind=data["kind"], status=data["status"])


def verdict_data(verdict: Verdict) -> dict[str, Any]:
    """A gate's verdict as data."""
    return {"kind": verdict.kind, "reason": verdict.reason}


def verdict_of(data: dict[str, Any]) -> Verdict:
    """The verdict :func:`verdict_data` described."""
    return Verdict(data["kind"], data["reason"])


def result_json(result: RunResult) -> str:
    """A run's result as JSON text: the typed ending and the state in its own strict JSON."""
    return json.dumps(
        {
            "stop": result.stop.value,
            "answer": result.answer,
            "reason": result.reason,
            "code": result.code,
            "state": result.state.to_json(),
        }
    )


def result_of(text: str) -> RunResult:
    """
    The result :func:`result_json` wrote; the state is checked field by field as it is read.

    Raises:
        ValueError: the text is not such a result, or its state is not a valid saved state.
    """
    data = json.loads(text)
    if not isinstance(data, dict) or set(data) != {"stop", "answer", "reason", "code", "state"}:
        raise ValueError("not a run result written by agent_fsm.temporal")
    state = RunState.from_json(data["state"])
    stop = Stop(data["stop"])
    if state.stop is not stop:
        raise ValueError(f"the result says {stop.value!r} but its state is in {state.machine_state!r}")
    return RunResult(
        stop=stop,
        answer=data["answer"],
        state=state,
        blocked_on=state.pending[0] if stop is Stop.AWAITING_APPROVAL else None,
        reason=data["reason"],
        code=data["code"],
    )
