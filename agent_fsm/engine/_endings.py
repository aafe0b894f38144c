"""
A world's own endings, declared on top of the engine's typed stops.

The engine stops for reasons it can see (:class:`agent_fsm.Stop`): an answer
was accepted or refused, a budget was spent, the same refusal came back. A
world usually knows more: the doc lookup's refused answer is an
``unread_citation``, the retrieval controller's is a ``duplicate_query``. A
world says so with data, never by having callers read reason strings:

* an answer check (or a decision policy) returns ``Ending(code, reason)`` to
  refuse an answer with a code, or ``Ending(code, reason, accept=True)`` to
  accept it and still say which kind of answer it was (``missing_evidence``);
* ``endings=`` on :func:`agent_fsm.run` names the code of an engine stop, as a
  ``{Stop: code}`` table or a function ``(stop, state) -> code | None``.

The code lands in ``RunState.code`` (so it survives a save and load) and in
``RunResult.code``, which is always set: the stop's own value when the world
declared nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from agent_fsm.engine._limits import Stop

if TYPE_CHECKING:
    from agent_fsm.engine._state import RunState

__all__ = ["CODE_PATTERN", "Ending", "EndingRule", "code_for"]


# --- endings ---

CODE_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,63}")
"""What a code looks like: a lowercase identifier of at most 64 characters (it is a name, not prose)."""


def _code(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or CODE_PATTERN.fullmatch(value) is None:
        raise ValueError(
            f"an ending code must be a lowercase identifier like 'unread_citation' "
            f"(letters, digits, _; at most 64); got {value!r}"
        )


@attrs.frozen
class Ending:
    """
    A world's ending: a ``code`` callers branch on, and the ``reason`` in words.

    Returned by an answer check, it refuses the answer (the run stops
    ``answer_rejected``) unless ``accept`` is true, in which case the answer
    stands (``answered``) and the code says what kind of answer it was.

    Raises:
        ValueError: ``code`` is not a lowercase identifier.
    """

    code: str = attrs.field(validator=_code)
    reason: str = attrs.field(default="", converter=str)
    accept: bool = attrs.field(default=False, validator=attrs.validators.instance_of(bool))


EndingRule = Mapping[Stop, str] | Callable[[Stop, "RunState"], "str | None"]
"""How a world names the code of an engine stop: a ``{Stop: code}`` table, or ``(stop, state) -> code | None``."""


# A reply the engine refused as an answer because of how the provider said it ended.
_FINISH_CODES = {"refusal": "refusal", "content_filter": "content_filter", "length": "truncated"}


def code_for(rule: EndingRule | None, stop: Stop, state: RunState) -> str:
    """
    The code of a run that stopped ``stop``: the one already recorded, else the rule's, else the engine's own.

    The engine's own code is the stop's value, except for an answer refused
    because of how the reply ended: ``refusal``, ``content_filter`` or
    ``truncated`` (cut off at the output token limit).

    Raises:
        ValueError: the rule named something that is not a code (a programmer error, so it is loud).
    """
    if state.code is not None:
        return state.code
    code: object = None if rule is None else rule.get(stop) if isinstance(rule, Mapping) else rule(stop, state)
    if code is None:
        own = _FINISH_CODES.get(state.finish or "") if stop is Stop.ANSWER_REJECTED else None
        return own or str(stop.value)
    if not isinstance(code, str) or CODE_PATTERN.fullmatch(code) is None:
        raise ValueError(f"the ending rule named {code!r} for {stop.value}; expected a lowercase identifier")
    named: str = code
    return named
