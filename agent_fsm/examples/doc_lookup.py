"""
Documentation lookup: a search / read / final decision loop over a version-pinned corpus.

The fictional ``harborctl`` tool has documentation for two versions; a
lookup is pinned to one of them. A policy proposes ``search``, ``read`` or
``final`` through :class:`agent_fsm.engine.DecisionPolicy`; the engine
validates, dispatches and stops. Three checks stay apart:

* the *answer check* (engine hook): a final decision is well formed and cites
  a page read in this run, else the run ends ``answer_rejected``;
* the *outcome check* ``outcome_ok`` (independent): the answered command and
  the cited page are the right ones; an ``answered`` stop alone never passes;
* the run invariants (:func:`agent_fsm.check_run`).

Endings of the decision loop, the engine stops they are, and the world's code
(``RunResult.code``; the table is :data:`ENDINGS`)::

    final (accepted)         -> answered         code final
    invalid decision         -> no_progress      code invalid_decision (an ``invalid`` observation; with
                                                 repeated_denials=1 the first one ends the run; a decide that
                                                 raises ValueError/TypeError/KeyError is one too)
    malformed final decision -> answer_rejected  code invalid_decision
    provider error (OSError) -> provider_error   code provider_error
    unread citation          -> answer_rejected  code unread_citation (the answer check's Ending)
    tool limit               -> tool_limit       code tool_limit (checked before dispatch; failed reads count)
    turn limit               -> step_limit       code turn_limit
    wrong-version read       -> an ``error`` observation; the policy may recover within its budget

A lookup is validated before it starts (:class:`Lookup`): a version other
than ``v1``/``v2``, an empty or oversized question, an environment other
than ``staging`` or an unbounded ``id``/``family`` is refused with a
``ValueError``, never run against an empty corpus. :data:`CASES` is the
table of authored tasks with the answer each expects; :func:`run_case` runs
one and judges it against its own expectation (``agent-fsm lookup --case``). Search expands the
question's words through a small glossary (:data:`GLOSSARY`), so "revert"
finds the rollback page.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from agent_fsm.engine import (
    Ending,
    FinalDecision,
    Limits,
    RunResult,
    RunState,
    Stop,
    ToolError,
    ToolSpec,
    named,
    observations_of,
    string_fields,
)
from agent_fsm.scenarios.environment import Environment

__all__ = [
    "CASES",
    "CORPUS",
    "DEFAULT_CASE",
    "ENDINGS",
    "EXPECTED",
    "FINAL",
    "GLOSSARY",
    "LIMITS",
    "POLICIES",
    "VERSIONS",
    "Corpus",
    "Lookup",
    "case",
    "cited_page_check",
    "environment",
    "lookup",
    "outcome_ok",
    "run_case",
    "task_of",
]

LIMITS = Limits(max_turns=4, max_tool_calls=3, repeated_denials=1)
"""The lookup's budgets: four policy turns, three tool attempts, and no second chance for a refused decision."""

FINAL = FinalDecision("final", string_fields({"answer": 500, "citation": 64}, may_be_empty=("citation",)))
"""A final decision: the answer and the id of the page it rests on (``""`` for none)."""

SYSTEM_PROMPT = (
    "You answer questions about harborctl from its documentation. Search, read the page you rely on, "
    "then answer with the command and cite the page you read."
)

CORPUS: tuple[dict[str, str], ...] = (
    {
        "id": "rollback-v1",
        "version": "v1",
        "title": "Rolling back a deployment",
        "text": "Version 1 rolls back by redeploying an older build: pass the build number explicitly.",
        "command": "harborctl deploy --env staging --build PREVIOUS",
    },
    {
        "id": "rollback-v2",
        "version": "v2",
        "title": "Rolling back a deployment",
        "text": "Return staging to the last release that passed its health checks with the rollback subcommand.",
        "command": "harborctl rollback --env staging --to last-healthy",
    },
    {
        "id": "deploy-v2",
        "version": "v2",
        "title": "Deploying a release",
        "text": "Ship a tagged release to staging; health checks gate the switch of traffic.",
        "command": "harborctl deploy --env staging --release TAG",
    },
    {
        "id": "logs-v2",
        "version": "v2",
        "title": "Reading service logs",
        "text": "Stream the logs of a staging service, newest lines last.",
        "command": "harborctl logs --env staging --follow SERVICE",
    },
)

