"""
Gates: policy applied to the exact arguments immediately before an effect.

A gate is any callable from a validated :class:`ToolCall` to a
:class:`Verdict` (or a plain ``(allowed, reason)`` tuple). It decides whether
*this* call may run *now*; it never sees the model's prose, only the call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Union

import attrs

from agent_fsm.engine._errors import GateError
from agent_fsm.engine._tools import Registry, ToolCall

__all__ = ["Gate", "Verdict", "allow_all", "as_verdict", "ask_for_effects", "deny_effects"]


# --- gates ---

VerdictKind = Literal["allow", "deny", "ask"]


@attrs.frozen
class Verdict:
    """
    A gate's decision: ``allow``, ``deny`` (the reason goes back to the model),
    or ``ask`` (the run pauses in ``awaiting_approval`` until a human decides).
    """

    kind: VerdictKind = attrs.field(validator=attrs.validators.in_(("allow", "deny", "ask")))
    reason: str = attrs.field(default="", validator=attrs.validators.instance_of(str))

    @classmethod
    def allow(cls, reason: str = "allowed") -> Verdict:
        return cls("allow", reason)

    @classmethod
    def deny(cls, reason: str) -> Verdict:
        return cls("deny", reason)

    @classmethod
    def ask(cls, reason: str) -> Verdict:
        return cls("ask", reason)


Gate = Callable[[ToolCall], Union[Verdict, "tuple[bool, str]"]]
"""A gate: a validated call in, a :class:`Verdict` (or ``(allowed, reason)``) out, consulted just before the effect."""


def as_verdict(decision: object) -> Verdict:
    """
    Read a gate's return value as a Verdict.

    Raises:
        GateError: it is neither a Verdict nor an ``(allowed: bool, reason: str)`` tuple.
            A gate that answers something else is a bug; guessing would be unsafe.
    """
    if isinstance(decision, Verdict):
        # attrs validators run at construction only; a Verdict built around them is still checked here
        if decision.kind not in ("allow", "deny", "ask") or not isinstance(decision.reason, str):
            raise GateError(
                f"a Verdict needs a kind of allow, deny or ask and a reason string; got {decision!r}"
                f" (reason is a {type(decision.reason).__name__})"
            )
        return decision
    if (
        isinstance(decision, tuple)
        and len(decision) == 2
        and isinstance(decision[0], bool)
        and isinstance(decision[1], str)
    ):
        return Verdict("allow" if decision[0] else "deny", decision[1])
    raise GateError(f"a gate must return a Verdict or (bool, str); got {decision!r}")


def allow_all(call: ToolCall) -> Verdict:
    """Let every call through: having no policy, stated openly."""
    return Verdict.allow("no policy configured")


NO_GATE_REASON = "no gate authorised effects: {name} changes the world and this run has no gate allowing it"


def deny_effects(tools: Registry) -> Gate:
    """
    The secure default used when ``gate=None``: reads run, effectful tools are refused.
    """

    def gate(call: ToolCall) -> Verdict:
        if tools[call.name].effectful:
            return Verdict.deny(NO_GATE_REASON.format(name=call.name))
        return Verdict.allow("effect-free tool")

    return gate


def ask_for_effects(tools: Registry, reason: str = "needs a human's approval") -> Gate:
    """Reads run; every effectful call pauses the run for a human's approval."""

    def gate(call: ToolCall) -> Verdict:
        if tools[call.name].effectful:
            return Verdict.ask(f"{call.name} {reason}")
        return Verdict.allow("effect-free tool")

    return gate
