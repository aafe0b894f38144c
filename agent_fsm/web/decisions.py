"""
A reviewer's decision from a form, applied through the store's atomic decision functions.

Nothing here decides by itself: :func:`agent_fsm.store.approve`,
:func:`agent_fsm.store.reject` and the others check that the pause the reviewer saw is the
open one (a compare-and-set on its id), and an edit is judged against the
tool's contract and the gate like a new proposal. This module turns the form
into their arguments and their refusals into answers a person can act on.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from agent_fsm import Agent
from agent_fsm.engine import DEPTH_CEILING, EventSink, RunResult, UngatedApproval, answered_by, nesting_exceeds
from agent_fsm.store import (
    AlreadyDecided,
    RunNotFound,
    StoreError,
    answer,
    approve,
    cancel,
    decide_reply,
    reject,
    reply_of,
)
from agent_fsm.store.protocol import RunStore

__all__ = ["ACTIONS", "FormRefused", "Request", "answer_fields", "apply", "decide", "read_form"]

ACTIONS = ("approve", "edit", "reject", "answer", "reply", "cancel")
"""What a form may ask: approve the call as it is, approve it with edited arguments, reject it, answer it,
decide every call of the reply at once, or cancel the run (it ends ``cancelled``)."""

MAX_REASON = 2000


class FormRefused(ValueError):
    """
    No decision was taken; ``status`` is the HTTP status that says why and ``title`` the page's heading.

    409: the pause is not open any more (someone decided first, or the page is stale);
    422: the form is incomplete, the edit is not JSON a call can carry (too deep, a number too long),
    or the edited call breaks the tool's contract or is denied by the gate;
    404: no such run.
    """

    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.title = title
        self.message = message


@attrs.frozen
class Request:
    """A decision as the form asked for it: which pause, which way, the edit or the reason."""

    run_id: str
    pause_id: str
    action: str
    arguments: dict[str, Any] | None = None
    reason: str | None = None
    fields: dict[str, str] | None = None  # an answer's form fields, read against the result schema by apply
    reply: dict[str, Any] | None = None  # a whole reply's decisions, in the JSON form reply_of reads


@attrs.frozen
class Field:
    """One input of the answer form, made from a property of the result schema."""

    name: str
    kind: str  # text, integer, number, boolean, choice, json
    required: bool
    options: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None


def answer_fields(result: Mapping[str, Any]) -> list[Field]:
    """
    The answer form's inputs for a result schema: one per property of an object schema (a choice for an
    enum, a number box for numbers, a check box for a boolean, text, or JSON for anything richer), or one JSON
    box for any other schema. The browser checks what HTML can (required, bounds, choices); the server checks all.
    """
    properties = result.get("properties") if result.get("type") == "object" else None
    if not isinstance(properties, Mapping) or not properties:
        return [Field("answer", "json", True)]
    required = set(result.get("required") or ())
    fields = []
    for name, schema in properties.items():
        schema = schema if isinstance(schema, Mapping) else {}
        kind = schema.get("type")
        if isinstance(schema.get("enum"), list) and all(isinstance(v, str) for v in schema["enum"]):
            fields.append(Field(name, "choice", name in required, tuple(schema["enum"])))
        elif kind in ("integer", "number"):
            fields.append(Field(name, kind, name in required, (), schema.get("minimum"), schema.get("maximum")))
        elif kind == "boolean":
            fields.append(Field(name, "boolean", False))
        elif kind == "string":
            fields.append(Field(name, "text", name in required))
        else:
            fields.append(Field(name, "json", name in required))
    return fields


def _answer_of(fields: list[Field], given: Mapping[str, str]) -> Any:
    """The answer the form's fields give, typed by the schema; refused (422) where a field cannot be read."""
    if len(fields) == 1 and fields[0].name == "answer" and fields[0].kind == "json" and "answer" in given:
        return _json_field("answer", given.get("answer", ""))
    value: dict[str, Any] = {}
    for field in fields:
        raw = given.get(field.name, "")
        if field.kind == "boolean":
            value[field.name] = raw in ("on", "true")
            continue
        if raw == "" and not field.required:
            continue
        if field.kind in ("integer", "number"):
            try:
                value[field.name] = int(raw) if field.kind == "integer" else float(raw)
            except ValueError:
                raise FormRefused(422, "The answer was refused", f"{field.name}: {raw!r} is not a number") from None
        elif field.kind == "json":
            value[field.name] = _json_field(field.name, raw)
        else:
            value[field.name] = raw
    return value


def _json_field(name: str, text: str) -> Any:
    try:
        found = json.loads(text)
    except (ValueError, RecursionError) as exc:  # not JSON, a number too long, nesting Python cannot read
        raise FormRefused(422, "The answer was refused", f"{name} is not JSON Python can read: {exc}") from None
    if nesting_exceeds(found, DEPTH_CEILING):
        raise FormRefused(422, "The answer was refused", f"{name} nests deeper than {DEPTH_CEILING} levels")
    return found


