"""
A narrow decision interface, ``decide(task, observations) -> dict``, adapted onto the engine's Model protocol.

A policy written against this interface never sees the wire format. The
adapter reads the task (the newest user message) and this run's
observations from the transcript, calls ``decide``, and turns the returned
decision into one assistant message. Nothing is validated twice: every
decision goes through the check the engine already owns.

How a decision maps onto the engine::

    {"action": <tool>, **arguments}     -> one tool call <tool>(arguments); the engine validates it
                                           against the tool's JSON Schema, then the gate judges it
    {"action": <final>, **fields}       -> a plain answer whose text is the JSON object ``fields``;
                                           ``FinalDecision.check`` (the run's answer check) validates it
    anything else (not an object, no     -> a tool call whose arguments are not a JSON object; the
    string action, not JSON data)           engine refuses it ``invalid`` and quotes the adapter's reason

So an unknown action (``"shell"``) is an unknown tool, an extra field is an
``additionalProperties: false`` violation, a non-string or oversized value is
a ``type``/``maxLength`` violation: each becomes an ``invalid`` observation
before any handler runs and spends no tool budget. The policy sees that
observation and may correct itself; the same refused decision coming back
``Limits.repeated_denials`` times ends the run ``no_progress`` (set it to 1 to
stop on the first bad decision). A bad final decision ends the run
``answer_rejected``.

What ``decide`` raises is sorted at one line, :data:`DECISION_ERRORS`:

* ``ValueError``, ``TypeError``, ``KeyError`` (a model-backed policy whose
  JSON does not parse, a reply missing a field) are a bad decision like any
  other: an ``invalid`` observation quoting the error, counted by the
  no-progress rule (code ``invalid_decision`` in the doc lookup);
* an ``OSError`` (the remote model cannot be reached) ends the run
  ``provider_error``; no decision is made up;
* anything else (``AttributeError``, ``NameError``, ``AssertionError``, ...) is
  a bug in the policy's own code and stays loud: :class:`agent_fsm.RunError`
  with the run state attached. The callable is trusted application code, and
  this adapter is not a sandbox for it.

``decide`` may also return an :class:`agent_fsm.Ending` to stop the run with one
of the world's codes: it becomes a final decision ``{"ending": code,
"reason": ...}`` that the answer check of ``FinalDecision.check`` refuses
with that code. Only codes listed in ``FinalDecision.endings`` are accepted,
so a reply cannot invent an ending the world never declared.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from agent_fsm.engine._endings import Ending
from agent_fsm.engine._messages import answer_message, assistant_text
from agent_fsm.engine._run import AnswerCheck
from agent_fsm.engine._state import RunState
from agent_fsm.engine._tools import ToolSpec

__all__ = [
    "DECISION_ERRORS",
    "Decide",
    "DecisionPolicy",
    "FinalCheck",
    "FinalDecision",
    "conversation_of",
    "named",
    "observations_of",
    "string_fields",
    "task_of",
]


# --- policy ---

DECISION_ERRORS: tuple[type[Exception], ...] = (ValueError, TypeError, KeyError)
"""What ``decide`` may raise for a bad decision (an ``invalid`` observation); others but ``OSError`` are bugs."""

Decide = Callable[..., "Mapping[str, Any] | Ending"]
"""``decide(task, observations) -> decision``; with ``conversation=True`` also a ``conversation=`` keyword."""

FinalCheck = Callable[[dict[str, Any], RunState], "str | Ending | None"]
"""Judges a well-formed final decision's fields: ``None`` accepts, a reason refuses."""


def string_fields(fields: Mapping[str, int], *, may_be_empty: Sequence[str] = ()) -> dict[str, Any]:
    """
    A JSON Schema for an object of exactly these string fields, each at most ``fields[name]`` characters.

    Every field is required and no other is allowed. A field not named in
    ``may_be_empty`` must contain a non-blank character, so ``"  "`` is as
    refused as a missing value.
    """
    properties: dict[str, Any] = {}
    for name, max_length in fields.items():
        schema: dict[str, Any] = {"type": "string", "maxLength": max_length}
        if name not in may_be_empty:
            schema["pattern"] = r"\S"
        properties[name] = schema
    return {"type": "object", "properties": properties, "required": list(fields), "additionalProperties": False}


