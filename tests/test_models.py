"""The scripted model: turns, reactions, and a position read off the transcript."""

from __future__ import annotations

import pytest

from agent_fsm import RunError, ScriptedModel, ScriptExhausted, ToolSpec, answer_message, run, tool_call_message
from agent_fsm.engine import DEFAULT_LAST_WORD

LOOKUP = tool_call_message("c1", "lookup", {"id": "A"})


def tool(content: str, call_id: str = "c1") -> dict:
    """A tool message with the given text."""
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def test_turns_play_in_order_then_the_script_is_exhausted():
    """Each call returns the next turn; asked past the script, the model raises instead of making up an answer."""
    model = ScriptedModel([LOOKUP, answer_message("done")])
    transcript = [{"role": "user", "content": "go"}]
    assert model.chat(transcript) == LOOKUP
    transcript += [LOOKUP, tool("{}")]
    assert model.chat(transcript) == answer_message("done")
    transcript += [answer_message("done"), {"role": "user", "content": "more?"}]
    with pytest.raises(ScriptExhausted, match=r"2 turns.*last_word="):
        model.chat(transcript)


def test_last_word_answers_past_the_script_when_asked_for():
    """``last_word=`` keeps the closing answer for a script that means it: past the script, that text is the reply."""
    model = ScriptedModel([LOOKUP], last_word=DEFAULT_LAST_WORD)
    transcript = [{"role": "user", "content": "go"}, LOOKUP, tool("{}")]
    assert model.chat(transcript) == answer_message(DEFAULT_LAST_WORD)
    assert "last_word=" in repr(model)


def test_a_run_whose_script_lacks_its_answer_fails_loudly_with_its_state():
    """A run that asks past its script is a RunError carrying the state, caused by ScriptExhausted; never answered."""
    lookup = {"lookup": ToolSpec("look", {"id": str}, lambda id: id)}
    with pytest.raises(RunError) as caught:
        run("go", ScriptedModel([LOOKUP]), lookup)
    assert isinstance(caught.value.__cause__, ScriptExhausted)
    assert caught.value.state is not None and caught.value.state.turns == 2


def test_last_word_must_be_text():
    """A last word that is not a string is refused when the model is built, not when the script runs out."""
    with pytest.raises(TypeError, match="last_word"):
        ScriptedModel([], last_word=5)  # type: ignore[arg-type]


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
