"""Nested agents drawn as one statechart: Mermaid composites read back by mermaid's parser, DOT clusters by dot."""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import pytest
from typer.testing import CliRunner

from agent_fsm import Agent, ScriptedModel, ToolSpec, answer_message, check_composition
from agent_fsm.cli import app
from agent_fsm.diagrams import composition_dot, composition_mermaid, render_composition
from agent_fsm.engine import RUN_MACHINE, MachineSpec, held_limits
from tests.nested_world import recursive_agent, triage_agent
from tests.test_diagrams import mermaid_parse  # noqa: F401  (the session's real Mermaid parser)

runner = CliRunner()
needs_dot = pytest.mark.usefixtures("graphviz_dot")


def _machine_relations(key: str, machine: MachineSpec = RUN_MACHINE) -> set[tuple[str, str]]:
    return {(f"{key}_{e.source}", f"{key}_{e.dest}") for e in machine.edges}


def _self_nesting() -> Agent:
    """An agent whose one tool is itself."""
    tools: dict[str, ToolSpec] = {}
    loop = Agent(ScriptedModel([answer_message("done")]), tools, name="loop")
    tools["again"] = loop.as_tool()
    return loop


@pytest.mark.parametrize("full", [False, True], ids=["configured", "full"])
def test_mermaid_nests_each_agents_machine_in_a_composite_state(mermaid_parse, full: bool) -> None:  # noqa: F811
    """
    The parser reads three composites nested as the agents nest, each with exactly its agent's machine as
    configured inside (under the limits it is held to nested), or with full=True the whole run machine.
    """
    triage = triage_agent()
    (report,) = mermaid_parse([composition_mermaid(triage, full=full)])
    assert report["ok"], report.get("error")
    boxes = {c["id"]: c for c in report["composites"]}
    held = triage.limits
    assert held is not None
    agents = {"n0": triage, "n1": triage.tools["refunds"].handler.agent, "n2": triage.tools["to_billing"].handler.agent}  # type: ignore[attr-defined]
    for key, agent in agents.items():
        machine = RUN_MACHINE if full else agent.machine(limits=held if key == "n0" else held_limits(agent, held))
        inside = {(r["from"], r["to"]) for r in boxes[key]["relations"] if r["from"] != f"{key}_start"}
        inside = {
            (a, b) for a, b in inside if a.startswith(f"{key}_") and b.startswith(f"{key}_") and b != f"{key}_end"
        }
        assert inside == _machine_relations(key, machine), key
    if not full:
        assert "n2_HandedOver" not in str(boxes["n2"])  # billing hands over to nobody: not its state
        assert "n0_HandedOver" in str(boxes["n0"])
    assert {k: (c["description"], c["parent"]) for k, c in boxes.items()} == {
        "n0": ("triage", "root"),
        "n1": ("refunds (as tool)", "n0"),
        "n2": ("billing (handoff to_billing)", "n0"),
    }
    for key, box in boxes.items():
        assert (f"{key}_start", f"{key}_{RUN_MACHINE.initial}") in {(r["from"], r["to"]) for r in box["relations"]}
    between = {(r["from"], r["to"], r["label"]) for r in boxes["n0"]["relations"]}
    assert ("n0_Executing", "n1", "refunds") in between  # entered from Executing by the delegating call
    assert ("n1", "n0_Executing", "ends: observation") in between
    assert ("n1", "n0_AwaitingApproval", "pauses: waits with it") in between
    assert ("n0_Executing", "n2", "to_billing") in between
    assert ("n2", "n0_HandedOver", "its part ends [handed_over]") in between  # a handoff ends the parent
    assert {(r["from"], r["to"]) for r in report["relations"]} == {("root_start", "n0")}
    paused = {s["id"] for s in report["states"] if "paused" in s["classes"]}
    assert paused >= {"n1_AwaitingApproval", "n2_AwaitingApproval"}


