"""The saved-state reader's fast path: it accepts exactly what the strict reader accepts, and builds the same state."""

from __future__ import annotations

import copy
import hashlib
import json
from decimal import Decimal
from typing import Any

import attrs
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from agent_fsm import (
    File,
    Image,
    Limits,
    Price,
    Prices,
    RunState,
    ScriptedModel,
    answer_message,
    run,
    tool_call_message,
)
from agent_fsm.engine import ToolCall, call_fingerprint
from agent_fsm.engine import _codecs as state_fast_reader
from agent_fsm.engine import _state as consistency
from agent_fsm.engine._codecs import BadField
from agent_fsm.engine._state import SAVED
from agent_fsm.engine._tools import _DIGESTED as _CANONICAL
from agent_fsm.examples.support_desk import TASK, make_support_desk, refund_gate
from tests.media import pdf, png
from tests.payments import SCRIPT, make_payments, paused, pay_call, pay_gate

dump_state, quick_state, read_state = SAVED.dump, SAVED.quick, SAVED.read


def _texts() -> list[str]:
    """Saved states of runs that end in different ways, with every kind of record in them."""
    tools, _ = make_payments()
    denied = [pay_call(5000, "c1"), pay_call(5000, "c2"), pay_call(5000, "c3"), answer_message("Done.")]
    desk = make_support_desk()
    over_reach = ScriptedModel(
        [
            tool_call_message("call_1", "lookup_order", {"order_id": "A-17"}),
            tool_call_message("call_2", "refund_order", {"order_id": "A-17", "amount_cents": 9999}),
            answer_message("I could not refund that amount."),
        ]
    )

    class Unreachable:
        def chat(self, messages: Any, tools: Any = ()) -> Any:
            raise ConnectionResetError("peer closed the connection")

    states = [
        paused()[0].state,
        run("Pay ACME.", ScriptedModel([pay_call(10), answer_message("Paid.")]), tools, gate=pay_gate).state,
        run("Pay ACME.", ScriptedModel(denied), tools, gate=pay_gate).state,
        run(TASK, over_reach, desk.tools, gate=refund_gate).state,
        run("Pay ACME.", Unreachable(), tools).state,
        run("Pay ACME.", ScriptedModel(SCRIPT), tools, gate=pay_gate).state,
        # a priced run under a money budget, with a capped tool: usage, tool counts and decimal text saved
        run(
            "Pay ACME.",
            ScriptedModel([pay_call(10), pay_call(20, "c2"), answer_message("Paid.")]),
            {name: attrs.evolve(spec, max_calls=1) for name, spec in tools.items()},
            gate=pay_gate,
            limits=Limits(max_output_tokens=50, max_cost=Decimal("0.5")),
            prices=Prices(default=Price(Decimal("0.15"), Decimal("0.6"))),
        ).state,
    ]
    # a task with an image and a file: content parts in the transcript
    task = ["Pay this.", Image(data=png(4, 4), media_type="image/png"), File(data=pdf(), name="invoice.pdf")]
    states.append(run(task, ScriptedModel([pay_call(10), answer_message("Paid.")]), tools, gate=pay_gate).state)
    assert any(s.usage.cost > 0 for s in states) and any(s.tool_uses for s in states)
    assert {s.fault is not None for s in states} == {True, False}
    assert any(s.denials for s in states) and any(s.recent_rejections for s in states)
    return [s.to_json() for s in states]


TEXTS = _texts()

# What an editor (or a forger) might write anywhere: each a near miss of some field's rule.
ODD: list[Any] = [
    *(None, True, False, 0, 1, -1, 1.0, 2.5, 1e308, "", "x", "5", "AwaitingApproval", "Ready", "result", "ask"),
    *("assistant", "tool", "call_1", "c1", "pay", "A-17", "a" * 65, "allow", "denied", "error"),
    *([], {}, [1], ["Ready"], ["x", "y", "z"], {"a": 1}, {"role": "user"}, [[]], {"x": 0}),
    *({"type": "text", "text": "x"}, {"type": "image", "url": "https://a/b.png"}, {"type": "image"}, "image", "AAAA"),
    *("image/png", "application/pdf", "data:image/png;base64,AAAA"),
]
odd_values = st.sampled_from(ODD)


