"""Run state as plain data: JSON round trips and resuming in another process."""

from __future__ import annotations

import asyncio
import copy
import gc
import json
import pickle
import subprocess
import sys
import textwrap
import tracemalloc

import attrs
import pytest

from agent_fsm import (
    RunState,
    ScriptedModel,
    Stop,
    answer_message,
    arun,
    ask_for_effects,
    astream,
    resume,
    run,
    stream,
    tool_call_message,
)
from agent_fsm.engine._resting import rest
from tests.warehouse import make_warehouse, ship_args

SCRIPT = [
    tool_call_message("c1", "count_stock", {"sku": "BOLT"}),
    tool_call_message("c2", "ship", ship_args(), thought="enough stock, shipping"),
    answer_message("Shipped two bolts."),
]


def paused_run():
    """A run paused on the shipment, with one read already observed."""
    tools, effects = make_warehouse()
    return run("Ship 2 bolts.", ScriptedModel(SCRIPT), tools, gate=ask_for_effects(tools)), tools, effects


def test_round_trip_is_lossless():
    """from_json(to_json(s)) == s for a paused run, including the pending call and judgement."""
    result, _, _ = paused_run()
    assert result.stop is Stop.AWAITING_APPROVAL
    loaded = RunState.from_json(result.state.to_json())
    assert loaded == result.state
    assert loaded.pending[0].arguments == ship_args()
    assert loaded.judgement.kind == "ask"


def test_saved_state_is_readable_json():
    """The saved form is plain JSON with a format marker and the wire transcript."""
    result, _, _ = paused_run()
    data = json.loads(result.state.to_json())
    assert data["format"] == 2
    assert data["machine_state"] == "AwaitingApproval"
    assert data["messages"][0]["role"] == "system"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "not a saved agent_fsm run state"),
        ('{"format": 99}', "not a saved agent_fsm run state"),
        ('{"format": 2, "turns": "many"}', "malformed"),
        ('{"format": 2, "surprise": 1}', "malformed"),
    ],
)
def test_bad_saved_state_is_a_clear_value_error(text, fragment):
    """Loading something that is not a saved state says so instead of half-loading it."""
    with pytest.raises(ValueError, match=fragment):
        RunState.from_json(text)


def test_resume_from_a_loaded_copy_matches_resume_in_memory():
    """Saving and loading between pause and resume changes nothing about the outcome."""
    result, tools, effects = paused_run()
    saved = result.state.to_json()
    in_memory = resume(result.state, ScriptedModel(SCRIPT), tools, approve=True, gate=ask_for_effects(tools))
    tools2, effects2 = make_warehouse()
    from_disk = resume(
        RunState.from_json(saved), ScriptedModel(SCRIPT), tools2, approve=True, gate=ask_for_effects(tools2)
    )
    assert from_disk.state == in_memory.state
    assert effects == effects2 == [{"sku": "BOLT", "qty": 2, "city": "Ghent"}]


