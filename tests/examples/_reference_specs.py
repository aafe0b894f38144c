"""Play the reference systems' TOML scenario specs with the shared spec semantics (a test-only reader)."""

from __future__ import annotations

import importlib
import json
import tomllib
from pathlib import Path
from typing import Any

from agent_fsm import Limits, RunResult, ScriptedModel, allow_all, check_run, resume, run
from agent_fsm.environment import Environment
from agent_fsm.wire import answer_message

SPECS = Path(__file__).resolve().parents[2] / "specs"


def spec_files(system: str) -> list[Path]:
    """Every spec of one system, sorted by file name."""
    return sorted((SPECS / system).glob("*.toml"))


def load(path: Path) -> dict[str, Any]:
    """One spec as data."""
    with path.open("rb") as handle:
        return tomllib.load(handle)


def _environment(reference: str) -> Environment:
    module, _, function = reference.partition(":")
    assert module.startswith("agent_fsm.examples."), f"unexpected environment {reference!r}"
    return getattr(importlib.import_module(module), function)()


def _call(entry: dict[str, Any]) -> dict[str, Any]:
    arguments = entry["raw_arguments"] if "raw_arguments" in entry else json.dumps(entry.get("arguments", {}))
    return {"id": entry["id"], "type": "function", "function": {"name": entry["name"], "arguments": arguments}}


def _message(turn: dict[str, Any]) -> dict[str, Any]:
    if "answer" in turn:
        return answer_message(turn["answer"])
    calls = [turn["call"]] if "call" in turn else turn["calls"]
    return {"role": "assistant", "content": turn.get("thought"), "tool_calls": [_call(c) for c in calls]}


def _model(spec: dict[str, Any], env: Environment) -> Any:
    model = spec["model"]
    if "name" in model:
        return env.models[model["name"]]()
    reactions = {key: _message(value) for key, value in model.get("reactions", {}).items()}
    return ScriptedModel([_message(t) for t in model["turns"]], reactions)


def play(spec: dict[str, Any]) -> tuple[RunResult, Environment, Limits]:
    """Run a spec, resuming with each human decision while the run awaits approval."""
    env = _environment(spec["environment"])
    model = _model(spec, env)
    gate_name = spec.get("gate")
    gate = None if gate_name is None else allow_all if gate_name == "allow_all" else env.gates[gate_name]
    limits = Limits(**spec.get("limits", {}))
    options = {"gate": gate, "limits": limits, "answer_check": env.answer_check}
    result = run(
        spec["task"],
        model,
        env.tools,
        system_prompt=spec.get("system_prompt", env.system_prompt),
        history=spec.get("history", ()),
        **options,
    )
    for decision in spec.get("resume", ()):
        assert result.stop.value == "awaiting_approval", f"a resume decision came but the run is {result.stop}"
        result = resume(
            result.state, model, env.tools, approve=decision["approve"], reason=decision.get("reason", ""), **options
        )
    return result, env, limits


def failures(spec: dict[str, Any], result: RunResult, env: Environment, limits: Limits) -> list[str]:
    """Every way the run differs from the spec's ``[expect]`` table (empty when it matches)."""
    expect, state, found = spec["expect"], result.state, []

    def differ(what: str, wanted: Any, got: Any) -> None:
        if wanted != got:
            found.append(f"{what}: expected {wanted!r}, got {got!r}")

    if "stop" in expect:
        differ("stop", expect["stop"], result.stop.value)
    for text in expect.get("answer_contains", ()):
        if text not in (result.answer or ""):
            found.append(f"answer {result.answer!r} lacks {text!r}")
    if "effects" in expect:
        differ("effects", expect["effects"], env.effects)
    if "turns" in expect:
        differ("turns", expect["turns"], state.turns)
    if "tool_attempts" in expect:
        differ("tool_attempts", expect["tool_attempts"], state.tool_attempts)
    if "observation_kinds" in expect:
        differ("observation_kinds", expect["observation_kinds"], [o.kind for o in state.observations])
    for name, wanted in expect.get("checks", {}).items():
        differ(f"check {name}", wanted, env.checks[name](result))
    if "invariants" in expect:
        held = check_run(result, env.effects, limits)
        differ("invariants", expect["invariants"], all(held.values()))
    return found
