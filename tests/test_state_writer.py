"""The incremental writer a store commits a run with: the very text of ``to_json``, each field encoded when changed."""

from __future__ import annotations

from decimal import Decimal

import attrs
import pytest

from agent_fsm import Limits, RunState, ScreenRecord, run
from agent_fsm.engine import GROWING, Judgement, StateWriter, ToolCall, Usage
from agent_fsm.examples.demo import TASK, overreaching_model
from agent_fsm.examples.support_desk import make_support_desk, refund_gate


def _bare(state: RunState) -> str:
    return attrs.evolve(state, **{name: [] for name in GROWING}).to_json()


def _mutations(state: RunState) -> list[object]:
    """In-place and replacing changes of every kind of field, each followed by a commit."""
    return [
        lambda: state.path.append("Ready"),
        lambda: state.prompt_token_log.__setitem__(0, 7),
        lambda: setattr(state, "turns", state.turns + 1),
        lambda: state.denials.__setitem__("x", 2),
        lambda: state.denials.update(x=3),
        lambda: setattr(state.usage, "input_tokens", 12),
        lambda: setattr(state.usage, "cost", Decimal("0.25")),
        lambda: setattr(state, "limits", Limits(max_turns=3)),
        lambda: state.pending.append(ToolCall("c9", "refund_order", {"order_id": "A-17"})),
        lambda: state.pending[0].arguments.__setitem__("amount_cents", 5),  # a frozen call's mutable arguments
        lambda: setattr(state, "judgement", Judgement("denied", "no")),
        lambda: setattr(state, "output", {"a": [1]}),
        lambda: state.output["a"].append(2),
        lambda: setattr(state, "elapsed", 0.5),
        lambda: state.recent_rejections.append("r"),
        lambda: state.tool_uses.__setitem__("refund_order", 1),
        lambda: state.children.__setitem__("c1", RunState(run_id=f"{state.run_id}/c1")),
        lambda: setattr(state.children["c1"], "answer", "nested"),
        lambda: state.prompt_token_log.__setitem__(0, True),  # equal to 1 once set so, written as true
        lambda: state.prompt_token_log.__setitem__(0, 1),
    ]


def test_each_commit_writes_what_to_json_writes_of_the_state_without_its_lists() -> None:
    """Through a stored run's commits and every kind of change, the writer's text is to_json's, byte for byte."""
    state = run(TASK, overreaching_model(), make_support_desk().tools, gate=refund_gate).state
    writer = StateWriter()
    assert writer.bare(state) == _bare(state)
    assert writer.bare(state) == _bare(state)  # unchanged: the texts kept
    for change in _mutations(state):
        change()  # type: ignore[operator]
        assert writer.bare(state) == _bare(state), change


def test_the_added_items_are_to_json_s() -> None:
    """The items of each growing list after those stored, as to_json writes them, comma-joined."""
    state = run(TASK, overreaching_model(), make_support_desk().tools, gate=refund_gate).state
    state.screens.append(ScreenRecord("input", None, "pass"))
    text = state.to_json()
    added = StateWriter().added(state, *(0 for _ in GROWING))
    for name, items in zip(GROWING, added, strict=True):
        assert f'"{name}": [{items}]' in text, name
    assert added[GROWING.index("path")].startswith('"Proposing", "Executing"')
    lengths = [len(getattr(state, name)) for name in GROWING]
    lengths[0] -= 1
    later = StateWriter().added(state, *lengths)
    assert later[0].startswith('{"role": "assistant"') and added[0].endswith(later[0]) and set(later[1:]) == {""}


def test_a_state_strict_json_cannot_hold_is_refused_and_the_writer_stays_right() -> None:
    """NaN is refused as to_json refuses it; the fields written before stay correct for the next commit."""
    state = RunState(run_id="r")
    writer = StateWriter()
    writer.bare(state)
    state.output = float("nan")
    with pytest.raises(ValueError, match="strict JSON"):
        writer.bare(state)
    state.output = None
    state.usage = Usage(1, 2, 3, Decimal("0.5"))
    assert writer.bare(state) == _bare(state)
