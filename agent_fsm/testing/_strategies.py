"""
Hypothesis strategies for what a run is made of: proposals, models, limits, gates.

Every strategy is named for what it generates. Proposals are OpenAI wire
messages built from the registry's own contracts, so valid calls are valid
by the engine's validator and invalid ones are refused by it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import attrs
from hypothesis import strategies as st

from ..gates import Verdict
from ..limits import Limits
from ..models import ScriptedModel
from ..tools import Registry, ToolCall
from ._schema import schema_values, schema_violations

__all__ = [
    "MESSAGE_KINDS",
    "TableGate",
    "answer_messages",
    "assistant_messages",
    "gates",
    "invalid_arguments",
    "limits",
    "scripted_models",
    "scripts",
    "thoughts",
    "tool_arguments",
    "tool_calls",
    "verdicts",
]

MessageKind = Literal["call", "bad_json", "unknown_tool", "bad_arguments", "parallel", "answer"]
MESSAGE_KINDS: tuple[MessageKind, ...] = ("call", "bad_json", "unknown_tool", "bad_arguments", "parallel", "answer")
"""The kinds of assistant message :func:`assistant_messages` can make."""

_WORDS = st.sampled_from(
    ["order", "refund", "policy", "check", "the", "customer", "amount", "approved", "manager", "done", "small", "ok"]
)
_PROSE = st.lists(_WORDS, min_size=1, max_size=6).map(" ".join)


def tool_arguments(tools: Registry, name: str) -> st.SearchStrategy[dict[str, Any]]:
    """Arguments that tool ``name``'s contract accepts (checked by the engine's validator)."""
    tool = tools[name]
    return schema_values(tool.json_schema).filter(lambda args: not tool.errors(args))


def invalid_arguments(tools: Registry, name: str) -> st.SearchStrategy[Any]:
    """Argument values tool ``name``'s contract refuses: wrong types, missing or extra fields, broken bounds."""
    tool = tools[name]
    return schema_violations(tool.json_schema).filter(lambda args: bool(tool.errors(args)))


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
    return st.sampled_from(list(tools)).flatmap(
        lambda name: tool_arguments(tools, name).map(lambda args: ToolCall(call_id, name, args, json.dumps(args)))
    )


def thoughts(tools: Registry, name: str | None = None) -> st.SearchStrategy[str | None]:
    """
    Text riding beside a call: none, prose, or a *claim* about the arguments.

    Claims name argument values that may differ from the real ones, which is
    what a gate reading the model's explanation instead of its arguments falls for.
    """
    options: list[st.SearchStrategy[str | None]] = [st.none(), _PROSE]
    if name is not None and name in tools:
        options.append(
            tool_arguments(tools, name).map(
                lambda args: f"Calling {name} with " + ", ".join(f"{k}={json.dumps(v)}" for k, v in args.items())
            )
        )
    return st.one_of(options)


def _wire_call(call_id: str | None, name: str, arguments: str) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not None:
        item["id"] = call_id
    return item


def _one_call(tools: Registry, kind: MessageKind, index: int) -> st.SearchStrategy[tuple[dict[str, Any], str | None]]:
    """One wire ``tool_calls`` entry of ``kind`` and the tool name it targets (for thoughts)."""
    call_id = st.sampled_from([f"call_{index}", f"c{index}", None])
    names = list(tools)
    if kind == "call" and names:
        return st.sampled_from(names).flatmap(
            lambda name: st.tuples(call_id, tool_arguments(tools, name)).map(
                lambda pair: (_wire_call(pair[0], name, json.dumps(pair[1])), name)
            )
        )
    if kind == "bad_arguments" and _refusable(tools):
        return st.sampled_from(_refusable(tools)).flatmap(
            lambda name: st.tuples(call_id, invalid_arguments(tools, name)).map(
                lambda pair: (_wire_call(pair[0], name, json.dumps(pair[1])), name)
            )
        )
    if kind == "bad_json":
        broken = st.sampled_from(['{"order_id": ', "{'a': 1}", "not json", "[1, 2]", "{", '"text"', "null"])
        target = st.sampled_from(names) if names else st.just("tool")
        return st.tuples(call_id, target, broken).map(lambda t: (_wire_call(t[0], t[1], t[2]), None))
    # unknown tool, or a kind the registry cannot express: a name outside the registry
    unknown = st.sampled_from(["delete_everything", "transfer_funds", "shell", ""]).filter(lambda n: n not in tools)
    return st.tuples(call_id, unknown, st.sampled_from(["{}", '{"x": 1}'])).map(
        lambda t: (_wire_call(t[0], t[1], t[2]), None)
    )


def answer_messages() -> st.SearchStrategy[dict[str, Any]]:
    """Plain assistant answers: text and no proposal."""
    return _PROSE.map(lambda text: {"role": "assistant", "content": text})


