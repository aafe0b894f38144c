"""Agent definitions and their registry, checked without a server; and that temporalio loads only when used."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from agent_fsm import Agent, Limits, ModelReply, ScriptedModel, ToolSpec, Verdict
from agent_fsm.temporal import AgentDefinition, Timeouts, definition_for, register, registered
from agent_fsm.temporal.codec import fault_data, fault_of, reply_data, reply_of, result_json, result_of

TOOLS = {"echo": ToolSpec("Echo.", {"text": str}, lambda text: text)}


def _agent(name: str | None = "desk", **parts: Any) -> Agent:
    return Agent(ScriptedModel([]), TOOLS, name=name, **parts)


def test_a_definition_refuses_what_a_workflow_cannot_replay() -> None:
    """Not an Agent, a clock budget, a patch without what it replaces, a change under another name: refused."""
    with pytest.raises(TypeError, match="holds an Agent"):
        AgentDefinition(TOOLS)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="patch"):
        AgentDefinition(_agent(), patch="p1")
    with pytest.raises(ValueError, match="keeps its name"):
        AgentDefinition(_agent("desk-2"), patch="p1", before=AgentDefinition(_agent()))
    with pytest.raises(ValueError, match="heartbeat"):
        Timeouts(heartbeat=0)
    if "max_seconds" in {a.name for a in Limits.__attrs_attrs__}:
        with pytest.raises(ValueError, match="clock"):
            AgentDefinition(_agent(limits=Limits(max_seconds=5)))


def test_a_patch_chain_picks_the_newest_definition_the_run_admits() -> None:
    """``chosen`` walks back through ``before`` past every patch the run did not record."""
    v1 = AgentDefinition(_agent())
    v2 = AgentDefinition(v1.agent.replace(gate=lambda c: Verdict.allow()), patch="p2", before=v1)
    v3 = AgentDefinition(_agent(), patch="p3", before=v2)
    assert v3.chosen(lambda patch: True) is v3
    assert v3.chosen(lambda patch: patch == "p2") is v2
    assert v3.chosen(lambda patch: False) is v1
    assert (v3.patches, v2.patches, v1.patches) == (["p3", "p2"], ["p2"], [])  # what a run carried over admits
    assert v3.chosen(set(v2.patches).__contains__) is v2
    with pytest.raises(ValueError, match="twice"):
        AgentDefinition(_agent(), patch="p2", before=v2)


def test_an_agent_is_registered_under_its_own_name() -> None:
    """A bare Agent is served with the default settings; one name, one definition, unless replaced on purpose."""
    first, second = _agent("definition-test"), _agent("definition-test")
    assert register(first) == AgentDefinition(first)  # default timeouts, a pure gate, no patch
    register(first)  # the same agent again is fine
    with pytest.raises(ValueError, match="another definition"):
        register(second)
    with pytest.raises(ValueError, match="another definition"):
        register(AgentDefinition(first, gate_does_io=True))  # the same agent served otherwise is another definition
    register(AgentDefinition(second, timeouts=Timeouts(tool=5)), replace=True)
    assert definition_for("definition-test").agent is second and registered()["definition-test"].timeouts.tool == 5
    with pytest.raises(TypeError, match="by its name"):
        register(_agent(None))
    with pytest.raises(TypeError, match="Agent or an AgentDefinition"):
        register(TOOLS)  # type: ignore[arg-type]
    with pytest.raises(LookupError, match="definition-test"):
        definition_for("no-such-agent")


def test_a_worker_serves_a_list_of_named_agents() -> None:
    """A mapping (names given twice) or two agents of one name are refused before anything is registered."""
    from agent_fsm.temporal import create_worker

    twin = _agent("worker-test")
    with pytest.raises(TypeError, match="as a list"):
        create_worker(None, {"worker-test": twin})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="two agents are named 'worker-test'"):
        create_worker(None, [twin, AgentDefinition(_agent("worker-test"))])  # type: ignore[arg-type]
    assert "worker-test" not in registered()


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


def test_a_tools_image_crosses_the_activity_boundary_whole() -> None:
    """An observation's media travel from the tool activity to the workflow as JSON and come back equal."""
    import json

    from agent_fsm import Image, Observation
    from agent_fsm.temporal.codec import observation_data, observation_of
    from tests.media import png

    image = Image(data=png(4, 4), media_type="image/png")
    observation = Observation("c1", True, "result", ["a chart", str(image)], media=(image.part,))
    assert observation_of(json.loads(json.dumps(observation_data(observation)))) == observation


def test_a_model_reply_travels_with_every_figure_the_provider_reported() -> None:
    """Usage, cache, reasoning and the answering model reach the workflow (a run's cost is computed from them)."""
    import json

    message = {"role": "assistant", "content": "hi"}
    full = ModelReply(message, 12, "stop", output_tokens=5, cached_tokens=3, model="m-1", reasoning_tokens=2)
    assert reply_of(json.loads(json.dumps(reply_data(full)))) == full
    assert reply_of({"message": message, "prompt_tokens": 12, "finish": None}) == ModelReply(message, 12)
    absurd = json.loads(json.dumps(reply_data(ModelReply(message, output_tokens=10**5000))))
    assert "bits" in (reply_of(absurd).problem() or "")  # refused in the workflow, as in-process


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
