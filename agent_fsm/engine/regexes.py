"""
Regular expressions for JSON Schema ``pattern``: linear time, with JSON Schema's meaning.

A tool schema's ``pattern`` runs on text the model wrote. Python's ``re``
backtracks: ``^(a+)+$`` takes seconds on forty characters, so a pattern is a
way for hostile input to stall the engine. Patterns here run on RE2, whose
matching time is linear in the input; a pattern that needs backtracking
(look-around, back-references) is refused when the tool is defined.

JSON Schema patterns are ECMA-262 regular expressions, where ``\\d`` and ``\\w``
are ASCII (Python's ``re`` would let ``"٣"`` pass ``^\\d+$``) and ``$`` ends the
text (Python's would also accept a trailing newline). RE2 agrees on those;
the translation below covers where it does not: ``\\s`` (ECMA's includes
Unicode spaces), ``.`` (ECMA's stops at ``\\r``, U+2028 and U+2029 too) and
``\\uXXXX`` escapes.

RE2 is loaded with the first pattern compiled, so importing the engine does not load it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

__all__ = ["PatternError", "compile_pattern", "translate"]

# ECMA-262 WhiteSpace and LineTerminator, the members of \s.
_ECMA_SPACE = r"\t\n\x{0b}\f\r \x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}\x{feff}"
_ECMA_DOT = r"[^\n\r\x{2028}\x{2029}]"
_HEX = frozenset("0123456789abcdefABCDEF")


class PatternError(ValueError):
    """A pattern that RE2 cannot run (a syntax error, or a feature that needs backtracking)."""


def translate(pattern: str) -> str:
    """
    ``pattern`` (ECMA-262, as JSON Schema writes it) rewritten in RE2 syntax with the same meaning.

    Raises:
        PatternError: an escape this translation cannot carry over (``\\S`` inside a class).
    """
    out: list[str] = []
    in_class = False
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            if nxt == "s":
                out.append(_ECMA_SPACE if in_class else f"[{_ECMA_SPACE}]")
            elif nxt == "S":
                if in_class:
                    raise PatternError(f"\\S inside a character class is not supported: {pattern!r}")
                out.append(f"[^{_ECMA_SPACE}]")
            elif nxt == "u" and pattern[i + 2 : i + 3] == "{":
                end = pattern.find("}", i + 3)
                if end < 0:
                    raise PatternError(f"unterminated \\u{{...}} escape in {pattern!r}")
                out.append(f"\\x{{{pattern[i + 3 : end]}}}")
                i = end + 1
                continue
            elif nxt == "u" and len(pattern) >= i + 6 and set(pattern[i + 2 : i + 6]) <= _HEX:
                out.append(f"\\x{{{pattern[i + 2 : i + 6]}}}")
                i += 6
                continue
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if char == "]":
                in_class = False
        elif char == "[":
            in_class = True
            opening = "[^" if pattern[i + 1 : i + 2] == "^" else "["
            if pattern[i + len(opening) : i + len(opening) + 1] == "]":
                # ECMA-262 reads "[]" as matching nothing and "[^]" as anything; RE2 reads a literal "]".
                raise PatternError(f"an empty character class ({opening}]) is not supported: {pattern!r}")
            out.append(opening)
            i += len(opening)
            continue
        elif char == ".":
            out.append(_ECMA_DOT)
            i += 1
            continue
        out.append(char)
        i += 1
    return "".join(out)


@functools.cache
def _engine() -> tuple[Any, Any, Any]:
    # (RE2's constructor, its options, the unanchored mode), loaded with the first pattern.
    from re2 import _re2

    options = _re2.RE2.Options()
    options.log_errors = False  # RE2 would print every refused pattern to stderr
    options.never_capture = True  # only "does it match" is asked; no group offsets to track
    return _re2.RE2, options, _re2.RE2.Anchor.UNANCHORED


@functools.lru_cache(maxsize=4096)
def compile_pattern(pattern: str) -> Callable[[str], bool]:
    """
    A predicate ``search(text) -> bool`` for ``pattern``, as JSON Schema's ``pattern`` applies it.

    The match is unanchored (``pattern`` finds its match anywhere unless it
    anchors itself) and takes time linear in ``len(text)``.

    Raises:
        PatternError: RE2 cannot compile it; the message says why.
    """
    re2, options, unanchored = _engine()
    regexp = re2(translate(pattern).encode("utf-8"), options)
    if not regexp.ok():
        why = regexp.error().decode("utf-8", "replace")
        raise PatternError(
            f"pattern {pattern!r} is refused by the linear-time regex engine: {why}"
            " (look-around and back-references need backtracking, so they are not supported)"
        )

    def search(text: str) -> bool:
        try:
            data = text.encode()
        except UnicodeEncodeError:  # a lone surrogate, as JSON's "\ud800" makes; RE2 sees its bytes
            data = text.encode("utf-8", "surrogatepass")
        return bool(regexp.Match(unanchored, data, 0, len(data))[0][0] >= 0)

    return search
