"""Real runs become tests: cassettes record and replay a model's replies, redact secrets, and can be moved a little."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from agent_fsm import ProviderFailure, RunError, Stop, ToolSpec, Verdict, answer_message, run, tool_call_message
from agent_fsm.testing import (
    CASSETTE_FORMAT,
    NotRecorded,
    RecordingModel,
    ReplayModel,
    assert_run_invariants,
    load_cassette,
    perturbed_runs,
    redact,
)

KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2"


def make_pantry() -> dict[str, ToolSpec]:
    schema = {
        "type": "object",
        "properties": {"item": {"type": "string"}, "count": {"type": "integer", "minimum": 1, "maximum": 12}},
        "required": ["item", "count"],
        "additionalProperties": False,
    }
    return {"order": ToolSpec("Order groceries.", schema, lambda item, count: {"ordered": count}, effectful=True)}


class LiveModel:
    """Stands for a provider: its replies carry a key the cassette must not keep."""

    def __init__(self) -> None:
        self.calls = 0

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        self.calls += 1
        if self.calls == 1:
            reply = tool_call_message("call_1", "order", {"item": "eggs", "count": 6})
            reply["headers"] = {"Authorization": f"Bearer {KEY}"}
            return reply
        return answer_message(f"Ordered. (debug: key={KEY})")


def allow(call: Any) -> Verdict:
    return Verdict.allow("pantry orders are fine")


def _record(path: Path) -> Any:
    recorder = RecordingModel(LiveModel(), path, secrets=["hunter2"])
    return run("Order six eggs; my password is hunter2.", recorder, make_pantry(), gate=allow)


def test_a_recorded_run_replays_the_same(tmp_path: Path) -> None:
    """The replayed run has the same transcript as the live one, without the live model."""
    cassette = tmp_path / "pantry.json"
    live = _record(cassette)
    replayed = run(
        "Order six eggs; my password is hunter2.", ReplayModel(cassette, secrets=["hunter2"]), make_pantry(), gate=allow
    )
    assert replayed.stop is Stop.ANSWERED and live.stop is Stop.ANSWERED
    assert replayed.state.path == live.state.path
    assert [m.get("role") for m in replayed.state.messages] == [m.get("role") for m in live.state.messages]
    assert_run_invariants(replayed)


def test_cassettes_are_plain_json_with_secrets_redacted(tmp_path: Path) -> None:
    """The file is JSON with a format tag; keys, bearer tokens and the given secrets appear nowhere in it."""
    cassette = tmp_path / "pantry.json"
    _record(cassette)
    text = cassette.read_text()
    data = json.loads(text)
    assert data["format"] == CASSETTE_FORMAT and len(data["interactions"]) == 2
    assert KEY not in text and "hunter2" not in text and "[REDACTED]" in text
    assert data["interactions"][0]["request"]["tools"] == ["order"]
    assert redact({"api_key": "x", "note": "AKIA" + "ABCDEFGHIJKLMNOP"}) == {
        "api_key": "[REDACTED]",
        "note": "[REDACTED]",
    }


def test_replay_fails_clearly_past_the_end_and_on_another_request(tmp_path: Path) -> None:
    """Asking for one reply too many, or after a different transcript, raises NotRecorded naming where."""
    cassette = tmp_path / "pantry.json"
    _record(cassette)
    with pytest.raises(
        RunError, match="NotRecorded: request 1 differs from the one recorded .* at message 1"
    ) as raised:
        run("Order twelve eggs.", ReplayModel(cassette), make_pantry(), gate=allow)
    assert isinstance(raised.value.__cause__, NotRecorded)
    model = ReplayModel(cassette, strict=False)
    model.chat([{"role": "user", "content": "a"}])
    model.chat([{"role": "user", "content": "b"}])
    with pytest.raises(NotRecorded, match="asked for reply 3 but .* holds 2"):
        model.chat([{"role": "user", "content": "c"}])
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(ValueError, match="not a cassette"):
        load_cassette(tmp_path / "other.json")


def test_a_provider_failure_is_not_recorded(tmp_path: Path) -> None:
    """A model call that fails leaves the cassette as it was: only replies are recorded."""

    class Down:
        def chat(self, messages: Any, tools: Any = ()) -> Any:
            raise ProviderFailure("unreachable")

    cassette = tmp_path / "down.json"
    result = run("hello", RecordingModel(Down(), cassette), make_pantry())
    assert result.stop is Stop.PROVIDER_ERROR and not cassette.exists()


def test_perturbed_runs_move_a_recorded_run_one_step(tmp_path: Path) -> None:
    """Perturbations drop, repeat, deny and move an argument to a boundary; every one still runs to a typed end."""
    cassette = tmp_path / "pantry.json"
    _record(cassette)
    changes: set[str] = set()

    @settings(max_examples=60, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(perturbed_runs(cassette, make_pantry(), constants=(12, 13)))
    def explore(perturbation: Any) -> None:
        changes.add(perturbation.change.split(" ")[0] if "=" not in perturbation.change else "moved")
        result = run("Order six eggs.", perturbation.model(), make_pantry(), gate=perturbation.gate(allow))
        assert_run_invariants(result)
        if perturbation.deny:
            assert any(o.kind == "denied" for o in result.state.observations)
        if "count =" in perturbation.change:  # a boundary the contract accepts is executed, one it refuses is not
            count = int(perturbation.change.rsplit("= ", 1)[1])
            executed = any(o.kind == "result" for o in result.state.observations)
            assert executed == (1 <= count <= 12 and not perturbation.deny)

    explore()
    assert {"as", "reply", "call", "moved"} <= changes


def test_a_provider_reply_with_its_usage_replays_as_recorded(tmp_path: Path) -> None:
    """An adapter returns ModelReply (message plus usage): the cassette keeps both, and the replay reports the same."""
    from agent_fsm import ModelReply, Price, Prices

    class Provider:
        def chat(self, messages: Any, tools: Any = ()) -> ModelReply:
            message = answer_message("Six eggs are ordered.")
            return ModelReply(message, prompt_tokens=120, finish="stop", output_tokens=9, cached_tokens=20, model="m1")

    prices = Prices({"m1": Price(input=Decimal("1"), output=Decimal("2"))})
    cassette = tmp_path / "provider.json"
    live = run("Order six eggs.", RecordingModel(Provider(), cassette), {}, prices=prices)
    replayed = run("Order six eggs.", ReplayModel(cassette), {}, prices=prices)
    assert replayed.stop is Stop.ANSWERED and replayed.answer == live.answer
    assert replayed.usage == live.usage and live.usage.cached_tokens == 20
    [interaction] = load_cassette(cassette)
    assert interaction["reply"] == {"role": "assistant", "content": "Six eggs are ordered."}
    assert interaction["usage"]["output_tokens"] == 9