def _as_codes(codes: Sequence[str]) -> tuple[str, ...]:
    return tuple(codes)


def _no_handler(**_: Any) -> None:  # pragma: no cover - a final decision is never dispatched
    raise AssertionError("a final decision is checked, never executed")


@attrs.frozen
class FinalDecision:
    """
    The action that ends a run, and the exact shape its fields must have.

    ``schema`` is a JSON Schema object (or the ``{field: type}`` shorthand)
    checked with the same validator as tool arguments. The answer text of a
    final decision is its fields as a JSON object, so the answer check, the
    transcript and a saved run all read the same data.
    """

    action: str = "final"
    schema: Mapping[str, Any] = attrs.field(factory=lambda: string_fields({"answer": 2000}))
    # The world's codes a policy may stop with (decide returning Ending(code, reason)).
    endings: tuple[str, ...] = attrs.field(default=(), converter=_as_codes)
    _contract: ToolSpec = attrs.field(init=False, repr=False, eq=False)

    def __attrs_post_init__(self) -> None:
        contract = ToolSpec(f"the {self.action!r} decision", self.schema, _no_handler)
        object.__setattr__(self, "_contract", contract)

    def render(self, fields: Mapping[str, Any]) -> str:
        """The answer text for ``fields``."""
        return json.dumps(dict(fields), ensure_ascii=False)

    def read(self, text: str) -> tuple[dict[str, Any] | None, str | None]:
        """Parse and validate an answer text: ``(fields, None)`` or ``(None, reason)``."""
        try:
            fields = json.loads(text)
        except ValueError:
            return None, f"a {self.action!r} decision must be a JSON object; got {text[:80]!r}"
        if not isinstance(fields, dict):
            return None, f"a {self.action!r} decision must be a JSON object; got {type(fields).__name__}"
        problems = self._contract.errors(fields)
        if problems:
            return None, f"{self.action} decision rejected: " + "; ".join(problems)
        return fields, None

    def render_ending(self, ending: Ending) -> str:
        """
        The answer text of a policy's decision to stop with ``ending``.

        Raises:
            ValueError: the code is not one of :attr:`endings` (a bug in the policy, so it is loud).
        """
        if ending.code not in self.endings:
            raise ValueError(f"the policy stopped with {ending.code!r}, which is not a declared ending {self.endings}")
        return json.dumps({"ending": ending.code, "reason": ending.reason}, ensure_ascii=False)

    def ending_of(self, text: str) -> Ending | None:
        """The declared :class:`Ending` an answer text carries, if it is one (see :meth:`render_ending`)."""
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if not isinstance(data, dict) or set(data) != {"ending", "reason"} or data["ending"] not in self.endings:
            return None
        return Ending(data["ending"], str(data["reason"]))

    def check(self, then: FinalCheck | None = None) -> AnswerCheck:
        """An answer check: a declared ending refuses with its code; else the decision must be well formed and pass."""

        def answer_check(text: str, state: RunState) -> str | Ending | None:
            ending = self.ending_of(text)
            if ending is not None:
                return ending
            fields, reason = self.read(text)
            if fields is None:
                return reason
            return None if then is None else then(fields, state)

        return answer_check


def task_of(messages: Sequence[Mapping[str, Any]]) -> str:
    """The task: the text of the newest user message (``""`` when there is none)."""
    for message in reversed(messages):
        if message.get("role") == "user":
            return assistant_text(message) or ""
    return ""


def _since_task(messages: Sequence[Mapping[str, Any]]) -> Sequence[Mapping[str, Any]]:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return messages[index + 1 :]
    return messages


