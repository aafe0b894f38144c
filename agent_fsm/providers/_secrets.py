"""
Keeping an API key out of every message: the whole key, and any echo of part of it.
"""

from __future__ import annotations

import re

__all__ = ["echo_pieces", "redact"]

# Pieces of this length shared with the key mark an echo of it (a prefix, a suffix, a masked form).
_ECHO = 6
_TOKEN = re.compile(r"[^\s'\"`,;:()\[\]{}<>]+")


def echo_pieces(key: str | None) -> frozenset[str]:
    """Every run of six characters of ``key`` (none for a key too short to tell from words)."""
    if key is None or len(key) < 2 * _ECHO:
        return frozenset()
    return frozenset(key[i : i + _ECHO] for i in range(len(key) - _ECHO + 1))


def redact(text: str, key: str | None, echoes: frozenset[str]) -> str:
    """
    ``text`` with ``key`` blanked out, wherever and however partly it appears.

    The whole key is replaced, and so is every word that shares six
    characters in a row with it (``echoes``, from :func:`echo_pieces`):
    servers echo keys truncated or masked (``sk-proj-****abcd``), and httpx
    quotes an illegal header byte-escaped.
    """
    if not key:
        return text
    text = text.replace(key, "[redacted]")
    if not echoes:
        return text

    def scrub(match: re.Match[str]) -> str:
        word = match.group(0)
        pieces = (word[i : i + _ECHO] for i in range(len(word) - _ECHO + 1))
        return "[redacted]" if any(piece in echoes for piece in pieces) else word

    return _TOKEN.sub(scrub, text)
