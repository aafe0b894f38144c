"""
Hypothesis strategies for what a run is made of: proposals, models, limits, gates.

Every strategy is named for what it generates. Proposals are OpenAI wire
messages built from the registry's own contracts, so valid calls are valid
by the engine's validator and invalid ones are refused by it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal

import attrs
from hypothesis import strategies as st

from agent_fsm.engine import (
    DEFAULT_LAST_WORD,
    FallbackModel,
    File,
    Image,
    Limits,
    Model,
    ModelReply,
    PersonAnswers,
    Price,
    Prices,
    ProviderFailure,
    Registry,
    ScriptedModel,
    ToolCall,
    ToolRule,
    Verdict,
    after,
    answer_message,
    at_most_once,
    before,
    check_tool_rules,
    drop_middle,
    elide_results,
    ends_run,
    summarize,
)
from agent_fsm.testing._schema import schema_values, schema_violations

__all__ = [
    "MESSAGE_KINDS",
    "TableGate",
    "FailingModel",
    "answer_messages",
    "assistant_messages",
    "compactors",
    "capped_tools",
    "fallback_models",
    "files",
    "gates",
    "images",
    "invalid_arguments",
    "limits",
    "prices",
    "reported_replies",
    "scripted_models",
    "scripts",
    "answers",
    "invalid_answers",
    "tasks",
    "thoughts",
    "tool_arguments",
    "tool_calls",
    "tool_rule_sets",
    "verdicts",
]

MessageKind = Literal["call", "bad_json", "unknown_tool", "bad_arguments", "parallel", "answer"]
MESSAGE_KINDS: tuple[MessageKind, ...] = ("call", "bad_json", "unknown_tool", "bad_arguments", "parallel", "answer")
"""The kinds of assistant message :func:`assistant_messages` can make."""

# Neutral words: prose beside a call must not look like any one world's vocabulary.
_WORDS = st.sampled_from(["let", "me", "check", "the", "request", "first", "then", "next", "step", "done", "now", "ok"])
_PROSE = st.lists(_WORDS, min_size=1, max_size=6).map(" ".join)


def tool_arguments(tools: Registry, name: str, *, constants: Iterable[Any] = ()) -> st.SearchStrategy[dict[str, Any]]:
    """
    Arguments that tool ``name``'s contract accepts (checked by the engine's validator).

    ``constants`` are values worth trying where they fit (see :func:`constants_of`).
    """
    tool = tools[name]
    return schema_values(tool.json_schema, constants).filter(lambda args: not tool.errors(args))


def invalid_arguments(tools: Registry, name: str) -> st.SearchStrategy[Any]:
    """Argument values tool ``name``'s contract refuses: wrong types, missing or extra fields, broken bounds."""
    tool = tools[name]
    return schema_violations(tool.json_schema).filter(lambda args: bool(tool.errors(args)))


def _person(tools: Registry | PersonAnswers, name: str | None) -> PersonAnswers:
    if isinstance(tools, PersonAnswers):  # a question asked now (an open call's, say): its schema is the contract
        return tools
    person = tools[name].handler if name is not None else None
    if not isinstance(person, PersonAnswers):
        raise TypeError(f"tool {name!r} is not one a person answers (declare it with ToolSpec.person)")
    return person


def answers(
    tools: Registry | PersonAnswers, name: str | None = None, *, constants: Iterable[Any] = ()
) -> st.SearchStrategy[Any]:
    """
    Answers a person could give a call to tool ``name`` that its result schema accepts.

    Give a question instead of ``tools, name`` (``answered_by(agent.tools,
    state)[1]``: an MCP server's elicitation open now, say) for answers to it.
    """
    person = _person(tools, name)
    return schema_values(person.result, constants).filter(lambda value: not person.errors(value))


def invalid_answers(tools: Registry | PersonAnswers, name: str | None = None) -> st.SearchStrategy[Any]:
    """Answers tool ``name``'s result schema (or a question's) refuses: wrong types, missing or extra fields, bounds."""
    person = _person(tools, name)
    return schema_violations(person.result).filter(lambda value: bool(person.errors(value)))


