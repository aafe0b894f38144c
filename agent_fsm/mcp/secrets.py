"""
Secrets a server was given (its ``env``, its HTTP ``headers``, a URL's credentials), kept out of what comes back.

A server sees its environment and may echo it: in a result, an error, a
progress message, a tool's description. Everything the adapter hands to the
engine passes through :meth:`Secrets.redact` first, so no value given to the
server as a secret reaches the transcript, the events, a saved state or an
exception. Values shorter than :data:`MIN_SECRET` characters are not
redacted: they cannot be credentials, and removing such common strings
(``"1"``, ``"true"``) from every result would corrupt honest output.

Pieces count too: any run of :data:`MIN_SECRET` or more characters of a
secret is redacted, not only the whole value. Texts the adapter does not
write itself get cut (an error to 2,000 characters, a log line wrapped by
the server's logger, a value an SDK message abbreviates to its head and
tail); a piece of a key is still most of a key. The price: honest text that
shares 8 characters in a row with a secret (a ``sk-live-`` prefix, a long
path given in ``env``) shows :data:`REDACTED` there.

Finding the runs is linear in the text: one scan for any 8-character piece
(a regex alternation of literals), then, at each hit, a galloping search for
how far the run goes (a run is never longer than the longest secret).
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
    """The secret values of one server, and every piece of them :data:`MIN_SECRET` characters long."""

    __slots__ = ("__weakref__", "_pieces", "_values")

    def __init__(self, values: Iterable[str]) -> None:
        found = {v for v in values if isinstance(v, str) and len(v) >= MIN_SECRET}
        # As a JSON string would spell them, too: a result is redacted in its JSON text (see results.answer_of).
        found |= {json.dumps(v, ensure_ascii=False)[1:-1] for v in found}
        self._values = tuple(sorted(found, key=len, reverse=True))
        pieces = sorted({v[i : i + MIN_SECRET] for v in found for i in range(len(v) - MIN_SECRET + 1)})
        self._pieces = re.compile("|".join(map(re.escape, pieces))) if pieces else None

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
        return self._pieces is not None

    def _inside(self, text: str) -> bool:
        return any(text in value for value in self._values)

    def _run_end(self, text: str, start: int, end: int) -> int:
        # text[start:end] is a piece of a secret: where does the longest piece starting at start end? A prefix of a
        # piece is a piece, so gallop forward, then bisect (a run is never longer than the longest secret).
        limit = min(len(text), start + len(self._values[0]))
        low, step = end, 1
        while low + step <= limit and self._inside(text[start : low + step]):
            low, step = low + step, step * 2
        high = min(low + step - 1, limit)
        while low < high:
            middle = (low + high + 1) // 2
            if self._inside(text[start:middle]):
                low = middle
            else:
                high = middle - 1
        return low

    def text(self, value: str) -> str:
        """``value`` with every secret, and every run of 8 characters or more of one, replaced by :data:`REDACTED`."""
        if self._pieces is None:
            return value
        parts: list[str] = []
        at = 0
        found = self._pieces.search(value)
        while found is not None:
            start = found.start()
            end = self._run_end(value, start, found.end())
            parts += [value[at:start], REDACTED]
            at = end
            found = self._pieces.search(value, end)
        if not parts:
            return value
        parts.append(value[at:])
        return "".join(parts)

    def redact(self, value: Any) -> Any:
        """JSON data with every secret replaced in its strings (keys too); other values as they are."""
        if self._pieces is None:
            return value
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.redact(v) for v in value]
        if isinstance(value, dict):
            return {self.text(k) if isinstance(k, str) else k: self.redact(v) for k, v in value.items()}
        return value
