"""
A reviewer's decision from a form, applied through the store's atomic decision functions.

Nothing here decides by itself: :func:`agent_fsm.store.approve` and
:func:`agent_fsm.store.reject` check that the pause the reviewer saw is the
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
from agent_fsm.engine import DEPTH_CEILING, RunResult, UngatedApproval, nesting_exceeds
from agent_fsm.store import AlreadyDecided, RunNotFound, StoreError, approve, reject
from agent_fsm.store.protocol import RunStore

__all__ = ["ACTIONS", "FormRefused", "Request", "apply", "read_form"]

ACTIONS = ("approve", "edit", "reject")
"""What a form may ask: approve the call as it is, approve it with edited arguments, or reject it."""

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
    if action == "reject":
        reason = form.get("reason")
        reason = reason.strip() if isinstance(reason, str) else ""
        if not reason:
            raise FormRefused(422, "A rejection needs a reason", "say why: the model is told the reason")
        if len(reason) > MAX_REASON:
            raise FormRefused(422, "The reason is too long", f"keep the reason under {MAX_REASON} characters")
        return Request(run_id, pause_id, "reject", reason=reason)
    return Request(run_id, pause_id, "approve")


def apply(request: Request, *, reviewer: str, open_store: Callable[[], RunStore], agent: Agent) -> RunResult:
    """
    Decide ``request`` as ``reviewer`` and continue the run as ``agent`` (in this thread) until it rests again.

    Raises:
        FormRefused: the pause is not open (409), the run is unknown (404), the edit is refused or the
            call cannot be approved by ``agent`` (no gate for an effectful call) (422).
        StoreError: the store failed.
    """
    how: dict[str, Any] = {"reviewer": reviewer, "pause_id": request.pause_id}
    store = open_store()
    try:
        if request.action == "reject":
            return reject(store, request.run_id, agent, reason=request.reason or "", **how)
        return approve(store, request.run_id, agent, arguments=request.arguments, **how)
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
    except ValueError as exc:
        raise FormRefused(422, "The edit was refused", f"{exc}. Nothing was decided.") from None
    finally:
        store.close()