def _places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into ``value``: each dict key and list index, at every depth."""
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _places(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _places(item, (*path, index))
    return found


@st.composite
def edited(draw: st.DrawFn) -> dict[str, Any]:
    """A saved state with one to three edits: a value replaced (by an odd one or another field's), removed or added."""
    data = json.loads(draw(st.sampled_from(TEXTS)))
    for _ in range(draw(st.integers(1, 3))):
        # Inside a message only the role is the reader's business: edit there rarely, the records often.
        # (and inside a message's content parts, the reader's business too).
        places = [p for p in _places(data) if p and (p[0] != "messages" or len(p) <= 3 or p[2] == "content")]
        where = draw(st.sampled_from(places))
        target = data
        for step in where[:-1]:
            target = target[step]
        how = draw(st.sampled_from(["set", "borrow", "remove", "add"]))
        if how == "set":
            target[where[-1]] = copy.deepcopy(draw(odd_values))  # the strategy's own lists stay as they are
        elif how == "borrow":  # a value that is valid somewhere else in a saved state
            source = draw(st.sampled_from(places))
            value: Any = data
            for step in source:
                value = value[step]
            target[where[-1]] = copy.deepcopy(value)
        elif how == "remove":
            del target[where[-1]]
        elif isinstance(target, dict):
            target[draw(st.sampled_from(["surprise", "role", "kind", "elapsed", "status"]))] = copy.deepcopy(
                draw(odd_values)
            )
        else:
            target.append(copy.deepcopy(draw(odd_values)))
        event(how)
    return data


def _strict(data: dict[str, Any]) -> RunState | None:
    try:
        return read_state(copy.deepcopy(data))
    except BadField:
        return None


def _same(fast: RunState, strict: RunState) -> None:
    assert fast == strict
    # equality skips some fields (a call's raw text); the saved text holds every one
    assert dump_state(fast, None) == dump_state(strict, None)


def test_the_fast_path_is_on_and_taken_for_every_state_a_run_saves():
    """The record classes are as the fast path expects, and it reads every saved state without the strict reader."""
    assert state_fast_reader.ENABLED
    for text in TEXTS:
        fast = quick_state(json.loads(text))
        strict = _strict(json.loads(text))
        assert fast is not None and strict is not None
        _same(fast, strict)
        assert RunState.from_json(text).to_json() == text


@given(edited())
def test_the_fast_path_accepts_and_refuses_exactly_what_the_strict_reader_does(data):
    """However a saved state is edited, both readers agree on whether it is well formed, and build equal states."""
    strict = _strict(data)
    fast = quick_state(copy.deepcopy(data))
    event("accepted" if strict is not None else "refused")
    assert (fast is None) == (strict is None), (fast, strict)
    if fast is not None and strict is not None:
        _same(fast, strict)


def _shape(place: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple("*" if isinstance(step, int) else step for step in place)


def test_every_field_given_every_odd_value_or_removed_is_judged_alike():
    """One edit at a time, everywhere: each kind of place in a saved state, each odd value, and removal."""
    seen: set[tuple[Any, ...]] = set()
    cases = 0
    for text in TEXTS:
        data = json.loads(text)
        for place in _places(data):
            if not place or _shape(place) in seen:
                continue
            seen.add(_shape(place))
            for value in [*ODD, KeyError]:
                edited = copy.deepcopy(data)
                target = edited
                for step in place[:-1]:
                    target = target[step]
                if value is KeyError:
                    del target[place[-1]]
                else:
                    target[place[-1]] = copy.deepcopy(value)
                strict, fast = _strict(edited), quick_state(copy.deepcopy(edited))
                assert (fast is None) == (strict is None), (place, value)
                if fast is not None and strict is not None:
                    _same(fast, strict)
                cases += 1
    assert ("observations", "*", "text_form") in seen and ("fault", "status") in seen and cases > 2000


def test_a_state_saved_before_elapsed_was_added_still_reads_fast():
    """``elapsed`` is optional (older saved states lack it): both readers read it as 0.0."""
    data = json.loads(TEXTS[0])
    del data["elapsed"]
    fast, strict = quick_state(copy.deepcopy(data)), _strict(data)
    assert fast is not None and strict is not None and fast.elapsed == 0.0
    _same(fast, strict)


def test_a_loaded_state_holds_one_string_per_name_not_copies():
    """The machine's state names are the shared constants, and the pause id is one object in two places."""
    state = RunState.from_json(TEXTS[0])
    again = RunState.from_json(TEXTS[0])
    assert state.pause is not None and state.pause_id is state.pause.pause_id
    assert state.judgement is not None and state.judgement.reason is state.pause.reason
    assert state.machine_state is again.machine_state
    assert all(a is b for a, b in zip(state.path, again.path, strict=True))


def test_a_record_class_that_changed_turns_the_fast_path_off():
    """A field or validator the fast path does not repeat would be skipped by it: then it is not used at all."""

    @attrs.frozen
    class Shape:
        kind: str = attrs.field(validator=attrs.validators.in_(("a", "b")))
        reason: str

    plain, maker = state_fast_reader._plain, state_fast_reader._maker
    same = attrs.validators.in_(("a", "b"))
    assert plain(Shape, ("kind", "reason"), {"kind": same})  # exactly the rule it repeats
    assert maker(Shape, ("kind", "reason"), {"kind": same})("a", "r") == Shape("a", "r")  # built slot by slot
    assert not plain(Shape, ("kind", "reason"), {"kind": attrs.validators.in_(("a",))})  # another rule
    assert not plain(Shape, ("kind", "reason"), {})  # a validator it does not repeat
    assert maker(Shape, ("kind", "reason"), {}) is Shape  # then built by its class, validators and all
    assert not plain(Shape, ("kind",), {"kind": same})  # a field it does not know
    with pytest.raises(AssertionError):  # a field the class lost: importing still works, using it would not
        state_fast_reader._setter(Shape, "lost")(Shape("a", "r"), 1)


@pytest.mark.parametrize("value", [[], {}, [["Ready"]]])
def test_a_machine_state_that_is_not_even_a_string_is_a_value_error(value):
    """An unhashable machine state or path entry is named like any other bad value, not a TypeError."""
    data = json.loads(TEXTS[0])
    data["machine_state"] = value
    with pytest.raises(ValueError, match="malformed at machine_state"):
        RunState.from_json(json.dumps(data))
    data = json.loads(TEXTS[0])
    data["path"] = [value]
    with pytest.raises(ValueError, match=r"malformed at path\.0"):
        RunState.from_json(json.dumps(data))


json_data = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=8,
)


@given(st.dictionaries(st.text(max_size=4), json_data, max_size=4), st.text(max_size=4))
def test_the_fingerprint_is_the_canonical_encoding_it_always_was(arguments, call_id):
    """The encoder built once writes what a JSONEncoder(sort_keys=True) writes, so saved pauses still match."""
    call = ToolCall(call_id, "pay", arguments, json.dumps(arguments))
    canonical = _CANONICAL.encode([call_id, "pay", arguments])
    assert call_fingerprint(call) == hashlib.sha256(canonical.encode()).hexdigest()


def test_a_fingerprint_of_arguments_holding_a_cycle_is_refused_as_before():
    """Arguments that contain themselves are a ValueError, as the checking encoder says."""
    looped: dict[str, Any] = {}
    looped["self"] = looped
    with pytest.raises(ValueError, match="Circular"):
        call_fingerprint(ToolCall("c1", "pay", looped, None))


@pytest.mark.parametrize("text", ['{"a": 1}', ' {"a": 1}', '{"a": 1} ', '{"a": 1} x', "[1, NaN]", "{", "", "1"])
def test_the_arguments_parser_is_json_loads(text):
    """The direct scan answers as json.loads does: the same value, or a ValueError."""
    try:
        expected: Any = json.loads(text)
    except ValueError as exc:
        expected = type(exc)
    try:
        got: Any = consistency._parse(text)
    except ValueError as exc:
        got = type(exc)
    assert got == expected or (got != got and expected != expected)


@pytest.mark.parametrize("frozen", [False, True], ids=["set attribute by attribute", "built by its class"])
def test_a_form_over_any_record_reads_what_it_writes_and_declines_what_a_validator_refuses(frozen):
    """The compiled reader builds a record as its ``__init__`` would, validators and all, either way it builds one."""
    from agent_fsm.engine._codecs import COUNT, MAYBE_TEXT, codec
    from agent_fsm.engine._saved import SavedForm

    # RunState's settings (no hooks on assignment) let a record be set attribute by attribute; frozen does not.
    settings: dict[str, Any] = {"frozen": True} if frozen else {"on_setattr": attrs.setters.NO_OP}

    @attrs.define(**settings)
    class Record:
        count: int = attrs.field(default=0, metadata=codec(COUNT))
        name: str | None = attrs.field(
            default=None, validator=attrs.validators.optional(attrs.validators.max_len(3)), metadata=codec(MAYBE_TEXT)
        )
        later: int = attrs.field(default=7, metadata=codec(COUNT, added=True))

    form = SavedForm(Record, lambda record: None, Record)
    assert form.quick(json.loads(form.dump(Record(2, "abc", 1), None))) == Record(2, "abc", 1)
    assert form.quick({"format": 2, "count": 1, "name": None}) == Record(1, None, 7)  # saved before `later`
    assert form.quick({"format": 2, "count": 1, "name": "abcd"}) is None  # the validator's refusal: declined
    assert form.quick({"format": 2, "count": 1, "name": None, "other": 1}) is None  # an unknown field
    assert form.quick({"format": 2, "count": -1, "name": None}) is None