def assistant_messages(
    tools: Registry, *, kinds: Iterable[MessageKind] = MESSAGE_KINDS, max_calls: int = 3
) -> st.SearchStrategy[dict[str, Any]]:
    """
    Assistant messages in OpenAI wire format, as a model might send them for ``tools``.

    ``kinds`` picks from: ``call`` (one valid call), ``bad_json`` (argument
    text that is not a JSON object), ``unknown_tool``, ``bad_arguments`` (wrong
    types, missing or extra fields, broken bounds, off-pattern strings),
    ``parallel`` (several calls of any kind in one message) and ``answer``.
    Calls may carry a thought in ``content``; ids may be missing.
    """
    chosen = list(kinds)
    unknown = sorted(set(chosen) - set(MESSAGE_KINDS))
    if unknown or not chosen:
        raise ValueError(f"kinds must be a non-empty selection of {MESSAGE_KINDS}, got {chosen!r}")

    def build(kind: MessageKind) -> st.SearchStrategy[dict[str, Any]]:
        if kind == "answer":
            return answer_messages()
        if kind == "parallel":
            single = [k for k in MESSAGE_KINDS if k not in ("parallel", "answer")]
            calls = st.lists(st.sampled_from(single), min_size=2, max_size=max(2, max_calls)).flatmap(
                lambda ks: st.tuples(*[_one_call(tools, k, i) for i, k in enumerate(ks)])
            )
        else:
            calls = _one_call(tools, kind, 0).map(lambda pair: (pair,))
        return calls.flatmap(
            lambda entries: thoughts(tools, entries[0][1]).map(
                lambda thought: {"role": "assistant", "content": thought, "tool_calls": [e for e, _ in entries]}
            )
        )

    return st.sampled_from(chosen).flatmap(build)


def scripts(
    tools: Registry, *, kinds: Iterable[MessageKind] = MESSAGE_KINDS, min_size: int = 0, max_size: int = 6
) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Lists of assistant messages: the turns a scripted model plays in order."""
    return st.lists(assistant_messages(tools, kinds=kinds), min_size=min_size, max_size=max_size)


def scripted_models(
    tools: Registry, *, kinds: Iterable[MessageKind] = MESSAGE_KINDS, min_size: int = 0, max_size: int = 6
) -> st.SearchStrategy[ScriptedModel]:
    """
    :class:`agent_fsm.ScriptedModel` s playing a random script, sometimes with
    reactions to a denied or invalid observation (a model that changes tack).
    """
    kinds = tuple(kinds)
    reaction_keys = st.sampled_from(['"kind": "denied"', '"kind": "invalid"', '"kind": "error"'])
    reactions = st.dictionaries(reaction_keys, assistant_messages(tools, kinds=kinds), max_size=2)
    return st.builds(ScriptedModel, scripts(tools, kinds=kinds, min_size=min_size, max_size=max_size), reactions)


def limits(
    *,
    max_turns: tuple[int, int] = (0, 8),
    max_prompt_tokens: tuple[int, int] = (0, 3000),
    repeated_denials: tuple[int, int] = (1, 3),
    max_tool_calls: tuple[int, int] | None = (0, 6),
) -> st.SearchStrategy[Limits]:
    """:class:`agent_fsm.Limits` with each budget drawn from an inclusive range (``max_tool_calls`` may be None)."""
    tool_budget = st.none() if max_tool_calls is None else st.none() | st.integers(*max_tool_calls)
    return st.builds(
        Limits,
        max_turns=st.integers(*max_turns),
        max_prompt_tokens=st.integers(*max_prompt_tokens),
        repeated_denials=st.integers(*repeated_denials),
        max_tool_calls=tool_budget,
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
        return Verdict(decision, f"{call.name}: {decision} by table")  # type: ignore[arg-type]


def gates(tools: Registry, *, decisions: Iterable[Decision] = _DECISIONS) -> st.SearchStrategy[TableGate]:
    """Deterministic gates over ``tools``: each tool allowed, denied or sent to a human (verdict or tuple form)."""
    choice = st.sampled_from(tuple(decisions))
    return st.builds(TableGate, st.fixed_dictionaries({name: choice for name in tools}), choice)


def register_type_strategies() -> None:
    """Let ``st.from_type`` build :class:`Limits`, :class:`Verdict` and (registry-free) :class:`ToolCall`."""
    st.register_type_strategy(Limits, limits())
    st.register_type_strategy(Verdict, verdicts())
    st.register_type_strategy(
        ToolCall,
        st.builds(
            ToolCall,
            st.sampled_from(["call_0", "call_1"]),
            st.sampled_from(["lookup_order", "refund_order", "unknown"]),
            st.none() | st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3),
        ),
    )