def test_resume_in_a_new_process_matches_resume_in_memory(tmp_path):
    """A run paused here, saved, and resumed by another Python process ends in the same state."""
    result, tools, effects = paused_run()
    saved = tmp_path / "paused.json"
    saved.write_text(result.state.to_json())
    out = tmp_path / "resumed.json"
    program = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(__import__("pathlib").Path(__file__).resolve().parent.parent)!r})
        from agent_fsm import RunState, ScriptedModel, ask_for_effects, resume
        from tests.test_state import SCRIPT
        from tests.warehouse import make_warehouse
        tools, effects = make_warehouse()
        state = RunState.from_json(open({str(saved)!r}).read())
        done = resume(state, ScriptedModel(SCRIPT), tools, approve=True, gate=ask_for_effects(tools))
        open({str(out)!r}, "w").write(json.dumps({{"state": done.state.to_json(), "effects": effects}}))
        """
    )
    subprocess.run([sys.executable, "-c", program], check=True)
    there = json.loads(out.read_text())
    here = resume(result.state, ScriptedModel(SCRIPT), tools, approve=True, gate=ask_for_effects(tools))
    assert RunState.from_json(there["state"]) == here.state
    assert there["effects"] == effects


def test_observation_content_is_stored_as_json_data():
    """A handler returning a tuple is observed as a list, so saving never changes the state."""
    from agent_fsm import ToolSpec

    tools = {"pair": ToolSpec("d", {}, lambda: (1, 2))}
    result = run("t", ScriptedModel([tool_call_message("c", "pair", {}), answer_message("A pair.")]), tools)
    assert result.state.observations[0].content == [1, 2]
    assert RunState.from_json(result.state.to_json()) == result.state


def test_a_new_run_id_is_a_random_version_4_uuid_in_hex() -> None:
    """The id a run is given reads as ``uuid.uuid4().hex`` does: version 4, the RFC 4122 variant, never repeated."""
    import uuid

    ids = [RunState().run_id for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for run_id in ids:
        parsed = uuid.UUID(hex=run_id)
        assert parsed.hex == run_id and len(run_id) == 32
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
    # Every other bit is random: each of the 122 free bits is seen both ways.
    free = [i for i in range(128) if i not in range(48, 52) and i not in (64, 65)]
    bits = [int(run_id, 16) for run_id in ids]
    assert all(any(b >> (127 - i) & 1 for b in bits) and not all(b >> (127 - i) & 1 for b in bits) for i in free)


# --- at rest: a paused state waits compact, and reads back every value ---


def _loaded_twice():
    """Two equal states of a paused run, read from the same saved text, and that text."""
    text = paused_run()[0].state.to_json()
    return RunState.from_json(text), RunState.from_json(text), text


def test_paused_runs_are_held_compact():
    """A paused run's state is held in far less memory than its transcript as dicts (thousands may wait at once)."""
    paused_run()  # warm every cache first, so only what a run keeps is counted
    gc.collect()
    # The suite's step watchdog keeps a few objects per run it watched while the run lives: not the engine's.
    engine_only = [tracemalloc.Filter(False, "*step_watchdog.py"), tracemalloc.Filter(False, tracemalloc.__file__)]
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces(engine_only)
        kept = [paused_run()[0].state for _ in range(200)]
        gc.collect()
        after = tracemalloc.take_snapshot().filter_traces(engine_only)
        per_run = sum(stat.size_diff for stat in after.compare_to(before, "filename")) / len(kept)
    finally:
        tracemalloc.stop()
    assert per_run < 3500, f"{per_run:.0f} bytes a paused run (about 4,700 with the transcript as dicts)"
    assert kept[0].messages[0]["role"] == "system" and kept[0].pending[0].name == "ship"


@pytest.mark.parametrize(
    "use",
    [
        pytest.param(lambda a, b, text: a == b, id="equal"),
        pytest.param(lambda a, b, text: b == a, id="equal-reflected"),
        pytest.param(lambda a, b, text: (a != b) is False, id="not-unequal"),
        pytest.param(lambda a, b, text: a.to_json() == text, id="to_json"),
        pytest.param(lambda a, b, text: pickle.loads(pickle.dumps(a)) == b, id="pickle"),
        pytest.param(lambda a, b, text: copy.deepcopy(a) == b, id="deepcopy"),
        pytest.param(lambda a, b, text: attrs.evolve(a) == b, id="evolve"),
        pytest.param(lambda a, b, text: attrs.asdict(a) == attrs.asdict(b), id="asdict"),
        pytest.param(lambda a, b, text: a.messages == b.messages and a.children == {} and a.screens == [], id="read"),
    ],
)
def test_a_resting_state_reads_back_every_value(use):
    """Whatever first uses a resting state (comparing, saving, repr, pickling, a field) finds the very same values."""
    resting, plain, text = _loaded_twice()
    rest(resting)
    assert use(resting, plain, text)
    assert resting == plain and type(resting) is RunState


