"""
Who may decide: reviewers named with their tokens in the environment, their sessions, and the CSRF token of each.

``AGENT_FSM_REVIEWERS`` holds ``name:token`` pairs separated by spaces or
commas (``ana:3f9c... bo:77a1...``); there is no default, so an inbox
started without it refuses to start. A reviewer signs in with name and
token; the name is what the store records on every decision. Sessions
live in the server's memory (a restart signs everyone out) and each one
carries a random CSRF token that every form must send back.
"""

from __future__ import annotations

import hmac
import os
import re
import secrets
import threading
import time
from collections.abc import Mapping

import attrs

__all__ = ["REVIEWERS_VARIABLE", "Reviewers", "ReviewersMissing", "Session", "Sessions"]

REVIEWERS_VARIABLE = "AGENT_FSM_REVIEWERS"
"""The environment variable holding the reviewers' ``name:token`` pairs."""

MIN_TOKEN = 16
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")


class ReviewersMissing(ValueError):
    """No reviewer is configured, or an entry of ``AGENT_FSM_REVIEWERS`` is malformed or its token too short."""


@attrs.frozen
class Reviewers:
    """The people allowed to decide, each with a secret token (at least 16 characters)."""

    tokens: Mapping[str, str] = attrs.field(repr=False)

    @classmethod
    def parse(cls, text: str) -> Reviewers:
        """
        Read ``name:token`` pairs separated by spaces or commas.

        Raises:
            ReviewersMissing: there is no pair, a name or token is malformed, a token is short, a name repeats.
        """
        tokens: dict[str, str] = {}
        for entry in re.split(r"[\s,]+", text.strip()):
            if not entry:
                continue
            name, sep, token = entry.partition(":")
            if not sep or not _NAME.fullmatch(name):
                raise ReviewersMissing(
                    f"each reviewer is NAME:TOKEN with a name of letters, digits and ._@- (got {name!r})"
                )
            if len(token) < MIN_TOKEN:
                raise ReviewersMissing(f"reviewer {name!r} has a token of {len(token)} characters; use {MIN_TOKEN}+")
            if name in tokens:
                raise ReviewersMissing(f"reviewer {name!r} is named twice")
            tokens[name] = token
        if not tokens:
            raise ReviewersMissing(
                f"no reviewer is configured: set {REVIEWERS_VARIABLE}='ana:<token of {MIN_TOKEN}+ characters>'"
            )
        return cls(tokens)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Reviewers:
        """The reviewers in ``AGENT_FSM_REVIEWERS`` (``ReviewersMissing`` when unset or malformed)."""
        return cls.parse((os.environ if environ is None else environ).get(REVIEWERS_VARIABLE, ""))

    def check(self, name: str, token: str) -> str | None:
        """The reviewer's name if ``token`` is theirs, else None (compared in constant time)."""
        expected = self.tokens.get(name)
        # Compare against something even for an unknown name, so timing does not tell names apart.
        matched = hmac.compare_digest(token.encode(), (expected or secrets.token_hex(MIN_TOKEN)).encode())
        return name if matched and expected is not None else None


@attrs.frozen
class Session:
    """One browser's session: its id (the cookie), its CSRF token, the reviewer once signed in, its expiry."""

    sid: str
    csrf: str
    reviewer: str | None
    expires: float

    def csrf_matches(self, submitted: str | None) -> bool:
        """Whether a form sent back this session's CSRF token."""
        return submitted is not None and hmac.compare_digest(submitted.encode(), self.csrf.encode())


class Sessions:
    """
    Sessions in memory, each valid for ``lifetime`` seconds; at most ``limit`` are kept.

    Signing in replaces the session (a new id and token), so an id planted before sign-in is worthless after.
    """

    def __init__(self, *, lifetime: float = 8 * 3600, limit: int = 10_000) -> None:
        self.lifetime = lifetime
        self.limit = limit
        self._lock = threading.Lock()
        self._by_id: dict[str, Session] = {}

    def _store(self, reviewer: str | None) -> Session:
        now = time.time()
        session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32), reviewer, now + self.lifetime)
        with self._lock:
            if len(self._by_id) >= self.limit:
                self._by_id = {k: s for k, s in self._by_id.items() if s.expires > now and s.reviewer is not None}
                while len(self._by_id) >= self.limit:  # still full of signed-in sessions: drop the oldest
                    self._by_id.pop(next(iter(self._by_id)))
            self._by_id[session.sid] = session
        return session

    def new(self) -> Session:
        """A session for a browser that has not signed in (it still needs a CSRF token for the sign-in form)."""
        return self._store(None)

    def get(self, sid: str | None) -> Session | None:
        """The live session with this id, or None."""
        if not sid:
            return None
        with self._lock:
            session = self._by_id.get(sid)
            if session is not None and session.expires <= time.time():
                del self._by_id[sid]
                return None
        return session

    def sign_in(self, old: Session | None, reviewer: str) -> Session:
        """Replace ``old`` with a signed-in session for ``reviewer``."""
        self.end(old)
        return self._store(reviewer)

    def end(self, session: Session | None) -> None:
        """Forget ``session`` (signing out)."""
        if session is not None:
            with self._lock:
                self._by_id.pop(session.sid, None)
