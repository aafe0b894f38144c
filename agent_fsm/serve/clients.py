"""
Who may call the API: clients named with a bearer token and scopes in the environment.

``AGENT_FSM_CLIENTS`` holds ``name:token:scope+scope`` entries separated by
spaces or commas (``ui:3f9c...:start+read+decide ops:77a1...:read``), read
as the inbox's reviewers are; there is no default, so a server started
without it refuses to start. The scopes are ``start`` (start runs),
``read`` (list, read and stream runs) and ``decide`` (decide their pauses).
A client sees and decides only the runs it started: a run's id begins with
the name of the client that started it.
"""

from __future__ import annotations

import hmac
import os
import re
from collections.abc import Mapping

import attrs

from agent_fsm.web.auth import MIN_TOKEN

__all__ = ["CLIENTS_VARIABLE", "SCOPES", "Client", "Clients", "ClientsMissing"]

CLIENTS_VARIABLE = "AGENT_FSM_CLIENTS"
"""The environment variable holding the clients' ``name:token:scopes`` entries."""

SCOPES = ("start", "read", "decide")
"""What a token may be allowed: start runs, read them (list, read, stream), decide their pauses."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")


class ClientsMissing(ValueError):
    """No client is configured, or an entry of ``AGENT_FSM_CLIENTS`` is malformed or its token too short."""


@attrs.frozen
class Client:
    """One caller: its name (what its runs' ids begin with) and what its token allows."""

    name: str
    scopes: frozenset[str]

    def owns(self, run_id: str) -> bool:
        """Whether ``run_id`` is one of this client's runs (started by it)."""
        return run_id.startswith(f"{self.name}.")


@attrs.frozen
class Clients:
    """The clients allowed to call, each by its secret token (at least 16 characters)."""

    by_token: Mapping[str, Client] = attrs.field(repr=False)

    @classmethod
    def parse(cls, text: str) -> Clients:
        """
        Read ``name:token:scope+scope`` entries separated by spaces or commas.

        Raises:
            ClientsMissing: there is no entry, a name, token or scope is malformed, a token is short, a name repeats.
        """
        by_token: dict[str, Client] = {}
        names: set[str] = set()
        for entry in re.split(r"[\s,]+", text.strip()):
            if not entry:
                continue
            name, _, rest = entry.partition(":")
            token, sep, scopes_text = rest.rpartition(":")
            if not sep or not _NAME.fullmatch(name):
                raise ClientsMissing(
                    f"each client is NAME:TOKEN:SCOPES with a name of letters, digits, _ and - (got {name!r})"
                )
            if len(token) < MIN_TOKEN:
                raise ClientsMissing(f"client {name!r} has a token of {len(token)} characters; use {MIN_TOKEN}+")
            scopes = frozenset(s for s in scopes_text.split("+") if s)
            if not scopes or not scopes <= set(SCOPES):
                raise ClientsMissing(f"client {name!r} has scopes {scopes_text!r}; use some of {'+'.join(SCOPES)}")
            if name in names or token in by_token:
                raise ClientsMissing(f"client {name!r} is named twice, or shares its token")
            names.add(name)
            by_token[token] = Client(name, scopes)
        if not by_token:
            raise ClientsMissing(
                f"no client is configured: set {CLIENTS_VARIABLE}='ui:<token of {MIN_TOKEN}+ characters>:start+read'"
            )
        return cls(by_token)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Clients:
        """The clients in ``AGENT_FSM_CLIENTS`` (``ClientsMissing`` when unset or malformed)."""
        return cls.parse((os.environ if environ is None else environ).get(CLIENTS_VARIABLE, ""))

    def check(self, token: str) -> Client | None:
        """The client whose token ``token`` is, or None (every token compared, in constant time each)."""
        found = None
        given = token.encode()
        for known, client in self.by_token.items():
            if hmac.compare_digest(given, known.encode()):
                found = client
        return found