def _arguments(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    try:
        return json.loads(raw)
    except ValueError:
        return raw


def observations_of(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """
    This run's observations, oldest first, as plain data a policy can read.

    Only messages after the newest user message count: earlier turns of a
    conversation are context, not observations of this task. Each entry is
    ``{"call_id", "action", "arguments", "ok", "kind", "result"}``, correlated to its
    proposal by call id.
    """
    proposals: dict[Any, tuple[str, Any]] = {}
    found: list[dict[str, Any]] = []
    for message in _since_task(messages):
        for item in message.get("tool_calls") or ():
            function = item.get("function") or {}
            proposals[item.get("id")] = (function.get("name", ""), _arguments(function.get("arguments")))
        if message.get("role") != "tool":
            continue
        action, arguments = proposals.get(message.get("tool_call_id"), ("", None))
        content = message.get("content")
        if type(content) is list:  # a result with images or files: its text part (their placeholders)
            content = assistant_text(message)
        try:
            body = json.loads(content or "")
        except (ValueError, TypeError):
            body = None
        if not isinstance(body, dict):
            body = {"ok": False, "kind": "error", "content": message.get("content")}
        found.append(
            {
                "call_id": message.get("tool_call_id"),
                "action": action,
                "arguments": arguments,
                "ok": body.get("ok") is True,
                "kind": body.get("kind"),
                "result": body.get("content"),
            }
        )
    return found


def conversation_of(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The earlier conversation: user and assistant texts before the newest user message."""
    task_index = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "user"), 0)
    return [
        {"role": m["role"], "content": assistant_text(m) or ""}
        for m in messages[:task_index]
        if m.get("role") in ("user", "assistant") and not m.get("tool_calls")
    ]


def _refused(call_id: str, action: str, reason: str) -> dict[str, Any]:
    # Arguments that are not a JSON object are refused by the engine whatever
    # the registry holds, and the refusal quotes them: the reason reaches the policy.
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": action, "arguments": f"<{reason}>"}}],
    }


class DecisionPolicy:
    """
    A Model that asks ``decide(task, observations)`` for one decision per turn.

    ``final`` names the action that ends the run and the shape of its
    fields; pair the policy with ``final.check(...)`` as the run's answer
    check. With ``conversation=True`` ``decide`` also receives the earlier
    user/assistant turns, so a later "close that one" can find what it refers to.
    """

    def __init__(self, decide: Decide, *, final: FinalDecision | None = None, conversation: bool = False) -> None:
        if not callable(decide):
            raise TypeError(f"decide must be callable, got {decide!r}")
        self.decide = decide
        self.final = final if final is not None else FinalDecision()
        self.conversation = conversation

    def __repr__(self) -> str:
        return f"DecisionPolicy({getattr(self.decide, '__name__', self.decide)!r}, final={self.final!r})"

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        """
        Ask for the next decision and put it on the wire.

        A :data:`DECISION_ERRORS` exception from ``decide`` becomes a refused
        decision (an ``invalid`` observation); an ``OSError`` propagates (the
        engine ends the run ``provider_error``); anything else is a bug and
        propagates too (the engine raises :class:`agent_fsm.RunError`).
        """
        since = _since_task(messages)
        call_id = f"decision_{sum(1 for m in since if m.get('role') == 'assistant') + 1}"
        observations = observations_of(messages)
        try:
            if self.conversation:
                decision = self.decide(task_of(messages), observations, conversation=conversation_of(messages))
            else:
                decision = self.decide(task_of(messages), observations)
        except OSError:
            raise
        except DECISION_ERRORS as exc:
            return _refused(call_id, "", f"the policy raised {type(exc).__name__}: {exc}"[:500])
        return self.to_message(decision, call_id)

    def to_message(self, decision: Any, call_id: str) -> dict[str, Any]:
        """The assistant message for one decision (see the module docstring for the mapping)."""
        if isinstance(decision, Ending):
            return answer_message(self.final.render_ending(decision))
        if not isinstance(decision, Mapping):
            return _refused(call_id, "", f"a decision must be an object, got {type(decision).__name__}")
        action = decision.get("action")
        if not isinstance(action, str) or not action:
            return _refused(call_id, "", f"a decision needs a non-empty string 'action', got {action!r}")
        fields = {k: v for k, v in decision.items() if k != "action"}
        try:
            text = json.dumps(fields, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            return _refused(call_id, action, f"the {action!r} decision is not JSON data: {exc}")
        if action == self.final.action:
            return answer_message(self.final.render(fields))
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": action, "arguments": text}}],
        }


def named(decide: Decide, **options: Any) -> Callable[[], DecisionPolicy]:
    """A zero-argument factory of ``DecisionPolicy(decide, **options)``, as :attr:`Environment.models` holds."""
    return lambda: DecisionPolicy(decide, **options)
