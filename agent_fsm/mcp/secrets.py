"""
Secrets a server was given (its ``env``, its HTTP ``headers``, a URL's credentials), kept out of what comes back.

A server sees its environment and may echo it: in a result, an error, a
progress message, a tool's description. Everything the adapter hands to the
engine passes through :meth:`Secrets.redact` first, so no value given to the
server as a secret reaches the transcript, the events, a saved state or an
exception. Values shorter than :data:`MIN_SECRET` characters are not
redacted: they cannot be credentials, and removing such common strings
(``"1"``, ``"true"``) from every result would corrupt honest output.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

__all__ = ["MIN_SECRET", "REDACTED", "Secrets"]

MIN_SECRET = 8
"""The shortest value treated as a secret."""

REDACTED = "[redacted]"
"""What stands where a secret was."""


class Secrets:
    """The secret values of one server, matched at once by one alternation (longest first)."""

    __slots__ = ("_pattern",)

    def __init__(self, values: Iterable[str]) -> None:
        found = {v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET}
        # As a JSON string would spell them, too: a result is redacted in its JSON text (see results.answer_of).
        found |= {json.dumps(v, ensure_ascii=False)[1:-1] for v in found}
        kept = sorted(found, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, kept))) if kept else None

    @classmethod
    def of(
        cls, env: Mapping[str, str] | None = None, headers: Mapping[str, str] | None = None, url: str | None = None
    ) -> Secrets:
        """The values of ``env`` and ``headers`` (and of each header's credential part), and a URL's user info."""
        values: list[str] = [*(env or {}).values()]
        for value in (headers or {}).values():
            values.append(value)
            values.extend(value.split(None, 1)[1:])  # "Bearer <token>": the token alone is a secret too
        if url:
            parts = urlsplit(url)
            values.extend(v for v in (parts.password, parts.username) if v)
            values.extend(p.split("=", 1)[1] for p in parts.query.split("&") if "=" in p)
        return cls(values)

    def __bool__(self) -> bool:
        return self._pattern is not None

    def text(self, value: str) -> str:
        """``value`` with every secret replaced by :data:`REDACTED`."""
        return value if self._pattern is None else self._pattern.sub(REDACTED, value)

    def redact(self, value: Any) -> Any:
        """JSON data with every secret replaced in its strings (keys too); other values as they are."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.redact(v) for v in value]
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.redact(v) for k, v in value.items()}
        return value
