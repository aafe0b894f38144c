"""
Retrieval with query refinement: a controller that reads, applies a declared rule, then stops or searches again.

The corpus is pinned (:mod:`agent_fsm.examples.pinned_corpus`): passages
named by content hash, read only through the handles search issued. The
controller is a plain ``decide(task, observations)`` function configured by
a rule chosen from the question's words (:data:`RULES`); it sees the
question and its own observations, never the expected answer.

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

import re
from collections.abc import Mapping
from typing import Any

from agent_fsm.engine import Ending, FinalDecision, Limits, RunResult, RunState, Stop, named, observations_of
from agent_fsm.examples.pinned_corpus import PASSAGES, VERSION, PinnedCorpus
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
    "run_report",
]

LIMITS = Limits(max_turns=7, repeated_denials=1)
"""Seven model calls is the step guard: the rules need at most five (two rounds of search and read, then stop)."""

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


# --- the combined run report ----------------------------------------------------

EXECUTION_MODE = "offline-scripted-retrieval-controller"
"""How the report's runs were made: the declared controller over the pinned corpus, no model and no network."""

INTERPRETATION = (
    "Both runs follow rules declared in advance and check passages for a literal marker; no model was called, "
    "so a completed stop says the configured marker was read, not that the question was answered well."
)


def _run_record(result: RunResult) -> dict[str, Any]:
    """A run as the report keeps it: the controller's stop fields, the engine's stop and code, every observation."""
    fields = _stop_fields(result)
    return {
        **fields,
        "stop": result.stop.value,
        "code": result.code,
        "policy_decisions": result.state.turns,
        "observations": [
            {"tool": o["action"], "arguments": o["arguments"], "ok": o["ok"], "result": o["result"]}
            for o in observations_of(result.state.messages)
        ],
    }


def run_report(question: str = "Does put replace the value of a key that already exists?") -> dict[str, Any]:
    """
    Run the declared controller on ``question``, then the controlled duplicate case, and report both in one record.

    Each run gets a fresh pinned corpus. The record names how it was made
    (``execution_mode``, ``model_called`` is always false), the ``corpus_id``
    both runs read, the normal run (``controller``), the duplicate-query stop
    (``controlled_duplicate_stop``) and how to read them (``interpretation``).
    ``agent-fsm refine`` prints it and saves it with ``--output``.

    Raises:
        ValueError: the question is blank or over 512 characters (nothing is run).
    """
    problem = _question_problem(question)
    if problem is not None:
        raise ValueError(problem)
    records = {}
    for key, model in (("controller", "controller"), ("controlled_duplicate_stop", "duplicate")):
        world = environment()
        records[key] = _run_record(world.agent(world.models[model](), limits=LIMITS).run(question))
    return {
        "execution_mode": EXECUTION_MODE,
        "model_called": False,
        "corpus_id": PinnedCorpus().corpus_id,  # pinned: every fresh copy, each run's included, has this id
        **records,
        "interpretation": INTERPRETATION,
    }
