"""
The work every hand-written contestant shares: parsing, the desk's contracts, the gate, the handlers.

Every contestant but agent_fsm calls these, so the differences measured are
the frameworks' (and, for agent_fsm, the engine's own validation and records).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, NamedTuple

from agent_fsm import Limits, Verdict, estimate_tokens
from agent_fsm.examples.support_desk import TASK, SupportDesk

from .scenarios import SYSTEM_PROMPT


class Call(NamedTuple):
    """One parsed proposal (``arguments`` is ``None`` when they were not a JSON object)."""

    call_id: str
    name: str
    arguments: dict[str, Any] | None
    raw: str


_ORDER_ID = re.compile(r"^[A-Z]-[0-9]+$")
_CONTRACTS: dict[str, dict[str, type]] = {
    "lookup_order": {"order_id": str},
    "read_policy": {},
    "refund_order": {"order_id": str, "amount_cents": int},
}
_JSON_TYPE = {str: "string", int: "integer"}
_EXPECTED_ERRORS = (KeyError, ValueError, TimeoutError)


def opening() -> tuple[list[dict[str, Any]], int]:
    """The system prompt and the task as the first messages, and their token count."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    return messages, sum(estimate_tokens(m) for m in messages)


class CallIds:
    """
    The call ids a run's transcript holds: a reused id becomes the first free ``<id>~2``, ``<id>~3`` ...

    agent_fsm keeps call ids unique this way, so every contestant does; a
    counter per id keeps a model that reuses one id every turn from scanning
    all the earlier ones.
    """

    __slots__ = ("next", "used")

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.next: dict[str, int] = {}

    def claim(self, wanted: str) -> str:
        candidate, n = wanted, self.next.get(wanted, 1)
        while candidate in self.used:
            n += 1
            candidate = f"{wanted}~{n}"
        if n > 1:
            self.next[wanted] = n
        self.used.add(candidate)
        return candidate


def parse_reply(reply: Any, turn: int, ids: CallIds) -> tuple[dict[str, Any], list[Call]]:
    """The assistant message to store and its proposals, by key and type checks only; never raises."""
    if not isinstance(reply, dict):
        return {"role": "assistant", "content": str(reply)}, []
    content = reply.get("content")
    message: dict[str, Any] = {"role": "assistant", "content": content if content is None else str(content)}
    raw_calls = reply.get("tool_calls")
    if not raw_calls:
        return message, []
    calls: list[Call] = []
    wire: list[dict[str, Any]] = []
    for index, item in enumerate(raw_calls if isinstance(raw_calls, list) else [raw_calls]):
        item = item if isinstance(item, dict) else {}
        function = item.get("function")
        function = function if isinstance(function, dict) else {}
        call_id = item.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"call_{turn}_{index}"
        call_id = ids.claim(call_id)
        name = function.get("name")
        name = name if isinstance(name, str) else ""
        raw = function.get("arguments")
        arguments: Any = None
        if isinstance(raw, str):
            try:
                arguments = json.loads(raw) if raw.strip() else {}
            except (ValueError, RecursionError):
                arguments = None
        else:
            raw = ""
        calls.append(Call(call_id, name, arguments if isinstance(arguments, dict) else None, raw))
        wire.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}})
    message["tool_calls"] = wire
    return message, calls


def check_arguments(call: Call) -> str | None:
    """The desk's contracts as direct checks: ``None`` when valid, else why not."""
    if call.arguments is None:
        return f"arguments for {call.name or '(no name)'} were not a JSON object: {call.raw!r}"
    contract = _CONTRACTS.get(call.name)
    if contract is None:
        return f"unknown tool: {call.name!r} (available: {', '.join(sorted(_CONTRACTS))})"
    arguments = call.arguments
    problems = [f"{key!r} is a required property" for key in contract if key not in arguments]
    extra = [key for key in arguments if key not in contract]
    if extra:
        problems.append(f"Additional properties are not allowed ({', '.join(map(repr, extra))} were unexpected)")
    for key, kind in contract.items():
        value = arguments.get(key)
        if key in arguments and (not isinstance(value, kind) or isinstance(value, bool)):
            problems.append(f"{key}: {value!r} is not of type {_JSON_TYPE[kind]!r}")
    if call.name == "refund_order" and not problems:
        if not _ORDER_ID.search(arguments["order_id"]):
            problems.append(f"order_id: {arguments['order_id']!r} does not match {_ORDER_ID.pattern!r}")
        if arguments["amount_cents"] < 1:
            problems.append(f"amount_cents: {arguments['amount_cents']!r} is less than the minimum of 1")
    return f"{call.name} arguments rejected: " + "; ".join(problems) if problems else None


def judge_call(call: Call, gate: Callable[[Any], Verdict]) -> tuple[str, str]:
    """``(kind, reason)``: ``invalid`` (contract broken), else the gate's ``allow``, ``denied`` or ``ask``."""
    reason = check_arguments(call)
    if reason is not None:
        return "invalid", reason
    verdict = gate(call)
    return ("denied" if verdict.kind == "deny" else verdict.kind), verdict.reason


def execute_call(call: Call, desk: SupportDesk) -> tuple[str, bool, str, Any]:
    """Run an allowed call's handler; an expected failure becomes an ``error`` observation."""
    try:
        result = desk.tools[call.name].handler(**call.arguments)  # type: ignore[arg-type]
    except _EXPECTED_ERRORS as exc:
        content = exc.args[0] if len(exc.args) == 1 and isinstance(exc.args[0], str) else str(exc)
        return call.call_id, False, "error", content
    return call.call_id, True, "result", result


def tool_message(observation: tuple[str, bool, str, Any]) -> dict[str, Any]:
    call_id, ok, kind, content = observation
    content = json.dumps({"ok": ok, "kind": kind, "content": content})
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def fingerprint(call: Call) -> str:
    return f"{call.name}:{json.dumps(call.arguments, sort_keys=True, separators=(',', ':'))}"


def not_run(call: Call, stop: str) -> tuple[str, bool, str, Any]:
    return call.call_id, False, "denied", f"not run: the run stopped ({stop})"


def tool_budget_spent(attempts: int, limits: Limits) -> bool:
    return limits.max_tool_calls is not None and attempts >= limits.max_tool_calls
