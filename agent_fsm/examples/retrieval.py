"""
Retrieval with query refinement: a controller that reads, applies a declared rule, then stops or searches again.

The corpus is pinned: every passage carries the SHA-256 of its text and the
corpus is named by the hash of all of them. A search issues one read handle
per hit; ``read`` accepts only a handle this corpus issued, unchanged, for
the corpus as it is now, and re-checks the passage's hash before returning
it. The controller is a plain ``decide(task, observations)`` function
configured by a rule chosen from the question's words (:data:`RULES`); it
sees the question and its own observations, never the expected answer.

How the controller's endings map onto the engine, and the code each has
(``RunResult.code``; the controller's own reason is always the code, its
detail is kept in the stop decision)::

    completed  configured_context_marker_found -> answered         code configured_context_marker_found
    incomplete duplicate_query                 -> answer_rejected  code duplicate_query (the controller compares
                                                                   its refinement with every earlier query)
    incomplete no_new_passages                 -> answer_rejected  code no_new_passages
    incomplete round_limit                     -> answer_rejected  code round_limit
    incomplete no_refinement_rule (no rule)    -> answer_rejected  code no_refinement_rule
    failed     invalid_read (forged or stale)  -> answer_rejected  code invalid_read
    failed     another tool failure            -> answer_rejected  code tool_failed
    invalid question (blank, over 512)         -> answer_rejected  code invalid_question
    controller step guard                      -> step_limit       code controller_step_guard (``max_turns``)
    (tool budget, if one is set)               -> tool_limit       code tool_limit

An empty search is not an ending: as in the declared policy, the
controller goes on to its refined query (``no_match`` only describes that
search), and the round limit or a missing rule ends the run if that finds
nothing either.

A stop decision is the final action ``stop``: its fields say ``status``,
``reason`` (the code), ``detail``, the full ``policy`` configuration, the
``question`` and ``version``, the ``query_history`` and the
``read_sources``. Only a ``completed`` stop is an answer; the answer check
refuses every other one, so an ``answered`` run always means the configured
marker was read. The version is validated when the controller is built.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
from collections.abc import Mapping, Sequence
from typing import Any

from agent_fsm.engine.endings import Ending
from agent_fsm.engine.errors import ToolError
from agent_fsm.engine.gates import Verdict
from agent_fsm.engine.limits import Limits, Stop
from agent_fsm.engine.policy import FinalDecision, named
from agent_fsm.engine.state import RunResult, RunState
from agent_fsm.engine.tools import ToolCall, ToolSpec
from agent_fsm.scenarios.environment import Environment

__all__ = [
    "ENDINGS",
    "FINAL",
    "LIMITS",
    "PASSAGES",
    "RULES",
    "Controller",
    "PinnedCorpus",
    "environment",
    "rule_for",
]

VERSION = "2.4"
LIMITS = Limits(max_turns=7, repeated_denials=1)
"""Seven model calls is the step guard: the rules need at most five (two rounds of search and read, then stop)."""

PASSAGES: tuple[tuple[str, str], ...] = (
    ("get-basic", "Store.get(key) returns the stored value for key, or raises KeyError when the key is absent."),
    ("put-basic", "Store.put(key, value) saves value under key and returns the new revision number."),
    (
        "put-existing",
        (
            "When key already exists, Store.put replaces the stored value and bumps the revision; "
            "the previous value survives only if history is enabled."
        ),
    ),
    ("get-default", "Store.get(key, default) returns default instead of raising when the key is absent."),
    ("delete", "Store.delete(key) removes key and returns True; an absent key returns False."),
    ("ttl", "Store.put(key, value, ttl=seconds) expires the entry after that many seconds."),
)
"""The pinned documentation of the fictional ``quill`` store, version 2.4: (source id, text)."""

RULES: tuple[tuple[str, frozenset[str], str, str | None, str | None], ...] = (
    # (name, question cues, initial query, refinement query, marker that completes the search)
    (
        "existing-key",
        frozenset({"existing", "exists", "already", "overwrite", "replace"}),
        "value",
        "exists",
        "replaces",
    ),
    ("missing-key", frozenset({"missing", "absent"}), "absent", "default", "instead of raising"),
    ("durability", frozenset({"durable", "durably", "persist"}), "value", "saves", "persisted"),
    ("transactions", frozenset({"transaction", "transactions", "atomic"}), "transaction", "commit", "atomically"),
)
"""Declared rules. A literal marker is an application's choice; it does not prove the passage answers the question."""

ENDINGS = {Stop.STEP_LIMIT: "controller_step_guard", Stop.TOOL_LIMIT: "tool_limit"}
"""Codes for the engine's own stops; every other ending is the controller's reason (an Ending)."""