VERSIONS = ("v1", "v2")
"""The documentation versions the corpus holds; a lookup pinned to any other is refused."""

GLOSSARY = {"revert": "rollback", "undo": "rollback", "restore": "rollback", "ship": "deploy", "tail": "logs"}
"""Aliases a search adds to the query's words: a user's word for what the docs call something else."""

ENDINGS = {
    Stop.ANSWERED: "final",
    Stop.NO_PROGRESS: "invalid_decision",
    Stop.ANSWER_REJECTED: "invalid_decision",
    Stop.STEP_LIMIT: "turn_limit",
    Stop.TOOL_LIMIT: "tool_limit",
    Stop.PROVIDER_ERROR: "provider_error",
}
"""The lookup's codes for the engine's stops; an unread citation names its own (the answer check's Ending)."""

EXPECTED = {"answer": "harborctl rollback --env staging --to last-healthy", "citation": "rollback-v2"}
"""What the rollback question should produce; only the outcome check reads it, never a policy."""

# Words too common to tell pages apart; a query is matched on what is left.
# fmt: off
_STOP_WORDS = frozenset((
    "a", "an", "the", "and", "or", "of", "to", "in", "on", "for", "with", "is",
    "are", "do", "does", "how", "what", "which", "i", "me", "my", "it", "can",
))
# fmt: on


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.casefold())) - _STOP_WORDS


