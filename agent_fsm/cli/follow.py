"""
``--follow``: a run's events printed as they happen, one line each, the model's streamed text inline.

Every line is ``label | what happened``, aligned like the transcript. The
text of an event comes from outside (the model's words, a tool's result,
a gate's reason), so control characters are shown escaped: nothing a
model writes can move the cursor, clear the screen or forge a line.

A run nested in a tool call (an agent run as a tool, a handoff) posts its
events with its own run id, its parent's and the call's joined by ``/``:
its lines carry the call path below the followed run, ``[d1/t1]``, indented
two spaces a level, so each level reads apart.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from agent_fsm.cli._text import clean
from agent_fsm.engine import (
    AnswerWithheld,
    Charged,
    Compacted,
    Ended,
    FellBack,
    Judged,
    ModelReplied,
    ModelRequested,
    Observed,
    Paused,
    Proposed,
    RateWaited,
    RunEvent,
    Screened,
    StateEntered,
    TextDelta,
    ToolProgress,
    ToolsOffered,
)

__all__ = ["Follower", "event_line", "nesting_mark"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_LIMIT = 300  # characters of a result or of arguments shown; the saved trace has them whole


def _safe(text: str) -> str:
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return _safe(text if len(text) <= _LIMIT else text[: _LIMIT - 1] + "…")


def _label(name: str) -> str:
    return f"{name:7} |"


def nesting_mark(run_id: str, top: str | None) -> str:
    """
    What a nested run's lines start with: its call path below ``top``, indented by its depth; ``""`` for ``top``.

    ``top`` is the followed run's id (``None``: nothing is marked).
    """
    if top is None or not run_id.startswith(top + "/"):
        return ""
    path = run_id[len(top) + 1 :]
    return "  " * path.count("/") + f"[{_safe(path)}] "


def event_line(event: RunEvent, *, streamed: bool = False, top: str | None = None) -> str | None:
    """
    The line shown for ``event`` (``None`` for a text delta, which is shown inline).

    ``streamed``: the reply's text was already shown as it arrived, so a reply's line leaves it out.
    ``top``: the followed run's id; an event of a run nested in it is marked with its call path.
    """
    mark = nesting_mark(event.run_id, top)
    if mark:
        line = event_line(event, streamed=streamed)
        if line is None:
            return None
        label, bar, what = line.partition("| ")
        return f"{label}{bar}{mark}{what}"
    if isinstance(event, StateEntered):
        guard = f" [{event.guard}]" if event.guard else ""
        return f"{_label('state')} {event.source} --{event.event}{guard}--> {event.state}"
    if isinstance(event, ModelRequested):
        return f"{_label('model')} asked (call {event.turn}: {event.messages} messages, ~{event.prompt_tokens} tokens)"
    if isinstance(event, ModelReplied):
        calls = f"{event.calls} call{'s' if event.calls != 1 else ''}" if event.calls else "an answer"
        finish = f", finish {event.finish}" if event.finish else ""
        text = f": {_short(event.text)}" if event.text and not streamed else ""
        return f"{_label('model')} replied with {calls} ({event.prompt_tokens} prompt tokens{finish}){text}"
    if isinstance(event, Proposed):
        arguments = "(arguments did not parse)" if event.arguments is None else _short(event.arguments)
        return f"{_label('propose')} {_safe(event.name)} {arguments}  [{_safe(event.call_id)}]"
    if isinstance(event, Judged):
        reason = f": {_short(event.reason)}" if event.reason else ""
        return f"{_label('judge')} {event.kind}{reason}  [{_safe(event.call_id)}]"
    if isinstance(event, Observed):
        return f"{_label('observe')} {event.kind} {_short(event.content)}  [{_safe(event.call_id)}]"
    if isinstance(event, Paused):
        return f"{_label('paused')} {event.pause_id}: {_safe(event.name)} waits for a human: {_short(event.reason)}"
    if isinstance(event, Charged):
        model = f" by {_safe(event.model)}" if event.model else ""
        tokens = f"{event.input_tokens} in ({event.cached_tokens} cached), {event.output_tokens} out"
        return f"{_label('spent')} call {event.turn}{model}: {tokens}; cost {event.cost}, run total {event.total}"
    if isinstance(event, AnswerWithheld):
        more = "; another answer is coming" if event.retrying else ""
        return f"{_label('model')} answer of call {event.turn} withheld: not accepted ({event.state}){more}"
    if isinstance(event, RateWaited):
        cut = "; past the time budget, not made" if event.cut else ""
        return f"{_label('model')} call {event.turn} waited {event.seconds:.3f} s for its rate limit{cut}"
    if isinstance(event, FellBack):
        return f"{_label('model')} call {event.turn} failed ({event.kind}): {_short(event.message)}; next model"
    if isinstance(event, Compacted):
        shrunk = f"{event.tokens_before} -> {event.tokens_after} tokens"
        return f"{_label('compact')} {event.strategy}: {shrunk} ({event.elided} elided, {event.dropped} dropped)"
    if isinstance(event, ToolsOffered):
        return f"{_label('offer')} call {event.turn} offers {', '.join(_safe(n) for n in event.names) or 'no tool'}"
    if isinstance(event, Screened):
        where = "the task" if event.call_id is None else f"[{_safe(event.call_id)}]"
        code = f" {_safe(event.code)}" if event.code else ""
        reason = f": {_short(event.reason)}" if event.reason else ""
        return f"{_label('screen')} {event.action}{code} on {where}{reason}"
    if isinstance(event, ToolProgress):
        total = f"/{event.total:g}" if event.total is not None else ""
        message = f": {_short(event.message)}" if event.message else ""
        return f"{_label('working')} {_safe(event.name)} {event.progress:g}{total}{message}  [{_safe(event.call_id)}]"
    if isinstance(event, Ended):
        result = event.result
        code = f" [{result.code}]" if result.code != result.stop.value else ""
        reason = f": {_short(result.reason)}" if result.reason else ""
        return f"{_label('ended')} {result.stop.value}{code}{reason}"
    return None


class Follower:
    """
    An ``on_event=`` sink that writes each event as one line through ``write``.

    A streaming model's text deltas are written as they arrive on one
    ``text`` line, ended when the next event comes.
    """

    def __init__(self, write: Callable[[str], Any]) -> None:
        self._write = write
        self._streaming = False
        self._top: str | None = None  # the followed run: the first run seen, or the next not nested in it

    def __call__(self, event: RunEvent) -> None:
        """Write ``event`` (a delta inline; anything else on a line of its own)."""
        top = self._top
        if top is None or (event.run_id != top and not event.run_id.startswith(top + "/")):
            self._top = top = event.run_id
        if isinstance(event, TextDelta):
            if not self._streaming:
                self._write(_label("text") + " " + nesting_mark(event.run_id, top))
                self._streaming = True
            self._write(clean(_safe(event.text)))
            return
        streamed = self._streaming
        if streamed:
            self._write("\n")
            self._streaming = False
        line = event_line(event, streamed=streamed, top=top)
        if line is not None:
            self._write(clean(line) + "\n")