STOP_REASONS = {
    "completed": ("configured_context_marker_found",),
    "incomplete": ("duplicate_query", "no_new_passages", "round_limit", "no_refinement_rule"),
    "failed": ("invalid_read", "tool_failed"),
}
"""The controller's stop reasons by status; each reason is also the run's code."""

_FIELDS = ("name", "initial_query", "refinement_query", "required_marker", "max_rounds")
_QUERY = re.compile(r"[a-z0-9]{1,64}")


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _config(*values: Any) -> dict[str, Any]:
    return dict(zip(_FIELDS, values, strict=True))


def rule_for(question: str) -> dict[str, Any]:
    """The first rule whose cues appear in the question, or the no-rule configuration."""
    words = set(re.findall(r"[a-z0-9]+", question.casefold()))
    for name, cues, initial, refinement, marker in RULES:
        if words & cues:
            return _config(name, initial, refinement, marker, 2)
    return _config("no-matching-rule", "value", None, None, 2)


def _check_config(config: Mapping[str, Any]) -> dict[str, Any]:
    if set(config) != set(_FIELDS):
        raise ValueError(f"a controller config has exactly the fields {_FIELDS}; got {sorted(config)}")
    for key in ("initial_query", "refinement_query"):
        value = config[key]
        if not (value is None and key == "refinement_query") and not (
            isinstance(value, str) and _QUERY.fullmatch(value)
        ):
            raise ValueError(f"{key} must be 1-64 lowercase letters or digits; got {value!r}")
    marker = config["required_marker"]
    if marker is not None and not (isinstance(marker, str) and 0 < len(marker) <= 128):
        raise ValueError(f"required_marker must be a 1-128 character string or None; got {marker!r}")
    if type(config["max_rounds"]) is not int or not 1 <= config["max_rounds"] <= 3:
        raise ValueError(f"max_rounds must be an int in 1..3; got {config['max_rounds']!r}")
    return dict(config)


# --- the pinned corpus and its tools ------------------------------------------


def _invalid_read(detail: str) -> ToolError:
    # The category is data the controller reads; the words are for people.
    return ToolError(f"invalid_read: {detail}", data={"error": "invalid_read", "detail": detail})


class PinnedCorpus:
    """
    Passages named by content hash, a corpus id over all of them, and the read handles issued by search.

    ``query_history`` keeps every query searched, in order; a later query
    never overwrites an earlier one.
    """

    def __init__(self, passages: Sequence[tuple[str, str]] = PASSAGES) -> None:
        self.query_history: list[str] = []
        self._issued: dict[str, dict[str, Any]] = {}
        self.publish(passages)

    def publish(self, passages: Sequence[tuple[str, str]]) -> None:
        """Replace the corpus; handles issued for the old one become stale."""
        self.passages = {
            source: {"source_id": source, "text": text, "text_sha256": _sha256(text)} for source, text in passages
        }
        canonical = json.dumps(sorted((s, p["text_sha256"]) for s, p in self.passages.items()))
        self.corpus_id = _sha256(canonical)

    def search(self, query: str, k: int = 2) -> dict[str, Any]:
        """The ``k`` passages using ``query`` most often, each with a read handle."""
        self.query_history.append(query)
        ranked: list[tuple[int, int, dict[str, Any]]] = []
        for order, passage in enumerate(self.passages.values()):
            hits = re.findall(r"[a-z0-9]+", passage["text"].casefold()).count(query)
            if hits:
                ranked.append((-hits, order, passage))
        results = []
        for rank, (_, _, passage) in enumerate(sorted(ranked, key=lambda r: r[:2])[:k], start=1):
            handle: dict[str, Any] = {
                "corpus_id": self.corpus_id,
                "source_id": passage["source_id"],
                "version": VERSION,
                "text_sha256": passage["text_sha256"],
                "rank": rank,
                "read_token": secrets.token_hex(16),
            }
            self._issued[handle["read_token"]] = dict(handle)
            results.append(handle)
        return {"corpus_id": self.corpus_id, "query": query, "results": results}

    def read(self, handle: dict[str, Any]) -> dict[str, Any]:
        """
        The passage behind an issued handle, its hash re-checked.

        Raises:
            ToolError: the handle was never issued, was altered, is stale, or the text changed.
        """
        issued = self._issued.get(handle["read_token"])
        if issued is None:
            raise _invalid_read("this read_token was never issued by search")
        if issued != handle:
            changed = sorted(k for k in handle if handle[k] != issued.get(k))
            raise _invalid_read(f"the handle was altered after it was issued ({', '.join(changed)})")
        if handle["corpus_id"] != self.corpus_id:
            raise _invalid_read("the handle is stale; the corpus was republished since it was issued")
        passage = self.passages[handle["source_id"]]
        if _sha256(passage["text"]) != handle["text_sha256"]:
            raise _invalid_read("the passage text no longer matches its hash")
        return {**handle, "text": passage["text"]}

    def tools(self) -> dict[str, ToolSpec]:
        """``search`` and ``read``, with exact contracts (a handle has exactly its issued fields)."""
        hex64 = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
        handle = {
            "type": "object",
            "properties": {
                "corpus_id": hex64,
                "source_id": {"type": "string", "pattern": "^[a-z0-9-]{1,64}$"},
                "version": {"const": VERSION},
                "text_sha256": hex64,
                "rank": {"type": "integer", "minimum": 1, "maximum": 3},
                "read_token": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
            },
            "required": ["corpus_id", "source_id", "version", "text_sha256", "rank", "read_token"],
            "additionalProperties": False,
        }
        return {
            "search": ToolSpec(
                "Search the pinned corpus for one lowercase word; returns up to k passages with read handles.",
                {
                    "type": "object",
                    "properties": {
                        "query": {"type": "string", "pattern": "^[a-z0-9]{1,64}$"},
                        "k": {"type": "integer", "minimum": 1, "maximum": 3},
                    },
                    "required": ["query", "k"],
                    "additionalProperties": False,
                },
                self.search,
            ),
            "read": ToolSpec(
                "Read the passage behind a handle issued by search.",
                {
                    "type": "object",
                    "properties": {"handle": handle},
                    "required": ["handle"],
                    "additionalProperties": False,
                },
                self.read,
            ),
        }

    def distinct_queries(self, call: ToolCall) -> Verdict:
        """
        A gate refusing a query already searched: a second line only, for a policy without the controller's rule.

        The controller itself stops ``duplicate_query`` before proposing a repeat.
        """
        if call.name == "search" and call.arguments and call.arguments.get("query") in self.query_history:
            return Verdict.deny(f"duplicate_query: {call.arguments['query']!r} was already searched")
        return Verdict.allow("effect-free tool")


