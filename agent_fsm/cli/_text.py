"""
Text the command line prints: any Unicode in, printable text out.

Model replies, traces and specs are outside text. A lone surrogate
(``"\\ud800"``, which JSON can carry) cannot be encoded to UTF-8 and would
end the command with a traceback; it is shown as its escape instead, and so
is any other character the terminal's encoding cannot take.
"""

from __future__ import annotations

import sys

__all__ = ["clean"]


def clean(text: str, encoding: str | None = None) -> str:
    """``text`` with every character ``encoding`` (default: standard output's, else UTF-8) cannot take escaped."""
    target = encoding or getattr(sys.stdout, "encoding", None) or "utf-8"
    try:
        text.encode(target)
    except (UnicodeEncodeError, LookupError):
        try:
            return text.encode(target, "backslashreplace").decode(target)
        except LookupError:
            return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
