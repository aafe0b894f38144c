"""Run state as plain data: JSON round trips and resuming in another process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from agent_fsm import (
    RunState,
    ScriptedModel,
    Stop,
    answer_message,
    ask_for_effects,
    resume,
    run,
    tool_call_message,
)
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
    result = run("t", ScriptedModel([tool_call_message("c", "pair", {})]), tools)
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
