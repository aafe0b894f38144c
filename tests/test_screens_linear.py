"""
The secret redactor takes time linear in what it reads, on text written to make a regex backtrack.

A tool's result is the attacker's text: a pattern that rescans a long run
from each of many starting points (a JWT's ``eyJ-eyJ-...``, a private key's
``-----BEGIN`` repeated) turns one 400 kB result into seconds of CPU per
pattern. The property builds results from the very pieces each pattern
starts with, repeated up to a megabyte, and holds the redactor to a time
budget that a linear scan meets many times over and a quadratic one misses
by orders of magnitude.
"""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from agent_fsm import Observation, RunState
from agent_fsm.screens import SECRET_PATTERNS, secret_redactor

# What each pattern starts with, and what can continue it or break it off.
PIECES = [
    "eyJ",
    "eyJ-",
    "eyJhbGciOiJIUzI1NiJ9",
    ".",
    "-",
    "_",
    "a",
    "0",
    " ",
    "sk-",
    "sk-ant-",
    "sk_live_",
    "ghp_",
    "github_pat_",
    "xoxb-",
    "AKIA",
    "AIza",
    "Bearer ",
    "-----BEGIN PRIVATE KEY-----",
    "-----BEGIN RSA PRIVATE KEY-----\n",
    "-----END ",
    "\n",
]

MEGABYTE = 1_000_000


def _budget(length: int) -> float:
    """Seconds allowed for ``length`` characters: 2 s, plus 10 s a megabyte (a quadratic scan needs minutes)."""
    return 2.0 + 10.0 * length / MEGABYTE


def _redact_seconds(text: str) -> float:
    screen = secret_redactor("registered-secret-value")
    observation = Observation("c1", True, "result", {"text": text})
    started = time.perf_counter()
    screen(observation, RunState())
    return time.perf_counter() - started


@settings(max_examples=12)
@given(
    motif=st.lists(st.sampled_from(PIECES), min_size=1, max_size=6).map("".join),
    length=st.integers(min_value=50_000, max_value=MEGABYTE),
)
def test_the_redactor_is_linear_on_adversarial_text(motif: str, length: int) -> None:
    """A motif of pattern openings repeated up to 1 MB is redacted within a linear time budget."""
    text = (motif * (length // len(motif) + 1))[:length]
    seconds = _redact_seconds(text)
    assert seconds < _budget(length), f"{seconds:.2f}s for {length:,} characters of {motif!r}"


def test_the_known_worst_cases_are_linear() -> None:
    """The two shapes that were quadratic (JWT openings glued by '-', private-key headers with no end) at 1 MB."""
    for motif in ("eyJ-", "-----BEGIN PRIVATE KEY-----", "eyJaaaaaaaaaa.eyJ-"):
        text = (motif * (MEGABYTE // len(motif) + 1))[:MEGABYTE]
        seconds = _redact_seconds(text)
        assert seconds < _budget(MEGABYTE), f"{seconds:.2f}s for {motif!r}"


def test_the_patterns_still_find_what_they_are_for() -> None:
    """Making them linear kept them useful: a JWT and a private-key block in prose are still found."""
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
    assert SECRET_PATTERNS["jwt"].search(f"token: {jwt} (expires)").group() == jwt
    block = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END PRIVATE KEY-----"
    text = f"-----BEGIN PRIVATE KEY----- (a stray header)\nkey:\n{block}\n"
    assert SECRET_PATTERNS["private_key"].search(text).group() == block
