"""
A meter: the spend of each control policy, counted in units shared by every pattern.

Comparing workflow patterns is only fair when each is charged the same way
and crosses the same effect boundary. The meter does both: every model call
goes through :meth:`Meter.ask` (one call, the estimated size of the prompt
sent), and every tool proposal goes through :meth:`Meter.attempt`, which is
:func:`agent_fsm.engine._boundary.attempt` (validation, the gate, the handler) plus
one tool call charged, whether the call ran or was refused. Differences
between patterns can then only stem from how each steers.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from agent_fsm import Agent
from agent_fsm.engine import (
    Gate,
    Model,
    ModelReply,
    Observation,
    Registry,
    Steps,
    TokenEstimator,
    ToolCall,
    attempt,
    attempting,
    estimate_tokens,
    is_awaitable,
    wrapped_estimator,
)

__all__ = ["Meter", "Spend"]


@attrs.frozen
class Spend:
    """What one run spent: model calls, tool calls (refused ones included), estimated prompt tokens."""

    model_calls: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0


@attrs.define
class Meter:
    """
    Charge model calls and tool proposals, and forward them.

    The prompt size charged for a model call is the estimate of every message
    and every tool declaration sent, measured as the run machine measures its
    own prompts; a provider's reported ``prompt_tokens`` replaces the estimate.
    Safe to share between threads (the parallel fan-out charges from workers).
    """

    estimator: TokenEstimator = estimate_tokens
    model_calls: int = 0
    tool_calls: int = 0
    prompt_tokens: int = 0
    _lock: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False, eq=False)

    def ask(
        self,
        model: Model,
        messages: Sequence[Mapping[str, Any]],
        declarations: Sequence[Mapping[str, Any]] = (),
    ) -> Any:
        """
        Charge one model call and make it; return the assistant message (a :class:`ModelReply` unwrapped).

        Exceptions from the model propagate; the caller decides what a failed
        call means (the patterns end ``provider_error`` on an ``OSError``).
        The call is charged even when it fails: the prompt was sent.
        """
        reply = self._call(model, messages, declarations)
        return reply.message if isinstance(reply, ModelReply) else reply

    async def aask(
        self,
        model: Model,
        messages: Sequence[Mapping[str, Any]],
        declarations: Sequence[Mapping[str, Any]] = (),
    ) -> Any:
        """
        :meth:`ask`, awaited: a model's ``achat`` is preferred, a ``blocking`` model's ``chat`` runs in a thread.
        """
        estimate = self._charge_call(messages, declarations)
        achat = getattr(model, "achat", None)
        if achat is not None:
            reply = achat(messages, declarations)
        elif getattr(model, "blocking", False):
            import asyncio  # only an async pattern needs it

            reply = asyncio.to_thread(model.chat, messages, declarations)
        else:
            reply = model.chat(messages, declarations)
        if is_awaitable(reply):
            reply = await reply
        self._adopt(reply, estimate)
        return reply.message if isinstance(reply, ModelReply) else reply

    def _charge_call(self, messages: Sequence[Mapping[str, Any]], declarations: Sequence[Mapping[str, Any]]) -> int:
        estimate = sum(self.estimator(m) for m in messages) + sum(self.estimator(d) for d in declarations)
        with self._lock:
            self.model_calls += 1
            self.prompt_tokens += estimate
        return estimate

    def _adopt(self, reply: Any, estimate: int) -> None:
        if isinstance(reply, ModelReply) and reply.prompt_tokens is not None:
            with self._lock:  # the provider counted this prompt: its figure replaces the estimate
                self.prompt_tokens += reply.prompt_tokens - estimate

    def _call(
        self, model: Model, messages: Sequence[Mapping[str, Any]], declarations: Sequence[Mapping[str, Any]]
    ) -> Any:
        estimate = self._charge_call(messages, declarations)
        reply = model.chat(messages, declarations)
        self._adopt(reply, estimate)
        return reply

    def attempt(self, call: ToolCall, tools: Registry, gate: Gate) -> Observation:
        """Count a tool call, then hand it to the effect boundary every pattern shares (:func:`agent_fsm.attempt`)."""
        with self._lock:
            self.tool_calls += 1
        return attempt(call, tools, gate)

    def attempting(self, call: ToolCall, tools: Registry, gate: Gate) -> Steps[Observation]:
        """
        :meth:`attempt` as driver steps (:mod:`agent_fsm.engine._steps`): an ``async`` gate or handler is awaited.

        The same boundary in the same order: validation, the gate (an
        ``ask`` refused, as there is no pause to offer), then the handler.
        """
        with self._lock:
            self.tool_calls += 1
        return (yield from attempting(call, tools, gate))

    def charge_attempts(self, observations: Iterable[Observation]) -> None:
        """
        Charge tool calls the run machine already carried across the boundary itself.

        The adaptive agent judges and executes inside :meth:`agent_fsm.Agent.run`
        (through the same :func:`agent_fsm.judge` and :func:`agent_fsm.execute`);
        each of its observations is one attempt, refused ones included.
        """
        count = sum(1 for _ in observations)
        with self._lock:
            self.tool_calls += count

    def metered(self, agent: Agent) -> Agent:
        """``agent`` with its model seen through this meter: every call its runs make is charged here."""
        return agent.replace(model=_MeteredModel(self, agent.model))

    def spend(self) -> Spend:
        """The figures so far, as a value."""
        with self._lock:
            return Spend(self.model_calls, self.tool_calls, self.prompt_tokens)


class _MeteredModel:
    """A model seen through a meter: same replies, every call charged."""

    __slots__ = ("_meter", "_model")

    def __init__(self, meter: Meter, model: Model) -> None:
        self._meter = meter
        self._model = model

    # The wrapped model's token estimate, so an agent given this measures prompts as it would the model.
    estimator = wrapped_estimator("_model")

    def __repr__(self) -> str:
        return f"{self._meter!r}.metered({self._model!r})"

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        # The reply is passed on as it came, so the run machine still sees a provider's usage figures.
        return self._meter._call(self._model, messages, tools)
