"""
Observations (what happened when a call was attempted) and token accounting.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Literal

import attrs

from agent_fsm.engine.jsondata import storable

__all__ = ["Observation", "ObservationKind", "TokenEstimator", "estimate_tokens", "to_json_data"]

ObservationKind = Literal["result", "invalid", "denied", "error"]
_KINDS = ("result", "invalid", "denied", "error")


def to_json_data(value: Any) -> Any:
    """
    ``value`` as plain JSON data (dicts, lists, str, numbers, bools, None).

    Observations are stored as JSON data so that a saved run reads back
    exactly as it was. Plain data is copied as is (no JSON round trip);
    objects JSON cannot hold are stored as their ``str``, and a value that
    cannot be stored at all (a cycle, a tuple key, ``NaN``) as its text form:
    see :func:`agent_fsm.engine.jsondata.storable`, which also says whether
    text stood in.
    """
    return storable(value)[0]


@attrs.frozen
class Observation:
    """
    What came of trying a single tool call, typed, and tied to its ``call_id``.

    ``kind`` tells a denial (the gate refused) from an invalid proposal
    (it broke the contract) from an error (the handler failed in an expected
    way) from a result; a policy that only sees "failed" can only retry blindly.
    ``permanent`` marks an ``error`` the tool declared unrecoverable
    (``ToolError(..., permanent=True)``); such an error ends the run ``handoff``.
    ``text_form`` marks content that is a text rendering of what the handler
    returned, because JSON could not hold it (the effect happened all the same).
    """

    call_id: str
    ok: bool
    kind: ObservationKind = attrs.field(validator=attrs.validators.in_(_KINDS))
    content: Any
    permanent: bool = attrs.field(default=False, kw_only=True)
    text_form: bool = attrs.field(default=False, kw_only=True)

    def wire_content(self) -> str:
        """The text of the tool message that carries this observation to the model."""
        data = {"ok": self.ok, "kind": self.kind, "content": self.content}
        if self.permanent:
            data["permanent"] = True
        if self.text_form:
            data["text_form"] = True
        return json.dumps(data)


TokenEstimator = Callable[[Mapping[str, Any]], int]
"""Estimates the prompt tokens one wire message costs. Called once per message."""


def estimate_tokens(message: Mapping[str, Any]) -> int:
    """
    Four characters of serialized JSON per token, rounded up.

    Crude but monotone: the transcript, and so the price of the next turn,
    only grows. Replace it with a real tokenizer through ``run(estimator=...)``.
    """
    return -(-len(json.dumps(message)) // 4)
