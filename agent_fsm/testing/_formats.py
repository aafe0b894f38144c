"""
Strings with meaning: JSON Schema ``format`` values, ASCII regexes, and the dates and lengths near a gate's constants.

Rationale: a gate compares meaningful values (a booking date that must be a
weekday, an email's domain, hours above a threshold), so a violation needs
arguments that are *real* values of their kind. Random text off a regex is
almost never a real date: ``^\\d{4}-\\d{2}-\\d{2}$`` matches ``0000-00-00``, and
in Python's ``re`` ``\\d`` also matches digits of other scripts. JSON Schema's
regex dialect is ECMA-262, where ``\\d``, ``\\w`` and ``\\s`` are ASCII, so
patterns are compiled with :data:`re.ASCII`; and a pattern that real dates
(times, emails, ...) satisfy is also fed real ones.
"""

from __future__ import annotations

import datetime as dt
import re
import string
from collections.abc import Callable, Mapping
from typing import Any

from hypothesis import strategies as st

__all__ = [
    "FORMATS",
    "ascii_pattern",
    "format_values",
    "is_format",
    "mostly",
    "formatted_like",
    "pattern_values",
    "string_lengths",
]

_UTC = dt.UTC
# Dates a booking, an invoice or a deadline plausibly names; near today's
# calendar rather than year 1 or 9999, where a gate's date arithmetic is not tested.
_FIRST_DAY = dt.date(2000, 1, 1)
_LAST_DAY = dt.date(2099, 12, 31)


def _dates() -> st.SearchStrategy[dt.date]:
    return st.dates(min_value=_FIRST_DAY, max_value=_LAST_DAY)


