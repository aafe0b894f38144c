"""
Real runs become tests: record a model's replies to a cassette, replay them, and explore around them.

Rationale: a run against a real model is the best test input there is and
the worst test (slow, paid, never the same twice). :class:`RecordingModel`
wraps the real model and writes each request and reply to a plain JSON
file, secrets redacted, after every reply (a crash keeps what was recorded);
:class:`ReplayModel` serves the replies in order and fails, naming the turn
and the first differing message, as soon as the run asks for something the
cassette does not hold. :func:`perturbed_runs` then moves a recorded run a
little (an argument to a boundary, a reply dropped or repeated, a call
denied) so a property explores around real behaviour, not only along it.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
from hypothesis import strategies as st

from agent_fsm import ScriptedModel, ToolCall, Verdict
from agent_fsm.engine import DEFAULT_LAST_WORD, Gate, Model, ModelReply, Registry, wrapped_estimator
from agent_fsm.testing._schema import schema_values

__all__ = [
    "CASSETTE_FORMAT",
    "NotRecorded",
    "Perturbation",
    "RecordingModel",
    "ReplayModel",
    "load_cassette",
    "perturbed_runs",
    "redact",
]

CASSETTE_FORMAT = "agent_fsm.cassette/1"
"""The ``format`` field of every cassette file."""

REDACTED = "[REDACTED]"

_SECRET_KEYS = re.compile(r"(api[_-]?key|authorization|password|secret|token|cookie|credential)", re.IGNORECASE)
_SECRET_TEXT = (
    re.compile(r"sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}"),  # OpenAI and Anthropic keys
    re.compile(r"AKIA[0-9A-Z]{16}"),  # AWS access key ids
    re.compile(r"gh[pousr]_[A-Za-z0-9]{30,}"),  # GitHub tokens
    re.compile(r"xox[abpr]-[A-Za-z0-9\-]{10,}"),  # Slack tokens
    re.compile(r"(?i)bearer\s+[A-Za-z0-9._\-]{8,}"),
)


def redact(value: Any, secrets: Iterable[str] = ()) -> Any:
    """
    ``value`` with secrets replaced by ``[REDACTED]``: values under keys that
    name a secret (``api_key``, ``authorization``, ``token``, ...), text that
    looks like a provider key or a bearer token, and each of ``secrets`` verbatim.
    """
    literal = [s for s in secrets if s]
    if isinstance(value, Mapping):
        return {
            k: REDACTED if isinstance(k, str) and _SECRET_KEYS.search(k) else redact(v, literal)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact(v, literal) for v in value]
    if isinstance(value, str):
        for secret in literal:
            value = value.replace(secret, REDACTED)
        for pattern in _SECRET_TEXT:
            value = pattern.sub(REDACTED, value)
        return value
    return value


def _names_secret(key: Any) -> bool:
    return isinstance(key, str) and _SECRET_KEYS.search(key) is not None


def _plain_json(value: Any) -> Any:
    """The JSON form of a request or a reply (tuples as lists, anything else as its text)."""
    return json.loads(json.dumps(value, default=str))


def load_cassette(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """
    The interactions of a cassette: ``{"request": {"messages", "tools"}, "reply"}`` each, in order, and
    ``"usage"`` (``prompt_tokens``, ``finish``, ``output_tokens``, ``cached_tokens``, ``model``) when the
    recorded model reported it (a provider adapter's :class:`agent_fsm.ModelReply`).

    Raises:
        ValueError: the file is not a cassette.
    """
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("format") != CASSETTE_FORMAT:
        raise ValueError(f"{os.fspath(path)!r} is not a cassette (expected format {CASSETTE_FORMAT!r})")
    interactions = data.get("interactions")
    if not isinstance(interactions, list):
        raise ValueError(f"{os.fspath(path)!r} has no list of interactions")
    return interactions


class RecordingModel:
    """
    Wraps a real model and writes every request and reply to the cassette at ``path``, secrets redacted.

    The file is rewritten whole after each reply (to a temporary file, then
    renamed), so it is always a valid cassette. ``secrets`` are strings to
    redact verbatim besides the patterns :func:`redact` knows.
    """

    def __init__(self, model: Model, path: str | os.PathLike[str], *, secrets: Iterable[str] = ()) -> None:
        self.model = model
        self.path = Path(path)
        self.secrets = tuple(secrets)
        self.interactions: list[dict[str, Any]] = []

    # The wrapped model's token estimate, so an agent given this measures prompts as it would the model.
    estimator = wrapped_estimator("model")

    def __repr__(self) -> str:
        return f"RecordingModel({self.model!r}, {os.fspath(self.path)!r})"

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        reply = self.model.chat(messages, tools)
        request = {"messages": _plain_json(list(messages)), "tools": sorted(_tool_names(tools))}
        usage = attrs.asdict(reply, recurse=False) if isinstance(reply, ModelReply) else None
        message = usage.pop("message") if usage is not None else reply
        interaction = redact({"request": request, "reply": _plain_json(message)}, self.secrets)
        if usage is not None:
            # A provider's reply carries what it reported (tokens, finish, the model): kept beside the message,
            # so a replayed run is charged and ended exactly as the recorded one. Its keys name token counts,
            # not secrets: only its text is redacted.
            interaction["usage"] = {k: redact(v, self.secrets) for k, v in usage.items()}
        self.interactions.append(interaction)
        self._write()
        return reply

    def _write(self) -> None:
        text = json.dumps({"format": CASSETTE_FORMAT, "interactions": self.interactions}, indent=2, sort_keys=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name, suffix=".tmp")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text + "\n")
        os.replace(temporary, self.path)


def _tool_names(tools: Sequence[Mapping[str, Any]]) -> list[str]:
    names = []
    for declaration in tools:
        function = declaration.get("function", declaration)
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            names.append(function["name"])
    return names


class NotRecorded(AssertionError):
    """A replayed run asked for a reply the cassette does not hold: one more, or after a different transcript."""


class ReplayModel:
    """
    Serves a cassette's replies in order, checking that each request is the one recorded.

    The request is compared as recorded (redacted, as JSON); ``strict=False``
    compares only the number of requests, for a run the world changes on purpose.
    ``start`` is how many replies the run already had: a run forked from a
    stored checkpoint (:func:`agent_fsm.store.fork`) asks from there on, so
    pass ``start=forked.state.turns``.

    Raises:
        NotRecorded: from ``chat``, naming the turn and the first message that differs.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, strict: bool = True, secrets: Iterable[str] = (), start: int = 0
    ) -> None:
        self.path = Path(path)
        self.interactions = load_cassette(path)
        self.strict = strict
        self.secrets = tuple(secrets)
        if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start <= len(self.interactions):
            raise ValueError(f"start must be a reply number from 0 to {len(self.interactions)} (got {start!r})")
        self.used = start

    def __repr__(self) -> str:
        return f"ReplayModel({os.fspath(self.path)!r})"

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        turn = self.used + 1
        if self.used >= len(self.interactions):
            raise NotRecorded(
                f"the run asked for reply {turn} but cassette {os.fspath(self.path)!r} holds "
                f"{len(self.interactions)}; the last message was {json.dumps(_plain_json(messages[-1]))[:200]}"
            )
        recorded = self.interactions[self.used]
        if self.strict:
            asked = redact(_plain_json(list(messages)), self.secrets)
            expected = recorded["request"]["messages"]
            if asked != expected:
                raise NotRecorded(_difference(turn, expected, asked, self.path))
        self.used += 1
        usage = recorded.get("usage")
        if isinstance(usage, Mapping):
            return ModelReply(recorded["reply"], **usage)
        return recorded["reply"]


