"""
The refund limit as configuration the gate reads at call time, not a constant and not a line of the prompt.

Moving the support desk's 5000-cent rule into the system prompt, so that it
can change without a deploy, gives up the rule: a prompt is advice to the
model, and the over-reaching model of :mod:`agent_fsm.examples.demo`, told
the limit in its prompt with no gate to enforce it, still refunds 9999 cents;
the same model under a gate is denied and corrects itself to 4999. The
compromise keeps the rule in the gate and its number out of the code: the
limit lives in a small JSON file (``{"refund_limit_cents": 5000}``) that
:func:`configured_refund_gate` reads each time it judges a refund, so an
edit applies to the next call, with no restart and no new agent.

The gate fails closed: a missing, unreadable or malformed file denies every
refund, saying why. The risk this design keeps is stale configuration: a
refund judged a moment before an edit ran under the old limit, and a file
nobody updated keeps an outdated policy in force. Each verdict therefore names
the limit it applied and the first characters of the file's SHA-256, so the
run's transcript says which configuration let each refund through.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from agent_fsm.engine import Gate, ToolCall, Verdict

__all__ = ["PROMPT_RULE", "configured_refund_gate", "read_limit", "write_limit"]

PROMPT_RULE = "Never refund more than 5000 cents without a manager's approval."
"""The rule as a prompt would state it: what the model is told, and nothing enforces."""

_KEY = "refund_limit_cents"


def _checked(value: object) -> int:
    if type(value) is not int or value < 0:
        raise ValueError(f"{_KEY} must be a whole number of cents, 0 or more; got {value!r}")
    return value


def read_limit(path: str | Path) -> tuple[int, str]:
    """
    The limit in cents the file at ``path`` holds, and the SHA-256 of the file's bytes.

    Raises:
        ValueError: the file cannot be read or is not JSON, or holds no non-negative int under ``refund_limit_cents``.
    """
    try:
        raw = Path(path).read_bytes()
        data: Any = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise ValueError(f"the refund limit file {str(path)!r} cannot be read: {exc}") from None
    value = data.get(_KEY) if isinstance(data, dict) else None
    return _checked(value), hashlib.sha256(raw).hexdigest()


def write_limit(path: str | Path, cents: int) -> str:
    """
    Write ``cents`` as the limit, whole or not at all (a reader never sees half a file); return the file's SHA-256.

    Raises:
        ValueError: ``cents`` is not a non-negative int (nothing is written).
    """
    raw = json.dumps({_KEY: _checked(cents)}).encode()
    target = Path(path)
    partial = target.with_name(f".{target.name}.partial")
    partial.write_bytes(raw)
    os.replace(partial, target)
    return hashlib.sha256(raw).hexdigest()


def configured_refund_gate(path: str | Path) -> Gate:
    """A gate that reads the refund limit from ``path`` each time it judges a refund; other tools pass."""

    def refund_within_configured_limit(call: ToolCall) -> Verdict:
        if call.name != "refund_order":
            return Verdict.allow("not a refund")
        try:
            limit, digest = read_limit(path)
        except ValueError as exc:
            return Verdict.deny(f"no refund until the limit is fixed: {exc}")
        amount = call.arguments["amount_cents"]  # type: ignore[index]
        where = f"limit file sha256 {digest[:12]}"
        if amount > limit:
            return Verdict.deny(f"refunds above {limit} cents need a manager ({where})")
        return Verdict.allow(f"within the {limit}-cent limit ({where})")

    return refund_within_configured_limit