# --- the controller -----------------------------------------------------------

_CONFIG_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 64},
        "initial_query": {"type": "string", "pattern": "^[a-z0-9]{1,64}$"},
        "refinement_query": {"type": ["string", "null"], "pattern": "^[a-z0-9]{1,64}$"},
        "required_marker": {"type": ["string", "null"], "minLength": 1, "maxLength": 128},
        "max_rounds": {"type": "integer", "minimum": 1, "maximum": 3},
    },
    "required": list(_FIELDS),
    "additionalProperties": False,
}

FINAL = FinalDecision(
    "stop",
    {
        "type": "object",
        "properties": {
            "status": {"enum": list(STOP_REASONS)},
            "reason": {"enum": [r for reasons in STOP_REASONS.values() for r in reasons]},
            "detail": {"type": "string", "maxLength": 300},
            "policy": _CONFIG_SCHEMA,
            "question": {"type": "string", "maxLength": 512},
            "version": {"type": "string", "pattern": "^[0-9]+[.][0-9]+$"},
            "query_history": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
            "read_sources": {"type": "array", "items": {"type": "string"}, "maxItems": 8},
        },
        "required": ["status", "reason", "detail", "policy", "question", "version", "query_history", "read_sources"],
        "additionalProperties": False,
    },
    endings=("invalid_question",),
)


def _check_version(version: object) -> str:
    if not isinstance(version, str) or re.fullmatch(r"[0-9]+\.[0-9]+", version) is None:
        raise ValueError(f"invalid_version: a version looks like '2.4'; got {version!r}")
    if version != VERSION:
        raise ValueError(f"invalid_version: the pinned corpus documents {VERSION}, not {version}")
    return version


def _question_problem(question: object) -> str | None:
    if not isinstance(question, str) or not question.strip() or len(question) > 512:
        return f"the question must be 1..512 characters, not blank; got {str(question)[:40]!r}"
    return None


