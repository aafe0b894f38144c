"""Diagrams of agents as configured, and of nested runs: read back by mermaid's parser and Graphviz's dot."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent_fsm import (
    RUN_MACHINE,
    Agent,
    RunState,
    ScriptedModel,
    answer_message,
    check_composition,
    tool_call_message,
)
from agent_fsm.cli import app
from agent_fsm.diagrams import TraceError, path_of, runs_dot, runs_mermaid, sequence_diagram, to_mermaid
from agent_fsm.diagrams.catalog import agents
from agent_fsm.diagrams.labels import agent_title
from agent_fsm.diagrams.legend import core_machine, option_legend
from agent_fsm.engine import check_machine
from tests.nested_world import desk_agent, triage_agent
from tests.test_diagrams import (
    _dot_json,
    _expected_relations,
    _parsed_relations,
    mermaid_parse,  # noqa: F401  (the session's real Mermaid parser)
)

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()
needs_dot = pytest.mark.usefixtures("graphviz_dot")

OPTIONAL = {"ScreeningInput", "Compacting", "CostLimit", "OutputInvalid", "HandedOver", "ToolEnded", "Intercepted"}


def test_the_plain_world_draws_only_the_states_it_can_enter(mermaid_parse) -> None:  # noqa: F811
    """`diagram --world` of a plain agent: the parser reads back exactly its machine, none of the optional states."""
    result = runner.invoke(app, ["diagram", "--world", "agent_fsm.diagrams.catalog:agents"])
    assert result.exit_code == 1  # a dict of agents is not an agent: a one-line error
    result = runner.invoke(app, ["diagram", "--world", "tests.test_diagrams_configured:plain"])
    assert result.exit_code == 0, result.output
    (report,) = mermaid_parse([result.stdout])
    assert report["ok"], report.get("error")
    machine = plain().machine()
    assert _parsed_relations(report) == _expected_relations(machine)
    names = {s["id"] for s in report["states"]}
    assert not names & OPTIONAL
    assert "plain: the run machine as configured (13 of 26 states, 19 of 61 edges)" in result.stdout
    full = runner.invoke(app, ["diagram", "--world", "tests.test_diagrams_configured:plain", "--full"])
    (whole,) = mermaid_parse([full.stdout])
    assert _parsed_relations(whole) == _expected_relations(RUN_MACHINE)


def plain() -> Agent:
    """The catalog's plain agent, for ``--world tests.test_diagrams_configured:plain``."""
    return agents()["plain"]


def test_full_without_world_is_a_usage_error() -> None:
    """--full says which agent's machine it widens: without --world it is refused, exit 2."""
    result = runner.invoke(app, ["diagram", "--full"])
    assert result.exit_code == 2 and "--full is for --world" in result.output


@needs_dot
def test_committed_agent_diagrams_parse_and_match_their_machines(mermaid_parse) -> None:  # noqa: F811
    """Each diagrams/agent-*.mmd parses with mermaid's parser, each .dot with dot; flat ones equal their machine."""
    names = sorted(agents())
    texts = [(ROOT / "diagrams" / f"agent-{name}.mmd").read_text(encoding="utf-8") for name in names]
    for name, report in zip(names, mermaid_parse(texts), strict=True):
        assert report["ok"], (name, report.get("error"))
        agent = agents()[name]
        if name != "nested-handoff":
            assert _parsed_relations(report) == _expected_relations(agent.machine()), name
        else:
            assert {c["description"] for c in report["composites"]} == {
                "triage", "refunds (as tool)", "billing (handoff to_billing)",
            }  # fmt: skip
        dot = _dot_json((ROOT / "diagrams" / f"agent-{name}.dot").read_text(encoding="utf-8"))
        assert dot["objects"], name
    # What each configuration adds is visible: the screens bring their states, cost and compaction theirs.
    assert "ScreeningInput" in texts[names.index("screens")] and "Intercepted" in texts[names.index("screens")]
    costly = texts[names.index("cost-compaction")]
    assert "Compacting" in costly and "CostLimit" in costly and "ScreeningInput" not in costly
    assert all(check_machine(a.machine()).ok for a in agents().values())