def read_form(run_id: str, form: Mapping[str, Any]) -> Request:
    """
    The decision a submitted form asks for.

    Raises:
        FormRefused: (422) a field is missing, the edit is not a JSON object (or nests deeper than
            ``DEPTH_CEILING``, or holds a number too long to read), or the reason is empty.
    """
    action, pause_id = form.get("action"), form.get("pause_id")
    if action not in ACTIONS:
        raise FormRefused(422, "Unknown decision", f"the form asks for {action!r}; expected one of {ACTIONS}")
    if not isinstance(pause_id, str) or not pause_id:
        raise FormRefused(422, "No pause named", "the form does not say which pause it decides; reload the run")
    if action == "edit":
        text = form.get("arguments")
        try:
            arguments = json.loads(text) if isinstance(text, str) else None
        except json.JSONDecodeError as exc:
            raise FormRefused(422, "The edit is not JSON", f"the edited arguments are not JSON: {exc}") from None
        except (ValueError, RecursionError) as exc:  # a number too long to convert; nesting deeper than Python recurses
            said = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            raise FormRefused(422, "The edit cannot be read", f"the edited arguments: {said}") from None
        if not isinstance(arguments, dict):
            raise FormRefused(422, "The edit is not an object", "the edited arguments must be a JSON object")
        if nesting_exceeds(arguments, DEPTH_CEILING):  # nothing deeper can be stored or judged
            raise FormRefused(
                422, "The edit cannot be read", f"the edited arguments nest deeper than {DEPTH_CEILING} levels"
            )
        return Request(run_id, pause_id, "edit", arguments=arguments)
    if action == "reply":
        text = form.get("reply")
        try:
            reply = json.loads(text) if isinstance(text, str) else None
        except (ValueError, RecursionError) as exc:
            raise FormRefused(422, "The review is not JSON", f"the reply's decisions: {exc}") from None
        if not isinstance(reply, dict) or nesting_exceeds(reply, DEPTH_CEILING):
            raise FormRefused(422, "The review is not an object", "the reply's decisions map each call id to one")
        return Request(run_id, pause_id, "reply", reply=reply)
    if action == "answer":
        fields = {k[len("answer.") :]: v for k, v in form.items() if k.startswith("answer.") and isinstance(v, str)}
        if isinstance(form.get("answer"), str):
            fields["answer"] = form["answer"]
        return Request(run_id, pause_id, "answer", fields=fields)
    if action in ("reject", "cancel"):
        reason = form.get("reason")
        reason = reason.strip() if isinstance(reason, str) else ""
        if not reason and action == "reject":
            raise FormRefused(422, "A rejection needs a reason", "say why: the model is told the reason")
        if len(reason) > MAX_REASON:
            raise FormRefused(422, "The reason is too long", f"keep the reason under {MAX_REASON} characters")
        return Request(run_id, pause_id, action, reason=reason)
    return Request(run_id, pause_id, "approve")


def decide(
    store: RunStore,
    request: Request,
    agent: Agent,
    *,
    reviewer: str,
    given: Any = None,
    on_event: EventSink | None = None,
) -> RunResult:
    """
    Decide ``request`` in ``store`` by the store's function for its kind, and continue the run as ``agent``.

    The one place a decision's kind picks what the store does, for the inbox's
    forms and for every protocol ``agent_fsm.serve`` speaks; ``given`` is a
    person's answer when the kind is ``answer``.

    Raises:
        AlreadyDecided, RunNotFound, ValueError (an edit, an answer or a review refused), StoreError:
            nothing was decided.
    """
    how: dict[str, Any] = {"reviewer": reviewer, "pause_id": request.pause_id, "on_event": on_event}
    if request.action == "reject":
        return reject(store, request.run_id, agent, reason=request.reason or "", **how)
    if request.action == "cancel":
        return cancel(store, request.run_id, agent, reason=request.reason or "", **how)
    if request.action == "reply":
        return decide_reply(store, request.run_id, agent, reply=reply_of(request.reply), **how)
    if request.action == "answer":
        return answer(store, request.run_id, agent, answer=given, **how)
    return approve(store, request.run_id, agent, arguments=request.arguments, **how)


def apply(request: Request, *, reviewer: str, open_store: Callable[[], RunStore], agent: Agent) -> RunResult:
    """
    Decide ``request`` as ``reviewer`` and continue the run as ``agent`` (in this thread) until it rests again.

    Raises:
        FormRefused: the pause is not open (409), the run is unknown (404), the edit is refused or the
            call cannot be approved by ``agent`` (no gate for an effectful call) (422).
        StoreError: the store failed.
    """
    store = open_store()
    try:
        given = None
        if request.action == "answer":
            _call, person = answered_by(agent.tools, store.load(request.run_id).state)
            if person is None:
                raise FormRefused(422, "The answer was refused", "this call is not one a person answers")
            given = _answer_of(answer_fields(person.result), request.fields or {})
        return decide(store, request, agent, reviewer=reviewer, given=given)
    except AlreadyDecided as exc:
        raise FormRefused(
            409, "This pause is no longer open", f"{exc}. Nothing was decided: the page was stale; reload the run."
        ) from None
    except RunNotFound as exc:
        raise FormRefused(404, "No such run", str(exc)) from None
    except UngatedApproval as exc:  # the inbox's agent has no gate: its approval could not run the call
        raise FormRefused(422, "This call cannot be approved here", f"{exc}. Nothing was decided.") from None
    except StoreError:
        raise
    except FormRefused:
        raise
    except ValueError as exc:
        title = {"answer": "The answer was refused", "reply": "The review was refused"}.get(
            request.action, "The edit was refused"
        )
        raise FormRefused(422, title, f"{exc}. Nothing was decided.") from None
    finally:
        store.close()
