"""Building a tool: what its handler takes is read once per code, so a world built again per example stays cheap."""

from __future__ import annotations

import functools
import inspect
import types

import pytest

from agent_fsm import ToolSpec
from agent_fsm.engine import ToolDefinitionError, _tools


def _make(limit: int):
    def refund(order_id: str, amount_cents: int) -> dict:
        return {"order_id": order_id, "amount_cents": min(amount_cents, limit)}

    return refund


def test_handlers_of_one_code_share_one_signature_read(monkeypatch):
    """Two closures of the same function are read once; a handler of other code is read again."""
    reads = []
    real = inspect.signature
    monkeypatch.setattr(_tools, "_SIGNATURES", {})
    monkeypatch.setattr(_tools.inspect, "signature", lambda f: reads.append(f) or real(f))
    for limit in (10, 20, 30):
        ToolSpec("Refund.", {"order_id": str, "amount_cents": int}, _make(limit))
    assert len(reads) == 1
    ToolSpec("Look up.", {"order_id": str}, lambda order_id: order_id)
    assert len(reads) == 2


def test_a_shared_reading_still_refuses_what_it_must():
    """The cache changes no verdict: a schema naming a parameter the handler lacks is refused every time."""
    for _ in range(2):
        with pytest.raises(ToolDefinitionError, match="no such parameter"):
            ToolSpec("Refund.", {"order_id": str, "reason": str}, _make(1))


def test_defaults_and_wrappers_are_read_for_themselves():
    """Functions of one code with fewer defaults, and wrapped functions, are not given another's signature."""

    def with_default(order_id: str, note: str = "") -> str:
        return order_id

    without = types.FunctionType(with_default.__code__, with_default.__globals__, "without", None)
    ToolSpec("With a default.", {"order_id": str}, with_default)
    with pytest.raises(ToolDefinitionError, match="have no default"):
        ToolSpec("Same code, no default.", {"order_id": str}, without)

    def inner(order_id: str) -> str:
        return order_id

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        return inner(*args, **kwargs)

    spec = ToolSpec("Wrapped.", {"order_id": str}, wrapper)
    assert spec.handler_arguments({"order_id": "A"}) == {"order_id": "A"}