def test_a_trace_on_the_agents_machine_and_a_trace_it_cannot_have_taken(tmp_path: Path) -> None:
    """--world with --trace draws the run's path on the agent's machine; a path it cannot take is a one-line error."""
    agent = plain()
    script = ScriptedModel([tool_call_message("c1", "look_up", {"order": "A1"}), answer_message("shipped")])
    result = agent.replace(model=script).run("where is A1?")
    trace = tmp_path / "run.json"
    trace.write_text(result.state.to_json(), encoding="utf-8")
    drawn = runner.invoke(app, ["diagram", "--world", "tests.test_diagrams_configured:plain", "--trace", str(trace)])
    assert drawn.exit_code == 0, drawn.output
    machine = agent.machine()
    title = agent_title(agent.name, machine, RUN_MACHINE)
    assert drawn.stdout == to_mermaid(machine, path=path_of(result.state, machine=machine), title=title)
    assert "a run's path to Answered" in drawn.stdout and "taken ×1" in drawn.stdout
    state = json.loads(result.state.to_json())
    state["path"] = ["ScreeningInput", "Ready", *state["path"]]  # a screened run: not this agent's
    trace.write_text(json.dumps(state), encoding="utf-8")
    refused = runner.invoke(app, ["diagram", "--world", "tests.test_diagrams_configured:plain", "--trace", str(trace)])
    assert refused.exit_code == 1 and "configured otherwise" in refused.stderr
    with pytest.raises(TraceError, match="configured otherwise"):
        path_of(RunState.from_json(json.dumps(state)), machine=machine)
    assert path_of(RunState.from_json(json.dumps(state))).end == "Answered"  # on the whole table it is a walk


def test_a_nested_runs_sequence_draws_each_child_inside_its_call(mermaid_parse) -> None:  # noqa: F811
    """Two levels down: the children's model, engine, gate and tool are participants; their calls are drawn."""
    done = desk_agent(cents=100).run("refund A1")
    (report,) = mermaid_parse([sequence_diagram(done)])
    assert report["ok"], report.get("error")
    actors = [a["name"] for a in report["actors"]]
    assert actors[:4] == ["model", "engine", "gate", "tool"] and {"n1_engine", "n2_engine", "n2_tool"} <= set(actors)
    messages = [(m["from"], m["to"], m["text"]) for m in report["messages"]]
    assert ("engine", "n1_engine", "runs triage [d1]") in messages
    assert ("n1_engine", "n2_engine", "runs refunds [t1]") in messages
    assert any(f == "n2_engine" and to == "n2_tool" and t.startswith("refund ") for f, to, t in messages)
    assert ("n2_engine", "n1_engine", "result: refunded 100") in messages


def test_a_paused_nested_runs_sequence_shows_the_human_where_they_are_asked(mermaid_parse) -> None:  # noqa: F811
    """The refund waits two levels down: the innermost run asks its human; the runs above wait with it."""
    paused = desk_agent().run("refund A1")
    (report,) = mermaid_parse([sequence_diagram(paused)])
    assert report["ok"], report.get("error")
    texts = [(m["from"], m["to"], m["text"]) for m in report["messages"]]
    assert any(f == "n2_engine" and to == "n2_human" for f, to, _ in texts)
    assert sum(1 for _, _, t in texts if "waits with the run nested in it" in t) == 2