class Controller:
    """
    The declared refinement policy, as a ``decide(task, observations)`` callable.

    ``config`` overrides the rule chosen from the question (same fields as
    :func:`rule_for`) and ``version`` is the documentation version asked
    about; both are validated here, so a bad configuration fails before any
    run starts. Every stopping rule is the controller's own (none lives in a gate).

    Raises:
        ValueError: the configuration or the version is invalid.
    """

    def __init__(self, config: Mapping[str, Any] | None = None, *, version: str = VERSION) -> None:
        self.config = None if config is None else _check_config(config)
        self.version = _check_version(version)

    def __call__(self, task: str, observations: list[dict[str, Any]]) -> dict[str, Any] | Ending:
        problem = _question_problem(task)
        if problem is not None:
            return Ending("invalid_question", problem)
        config = self.config if self.config is not None else rule_for(task)
        searches = [o for o in observations if o["action"] == "search" and o["ok"]]
        reads = [o for o in observations if o["action"] == "read"]

        def stop(status: str, reason: str, detail: str = "") -> dict[str, Any]:
            return {
                "action": "stop",
                "status": status,
                "reason": reason,
                "detail": detail[:300],
                "policy": dict(config),
                "question": task,
                "version": self.version,
                "query_history": [o["arguments"]["query"] for o in searches],
                "read_sources": [o["result"]["source_id"] for o in reads if o["ok"]],
            }

        def search(query: str) -> dict[str, Any]:
            return {"action": "search", "query": query, "k": 2}

        if not observations:
            return search(config["initial_query"])
        last = observations[-1]
        if not last["ok"]:
            result = last["result"]
            category = result.get("error") if isinstance(result, dict) else None
            detail = f"{last['kind']}: {result.get('detail') if isinstance(result, dict) else result}"
            return stop("failed", "invalid_read" if category == "invalid_read" else "tool_failed", detail)
        if last["action"] == "search":
            already = {o["result"]["source_id"] for o in reads if o["ok"]}
            fresh = [h for h in last["result"]["results"] if h["source_id"] not in already]
            if fresh:
                return {"action": "read", "handle": fresh[0]}
            if last["result"]["results"]:
                return stop("incomplete", "no_new_passages")
            # An empty search (no_match) is not an ending: go on to the refined query.
        else:
            marker = config["required_marker"]
            if marker is not None and marker in last["result"]["text"]:
                return stop("completed", "configured_context_marker_found")
        if len(searches) >= config["max_rounds"]:
            return stop("incomplete", "round_limit")
        query = config["refinement_query"]
        if query is None:
            return stop("incomplete", "no_refinement_rule")
        if query in [o["arguments"]["query"] for o in observations if o["action"] == "search"]:
            return stop("incomplete", "duplicate_query", f"{query!r} was already searched")
        return search(query)


def _stop_ending(fields: dict[str, Any], state: RunState) -> Ending:
    """The controller's reason is the run's code; only a completed stop stands as an answer."""
    accept = fields["status"] == "completed"
    detail = f" ({fields['detail']})" if fields["detail"] else ""
    return Ending(fields["reason"], f"{fields['status']}: {fields['reason']}{detail}", accept=accept)


def _forging(task: str, observations: list[dict[str, Any]]) -> dict[str, Any] | Ending:
    """Alters the first handle it is given (a different passage hash) before reading it."""
    decision = Controller()(task, observations)
    if isinstance(decision, dict) and decision["action"] == "read" and len(observations) == 1:
        decision["handle"] = {**decision["handle"], "source_id": "put-existing"}
    return decision


def _looping(task: str, observations: list[dict[str, Any]]) -> dict[str, Any]:
    """A faulty policy that never stops: each turn a new query, so only the step guard ends it."""
    return {"action": "search", "query": f"value{len(observations)}", "k": 1}


def _stop_fields(result: RunResult) -> dict[str, Any]:
    """The controller's stop decision, whether the answer check accepted it or not."""
    if result.stop not in (Stop.ANSWERED, Stop.ANSWER_REJECTED):
        return {}
    fields, _ = FINAL.read(result.state.messages[-1].get("content") or "")
    return fields or {}


def _read_sources(result: RunResult) -> list[str]:
    return _stop_fields(result).get("read_sources", []) if result.stop is Stop.ANSWERED else []


def environment() -> Environment:
    """A fresh pinned corpus with the controller variants as models (and the optional ``distinct_queries`` gate)."""
    corpus = PinnedCorpus()
    return Environment(
        tools=corpus.tools(),
        gates={"distinct_queries": corpus.distinct_queries},
        models={
            "controller": named(Controller(), final=FINAL),
            "duplicate": named(
                Controller(_config("controlled-duplicate", "value", "value", "never-present", 2)), final=FINAL
            ),
            "one_round": named(Controller(_config("existing-key", "value", "exists", "replaces", 1)), final=FINAL),
            "forging": named(_forging, final=FINAL),
            "looping": named(_looping, final=FINAL),
        },
        checks={
            # Independent of the controller's own verdict: was the passage that really holds the fact read?
            "read_put_existing": lambda result: "put-existing" in _read_sources(result),
            "history_kept": lambda result: _stop_fields(result).get("query_history") == corpus.query_history,
        },
        answer_check=FINAL.check(_stop_ending),
        endings=ENDINGS,
        system_prompt="Search the pinned quill 2.4 documentation, read what you find, and stop when the rule says so.",
    )
