"""Agent definitions and their registry, checked without a server; and that temporalio loads only when used."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agent_fsm import Limits, ScriptedModel, ToolSpec, Verdict
from agent_fsm.temporal import AgentDefinition, Timeouts, definition_for, register, registered
from agent_fsm.temporal.codec import fault_data, fault_of, result_json, result_of

TOOLS = {"echo": ToolSpec("Echo.", {"text": str}, lambda text: text)}


def _model() -> ScriptedModel:
    return ScriptedModel([])


def test_a_definition_refuses_what_a_workflow_cannot_replay() -> None:
    """A clock budget, a model that is not a factory, a patch without the definition it replaces: refused."""
    with pytest.raises(TypeError, match="factory"):
        AgentDefinition(TOOLS, model=42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="patch"):
        AgentDefinition(TOOLS, model=_model, patch="p1")
    with pytest.raises(TypeError, match="Limits"):
        AgentDefinition(TOOLS, model=_model, limits={"max_turns": 3})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="heartbeat"):
        Timeouts(heartbeat=0)
    if "max_seconds" in {a.name for a in Limits.__attrs_attrs__}:
        with pytest.raises(ValueError, match="clock"):
            AgentDefinition(TOOLS, model=_model, limits=Limits(max_seconds=5))


def test_a_patch_chain_picks_the_newest_definition_the_run_admits() -> None:
    """``chosen`` walks back through ``before`` past every patch the run did not record."""
    v1 = AgentDefinition(TOOLS, model=_model)
    v2 = AgentDefinition(TOOLS, model=_model, gate=lambda c: Verdict.allow(), patch="p2", before=v1)
    v3 = AgentDefinition(TOOLS, model=_model, patch="p3", before=v2)
    assert v3.chosen(lambda patch: True) is v3
    assert v3.chosen(lambda patch: patch == "p2") is v2
    assert v3.chosen(lambda patch: False) is v1
    with pytest.raises(ValueError, match="twice"):
        AgentDefinition(TOOLS, model=_model, patch="p2", before=v2)


def test_the_registry_refuses_a_second_definition_under_one_name() -> None:
    """One name, one definition per process, unless replaced on purpose; an unknown name says what is known."""
    first, second = AgentDefinition(TOOLS, model=_model), AgentDefinition(TOOLS, model=_model)
    register("definition-test", first)
    register("definition-test", first)  # the same one again is fine
    with pytest.raises(ValueError, match="another definition"):
        register("definition-test", second)
    register("definition-test", second, replace=True)
    assert definition_for("definition-test") is second and registered()["definition-test"] is second
    with pytest.raises(LookupError, match="definition-test"):
        definition_for("no-such-agent")


def test_a_provider_fault_reads_as_it_was_raised() -> None:
    """A model's OSError crosses the activity boundary as data and comes back with its type name, kind and status."""
    fault = fault_of(fault_data(ConnectionRefusedError(111, "Connection refused")))
    assert isinstance(fault, OSError)
    assert (type(fault).__name__, fault.kind, fault.status, str(fault)) == (
        "ConnectionRefusedError",
        "transport",
        None,
        "[Errno 111] Connection refused",
    )


def test_a_result_travels_as_strict_json_and_a_forged_one_is_refused() -> None:
    """The result's state is read with RunState.from_json; a stop its state does not hold is refused."""
    import asyncio

    from agent_fsm import answer_message, arun

    done = asyncio.run(arun("hi", ScriptedModel([answer_message("hello")]), TOOLS, run_id="r1"))
    back = result_of(result_json(done))
    assert (back.stop, back.answer, back.state) == (done.stop, done.answer, done.state)
    forged = result_json(done).replace('"stop": "answered"', '"stop": "step_limit"')
    with pytest.raises(ValueError, match="step_limit"):
        result_of(forged)


def test_importing_the_package_does_not_import_temporalio() -> None:
    """``import agent_fsm`` and ``import agent_fsm.temporal`` leave the SDK unloaded until a worker or run needs it."""
    code = "import sys, agent_fsm, agent_fsm.temporal; print('temporalio' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