def _refusable(tools: Registry) -> list[str]:
    """Tools whose contract can refuse something (a contract that accepts anything has no violations)."""
    found = []
    for name, tool in tools.items():
        schema = tool.json_schema
        if schema.get("required") or schema.get("additionalProperties") is False or schema.get("properties"):
            found.append(name)
    return found


def tool_calls(tools: Registry, *, call_id: str = "call_0") -> st.SearchStrategy[ToolCall]:
    """Well-formed calls to tools of ``tools`` (valid arguments, known names)."""
    if not tools:
        return st.nothing()
    return _tool_calls(tools, call_id)


@st.composite
def _tool_calls(draw: st.DrawFn, tools: Registry, call_id: str) -> ToolCall:
    name = draw(st.sampled_from(list(tools)))
    arguments = draw(tool_arguments(tools, name))
    return ToolCall(call_id, name, arguments, json.dumps(arguments))


def _claim(name: str, arguments: Mapping[str, Any]) -> str:
    return f"Calling {name} with " + ", ".join(f"{k}={json.dumps(v)}" for k, v in arguments.items())


def thoughts(
    tools: Registry, name: str | None = None, *, constants: Iterable[Any] = ()
) -> st.SearchStrategy[str | None]:
    """
    Text riding beside a call: none, prose, or a *claim* about the arguments.

    Claims name argument values that may differ from the real ones, which is
    what a gate reading the model's explanation instead of its arguments falls for.
    """
    options: list[st.SearchStrategy[str | None]] = [st.none(), _PROSE]
    if name is not None and name in tools:
        options.append(st.builds(_claim, st.just(name), tool_arguments(tools, name, constants=constants)))
    return st.one_of(options)


@st.composite
def _thought_about(draw: st.DrawFn, shapes: _Shapes, name: str, real: Mapping[str, Any] | None) -> str | None:
    """A thought beside a call of ``name``: a misstated value, the truth, or any thought."""
    fields = shapes.field_values.get(name, {})
    known = sorted(set(real or ()) & set(fields))
    # "other" first: failing examples shrink towards the plainest thought (often none).
    way = draw(st.sampled_from(["other", "misstated", "honest"])) if known else "other"
    if way == "other" or real is None:
        return draw(shapes.thoughts[name])
    if way == "honest":
        return _claim(name, real)
    field = draw(st.sampled_from(known))
    return _claim(name, {**real, field: draw(fields[field])})


def _wire_call(call_id: str | None, name: str, arguments: str) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        item["id"] = call_id
    return item


_BROKEN_JSON = ('{"a": ', "{'a': 1}", "not json", "[1, 2]", "{", '"text"', "null")
_UNKNOWN_NAMES = ("delete_everything", "transfer_funds", "shell", "")


@st.composite
def _entry(
    draw: st.DrawFn,
    call_ids: st.SearchStrategy[str | None],
    names: st.SearchStrategy[str],
    arguments: Mapping[str, st.SearchStrategy[str]],
    targeted: bool,
) -> tuple[dict[str, Any], str | None]:
    # Built in a composite, not with .map(lambda ...), so failing examples print values, not lambda bodies.
    call_id = draw(call_ids)
    name = draw(names)
    return _wire_call(call_id, name, draw(arguments[name])), name if targeted else None