def _difference(turn: int, expected: list[Any], asked: list[Any], path: Path) -> str:
    for index, (want, got) in enumerate(zip(expected, asked, strict=False)):
        if want != got:
            return (
                f"request {turn} differs from the one recorded in {os.fspath(path)!r} at message {index}:\n"
                f"  recorded: {json.dumps(want)[:300]}\n  asked:    {json.dumps(got)[:300]}"
            )
    return (
        f"request {turn} differs from the one recorded in {os.fspath(path)!r}: "
        f"{len(expected)} messages recorded, {len(asked)} asked"
    )


@attrs.frozen
class Perturbation:
    """
    A recorded run moved a little: the replies to play, and the call ids the gate is made to deny.

    ``change`` says what was moved, for a failing example's reader.
    """

    replies: tuple[Mapping[str, Any], ...]
    deny: frozenset[str] = frozenset()
    change: str = "as recorded"

    def model(self) -> ScriptedModel:
        """
        A scripted model playing the replies, closing with the last word past them.

        A recording moved a little (a reply dropped, a call denied) may be
        asked one turn more than was recorded: the model then answers
        :data:`~agent_fsm.engine.DEFAULT_LAST_WORD`, as a model with nothing left to do would.
        """
        return ScriptedModel(self.replies, last_word=DEFAULT_LAST_WORD)

    def gate(self, gate: Gate) -> Gate:
        """``gate``, but denying the calls this perturbation denies."""
        denied = self.deny

        def judged(call: ToolCall) -> Any:
            if call.call_id in denied:
                return Verdict.deny("denied by the perturbation of a recorded run")
            return gate(call)

        return judged


