"""
What one model call is shown: its prompt (kept apart from the transcript, shrunk before the run must stop)
and the tools it offers.

The transcript (``RunState.messages``) keeps everything, for audit and for
saving. The prompt is what the next model call sends: the transcript until
a compaction, then a list of *entries*, each an index into the transcript
(that message, sent as it is) or a :class:`StandIn` (a message sent in
place of the transcript messages it ``covers``: an elided tool result, a
summary of the middle of the run). Messages appended later join both.

A compaction (``compact=``) is applied when the next prompt would pass
``Limits.max_prompt_tokens`` (or an earlier ``compact_at``); it receives a
:class:`PromptWindow` and answers the new entries. The built-ins:

* :func:`elide_results` -- older tool results replaced by a short stand-in, the last ``keep`` kept;
* :func:`drop_middle` -- the system prompt, the task and the last ``keep`` turns kept, the middle left out;
* :func:`summarize` -- as :func:`drop_middle`, the middle replaced by a summary a model writes
  (that call is a model call of the run: it spends a turn and is held to the token budget).

Whatever answers, the engine checks the result (:func:`prompt_problem`):
the system prompt, the task and the latest reply with its results are sent
as they are, every tool result still answers a call the prompt shows, and
nothing is sent twice or out of order. Each compaction is recorded
(:class:`Compaction`), so what the model did not see is never a mystery.

The tools a turn offers
-----------------------
A registry says what a tool *is*; these rules say *when* it may be used,
as a function of what the run has done so far (Letta's tool rules,
pydantic-ai's ``prepare_tools``, the Agents SDK's ``is_enabled``):

* :func:`after` ``(tool, other)`` -- ``tool`` is offered once ``other`` has returned a result;
* :func:`before` ``(tool, other)`` -- ``tool`` is offered until ``other`` has run;
* :func:`at_most_once` ``(tool)`` -- ``tool`` is offered until it has run once;
* :func:`ends_run` ``(tool)`` -- a result from ``tool`` ends the run ``tool_ended``.

Rules are data, so the static checker reads them
(:func:`agent_fsm.engine._analysis.check_tool_rules`) and an agent whose
rules leave a tool never offered is refused when it is defined. A function
of the run's state (``tools_for=``) may narrow the offer further; a call to
a tool not offered this turn is ``invalid``.

"Has run" means the handler was attempted (a result or an error); "returned
a result" means an observation of kind ``result``. Both are counted by the
run in flight from its transcript, never read from a saved field, so a
saved state cannot unlock a tool.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

import attrs

from agent_fsm.engine._errors import NotSynchronous, RunError
from agent_fsm.engine._limits import Limits
from agent_fsm.engine._messages import TokenEstimator, assistant_text, content_text, has_parts
from agent_fsm.engine._models import Model, ModelReply
from agent_fsm.engine._steps import Handed, Perform, Steps, call_of
from agent_fsm.engine._tools import measure

if TYPE_CHECKING:
    from agent_fsm.engine._state import RunState

__all__ = [
    "after",
    "at_most_once",
    "before",
    "choose_offer",
    "compact_state",
    "compacting",
    "Compaction",
    "compaction_record",
    "Compactor",
    "drop_middle",
    "elide_results",
    "ends_run",
    "offered",
    "prompt_problem",
    "PromptEntry",
    "PromptWindow",
    "protected",
    "read_compactions",
    "read_prompt",
    "refusal",
    "RuleKind",
    "sent_messages",
    "StandIn",
    "strategy_name",
    "Summarize",
    "summarize",
    "threshold",
    "ToolRule",
    "ToolsFor",
    "Usage",
    "window_of",
    "write_compactions",
    "write_prompt",
]


# --- prompt ---


@attrs.frozen
class StandIn:
    """
    A message sent in place of the transcript messages at ``covers`` (ascending indices).

    An elided tool result covers its own message (and answers the same call
    id); a summary covers the middle it replaced.
    """

    covers: tuple[int, ...]
    message: dict[str, Any] = attrs.field(hash=False)


PromptEntry = int | StandIn
"""One entry of a compacted prompt: a transcript index (sent as it is) or a :class:`StandIn`."""


@attrs.frozen
class Compaction:
    """
    One compaction, as the state records it: before which model call, by what, and what the model no longer sees.

    ``elided`` are the transcript indices newly sent as a stand-in (a result
    elided, a middle summarized), ``dropped`` those newly left out altogether;
    the transcript keeps every one of them. ``charged`` marks a compaction
    that was itself a model call of the run (a summary): it spent model
    call ``turn - 1``, which has no reply in the transcript.
    """

    turn: int
    strategy: str
    tokens_before: int
    tokens_after: int
    elided: tuple[int, ...] = ()
    dropped: tuple[int, ...] = ()
    charged: bool = False


def covered(entry: PromptEntry) -> tuple[int, ...]:
    """The transcript indices ``entry`` stands for."""
    return (entry,) if type(entry) is int else entry.covers  # type: ignore[union-attr]


def sent_messages(messages: Sequence[dict[str, Any]], prompt: Iterable[PromptEntry]) -> list[dict[str, Any]]:
    """The messages a prompt of ``prompt`` entries sends."""
    return [messages[e] if type(e) is int else e.message for e in prompt]  # type: ignore[union-attr]


def protected(messages: Sequence[Mapping[str, Any]], opening: int) -> frozenset[int]:
    """
    The transcript indices every prompt sends as they are.

    The system prompt (each system message of the opening), the task (the
    opening's last message) and the latest reply with the results that
    answer it: what the next model call cannot do without.
    """
    keep = {i for i in range(opening) if messages[i].get("role") == "system"}
    if opening:
        keep.add(opening - 1)
    for index in range(len(messages) - 1, opening - 1, -1):
        role = messages[index].get("role")
        if role == "assistant":
            keep.update(range(index, len(messages)))
            break
        if role != "tool":
            break
    return frozenset(keep)


def prompt_problem(messages: Sequence[Mapping[str, Any]], prompt: Sequence[Any], opening: int) -> str | None:
    """
    What is wrong with ``prompt`` as a prompt of ``messages`` (``None``: nothing).

    Entries in transcript order, none twice, each inside the transcript; the
    protected messages (:func:`protected`) sent as they are; every tool
    message answers a call of the assistant message just before it, and no
    call is left unanswered before the next message.
    """
    last = -1
    verbatim: set[int] = set()
    for position, entry in enumerate(prompt):
        if type(entry) is int:
            indices: tuple[int, ...] = (entry,)
            verbatim.add(entry)
        elif isinstance(entry, StandIn):
            indices = entry.covers
            if type(entry.message) is not dict or type(entry.message.get("role")) is not str:
                return f"entry {position} stands in with something that is not a message"
        else:
            return f"entry {position} is neither a transcript index nor a stand-in: {entry!r:.60}"
        for index in indices:
            if type(index) is not int or not last < index < len(messages):
                return f"entry {position} names message {index!r} out of order or outside the transcript"
            last = index
    missing = sorted(protected(messages, opening) - verbatim)
    if missing:
        return f"message {missing[0]} (system prompt, task or latest reply) is not sent as it is"
    open_calls: set[Any] = set()
    for message in sent_messages(messages, prompt):  # type: ignore[arg-type]
        if message.get("role") == "tool":
            if message.get("tool_call_id") not in open_calls:
                return f"a tool result answers {message.get('tool_call_id')!r}, a call the prompt does not show"
            open_calls.discard(message.get("tool_call_id"))
            continue
        if open_calls:
            return f"call {sorted(map(str, open_calls))[0]!r} is left unanswered in the prompt"
        if message.get("role") == "assistant":
            open_calls = {c.get("id") for c in message.get("tool_calls") or () if isinstance(c, Mapping)}
    return None


@attrs.frozen
class PromptWindow:
    """
    What a compaction sees: the transcript, the prompt as it stands, and the budget to fit.

    ``budget`` is the tokens the prompt's messages may take (the threshold
    less the tool declarations and the provider's correction); ``keep`` the
    indices that must be sent as they are.
    """

    transcript: Sequence[dict[str, Any]]
    prompt: tuple[PromptEntry, ...]
    opening: int
    budget: int
    estimator: TokenEstimator = attrs.field(eq=False)

    @property
    def keep(self) -> frozenset[int]:
        """The transcript indices every prompt must send as they are (see :func:`protected`)."""
        return protected(self.transcript, self.opening)

    def message(self, entry: PromptEntry) -> dict[str, Any]:
        """The message ``entry`` sends."""
        return self.transcript[entry] if type(entry) is int else entry.message  # type: ignore[union-attr]

    def tokens(self, entries: Iterable[PromptEntry]) -> int:
        """The estimated tokens of the messages ``entries`` send."""
        return sum(self.estimator(self.message(e)) for e in entries)

    def turns(self) -> list[int]:
        """Positions in :attr:`prompt` where a turn (a reply and what follows it) begins, after the opening."""
        return [
            p
            for p, e in enumerate(self.prompt)
            if type(e) is int and e >= self.opening and self.transcript[e].get("role") == "assistant"
        ]


Compactor = Callable[[PromptWindow], Sequence[PromptEntry]]
"""A compaction: the new prompt entries for a window (``compact=``); may be ``async`` under ``arun``."""


def _named(name: str, function: Callable[[PromptWindow], Sequence[PromptEntry]]) -> Compactor:
    function.__qualname__ = function.__name__ = name
    return function


def elide_results(keep: int = 2) -> Compactor:
    """
    Replace every tool result but the last ``keep`` with a short stand-in (same call id, content elided).

    The calls stay in the prompt, so the model still sees what it did; only
    the bulky results go. The latest reply's results are always kept.
    """
    _check_keep(keep)

    def compact(window: PromptWindow) -> list[PromptEntry]:
        results = [
            p for p, e in enumerate(window.prompt) if type(e) is int and window.transcript[e].get("role") == "tool"
        ]
        old = set(results[: max(len(results) - keep, 0)])
        guarded = window.keep
        out: list[PromptEntry] = []
        for position, entry in enumerate(window.prompt):
            if position in old and entry not in guarded:
                assert type(entry) is int
                message = window.transcript[entry]
                note = json.dumps({"elided": f"this result ({_size(message)} characters) is kept in the transcript"})
                entry = StandIn(
                    (entry,), {"role": "tool", "tool_call_id": message.get("tool_call_id"), "content": note}
                )
            out.append(entry)
        return out

    return _named(f"elide_results(keep={keep})", compact)


def _size(message: Mapping[str, Any]) -> int:
    content = message.get("content")
    return len(content) if isinstance(content, str) else len(json.dumps(content, default=str))


def _check_keep(keep: object) -> None:
    if type(keep) is not int or keep < 1:
        raise ValueError(f"'keep' must be a whole number >= 1 (got {keep!r}).")


def _middle(window: PromptWindow, keep: int) -> tuple[list[PromptEntry], list[PromptEntry], list[PromptEntry]]:
    """The prompt cut in three: head (system prompt, task), middle, tail (the last ``keep`` turns)."""
    prompt = list(window.prompt)
    starts = window.turns()
    tail_from = starts[-keep] if len(starts) >= keep else (starts[0] if starts else len(prompt))
    guarded = window.keep
    head: list[PromptEntry] = [e for e in prompt[:tail_from] if type(e) is int and e in guarded]
    middle = [e for e in prompt[:tail_from] if not (type(e) is int and e in guarded)]
    return head, middle, prompt[tail_from:]


def drop_middle(keep: int = 4) -> Compactor:
    """Keep the system prompt, the task and the last ``keep`` turns; leave the turns between them out."""
    _check_keep(keep)

    def compact(window: PromptWindow) -> list[PromptEntry]:
        head, _middle_part, tail = _middle(window, keep)
        return [*head, *tail]

    return _named(f"drop_middle(keep={keep})", compact)


SUMMARY_INSTRUCTION = (
    "Summarize the conversation below for the assistant that continues it: the facts found, the actions taken "
    "and their outcomes, and what remains to do. Be brief; do not invent anything."
)


@attrs.frozen
class Summarize:
    """
    The summarizing compaction (:func:`summarize`): the engine asks ``model`` for the summary.

    The call is a model call of the run: it spends a turn, its prompt is
    held to ``max_prompt_tokens`` (the oldest of the middle is cut to fit),
    it is priced like any model call (by ``model``'s name) and added to the
    run's usage, and a provider failure ends the run ``provider_error``.
    With no turn left, or when the call's worst case (its prompt in, the
    output cap out) would pass ``max_cost``, the middle is left out without a
    summary.
    """

    model: Model
    keep: int = 4
    instruction: str = SUMMARY_INSTRUCTION

    def __attrs_post_init__(self) -> None:
        _check_keep(self.keep)
        if not callable(getattr(self.model, "chat", None)) and not callable(getattr(self.model, "achat", None)):
            raise TypeError(f"'model' must be a model with chat() or achat() (got {self.model!r}).")

    @property
    def name(self) -> str:
        """How the record names this compaction."""
        return f"summarize(keep={self.keep})"

    def split(self, window: PromptWindow) -> tuple[list[PromptEntry], list[PromptEntry], list[PromptEntry]]:
        """Head, middle (to summarize) and tail of the window's prompt."""
        return _middle(window, self.keep)

    def request(self, window: PromptWindow, middle: Sequence[PromptEntry], budget: int) -> list[dict[str, Any]]:
        """The summarizer's prompt: the instruction and the middle as text, its oldest lines cut to fit ``budget``."""
        lines = [_line(window.message(e)) for e in middle]
        while True:
            messages = [
                {"role": "system", "content": self.instruction},
                {"role": "user", "content": "\n".join(lines) or "(nothing)"},
            ]
            if sum(window.estimator(m) for m in messages) <= budget or not lines:
                return messages
            lines = lines[max(1, len(lines) // 4) :]

    def stand_in(self, middle: Sequence[PromptEntry], text: str) -> StandIn:
        """The summary, standing in for the middle it replaces."""
        covers = tuple(i for e in middle for i in covered(e))
        return StandIn(covers, {"role": "user", "content": f"Summary of the earlier part of this run: {text}"})


def _line(message: Mapping[str, Any]) -> str:
    role = message.get("role")
    text = assistant_text(message) if role == "assistant" else message.get("content")
    calls = [
        f"{c.get('function', {}).get('name')}({c.get('function', {}).get('arguments')})"
        for c in message.get("tool_calls") or ()
        if isinstance(c, Mapping)
    ]
    shown = (
        text if isinstance(text, str) else content_text(text) if has_parts(message) else json.dumps(text, default=str)
    )
    return f"{role}: {shown or ''}{' calls ' + ', '.join(calls) if calls else ''}"


def strategy_name(compact: Any) -> str:
    """The name a compaction is recorded under."""
    if isinstance(compact, Summarize):
        return compact.name
    return str(getattr(compact, "__qualname__", None) or repr(compact))


def summarize(model: Model, keep: int = 4, instruction: str = SUMMARY_INSTRUCTION) -> Summarize:
    """Keep the system prompt, the task and the last ``keep`` turns; ``model`` summarizes the middle (a run's turn)."""
    return Summarize(model, keep, instruction)


def threshold(limits: Limits, compact_at: int | None) -> int:
    """The prompt size past which a compaction is due: ``compact_at`` if earlier, else ``max_prompt_tokens``."""
    limit = limits.max_prompt_tokens
    return limit if compact_at is None or compact_at > limit else compact_at


class Spender(Protocol):
    """What a summary's model call is checked against before it is made, and charged to after (the run)."""

    def admits(self, model: Any, prompt_tokens: int) -> bool:
        """Whether a call to ``model`` of ``prompt_tokens`` fits the cost budget at its worst case."""

    def charge_call(self, model: Any, reply: ModelReply | None, estimate: int, measured: int) -> None:
        """Add the call just made to ``model`` to the run's usage (its figures where reported)."""


def compact_state(
    state: RunState,
    compact: Any,
    compact_at: int | None,
    limits: Limits,
    spare: int,
    estimator: TokenEstimator,
    perform: Perform | None,
    spender: Spender | None = None,
) -> Steps[Compaction | tuple[str, str]]:
    """
    Compact ``state``'s prompt by ``compact`` (``spare``: the tokens a prompt carries besides its messages).

    The answer is checked (:func:`prompt_problem`), measured, recorded in
    ``state.compactions`` and becomes ``state.prompt``; a summary is charged
    a turn and, to ``spender``, its cost (which it must admit before the call).
    Returns the record, or why the summarizer's reply could not be had: the
    provider failure's kind (``timeout``, ``transport``, ``bad_response``...) and message.

    Raises:
        RunError: the compaction raised, or answered a prompt that breaks a rule.
    """
    window = window_of(state, max(threshold(limits, compact_at) - spare, 0), estimator)
    name = strategy_name(compact)
    summary_budget = limits.max_prompt_tokens if state.turns < limits.max_turns else None  # a summary needs a turn
    try:
        cap = limits.max_output_tokens
        entries, charged, fault, reply = yield from compacting(compact, window, perform, summary_budget, spender, cap)
        problem = prompt_problem(state.messages, entries, state.opening)
        tokens = sum(measure(estimator, m) for m in sent_messages(state.messages, entries))
    except (NotSynchronous, RunError):
        raise
    except Exception as exc:
        raise RunError(f"the compaction {name} raised {type(exc).__name__}: {exc}", state=state) from exc
    if fault is not None:
        return fault
    if problem is not None:
        raise RunError(f"the compaction {name} answered a prompt that breaks a rule: {problem}", state=state)
    if charged is not None:  # the summary was a model call of this run: it spends a turn, and money
        state.turns += 1
        state.prompt_token_log.append(charged)
        if spender is not None:
            message = reply.message if isinstance(reply, ModelReply) else reply
            reported = reply if isinstance(reply, ModelReply) else None
            spender.charge_call(compact.model, reported, charged, measure(estimator, message))
    before = state.message_tokens
    record = compaction_record(state.turns + 1, name, window.prompt, entries, before, tokens, charged is not None)
    state.compactions.append(record)
    if before:  # the provider's correction, scaled to the new size
        state.usage_offset = state.usage_offset * tokens // before
    state.prompt, state.message_tokens = list(entries), tokens
    return record


def window_of(state: RunState, budget: int, estimator: TokenEstimator) -> PromptWindow:
    """The window a compaction of ``state``'s prompt sees (the whole transcript before the first compaction)."""
    prompt = tuple(range(len(state.messages))) if state.prompt is None else tuple(state.prompt)
    return PromptWindow(state.messages, prompt, state.opening, budget, estimator)


def compaction_record(
    turn: int,
    strategy: str,
    prompt: Sequence[PromptEntry],
    entries: Sequence[PromptEntry],
    before: int,
    after: int,
    charged: bool = False,
) -> Compaction:
    """What a compaction from ``prompt`` to ``entries`` newly elided (sent as a stand-in) and dropped."""
    stood_in_before = {i for e in prompt if type(e) is not int for i in covered(e)}
    stood_in = {i for e in entries if type(e) is not int for i in covered(e)}
    seen_before = stood_in_before | {e for e in prompt if type(e) is int}
    still = stood_in | {e for e in entries if type(e) is int}
    elided, dropped = tuple(sorted(stood_in - stood_in_before)), tuple(sorted(seen_before - still))
    return Compaction(turn, strategy, before, after, elided, dropped, charged)


def compacting(
    compact: Any,
    window: PromptWindow,
    perform: Perform | None,
    summary_budget: int | None,
    spender: Spender | None = None,
    output_cap: int | None = None,
) -> Steps[tuple[list[PromptEntry], int | None, tuple[str, str] | None, Any]]:
    """
    The new entries ``compact`` answers for ``window``; with a summary, the tokens of its prompt (to charge).

    A :class:`Summarize` asks its model (``summary_budget`` is the token
    budget of that call, ``None``: no turn left, so no summary; no summary
    either when ``spender`` does not admit the call's worst case); anything
    else is called with the window. A summarizer that ``takes_output_cap`` is
    told ``output_cap``, as the run's model is. Returns the entries, the summary call's
    prompt tokens (``None``: no call made), if the summarizer could
    not be reached, why (the run then ends ``provider_error``), and its reply.

    Raises:
        Exception: whatever the compaction or the summarizer's model raised, to be reported with the run.
    """
    if not isinstance(compact, Summarize):
        request = call_of("compaction", compact, window)
        entries = perform(request) if perform is not None else (yield request)
        if type(entries) is Handed:  # the performer left it to the driver
            entries = yield entries or request
        return list(entries), None, None, None
    head, middle, tail = compact.split(window)
    if not middle or summary_budget is None:
        return [*head, *tail], None, None, None
    messages = compact.request(window, middle, summary_budget)
    tokens = sum(window.estimator(m) for m in messages)
    if spender is not None and not spender.admits(compact.model, tokens):
        return [*head, *tail], None, None, None  # its worst case would pass max_cost: no summary, as with no turn
    chat = getattr(compact.model, "chat", None) or getattr(compact.model, "achat")  # noqa: B009
    told = (
        {"max_output_tokens": output_cap}
        if output_cap is not None and getattr(compact.model, "takes_output_cap", False)
        else {}
    )
    request = call_of("summarizer", chat, messages, [], **told)
    try:
        reply = perform(request) if perform is not None else (yield request)
        if type(reply) is Handed:
            reply = yield reply or request
    except OSError as exc:
        kind = getattr(exc, "kind", "timeout" if isinstance(exc, TimeoutError) else "transport")
        return [], None, (str(kind), f"the summarizer could not be reached: {type(exc).__name__}: {exc}"), None
    problem = reply.problem() if isinstance(reply, ModelReply) else None
    if problem is not None:
        return [], None, ("bad_response", f"the summarizer's reply was refused: {problem}"), None
    message = reply.message if isinstance(reply, ModelReply) else reply
    text = assistant_text(message) if isinstance(message, Mapping) else None
    if not text:
        raise ValueError(f"the summarizer's reply holds no text: {message!r:.200}")
    return [*head, compact.stand_in(middle, text), *tail], tokens, None, reply


# --- the saved form of the prompt and its record (read by agent_fsm.engine._state) ---


def _bad(path: str, detail: str) -> ValueError:
    return ValueError(path, detail)


def _indices(value: Any, path: str) -> tuple[int, ...]:
    if type(value) is not list:
        raise _bad(path, f"expected an array of message indices, got {value!r:.60}")
    for i, item in enumerate(value):
        if type(item) is not int or item < 0:
            raise _bad(f"{path}.{i}", f"expected a whole number >= 0, got {item!r:.60}")
    return tuple(value)


def read_prompt(value: Any, path: str) -> list[PromptEntry] | None:
    """A saved prompt: null, or entries (an index, or ``{"covers": [...], "message": {...}}``); else ValueError."""
    if value is None:
        return None
    if type(value) is not list:
        raise _bad(path, f"expected null or an array of prompt entries, got {value!r:.60}")
    out: list[PromptEntry] = []
    for i, item in enumerate(value):
        if type(item) is int and item >= 0:
            out.append(item)
            continue
        if type(item) is not dict or set(item) != {"covers", "message"}:
            raise _bad(f"{path}.{i}", "expected a message index or an object with covers and message")
        message = item["message"]
        if type(message) is not dict or type(message.get("role")) is not str:
            raise _bad(f"{path}.{i}.message", "expected a message object with a role")
        out.append(StandIn(_indices(item["covers"], f"{path}.{i}.covers"), message))
    return out


_COMPACTION_FIELDS = tuple(f.name for f in attrs.fields(Compaction))


def read_compactions(value: Any, path: str) -> list[Compaction]:
    """Saved compaction records; ValueError(path, detail) naming the first problem."""
    if type(value) is not list:
        raise _bad(path, f"expected an array, got {value!r:.60}")
    out = []
    for i, item in enumerate(value):
        where = f"{path}.{i}"
        if type(item) is not dict or set(item) != set(_COMPACTION_FIELDS):
            raise _bad(where, f"expected an object with {', '.join(_COMPACTION_FIELDS)}")
        for name in ("turn", "tokens_before", "tokens_after"):
            if type(item[name]) is not int or item[name] < 0:
                raise _bad(f"{where}.{name}", f"expected a whole number >= 0, got {item[name]!r:.60}")
        if type(item["strategy"]) is not str:
            raise _bad(f"{where}.strategy", "expected a string")
        if type(item["charged"]) is not bool:
            raise _bad(f"{where}.charged", "expected true or false")
        elided = _indices(item["elided"], f"{where}.elided")
        dropped = _indices(item["dropped"], f"{where}.dropped")
        record = Compaction(
            item["turn"], item["strategy"], item["tokens_before"], item["tokens_after"], elided, dropped
        )
        out.append(attrs.evolve(record, charged=item["charged"]) if item["charged"] else record)
    return out


def write_prompt(prompt: list[PromptEntry] | None) -> list[Any] | None:
    """The saved form of a prompt (see :func:`read_prompt`)."""
    if prompt is None:
        return None
    return [e if type(e) is int else {"covers": list(e.covers), "message": e.message} for e in prompt]  # type: ignore[union-attr]


def write_compactions(records: list[Compaction]) -> list[dict[str, Any]]:
    """The saved form of compaction records."""
    return [{**attrs.asdict(r), "elided": list(r.elided), "dropped": list(r.dropped)} for r in records]


# --- offer ---

RuleKind = Literal["after", "before", "at_most_once", "ends_run"]
_RULE_KINDS = ("after", "before", "at_most_once", "ends_run")

ToolsFor = Callable[["RunState"], Iterable[str]]
"""The names of the tools offered this turn, as a function of the run's state (``tools_for=``)."""


def _paired(rule: ToolRule, attribute: attrs.Attribute[Any], value: object) -> None:
    needs = rule.kind in ("after", "before")
    if needs and (type(value) is not str or not value):
        raise TypeError(f"a {rule.kind!r} rule names the other tool (a non-empty str, got {value!r})")
    if not needs and value is not None:
        raise TypeError(f"a {rule.kind!r} rule names one tool only (got other={value!r})")


def _name(rule: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if type(value) is not str or not value:
        raise TypeError(f"'{attribute.name}' must be a tool name, a non-empty str (got {value!r}).")


@attrs.frozen
class ToolRule:
    """
    One declarative rule about when ``tool`` is offered; build it with :func:`after`, :func:`before`,
    :func:`at_most_once` or :func:`ends_run`.

    .. versionadded:: 0.4
    """

    kind: RuleKind = attrs.field(validator=attrs.validators.in_(_RULE_KINDS))
    tool: str = attrs.field(validator=_name)
    other: str | None = attrs.field(default=None, validator=_paired)

    def __str__(self) -> str:
        return f"{self.kind}({self.tool!r}{'' if self.other is None else f', {self.other!r}'})"


def after(tool: str, other: str) -> ToolRule:
    """``tool`` is offered only once ``other`` has returned a result."""
    return ToolRule("after", tool, other)


def before(tool: str, other: str) -> ToolRule:
    """``tool`` is offered only until ``other`` has run."""
    return ToolRule("before", tool, other)


def at_most_once(tool: str) -> ToolRule:
    """``tool`` is offered until it has run once."""
    return ToolRule("at_most_once", tool)


def ends_run(tool: str) -> ToolRule:
    """A result from ``tool`` ends the run (``Stop.TOOL_ENDED``); the rest of its reply's calls are not run."""
    return ToolRule("ends_run", tool)


class Usage:
    """What the run in flight has done with each tool: attempts and results, counted as observations arrive."""

    __slots__ = ("attempted", "last", "last_ok", "succeeded")

    def __init__(self) -> None:
        self.attempted: dict[str, int] = {}
        self.succeeded: set[str] = set()
        self.last: str | None = None  # the tool of the latest observation, and whether it was a result
        self.last_ok = False

    def observe(self, name: str, kind: str) -> None:
        """One observation of a call to ``name`` of ``kind`` (result, error, invalid, denied)."""
        if kind in ("result", "error"):
            self.attempted[name] = self.attempted.get(name, 0) + 1
        if kind == "result":
            self.succeeded.add(name)
        self.last, self.last_ok = name, kind == "result"

    @classmethod
    def of(cls, state: RunState) -> Usage:
        """The usage ``state``'s transcript records (this run's part, after the opening), read afresh."""
        names: dict[Any, str] = {}
        answered: list[Any] = []
        for message in state.messages[state.opening :]:
            if message.get("role") == "assistant":
                for item in message.get("tool_calls") or ():
                    if isinstance(item, Mapping) and isinstance(item.get("function"), Mapping):
                        names[item.get("id")] = str(item["function"].get("name"))
            elif message.get("role") == "tool":
                answered.append(message.get("tool_call_id"))
        usage = cls()
        for call_id, kind in zip(answered, (o.kind for o in state.observations), strict=False):
            usage.observe(names.get(call_id, ""), kind)
        return usage


def offered(names: Iterable[str], rules: Iterable[ToolRule], usage: Usage) -> list[str]:
    """The ``names`` (in order) the ``rules`` leave on offer, given what the run has done."""
    closed: set[str] = set()
    for rule in rules:
        kind = rule.kind
        if kind == "after":
            if rule.other not in usage.succeeded:
                closed.add(rule.tool)
        elif kind == "before":
            if usage.attempted.get(rule.other or ""):
                closed.add(rule.tool)
        elif kind == "at_most_once" and usage.attempted.get(rule.tool):
            closed.add(rule.tool)
    return [name for name in names if name not in closed]


def choose_offer(
    tools: Mapping[str, Any], tools_for: ToolsFor | None, rules: Iterable[ToolRule], usage: Usage, state: RunState
) -> list[str]:
    """
    The tools one model call offers: ``tools_for(state)`` (else every tool), narrowed by the rules.

    Raises:
        RunError: ``tools_for`` raised, or named a tool the agent does not have (a bug, reported with the run).
    """
    names: Iterable[str] = tools
    if tools_for is not None:
        try:
            names = list(tools_for(state))
        except Exception as exc:
            raise RunError(f"tools_for raised {type(exc).__name__}: {exc}", state=state) from exc
        unknown = [n for n in names if n not in tools]
        if unknown:
            raise RunError(f"tools_for offered {unknown[0]!r}, which is not a tool of the agent", state=state)
    return offered(names, rules, usage)


def refusal(
    name: str, still: frozenset[str], rules: Iterable[ToolRule], usage: Usage, tools: Mapping[str, Any]
) -> str | None:
    """Why a call to ``name`` is ``invalid``: not offered this turn, or closed by the rules since (``None``: fine)."""
    if name not in tools or (name in still and offered((name,), rules, usage)):
        return None  # offered and still open; an unknown tool is the boundary's to word
    now = offered(sorted(still), rules, usage)
    return f"{name} is not offered at this point of the run (offered now: {', '.join(now) or 'none'})"
