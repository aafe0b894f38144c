"""The saved-state format: strict JSON both ways, every field checked, an HMAC signature when asked."""

from __future__ import annotations

import json
import re
import time

import pytest

from agent_fsm import Limits, Observation, RunState, ScriptedModel, answer_message, resume, run, tool_call_message
from tests.payments import SCRIPT, make_payments, paused, pay_gate

KEY = b"a secret only the application holds"


def _saved() -> dict:
    return json.loads(paused()[0].state.to_json())


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        (("turns",), "1", "turns"),
        (("turns",), 1.0, "turns"),
        (("turns",), 1.9, "turns"),
        (("tool_attempts",), True, "tool_attempts"),
        (("machine_state",), "Executing2", "machine_state"),
        (("machine_state",), None, "machine_state"),
        (("path", 1), "Nowhere", "path.1"),
        (("prompt_token_log", 0), "900", "prompt_token_log.0"),
        (("pending", 0, "call_id"), 7, "pending.0.call_id"),
        (("pending", 0, "arguments"), "{}", "pending.0.arguments"),
        (("observations",), None, "observations"),
        (("judgement",), {"kind": "allow"}, "judgement.reason"),
        (("judgement", "kind"), "maybe", "judgement.kind"),
        (("limits", "max_turns"), "8", "limits"),
        (("limits", "surprise"), 1, "limits.surprise"),
        (("pause", "pause_id"), None, "pause.pause_id"),
        (("denials",), {"x": 0}, "denials.x"),
        (("consumed",), "no", "consumed"),
        (("messages", 0), "hello", "messages.0"),
        (("messages", 0, "role"), None, "messages.0.role"),
    ],
)
def test_from_json_coerces_nothing_and_names_the_first_problem(path, value, where):
    """Strings, floats and booleans are not counts; unknown machine states are refused; the path is dotted."""
    data = _saved()
    target = data
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    with pytest.raises(ValueError, match="malformed at " + re.escape(where) + r"\b"):
        RunState.from_json(json.dumps(data))


@pytest.mark.parametrize("text", [None, 5, "null", "[]", '"state"', "{}", '{"format": "2"}', '{"format": true}'])
def test_anything_that_is_not_a_saved_state_is_a_value_error(text):
    """None, other JSON values and format markers of the wrong type are plain ValueErrors."""
    with pytest.raises(ValueError):
        RunState.from_json(text)


def test_nan_is_refused_both_ways():
    """to_json never writes NaN or Infinity; from_json never reads them."""
    result, _, _ = paused()
    result.state.observations.append(Observation("x", True, "result", float("nan")))
    with pytest.raises(ValueError, match="strict JSON"):
        result.state.to_json()
    text = paused()[0].state.to_json().replace('"usage_offset": 0', '"usage_offset": NaN')
    with pytest.raises(ValueError, match="NaN is not JSON"):
        RunState.from_json(text)


def test_a_missing_or_extra_field_is_named():
    """Every field is required and no other is accepted."""
    data = _saved()
    del data["pause"]
    with pytest.raises(ValueError, match="malformed at pause: missing"):
        RunState.from_json(json.dumps(data))
    tools, _ = make_payments()
    script = [tool_call_message("r", "balance", {"account": "ACME"}), answer_message("500")]
    data = json.loads(run("t", ScriptedModel(script), tools).state.to_json())
    data["observations"][0]["x"] = 1
    with pytest.raises(ValueError, match=r"malformed at observations\.0\.x: unknown field"):
        RunState.from_json(json.dumps(data))


def test_observation_ok_must_agree_with_its_kind():
    """An error marked ok would read as a result: refused."""
    result, _, _ = paused()
    data = json.loads(result.state.to_json())
    data["observations"] = [
        {"call_id": "c1", "ok": True, "kind": "denied", "content": "x", "permanent": False, "text_form": False}
    ]
    with pytest.raises(ValueError, match=r"observations\.0\.ok"):
        RunState.from_json(json.dumps(data))


def test_limits_travel_in_the_saved_state():
    """The saved state holds the run's limits, and they read back as Limits."""
    result, _, _ = paused(limits=Limits(max_turns=3, max_tool_calls=5))
    loaded = RunState.from_json(result.state.to_json())
    assert loaded.limits == Limits(max_turns=3, max_tool_calls=5) and loaded == result.state


def test_a_signed_state_round_trips_and_any_edit_breaks_it():
    """to_json(key=) signs; from_json(key=) verifies before reading; one changed byte is refused."""
    result, tools, ledger = paused()
    signed = result.state.to_json(key=KEY)
    assert RunState.from_json(signed, key=KEY) == result.state
    forged = signed.replace('\\"cents\\": 50', '\\"cents\\": 20')
    assert forged != signed
    with pytest.raises(ValueError, match="signature does not match"):
        RunState.from_json(forged, key=KEY)
    with pytest.raises(ValueError, match="signature does not match"):
        RunState.from_json(signed, key=b"another key")
    with pytest.raises(ValueError, match="is not signed"):
        RunState.from_json(result.state.to_json(), key=KEY)
    with pytest.raises(ValueError, match="pass|key="):
        RunState.from_json(signed)
    with pytest.raises(TypeError, match="'key'"):
        result.state.to_json(key="text is not a key")
    resume(RunState.from_json(signed, key=KEY), ScriptedModel(SCRIPT), tools, approve=True, gate=pay_gate)
    assert len(ledger) == 1


def test_round_trip_of_many_paused_runs_stays_close_to_plain_json():
    """Saving and loading checks every field yet costs a small multiple of json.dumps/json.loads."""
    tools, _ = make_payments()
    states = [run("Pay ACME.", ScriptedModel(SCRIPT), tools, gate=pay_gate).state for _ in range(300)]
    texts = [s.to_json() for s in states]
    plain = [json.loads(t) for t in texts]

    def best(work) -> float:
        times = []
        for _ in range(5):
            start = time.perf_counter()
            work()
            times.append(time.perf_counter() - start)
        return min(times)

    dump = best(lambda: [s.to_json() for s in states]) / best(lambda: [json.dumps(d) for d in plain])
    load = best(lambda: [RunState.from_json(t) for t in texts]) / best(lambda: [json.loads(t) for t in texts])
    assert [RunState.from_json(t) for t in texts] == states
    # generous bounds for a shared machine; bench/ measures the real figures
    assert dump < 6 and load < 8, (dump, load)


def test_budgets_shared_between_loads_are_still_checked_by_type() -> None:
    """Runs saved under the same budgets share one Limits; an equal budget of another type (0 for false) is refused."""
    data = _saved()
    assert data["limits"] is not None
    RunState.from_json(json.dumps(data))  # the budgets are now known
    again = RunState.from_json(json.dumps(data))
    assert again.limits is RunState.from_json(json.dumps(data)).limits
    data["limits"]["accept_truncated"] = 0 if data["limits"]["accept_truncated"] is False else 1
    with pytest.raises(ValueError, match="at limits"):
        RunState.from_json(json.dumps(data))