def _bounded(limit: int) -> Any:
    def check(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
        if not isinstance(value, str) or not value.strip() or len(value) > limit:
            raise ValueError(f"{attribute.name} must be a string of 1..{limit} characters, not blank; got {value!r}")

    return check


def _known_version(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if value not in VERSIONS:
        raise ValueError(f"unsupported documentation version {value!r}; expected one of {list(VERSIONS)}")


def _staging_only(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    _bounded(100)(instance, attribute, value)
    if value != "staging":
        raise ValueError(f"this lookup covers the staging environment only; got {value!r}")


@attrs.frozen
class Lookup:
    """
    One lookup's task, checked before any run: a bounded question, a version the corpus has, staging only.

    ``id`` and ``family`` name the task (a case of :data:`CASES`, or ``ad-hoc``);
    ``environment`` is the one the commands are for, and the documentation
    covers ``staging`` alone, so any other is refused rather than answered
    with a staging command.

    Raises:
        ValueError: the question is blank or over 500 characters, the version is not ``v1``/``v2``,
            ``id`` or ``family`` is blank or over 100 characters, or the environment is not ``staging``.
    """

    question: str = attrs.field(validator=_bounded(500))
    version: str = attrs.field(default="v2", validator=_known_version)
    id: str = attrs.field(default="ad-hoc", kw_only=True, validator=_bounded(100))
    family: str = attrs.field(default="ad-hoc", kw_only=True, validator=_bounded(100))
    environment: str = attrs.field(default="staging", kw_only=True, validator=_staging_only)


class Corpus:
    """The pages of one documentation version; search and read never leave it."""

    def __init__(
        self, pages: Sequence[Mapping[str, str]], version: str, glossary: Mapping[str, str] = GLOSSARY
    ) -> None:
        self.version = version
        self.pages = {p["id"]: dict(p) for p in pages}
        self.glossary = dict(glossary)

    def search(self, query: str) -> list[dict[str, str]]:
        """At most two pages of the pinned version, ranked by words shared with ``query`` and their aliases."""
        terms = _words(query)
        terms |= {self.glossary[t] for t in tuple(terms) if t in self.glossary}
        overlap = {
            page_id: len(terms & _words(f"{page['title']} {page['text']}"))
            for page_id, page in self.pages.items()
            if page["version"] == self.version
        }
        best = sorted((page_id for page_id, shared in overlap.items() if shared), key=lambda p: (-overlap[p], p))
        return [{"id": page_id, "title": self.pages[page_id]["title"]} for page_id in best[:2]]

    def read(self, page_id: str) -> dict[str, str]:
        """The whole page, if it exists in the pinned version."""
        page = self.pages.get(page_id)
        if page is None:
            raise ToolError(f"no page {page_id!r}")
        if page["version"] != self.version:
            raise ToolError(f"page {page_id!r} documents {page['version']}; this lookup is pinned to {self.version}")
        return dict(page)


def _pages_read(state: RunState) -> set[str]:
    return {
        o["result"]["id"]
        for o in observations_of(state.messages)
        if o["action"] == "read" and o["ok"] and isinstance(o["result"], dict)
    }


def cited_page_check(fields: dict[str, Any], state: RunState) -> Ending | None:
    """A citation must name a page read in this run; finding a title in a search is not reading it."""
    citation = fields["citation"]
    if citation and citation not in _pages_read(state):
        return Ending("unread_citation", f"the answer cites {citation!r}, which was not read in this run")
    return None


def outcome_ok(result: RunResult, expected: Mapping[str, str] = EXPECTED) -> bool:
    """The independent outcome: answered with the right command AND the right cited page (``expected``'s)."""
    if result.stop is not Stop.ANSWERED or result.answer is None:
        return False
    fields, _ = FINAL.read(result.answer)
    return fields is not None and fields == dict(expected)


# --- policies: plain decide functions behind the narrow interface ---------------


def scripted(task: str, observations: list[dict[str, Any]]) -> dict[str, Any]:
    """Search the question, read the best hit, answer with its command and cite it."""
    if not observations:
        return {"action": "search", "query": task}
    last = observations[-1]
    if not last["ok"]:
        return {"action": "final", "answer": f"I could not finish: {last['result']}", "citation": ""}
    if last["action"] == "search":
        if not last["result"]:
            return {"action": "final", "answer": "No page matches the question.", "citation": ""}
        return {"action": "read", "page_id": last["result"][0]["id"]}
    return {"action": "final", "answer": last["result"]["command"], "citation": last["result"]["id"]}


def shell_action(task: str, observations: list[dict[str, Any]]) -> dict[str, Any]:
    """Proposes an action the interface does not have."""
    return {"action": "shell", "command": "rm -rf /srv/docs"}


def provider_down(task: str, observations: list[dict[str, Any]]) -> dict[str, Any]:
    """A model-backed policy whose provider cannot be reached."""
    raise ConnectionRefusedError("model endpoint refused the connection")


def cites_unread(task: str, observations: list[dict[str, Any]]) -> dict[str, Any]:
    """Answers at once with a plausible command and a page it never opened."""
    return {"action": "final", "answer": EXPECTED["answer"], "citation": "rollback-v2"}


def always_search(task: str, observations: list[dict[str, Any]]) -> dict[str, Any]:
    """Goes on searching even once it holds plenty to answer from."""
    return {"action": "search", "query": f"{task} (attempt {len(observations) + 1})"}


def wrong_version_first(task: str, observations: list[dict[str, Any]]) -> dict[str, Any]:
    """Reads the v1 page first, sees the refusal, then does the lookup properly."""
    if not observations:
        return {"action": "read", "page_id": "rollback-v1"}
    return scripted(task, observations[1:])


def invents_command(task: str, observations: list[dict[str, Any]]) -> dict[str, Any]:
    """Reads the right page, then answers a command the page does not give."""
    decision = scripted(task, observations)
    if decision["action"] == "final":
        decision["answer"] = "harborctl undo --env staging"
    return decision


def unparseable(task: str, observations: list[dict[str, Any]]) -> dict[str, Any]:
    """A model-backed policy whose model replied prose, not the JSON decision asked for."""
    reply = "Sure! First I would search the docs for the rollback command."
    decision: dict[str, Any] = json.loads(reply)  # raises json.JSONDecodeError (a ValueError)
    return decision


POLICIES = {
    "scripted": scripted,
    "unparseable": unparseable,
    "shell_action": shell_action,
    "provider_down": provider_down,
    "cites_unread": cites_unread,
    "always_search": always_search,
    "wrong_version_first": wrong_version_first,
    "invents_command": invents_command,
}


def environment(version: str = "v2") -> Environment:
    """
    A fresh lookup pinned to ``version``, with every policy above as a named model.

    Raises:
        ValueError: ``version`` is not one the documentation has.
    """
    corpus = Corpus(CORPUS, Lookup("environment", version).version)
    tools = {
        "search": ToolSpec(
            "Search the pinned documentation; returns page ids and titles.",
            string_fields({"query": 300}),
            corpus.search,
        ),
        "read": ToolSpec(
            "Read one page of the pinned documentation by id.",
            {
                "type": "object",
                "properties": {"page_id": {"type": "string", "pattern": "^[a-z0-9-]{1,64}$"}},
                "required": ["page_id"],
                "additionalProperties": False,
            },
            corpus.read,
        ),
    }
    return Environment(
        tools=tools,
        models={name: named(decide, final=FINAL) for name, decide in POLICIES.items()},
        checks={"outcome_ok": outcome_ok},
        answer_check=FINAL.check(cited_page_check),
        system_prompt=SYSTEM_PROMPT,
        endings=ENDINGS,
    )


def lookup(
    question: str | Lookup, *, version: str = "v2", policy: str = "scripted", limits: Limits = LIMITS
) -> RunResult:
    """
    Validate a lookup, then run it with one of :data:`POLICIES` to a typed ending with its code.

    ``question`` is the question (pinned to ``version``) or a whole :class:`Lookup`.

    Raises:
        ValueError: the task is refused (see :class:`Lookup`), or ``policy`` is unknown.
    """
    task = question if isinstance(question, Lookup) else Lookup(question, version)
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}; expected one of {sorted(POLICIES)}")
    world = environment(task.version)
    return world.agent(world.models[policy](), limits=limits).run(task.question)


# --- the case table ---------------------------------------------------------------

DEFAULT_CASE = "rollback-direct"
"""The case ``agent-fsm lookup`` runs when none is named."""

CASES: tuple[dict[str, str], ...] = (
    {
        "id": "rollback-direct",
        "family": "rollback",
        "question": "How do I roll back staging to the last good release?",
        "version": "v2",
        "answer": EXPECTED["answer"],
        "citation": EXPECTED["citation"],
    },
    {
        "id": "rollback-alias",
        "family": "rollback",
        "question": "How do I revert the staging release?",
        "version": "v2",
        "answer": EXPECTED["answer"],
        "citation": EXPECTED["citation"],
    },
    {
        "id": "rollback-v1",
        "family": "rollback",
        "question": "How do I roll back staging?",
        "version": "v1",
        "answer": "harborctl deploy --env staging --build PREVIOUS",
        "citation": "rollback-v1",
    },
    {
        "id": "deploy-release",
        "family": "deploy",
        "question": "How do I ship a tagged release to staging?",
        "version": "v2",
        "answer": "harborctl deploy --env staging --release TAG",
        "citation": "deploy-v2",
    },
    {
        "id": "logs-follow",
        "family": "logs",
        "question": "How do I tail the logs of a staging service?",
        "version": "v2",
        "answer": "harborctl logs --env staging --follow SERVICE",
        "citation": "logs-v2",
    },
)
"""Authored tasks and what each should produce (``answer``, ``citation``); only the outcome check reads those two."""


def case(case_id: str) -> dict[str, str]:
    """
    The case called ``case_id``.

    Raises:
        ValueError: no case has that id (the message lists those that do).
    """
    for entry in CASES:
        if entry["id"] == case_id:
            return dict(entry)
    raise ValueError(f"unknown case {case_id!r}; expected one of {[c['id'] for c in CASES]}")


def task_of(entry: Mapping[str, str]) -> Lookup:
    """A case's task, validated like any other (its expected answer stays out of it)."""
    return Lookup(entry["question"], entry["version"], id=entry["id"], family=entry["family"])


def run_case(case_id: str = DEFAULT_CASE, *, policy: str = "scripted") -> tuple[RunResult, bool]:
    """
    Run one case with one of :data:`POLICIES`; return the result and whether that case's outcome held.

    Raises:
        ValueError: the case or the policy is unknown.
    """
    entry = case(case_id)
    result = lookup(task_of(entry), policy=policy)
    return result, outcome_ok(result, {"answer": entry["answer"], "citation": entry["citation"]})