def test_the_path_picture_of_nested_runs_draws_the_children(mermaid_parse, tmp_path: Path, graphviz_dot) -> None:  # noqa: F811
    """--trace of a nested run: a box per run, each with its own path highlighted; with --world each agent's machine."""
    done = desk_agent(cents=100).run("refund A1")
    text = runs_mermaid(done, agent=desk_agent(cents=100))
    (report,) = mermaid_parse([text])
    assert report["ok"], report.get("error")
    boxes = {c["id"]: c for c in report["composites"]}
    assert set(boxes) == {"n0", "n1", "n2"} and boxes["n2"]["parent"] == "n1"
    ended = {s["id"] for s in report["states"] if "ended" in s["classes"]}
    assert ended == {"n0_Answered", "n1_Answered", "n2_Answered"}
    states = {s["id"] for s in report["states"]}
    assert "n1_HandedOver" in states and "n0_HandedOver" not in states  # triage may hand over; the desk cannot
    trace = tmp_path / "nested.json"
    trace.write_text(done.state.to_json(), encoding="utf-8")
    drawn = runner.invoke(app, ["diagram", "--trace", str(trace)])
    assert drawn.exit_code == 0, drawn.output
    assert drawn.stdout == runs_mermaid(done)
    svg = runner.invoke(app, ["diagram", "--trace", str(trace), "-f", "svg"])
    assert svg.exit_code == 0 and svg.stdout.count('class="cluster"') == 3
    assert "n2_Executing" in runs_dot(done)


def test_check_composition_proves_each_agents_machine_and_the_whole_table() -> None:
    """check_composition proves the run machine and each agent's machine as configured, and says so."""
    found = check_composition(triage_agent())
    assert found.terminates
    assert found.proved[0] == f"the run machine ({len(RUN_MACHINE.states)} states)"
    assert {p.split("'")[0] for p in found.proved[1:]} == {"triage", "refunds", "billing"}


def test_the_legend_accounts_for_every_edge_and_the_docs_show_it() -> None:
    """The core's edges, each option's and those only options together bring are the whole table; docs show it."""
    core = core_machine()
    assert core == plain().machine()
    legend = option_legend(edges=True)
    listed = sum(row.count(" → ") for row in legend.splitlines() if row.startswith("| ") and "→" in row)
    together = legend.split("Only options taken together bring ", 1)[1].count(" → ")
    assert len(core.edges) + listed + together == len(RUN_MACHINE.edges)
    docs = (ROOT / "docs" / "diagrams.md").read_text(encoding="utf-8")
    assert legend in docs, "docs/diagrams.md's legend is stale: paste option_legend(edges=True)"


def test_world_and_trace_of_a_nested_run_draw_each_run_on_its_agents_machine(mermaid_parse, tmp_path: Path) -> None:  # noqa: F811
    """--world with --trace of a run that nested another: each box is that run's agent's machine, with its path."""
    paused = triage_agent().run("refund A1")
    assert paused.state.children and paused.stop.value == "awaiting_approval"
    trace = tmp_path / "nested.json"
    trace.write_text(paused.state.to_json(), encoding="utf-8")
    drawn = runner.invoke(app, ["diagram", "--world", "tests.nested_world:world", "--trace", str(trace)])
    assert drawn.exit_code == 0, drawn.output
    assert drawn.stdout == runs_mermaid(paused, agent=triage_agent())
    (report,) = mermaid_parse([drawn.stdout])
    assert report["ok"], report.get("error")
    states = {s["id"] for s in report["states"]}
    refunds = triage_agent().tools["refunds"].handler.agent  # type: ignore[attr-defined]
    inner = refunds.machine(limits=paused.state.children["t1"].limits)
    box = next(c for c in report["composites"] if c["id"] == "n1")
    inside = {
        (r["from"][3:], r["to"][3:]) for r in box["relations"] if r["to"] not in ("n1_end",) and r["from"] != "n1_start"
    }
    assert inside == {(e.source, e.dest) for e in inner.edges}
    assert "n1_Compacting" not in states and "n0_HandedOver" in states  # triage may hand over; refunds cannot
    ended = {s["id"] for s in report["states"] if "ended" in s["classes"]}
    assert ended == {"n0_AwaitingApproval", "n1_AwaitingApproval"}  # the parent waits with its child