@pytest.mark.parametrize("build", [recursive_agent, _self_nesting], ids=["through-another", "itself"])
def test_recursion_is_drawn_once_with_an_edge_back(mermaid_parse, build) -> None:  # noqa: F811
    """An agent that nests itself is one box per agent and an edge back; the title gives the proved depth bound."""
    agent = build()
    text = composition_mermaid(agent)
    (report,) = mermaid_parse([text])
    assert report["ok"], report.get("error")
    found = check_composition(agent)
    assert len(report["composites"]) == len(found.agents)
    back = [r for c in report["composites"] for r in c["relations"] if "again" in r["label"]]
    assert len(back) == 1 and back[0]["to"] == "n0", back
    assert f"recursive, nests at most {found.depth_bound} deep" in text.splitlines()[1]
    assert "terminates" in text.splitlines()[1]


def test_a_flat_agent_is_one_box() -> None:
    """No nesting tool: one composite, depth 0."""
    flat = Agent(ScriptedModel([answer_message("hi")]), {}, name="flat")
    text = composition_mermaid(flat)
    assert text.count(" as n") == 1 and "nests at most 0 deep" in text


def _cluster_bodies(source: str) -> dict[str, str]:
    """Each cluster's name to the text of its body (nested clusters included), by matching braces."""
    bodies = {}
    for found in re.finditer(r"subgraph (cluster_\w+) \{", source):
        depth, at = 1, found.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(source[at], 0)
            at += 1
        bodies[found.group(1)] = source[found.end() : at]
    return bodies


@needs_dot
def test_dot_draws_nested_clusters_entered_from_executing() -> None:
    """Clusters nest as the agents do; the delegating edge enters the child's cluster; dot draws it."""
    source = composition_dot(triage_agent())
    bodies = _cluster_bodies(source)
    assert set(bodies) == {"cluster_n0", "cluster_n1", "cluster_n2"}
    assert "subgraph cluster_n1" in bodies["cluster_n0"] and "subgraph cluster_n2" in bodies["cluster_n0"]
    assert "cluster_n" not in bodies["cluster_n1"].replace("cluster_n1", "")
    assert "n0_Executing -> n1_Ready [label=refunds lhead=cluster_n1]" in source
    assert "compound=true" in source
    svg = render_composition(triage_agent(), "svg").decode()
    assert svg.count('class="cluster"') == 3
    for title in ("triage", "refunds (as tool)", "billing (handoff to_billing)"):
        assert f">{title}</text>" in svg
    assert render_composition(recursive_agent(), "png").startswith(b"\x89PNG")


def test_cli_draws_the_world_named(tmp_path: Path, graphviz_dot) -> None:
    """--world draws the agent's composition; as a file in a folder; refused with --machine; a bad name exits 1."""
    result = runner.invoke(app, ["diagram", "--world", "tests.nested_world:world"])
    assert result.exit_code == 0, result.output
    assert result.stdout == composition_mermaid(triage_agent())
    result = runner.invoke(app, ["diagram", "--world", "tests.nested_world:world", "-f", "svg", "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "triage-composition.svg").read_text().count('class="cluster"') == 3
    result = runner.invoke(app, ["diagram", "--world", "tests.nested_world:world", "--machine", "run"])
    assert result.exit_code == 2
    result = runner.invoke(app, ["diagram", "--world", "tests.nested_world:nothing"])
    assert result.exit_code == 1 and "cannot load the world" in result.stderr


def test_a_nested_record_reconstructs_to_the_path_it_took() -> None:
    """Without a saved path: a parent whose nested runs charged turns, and one that handed over, rebuild exactly."""
    from agent_fsm import tool_call_message
    from agent_fsm.diagrams import path_of, reconstruct_path
    from tests.nested_world import desk_agent

    paused = desk_agent().run("refund A1")
    done = desk_agent(cents=100).run("refund A1")  # no pause: an approval leaves no mark to rebuild it from
    billing = Agent(ScriptedModel([answer_message("fine")]), {}, name="billing")
    front = Agent(ScriptedModel([tool_call_message("h1", "to_billing", {})]), {"to_billing": billing.handoff()})
    handed = front.run("is my invoice ok?")
    assert handed.state.machine_state == "HandedOver"
    for state in (paused.state, done.state, done.state.children["d1"], handed.state):
        unsaved = attrs.evolve(state, path=[])
        assert reconstruct_path(unsaved).steps == path_of(state).steps, state.run_id