def test_a_resting_states_repr_shows_every_value_and_leaves_it_at_rest():
    """A repr is a look, not a use: asyncio.run makes one of a finished main task's result on Python 3.11."""
    resting, plain, _ = _loaded_twice()
    child, plain.children["c"] = _loaded_twice()[:2]
    resting.children["c"] = child
    rest(resting)
    assert repr(resting) == repr(plain)
    assert type(resting) is not RunState and type(child) is not RunState  # still at rest
    assert resting == plain


def test_a_resting_state_thaws_into_containers_of_its_own():
    """Containers held as nothing at rest come back new and writable: a write to one state reaches no other."""
    first, second, _ = _loaded_twice()
    rest(first)
    rest(second)
    first.screens.append("checked")
    first.denials["x"] = 1
    second.children["c"] = "kept"
    assert (first.screens, first.denials, first.children) == (["checked"], {"x": 1}, {})
    assert (second.screens, second.denials, second.children) == ([], {}, {"c": "kept"})


def test_a_write_to_a_resting_state_keeps_every_other_value():
    """Setting a field held compact thaws the state first: the transcript and the rest read back as they were."""
    resting, plain, _ = _loaded_twice()
    rest(resting)
    resting.tool_uses = {"ship": 1}
    plain.tool_uses = {"ship": 1}
    assert resting == plain


def _nested(depth):
    """A list ``depth`` lists deep."""
    value = ["deep"]
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("content", [Stop.ANSWERED, object(), _nested(5000)], ids=["enum", "object", "too-deep"])
def test_a_transcript_is_packed_only_when_it_reads_back_exactly(content):
    """A message holding what is not a builtin value (an enum, an object...) keeps the transcript as it is."""
    resting, _, _ = _loaded_twice()
    resting.messages.append({"role": "user", "content": content})
    rest(resting)
    assert resting.messages[-1]["content"] is content


def test_a_plain_transcript_reads_back_equal():
    """Builtin values of every kind (nested, unicode, tuples, int keys, big ints) read back equal, of the same types."""
    resting, plain, _ = _loaded_twice()
    content = {"a": [1, 2.5, -0.0, True, None, "é ✓ \n \u2028", (1, 2), 10**50], "b": {1: _nested(20)}}
    for state in (resting, plain):
        state.messages.append({"role": "user", "content": copy.deepcopy(content)})
    rest(resting)
    read = resting.messages[-1]["content"]
    assert read == content and repr(read) == repr(content)
    assert resting == plain


async def _astreamed(*args, **kwargs):
    return [event async for event in astream(*args, **kwargs)][-1].result


@pytest.mark.parametrize(
    "driver",
    [
        pytest.param(run, id="run"),
        pytest.param(lambda *a, **k: list(stream(*a, **k))[-1].result, id="stream"),
        pytest.param(lambda *a, **k: asyncio.run(arun(*a, **k)), id="arun"),
        pytest.param(lambda *a, **k: asyncio.run(_astreamed(*a, **k)), id="astream"),
    ],
)
def test_a_paused_run_rests_whichever_driver_returned_it(driver):
    """Each driver hands back a paused run at rest (a stream in its Ended event), reading back a plain one's values."""
    tools, _ = make_warehouse()
    result = driver("Ship 2 bolts.", ScriptedModel(SCRIPT), tools, gate=ask_for_effects(tools))
    assert result.stop is Stop.AWAITING_APPROVAL
    assert type(result.state) is not RunState and isinstance(result.state, RunState)  # at rest
    plain = paused_run()[0].state
    assert result.state.pending == plain.pending and result.state.messages == plain.messages
    assert type(result.state) is RunState  # thawed by that use


def test_runs_nested_in_a_paused_one_rest_with_it():
    """The states of nested runs rest with their parent's and read back the same."""
    parent, _, _ = _loaded_twice()
    child, _, _ = _loaded_twice()
    parent.children["c"] = child
    reference = copy.deepcopy(parent)
    rest(parent)
    assert type(child) is not RunState  # at rest as well
    assert parent == reference