def _date_times() -> st.SearchStrategy[str]:
    moments = st.datetimes(
        min_value=dt.datetime(2000, 1, 1), max_value=dt.datetime(2099, 12, 31, 23, 59, 59), timezones=st.just(_UTC)
    )
    return moments.map(lambda moment: moment.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _times() -> st.SearchStrategy[str]:
    return st.times().map(lambda moment: moment.strftime("%H:%M:%SZ"))


_EMAILS = st.from_regex(
    re.compile(r"[a-z][a-z0-9._]{0,10}@(example|mail|corp)\.(com|org|net)", re.ASCII), fullmatch=True
)
_HOSTS = st.sampled_from(["example.com", "example.org", "docs.example.net", "localhost"])
_PATHS = st.lists(st.text(string.ascii_lowercase + string.digits, min_size=1, max_size=6), max_size=3).map("/".join)
_URIS = st.builds(
    lambda scheme, host, path: f"{scheme}://{host}/{path}", st.sampled_from(["https", "http"]), _HOSTS, _PATHS
)

FORMATS: Mapping[str, Callable[[], st.SearchStrategy[str]]] = {
    "date": lambda: _dates().map(dt.date.isoformat),
    "date-time": _date_times,
    "time": _times,
    "email": lambda: _EMAILS,
    "uri": lambda: _URIS,
    "uuid": lambda: st.uuids().map(str),
    "ipv4": lambda: st.ip_addresses(v=4).map(str),
}
"""The ``format`` values the kit generates, each as a strategy factory."""

# One value of each format: a pattern that accepts it is fed that format's values too.
_SAMPLES = {
    "date": ("2024-03-15",),
    "date-time": ("2024-03-15T09:30:00Z",),
    "time": ("09:30:00Z",),
    "email": ("ana@example.com",),
    "uri": ("https://example.com/a",),
    "uuid": ("12345678-1234-5678-1234-567812345678",),
    "ipv4": ("192.168.0.1",),
}


def ascii_pattern(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled as JSON Schema means it: ``\\d``, ``\\w``, ``\\s`` are ASCII."""
    return re.compile(pattern, re.ASCII)


def is_format(kind: str, value: str) -> bool:
    """Whether ``value`` is a well-formed ``kind`` (as the kit generates them), for constants worth reusing."""
    try:
        if kind == "date":
            return bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", value, re.ASCII)) and bool(dt.date.fromisoformat(value))
        if kind == "date-time":
            return bool(
                re.fullmatch(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", value, re.ASCII)
            )
        if kind == "time":
            return bool(re.fullmatch(r"\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})", value, re.ASCII))
    except ValueError:
        return False
    if kind == "email":
        return value.count("@") == 1 and all(value.split("@"))
    if kind == "uri":
        return bool(re.match(r"[A-Za-z][A-Za-z0-9+.-]*:", value))
    if kind == "uuid":
        return bool(re.fullmatch(r"[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}", value))
    if kind == "ipv4":
        parts = value.split(".")
        return len(parts) == 4 and all(
            p.isascii() and p.isdigit() and int(p) <= 255 and str(int(p)) == p for p in parts
        )
    return False


def formatted_like(pattern: re.Pattern[str]) -> list[str]:
    """The formats whose values ``pattern`` accepts (judged on a sample of each)."""
    return [kind for kind, samples in _SAMPLES.items() if all(pattern.search(s) for s in samples)]


def format_values(kind: str, known: list[str]) -> st.SearchStrategy[str]:
    """
    Values of format ``kind``; ``known`` are constants of that format worth
    trying (dates also with the day before and after).
    """
    base = FORMATS[kind]()
    nearby = list(known)
    if kind == "date":
        for text in known:
            day = dt.date.fromisoformat(text)
            nearby += [
                (day + dt.timedelta(days=d)).isoformat() for d in (-1, 1) if day + dt.timedelta(days=d) >= _FIRST_DAY
            ]
    return st.one_of(st.sampled_from(sorted(set(nearby))), base) if nearby else base


def pattern_values(pattern: str) -> st.SearchStrategy[str]:
    """
    Strings ``pattern`` accepts with JSON Schema's (ASCII, unanchored) semantics:
    real values of any format the pattern admits, then whole matches, then
    matches inside other text.
    """
    compiled = ascii_pattern(pattern)
    # Real values first when the pattern admits some: a gate parses them, and
    # a failing example then shrinks to one (2000-01-01, not 0000-00-00).
    matches = st.from_regex(compiled, fullmatch=True)
    if not (pattern.startswith("^") and pattern.endswith("$")):
        # Unanchored: text around the match is allowed, and a gate may trip on it.
        matches = matches | st.from_regex(compiled, fullmatch=False)
    real = [FORMATS[kind]().filter(compiled.search) for kind in formatted_like(compiled)]
    return mostly(st.one_of(real), matches) if real else matches


@st.composite
def mostly(draw: st.DrawFn, usual: st.SearchStrategy[Any], other: st.SearchStrategy[Any]) -> Any:
    """``usual`` three times in four (``one_of`` would split evenly), shrinking towards it."""
    return draw(other if draw(st.integers(0, 3)) == 3 else usual)


_READABLE = st.characters(min_codepoint=0x20, max_codepoint=0x7E)


def _of_length(length: int) -> st.SearchStrategy[str]:
    # A short readable text repeated to the length: a 281-character
    # counterexample then shrinks in a few steps, not one character at a time.
    unit = st.text(_READABLE, min_size=1, max_size=4)
    return unit.map(lambda text: (text * (length // len(text) + 1))[:length]) if length else st.just("")


def string_lengths(low: int, high: int | None, lengths: list[int]) -> st.SearchStrategy[str]:
    """Readable strings of exactly the lengths given (bounds, and a gate's thresholds with their neighbours)."""
    # In the order given (a gate's own thresholds first), which Hypothesis favours and shrinks towards.
    chosen = list(dict.fromkeys(n for n in lengths if n >= low and (high is None or n <= high) and n <= 10_000))
    if not chosen:
        return st.nothing()
    return st.sampled_from(chosen).flatmap(_of_length)