def perturbed_runs(
    path: str | os.PathLike[str], tools: Registry, *, constants: Iterable[Any] = ()
) -> st.SearchStrategy[Perturbation]:
    """
    Recorded runs, each as recorded or moved one step: one call's argument set
    to a boundary (its schema's bounds and ``constants``), a reply dropped or
    repeated, or a call denied by the gate.
    """
    replies = tuple(interaction["reply"] for interaction in load_cassette(path))
    values = tuple(constants)
    calls = [
        (index, position, call)
        for index, reply in enumerate(replies)
        for position, call in enumerate(reply.get("tool_calls") or [])
        if isinstance(call, Mapping)
    ]
    options: list[st.SearchStrategy[Perturbation]] = [st.just(Perturbation(replies))]
    if replies:
        indices = st.integers(0, len(replies) - 1)
        options.append(indices.map(lambda i: _dropped(replies, i)))
        options.append(indices.map(lambda i: _repeated(replies, i)))
    if calls:
        chosen = st.sampled_from(calls)
        options.append(
            chosen.map(
                lambda c: Perturbation(replies, frozenset({str(c[2].get("id"))}), f"call {c[2].get('id')} denied")
            )
        )
        boundary = [c for c in calls if _argument_schemas(tools, c[2])]
        if boundary:
            options.append(st.sampled_from(boundary).flatmap(lambda c: _moved(replies, tools, c, values)))
    return st.one_of(options)


def _denied(replies: tuple[Mapping[str, Any], ...], call_id: str) -> Perturbation:
    return Perturbation(replies, frozenset({call_id}), f"call {call_id} denied")


def _dropped(replies: tuple[Mapping[str, Any], ...], index: int) -> Perturbation:
    return Perturbation((*replies[:index], *replies[index + 1 :]), change=f"reply {index + 1} dropped")


def _repeated(replies: tuple[Mapping[str, Any], ...], index: int) -> Perturbation:
    return Perturbation((*replies[: index + 1], *replies[index:]), change=f"reply {index + 1} repeated")


def _argument_schemas(tools: Registry, call: Mapping[str, Any]) -> dict[str, Any]:
    function = call.get("function") or {}
    tool = tools.get(str(function.get("name")))
    if tool is None:
        return {}
    properties = tool.json_schema.get("properties", {})
    return {k: v for k, v in properties.items() if isinstance(v, Mapping) and v.get("type") in ("integer", "number")}


def _moved(
    replies: tuple[Mapping[str, Any], ...],
    tools: Registry,
    chosen: tuple[int, int, Mapping[str, Any]],
    constants: tuple[Any, ...],
) -> st.SearchStrategy[Perturbation]:
    index, position, call = chosen
    schemas = _argument_schemas(tools, call)

    def move(pair: tuple[str, Any]) -> Perturbation:
        field, value = pair
        function = dict(call["function"])
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            arguments = {}
        arguments = {**arguments, field: value} if isinstance(arguments, dict) else {field: value}
        function["arguments"] = json.dumps(arguments)
        reply = dict(replies[index])
        reply["tool_calls"] = [
            {**c, "function": function} if i == position else c for i, c in enumerate(reply["tool_calls"])
        ]
        moved = (*replies[:index], reply, *replies[index + 1 :])
        return Perturbation(moved, change=f"reply {index + 1}: {function.get('name')}.{field} = {value!r}")

    field = st.sampled_from(sorted(schemas))
    return field.flatmap(lambda f: st.tuples(st.just(f), schema_values(schemas[f], constants))).map(move)
