"""The scripted model: turns, reactions, and a position read off the transcript."""

from __future__ import annotations

from agent_fsm import ScriptedModel, answer_message, tool_call_message
from agent_fsm.engine import DEFAULT_LAST_WORD

LOOKUP = tool_call_message("c1", "lookup", {"id": "A"})


def tool(content: str, call_id: str = "c1") -> dict:
    """A tool message with the given text."""
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def test_turns_play_in_order_then_a_closing_answer():
    """Each call returns the next turn; past the script the model says it has nothing to add."""
    model = ScriptedModel([LOOKUP, answer_message("done")])
    transcript = [{"role": "user", "content": "go"}]
    assert model.chat(transcript) == LOOKUP
    transcript += [LOOKUP, tool("{}")]
    assert model.chat(transcript) == answer_message("done")
    transcript += [answer_message("done"), {"role": "user", "content": "more?"}]
    assert model.chat(transcript) == answer_message(DEFAULT_LAST_WORD)


def test_reaction_replies_without_consuming_a_turn():
    """A reaction answers a matching tool message; the next scripted turn is still the one after."""
    retry = tool_call_message("c2", "lookup", {"id": "B"})
    model = ScriptedModel([LOOKUP, answer_message("done")], reactions={"denied": retry})
    transcript = [{"role": "user", "content": "go"}, LOOKUP, tool('{"kind": "denied"}')]
    assert model.chat(transcript) == retry
    transcript += [retry, tool('{"kind": "result"}', "c2")]
    assert model.chat(transcript) == answer_message("done")


def test_position_comes_from_the_transcript_not_from_hidden_state():
    """Two models with the same script give the same reply for the same transcript, whatever their history."""
    used = ScriptedModel([LOOKUP, answer_message("done")])
    used.chat([{"role": "user", "content": "x"}])
    fresh = ScriptedModel([LOOKUP, answer_message("done")])
    transcript = [{"role": "user", "content": "go"}, LOOKUP, tool("{}")]
    assert used.chat(transcript) == fresh.chat(transcript) == answer_message("done")
    # and a shorter, different transcript is not mistaken for the longer one
    assert used.chat([{"role": "user", "content": "go"}]) == LOOKUP


def test_repr_shows_the_whole_script():
    """The repr spells out turns and reactions as Python literals, so a failing example can be replayed."""
    model = ScriptedModel([answer_message("a")], reactions={"x": answer_message("b")})
    assert repr(model) == (
        "ScriptedModel(turns=[{'role': 'assistant', 'content': 'a'}], "
        "reactions={'x': {'role': 'assistant', 'content': 'b'}})"
    )