class _Shapes:
    """Every strategy a registry's messages are drawn from, built once (building strategies is costly)."""

    def __init__(self, tools: Registry, max_calls: int, constants: tuple[Any, ...]) -> None:
        # Effectful tools first: they are what gates are for, and Hypothesis
        # both favours and shrinks towards the first choices.
        names = sorted(tools, key=lambda n: not tools[n].effectful)
        refusable = [n for n in names if n in _refusable(tools)]

        def as_text(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[str]:
            return strategy.map(json.dumps)

        unknown = [n for n in _UNKNOWN_NAMES if n not in tools]
        # (names, arguments by name, whether thoughts may talk about the tool), per kind
        plans: dict[str, tuple[list[str], dict[str, st.SearchStrategy[str]], bool]] = {
            "unknown_tool": (unknown, {n: st.sampled_from(["{}", '{"x": 1}']) for n in unknown}, False),
            "bad_json": (names or ["tool"], {n: st.sampled_from(_BROKEN_JSON) for n in names or ["tool"]}, False),
        }
        if names:
            plans["call"] = (names, {n: as_text(tool_arguments(tools, n, constants=constants)) for n in names}, True)
        if refusable:
            plans["bad_arguments"] = (refusable, {n: as_text(invalid_arguments(tools, n)) for n in refusable}, True)
        self.entries: dict[tuple[str, int], st.SearchStrategy[tuple[dict[str, Any], str | None]]] = {}
        for kind in ("call", "bad_arguments", "bad_json", "unknown_tool"):
            # a kind the registry cannot express falls back to an unknown tool
            plan_names, arguments, targeted = plans.get(kind, plans["unknown_tool"])
            for index in range(max(2, max_calls)):
                call_ids = st.sampled_from([f"call_{index}", f"c{index}", None])
                self.entries[(kind, index)] = _entry(call_ids, st.sampled_from(plan_names), arguments, targeted)
        self.thoughts = {n: thoughts(tools, n, constants=constants) for n in names}
        self.field_values = {
            n: {f: schema_values(sub, constants) for f, sub in tools[n].json_schema.get("properties", {}).items()}
            for n in names
        }
        self.plain_thoughts = thoughts(tools)
        single = [k for k in MESSAGE_KINDS if k not in ("parallel", "answer")]
        self.parallel_kinds = st.lists(st.sampled_from(single), min_size=2, max_size=max(2, max_calls))


@st.composite
def _call_message(draw: st.DrawFn, shapes: _Shapes, kind: MessageKind) -> dict[str, Any]:
    kinds = draw(shapes.parallel_kinds) if kind == "parallel" else [kind]
    entries = [draw(shapes.entries[(k, i)]) for i, k in enumerate(kinds)]
    target = entries[0][1]
    if target is None:
        thought = draw(shapes.plain_thoughts)
    else:
        try:
            real = json.loads(entries[0][0]["function"]["arguments"])
        except ValueError:
            real = None
        thought = draw(_thought_about(shapes, target, real if isinstance(real, dict) else None))
    return {"role": "assistant", "content": thought, "tool_calls": [entry for entry, _ in entries]}


def answer_messages() -> st.SearchStrategy[dict[str, Any]]:
    """Plain assistant answers: text and no proposal."""
    return st.builds(answer_message, _PROSE)


def assistant_messages(
    tools: Registry, *, kinds: Iterable[MessageKind] = MESSAGE_KINDS, max_calls: int = 3, constants: Iterable[Any] = ()
) -> st.SearchStrategy[dict[str, Any]]:
    """
    Assistant messages in OpenAI wire format, as a model might send them for ``tools``.

    ``kinds`` picks from: ``call`` (one valid call), ``bad_json`` (argument
    text that is not a JSON object), ``unknown_tool``, ``bad_arguments`` (wrong
    types, missing or extra fields, broken bounds, off-pattern strings),
    ``parallel`` (several calls of any kind in one message) and ``answer``.
    Calls may carry a thought in ``content``; ids may be missing.
    ``constants`` are argument values worth trying (see :func:`constants_of`).
    """
    chosen = list(kinds)
    unknown = sorted(set(chosen) - set(MESSAGE_KINDS))
    if unknown or not chosen:
        raise ValueError(f"kinds must be a non-empty selection of {MESSAGE_KINDS}, got {chosen!r}")

    shapes = _Shapes(tools, max_calls, tuple(constants))
    return st.one_of([answer_messages() if kind == "answer" else _call_message(shapes, kind) for kind in chosen])


def scripts(
    tools: Registry,
    *,
    kinds: Iterable[MessageKind] = MESSAGE_KINDS,
    min_size: int = 0,
    max_size: int = 6,
    constants: Iterable[Any] = (),
) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Lists of assistant messages: the turns a scripted model plays in order."""
    return st.lists(assistant_messages(tools, kinds=kinds, constants=constants), min_size=min_size, max_size=max_size)


def scripted_models(
    tools: Registry,
    *,
    kinds: Iterable[MessageKind] = MESSAGE_KINDS,
    min_size: int = 0,
    max_size: int = 6,
    constants: Iterable[Any] = (),
    max_reactions: int = 2,
) -> st.SearchStrategy[ScriptedModel]:
    """
    :class:`agent_fsm.ScriptedModel` s playing a random script, sometimes with
    (up to ``max_reactions``) reactions to a denied or invalid observation (a model that changes tack).
    Past its script it answers :data:`~agent_fsm.engine.DEFAULT_LAST_WORD` (a random script need not end).
    """
    kinds, constants = tuple(kinds), tuple(constants)
    turns = scripts(tools, kinds=kinds, min_size=min_size, max_size=max_size, constants=constants)
    if max_reactions <= 0:
        return st.builds(ScriptedModel, turns, st.just({}), last_word=st.just(DEFAULT_LAST_WORD))
    reaction_keys = st.sampled_from(['"kind": "denied"', '"kind": "invalid"', '"kind": "error"'])
    messages = assistant_messages(tools, kinds=kinds, constants=constants)
    reactions = st.dictionaries(reaction_keys, messages, max_size=max_reactions)
    return st.builds(ScriptedModel, turns, reactions, last_word=st.just(DEFAULT_LAST_WORD))


def limits(
    *,
    max_turns: tuple[int, int] = (0, 8),
    max_prompt_tokens: tuple[int, int] = (0, 3000),
    repeated_denials: tuple[int, int] = (1, 3),
    max_tool_calls: tuple[int, int] | None = (0, 6),
    max_cost: tuple[Decimal, Decimal] | None = None,
    max_output_tokens: tuple[int, int] = (1, 500),
    repeated_results: tuple[int, int] | None = (2, 4),
    wrap_up: bool | None = None,
    max_seconds: tuple[float, float] | None = None,
) -> st.SearchStrategy[Limits]:
    """
    :class:`agent_fsm.Limits` with each budget drawn from an inclusive range (``max_tool_calls`` and
    ``repeated_results`` may be None; ``repeated_results=None`` keeps it off). ``wrap_up`` is drawn unless
    given.

    With ``max_cost`` (a range of amounts) the limits carry a money budget and
    the output cap it needs, drawn from ``max_output_tokens``. With
    ``max_seconds`` (a range of seconds) they carry a time budget: run them on
    a :class:`~agent_fsm.testing.ManualClock` (``Agent(clock=...)``) so that
    the time a run spends is the property's to choose, not the machine's load.
    """
    tool_budget = st.none() if max_tool_calls is None else st.none() | st.integers(*max_tool_calls)
    money = st.none() if max_cost is None else st.decimals(*max_cost, places=6)
    return st.builds(
        Limits,
        max_turns=st.integers(*max_turns),
        max_prompt_tokens=st.integers(*max_prompt_tokens),
        repeated_denials=st.integers(*repeated_denials),
        max_tool_calls=tool_budget,
        max_cost=money,
        max_output_tokens=st.none() if max_cost is None else st.integers(*max_output_tokens),
        repeated_results=st.none() if repeated_results is None else st.none() | st.integers(*repeated_results),
        wrap_up=st.booleans() if wrap_up is None else st.just(wrap_up),
        max_seconds=st.none() if max_seconds is None else st.floats(*max_seconds, exclude_min=max_seconds[0] <= 0),
    )


_AMOUNTS = st.decimals(min_value=Decimal(0), max_value=Decimal(100), places=2)


def prices(models: Sequence[str] = ()) -> st.SearchStrategy[Prices]:
    """Price tables: a :class:`agent_fsm.Price` per name in ``models`` and a default for any other model."""
    price = st.builds(Price, input=_AMOUNTS, output=_AMOUNTS, cached_input=st.none() | _AMOUNTS)
    return st.builds(Prices, st.fixed_dictionaries({name: price for name in models}), price)


def reported_replies(
    messages: st.SearchStrategy[dict[str, Any]], *, max_prompt_tokens: int = 4000, max_output_tokens: int = 500
) -> st.SearchStrategy[ModelReply]:
    """
    Replies as a provider reports them: a message from ``messages`` and random usage figures, any of them missing.

    The output is at most ``max_output_tokens`` (a provider honours the cap
    it is given); the cached tokens at most the prompt.
    """
    return _reported(messages, max_prompt_tokens, max_output_tokens)


@st.composite
def _reported(draw: st.DrawFn, messages: st.SearchStrategy[dict[str, Any]], prompt_cap: int, cap: int) -> ModelReply:
    prompt = draw(st.none() | st.integers(1, max(prompt_cap, 1)))
    cached = None if prompt is None else draw(st.none() | st.integers(0, prompt))
    return ModelReply(draw(messages), prompt, None, draw(st.none() | st.integers(0, cap)), cached)


class FailingModel:
    """A model the provider cannot serve: every call raises :class:`agent_fsm.ProviderFailure` of ``kind``."""

    def __init__(self, kind: str = "http") -> None:
        self.kind = kind

    def __repr__(self) -> str:
        return f"FailingModel({self.kind!r})"

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        raise ProviderFailure(f"the provider failed ({self.kind})", kind=self.kind)


_KINDS = ("timeout", "transport", "http", "bad_response", "request_limit")


def fallback_models(tools: Registry, *, max_failing: int = 2) -> st.SearchStrategy[FallbackModel]:
    """:class:`agent_fsm.FallbackModel` chains: up to ``max_failing`` failing models, then a scripted one."""
    failing = st.lists(st.sampled_from(_KINDS).map(FailingModel), min_size=1, max_size=max(max_failing, 1))
    kinds = st.sets(st.sampled_from(_KINDS), min_size=1)
    return st.builds(lambda chain, last, on: FallbackModel(*chain, last, on=on), failing, scripted_models(tools), kinds)


def capped_tools(tools: Registry, *, max_calls: tuple[int, int] = (0, 3)) -> st.SearchStrategy[dict[str, Any]]:
    """``tools`` with a random ``max_calls`` cap (or none) on each tool."""
    cap = st.none() | st.integers(*max_calls)
    return st.fixed_dictionaries({name: cap for name in tools}).map(
        lambda caps: {name: attrs.evolve(spec, max_calls=caps[name]) for name, spec in tools.items()}
    )


def verdicts() -> st.SearchStrategy[Verdict]:
    """Gate verdicts: allow, deny with a reason, ask a human."""
    return st.builds(Verdict, st.sampled_from(["allow", "deny", "ask"]), _PROSE)


Decision = Literal["allow", "deny", "ask", "allow_tuple", "deny_tuple"]
_DECISIONS: tuple[Decision, ...] = ("allow", "deny", "ask", "allow_tuple", "deny_tuple")


@attrs.frozen
class TableGate:
    """
    A gate that decides by tool name from a fixed table: a pure function of the call.

    ``allow_tuple``/``deny_tuple`` answer ``(bool, reason)`` instead of a
    :class:`~agent_fsm.Verdict`, the other form a gate may return.
    """

    table: Mapping[str, Decision] = attrs.field(converter=dict, hash=False)
    default: Decision = "deny"

    def __call__(self, call: ToolCall) -> Verdict | tuple[bool, str]:
        decision = self.table.get(call.name, self.default)
        if decision == "allow_tuple":
            return True, f"{call.name} allowed by table"
        if decision == "deny_tuple":
            return False, f"{call.name} denied by table"
        return Verdict(decision, f"{call.name}: {decision} by table")


def gates(tools: Registry, *, decisions: Iterable[Decision] = _DECISIONS) -> st.SearchStrategy[TableGate]:
    """Deterministic gates over ``tools``: each tool allowed, denied or sent to a human (verdict or tuple form)."""
    choice = st.sampled_from(tuple(decisions))
    return st.builds(TableGate, st.fixed_dictionaries({name: choice for name in tools}), choice)


# The smallest valid header of each image type, then any bytes: a size can be read or not, the part is the same.
_IMAGE_HEADS = {
    "image/png": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
    "image/jpeg": b"\xff\xd8\xff\xe0",
    "image/gif": b"GIF89a",
    "image/webp": b"RIFF\x00\x00\x00\x00WEBP",
}
_ADDRESSES = st.sampled_from(["https://example.com/a.png", "https://example.com/scan.jpg", "gs://bucket/b.webp"])


def images(*, max_bytes: int = 256) -> st.SearchStrategy[Image]:
    """:class:`Image` parts: by URL, or bytes of each media type (a real header, then up to ``max_bytes``)."""
    as_bytes = st.sampled_from(sorted(_IMAGE_HEADS)).flatmap(
        lambda media: st.binary(max_size=max_bytes).map(
            lambda tail: Image(data=_IMAGE_HEADS[media] + tail, media_type=media)
        )
    )
    return st.one_of(_ADDRESSES.map(lambda url: Image(url=url)), as_bytes)


def files(*, max_bytes: int = 256) -> st.SearchStrategy[File]:
    """:class:`File` parts (PDFs): by URL, or bytes starting ``%PDF-``, with or without a file name."""
    names = st.none() | st.sampled_from(["invoice.pdf", "report.pdf", "scan 2.pdf"])
    as_bytes = st.builds(
        lambda tail, name: File(data=b"%PDF-1.4\n" + tail, name=name), st.binary(max_size=max_bytes), names
    )
    return st.one_of(st.just(File(url="https://example.com/report.pdf")), as_bytes)


def tasks(*, max_parts: int = 4) -> st.SearchStrategy[Any]:
    """What a run may be given: text, or a list of text, images and files (at least one item)."""
    item = st.one_of(_PROSE, images(), files())
    return st.one_of(_PROSE, st.lists(item, min_size=1, max_size=max_parts))


def tool_results(*, max_parts: int = 3) -> st.SearchStrategy[Any]:
    """
    What a handler may return: an :class:`Image` or :class:`File` alone, or JSON data with some among it
    (in a list, or as a dict's values), for checking that a run sends them on and shows their placeholders.
    """
    media = st.one_of(images(), files())
    item = st.one_of(_PROSE, st.integers(-1000, 1000), media)
    listed = st.lists(item, min_size=1, max_size=max_parts)
    keyed = st.dictionaries(st.sampled_from(["shot", "scan", "note", "page"]), item, min_size=1, max_size=max_parts)
    return st.one_of(media, listed, keyed)


def register_type_strategies() -> None:
    """Let ``st.from_type`` build :class:`Limits`, :class:`Verdict`, images, files and (registry-free) tool calls."""
    st.register_type_strategy(Image, images())
    st.register_type_strategy(File, files())
    st.register_type_strategy(Limits, limits())
    st.register_type_strategy(Verdict, verdicts())
    st.register_type_strategy(
        ToolCall,
        st.builds(
            ToolCall,
            st.sampled_from(["call_0", "call_1"]),
            st.sampled_from(["read_tool", "write_tool", "unknown_tool"]),
            st.none() | st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3),
        ),
    )


def compactors(*, summarizer: Model | None = None, keep: tuple[int, int] = (1, 4)) -> st.SearchStrategy[Any]:
    """
    The built-in compactions with a ``keep`` drawn: :func:`agent_fsm.elide_results`, :func:`agent_fsm.drop_middle`,
    and :func:`agent_fsm.summarize` by ``summarizer`` when one is given.

    For a property over a user's own agent: whatever compaction it is given,
    every prompt keeps the system prompt, the task and the latest results.
    """
    keeps = st.integers(*keep)
    choices: list[st.SearchStrategy[Any]] = [keeps.map(elide_results), keeps.map(drop_middle)]
    if summarizer is not None:
        choices.append(keeps.map(lambda k: summarize(summarizer, keep=k)))
    return st.one_of(choices)


def tool_rule_sets(names: Iterable[str], *, max_size: int = 6) -> st.SearchStrategy[tuple[ToolRule, ...]]:
    """
    Tool rules over ``names`` (after, before, at most once, ends the run) that the static checker accepts.

    Rule sets under which a tool could never be offered are left out, as
    :class:`agent_fsm.Agent` refuses them when it is defined.
    """
    pool = sorted(set(names))
    tool = st.sampled_from(pool)
    pair = st.tuples(tool, tool).filter(lambda p: p[0] != p[1])
    rule = st.one_of(
        pair.map(lambda p: after(*p)),
        pair.map(lambda p: before(*p)),
        tool.map(at_most_once),
        tool.map(ends_run),
    )
    sets = st.lists(rule, max_size=max_size, unique=True).map(tuple)
    return sets.filter(lambda rules: not check_tool_rules(rules, pool))
