"""Tests for agent_fsm.diagrams: checked against the real Mermaid parser and the real Graphviz `dot`."""

from __future__ import annotations

import ast
import contextlib
import html
import json
import random
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_fsm import (
    Limits,
    ProviderFailure,
    ScriptedModel,
    ToolError,
    ToolSpec,
    ask_for_effects,
    resume,
    run,
)
from agent_fsm.diagrams import (
    REGENERATE_COMMAND,
    RunPath,
    TraceError,
    load_trace,
    path_of,
    reconstruct_path,
    render,
    sequence_diagram,
    to_dot,
    to_mermaid,
    write_all,
)
from agent_fsm.diagrams.catalog import machines, ships
from agent_fsm.diagrams.charts import CHART_FILES
from agent_fsm.diagrams.legend import option_legend
from agent_fsm.engine import DEFAULT_LAST_WORD, RUN_MACHINE, Edge, MachineSpec, StateSpec, answer_message, cycles
from agent_fsm.examples.demo import TASK, overreaching_model
from agent_fsm.examples.support_desk import make_support_desk, refund_gate
from tests.step_watchdog import watch_moves
from tests.system_parts import unavailable

ROOT = Path(__file__).resolve().parent.parent
MERMAID_DIR = Path(__file__).resolve().parent / "mermaid"
DOT = shutil.which("dot")
needs_dot = pytest.mark.usefixtures("graphviz_dot")


# --- the real Mermaid parser ---------------------------------------------------


@pytest.fixture(scope="session")
def mermaid_parse():
    """Parse Mermaid texts with mermaid's own parser, in one node process kept for the session."""
    node = shutil.which("node")
    if node is None or not (MERMAID_DIR / "node_modules" / "mermaid").is_dir():
        reason = "the real Mermaid parser is not installed: run `npm ci` in tests/mermaid (.ci/run does)"
        unavailable(reason)
    process = subprocess.Popen(
        [node, "parse.mjs"], cwd=MERMAID_DIR, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8"
    )

    def parse(texts: list[str]) -> list[dict[str, Any]]:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(json.dumps(texts) + "\n")
        process.stdin.flush()
        line = process.stdout.readline()
        assert line, f"the mermaid parser process died (exit status {process.poll()})"
        return json.loads(line)

    yield parse
    assert process.stdin is not None
    process.stdin.close()
    process.wait()


def _decoded(text: str) -> str:
    """Undo the entity placeholders mermaid's parser keeps in labels until it renders them."""
    text = re.sub("ﬂ°°(\\d+)¶ß", lambda m: chr(int(m.group(1))), text)
    return re.sub("ﬂ°(\\w+)¶ß", lambda m: html.unescape(f"&{m.group(1)};"), text)


def _label(machine: MachineSpec, edge: Edge) -> str:
    """The label the diagrams promise: event, guard or [else] for a fallback, the budget spent."""
    siblings = [e for e in machine.edges if (e.source, e.event) == (edge.source, edge.event)]
    text = edge.event + (f" [{edge.guard}]" if edge.guard else " [else]" if len(siblings) > 1 else "")
    return text + (f" / spends {edge.consumes}" if edge.consumes else "")


def _expected_relations(machine: MachineSpec, suffix: dict[Edge, str] | None = None) -> list[tuple[str, str, str]]:
    relations = [("[*]", machine.initial, "")]
    relations += [(e.source, e.dest, _label(machine, e) + (suffix or {}).get(e, "")) for e in machine.edges]
    relations += [(s.name, "[*]", "") for s in machine.states if s.kind == "absorbing"]
    return sorted(relations)


def _parsed_relations(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The parser's relations with ids mapped back to state names ([*] for start and end)."""
    names = {s["id"]: (_decoded(s["descriptions"][0]) if s["descriptions"] else s["id"]) for s in report["states"]}
    names.update({"root_start": "[*]", "root_end": "[*]"})
    return sorted((names[r["from"]], names[r["to"]], _decoded(r["label"])) for r in report["relations"])


def _awkward_machine(names: list[str], events: list[str], name: str = "awkward") -> MachineSpec:
    """A consistent machine whose state, event and guard names all need escaping."""
    start, done, paused, other = names
    return MachineSpec(
        name=name,
        initial=start,
        states=(
            StateSpec(start, "working"),
            StateSpec(done, "absorbing", stop="answered"),
            StateSpec(paused, "paused", stop="awaiting_approval"),
            StateSpec(other, "absorbing", stop="step_limit"),
        ),
        edges=(
            Edge(start, events[0], done, guard=events[1]),
            Edge(start, events[0], paused, guard=events[2]),
            Edge(start, events[0], other),
            Edge(paused, events[3], done),
        ),
    )


AWKWARD = _awkward_machine(
    ["end", 'say "hi"; then #stop', "S0", "<b>bold</b> & state"],
    ["go: now", "a;b", "x#y", "note right of end"],
    name='awkward: "names"',
)


# --- runs of known shape on the support desk ----------------------------------


@contextlib.contextmanager
def _recording() -> Iterator[list[str]]:
    """Record every state the real engine enters: the oracle a reconstructed path must equal."""
    seen: list[str] = ["Ready"]
    with pytest.MonkeyPatch.context() as patch:
        watch_moves(patch, lambda state, value: seen.append(value))
        yield seen


def _reply(*calls: tuple[str, str, Any]) -> dict[str, Any]:
    """One assistant message proposing several calls (arguments as data, or a raw string)."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": i,
                "type": "function",
                "function": {"name": n, "arguments": a if isinstance(a, str) else json.dumps(a)},
            }
            for i, n, a in calls
        ],
    }


LOOKUP = ("lookup_order", {"order_id": "A-17"})
MISSING = ("lookup_order", {"order_id": "Z-9"})
POLICY = ("read_policy", {})
SMALL_REFUND = ("refund_order", {"order_id": "A-17", "amount_cents": 100})
BIG_REFUND = ("refund_order", {"order_id": "A-17", "amount_cents": 9999})
UNKNOWN = ("wipe_orders", {})
CHARGE = ("charge_card", {})  # always fails permanently: the run hands off
BROKEN = ("lookup_order", '{"order_id": ')
ANSWER = answer_message("Done.")


class _InOrder:
    """A model that replies in order whatever the transcript holds (ScriptedModel counts earlier turns too)."""

    def __init__(self, replies: list[dict[str, Any]]) -> None:
        self.replies = list(replies)

    def chat(self, messages: Any, tools: Any = ()) -> Any:
        return self.replies.pop(0)


class _Unreachable(_InOrder):
    """A model whose provider fails once its replies are spent."""

    def chat(self, messages: Any, tools: Any = ()) -> Any:
        if not self.replies:
            raise ProviderFailure("connection refused", kind="transport")
        return super().chat(messages, tools)


def _desk_tools() -> dict[str, ToolSpec]:
    """The support desk's tools plus one whose every failure is permanent."""

    def charge_card() -> None:
        raise ToolError("the card processor refused the account", permanent=True)

    return {**make_support_desk().tools, "charge_card": ToolSpec("Charge the card on file.", {}, charge_card)}


def _states(path: RunPath) -> list[str]:
    return [path.machine.initial, *(edge.dest for edge in path.steps)]


def _demo_result():
    desk = make_support_desk()
    return run(TASK, overreaching_model(), desk.tools, gate=refund_gate)


KNOWN_SHAPES = {
    "demo: lookup, denied refund, allowed refund, answer": (
        lambda tools: run(TASK, overreaching_model(), tools, gate=refund_gate),
        "Ready Proposing Executing Ready Proposing Denied Ready Proposing Executing Ready Proposing Answered",
    ),
    "two calls in one reply": (
        lambda tools: run(TASK, ScriptedModel([_reply(("a", *LOOKUP), ("b", *POLICY)), ANSWER]), tools),
        "Ready Proposing Executing Proposing Executing Ready Proposing Answered",
    ),
    "denied then executed in one reply": (
        lambda tools: run(
            TASK, ScriptedModel([_reply(("a", *BIG_REFUND), ("b", *MISSING)), ANSWER]), tools, gate=refund_gate
        ),
        "Ready Proposing Denied Proposing Executing Ready Proposing Answered",
    ),
    "the same denial twice: no progress": (
        lambda tools: run(TASK, ScriptedModel([_reply(("a", *BIG_REFUND))] * 3), tools, gate=refund_gate),
        "Ready Proposing Denied Ready Proposing Denied NoProgress",
    ),
    "invalid proposals (unknown tool, broken JSON)": (
        lambda tools: run(TASK, ScriptedModel([_reply(("a", *UNKNOWN), ("b", *BROKEN)), ANSWER]), tools),
        "Ready Proposing Denied Proposing Denied Ready Proposing Answered",
    ),
    "step limit": (
        lambda tools: run(TASK, ScriptedModel([_reply(("a", *LOOKUP))] * 5), tools, limits=Limits(max_turns=2)),
        "Ready Proposing Executing Ready Proposing Executing Ready StepLimit",
    ),
    "token limit before any call": (
        lambda tools: run(TASK, ScriptedModel([ANSWER]), tools, limits=Limits(max_prompt_tokens=10)),
        "Ready TokenLimit",
    ),
    "tool limit inside a reply": (
        lambda tools: run(
            TASK, ScriptedModel([_reply(("a", *LOOKUP), ("b", *POLICY))]), tools, limits=Limits(max_tool_calls=1)
        ),
        "Ready Proposing Executing Proposing ToolLimit",
    ),
    "paused for approval": (
        lambda tools: run(TASK, ScriptedModel([_reply(("a", *SMALL_REFUND))]), tools, gate=ask_for_effects(tools)),
        "Ready Proposing AwaitingApproval",
    ),
    "provider error on the second turn": (
        lambda tools: run(TASK, _Unreachable([_reply(("a", *LOOKUP))]), tools),
        "Ready Proposing Executing Ready Proposing ProviderError",
    ),
    "a permanent tool failure hands off": (
        lambda tools: run(TASK, ScriptedModel([_reply(("a", *LOOKUP), ("b", *CHARGE), ("c", *LOOKUP))]), tools),
        "Ready Proposing Executing Proposing Executing Handoff",
    ),
    "answer refused by the answer check": (
        lambda tools: run(TASK, ScriptedModel([ANSWER]), tools, answer_check=lambda text, state: "cite an order"),
        "Ready Proposing AnswerRejected",
    ),
}


# --- Mermaid -------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(machines()))
def test_mermaid_lists_every_state_and_edge(name: str) -> None:
    """Every state and every labelled edge of each catalog machine is in its Mermaid text."""
    machine = machines()[name]
    text = to_mermaid(machine)
    assert text.splitlines()[3] == "stateDiagram-v2"
    assert f"[*] --> {machine.initial}" in text
    for edge in machine.edges:
        assert f"    {edge.source} --> {edge.dest}: {_label(machine, edge)}\n" in text
    for state in machine.states:
        assert re.search(rf"\b{state.name}\b", text), state.name
        if state.kind == "absorbing":
            assert f"    {state.name} --> [*]\n" in text


def test_run_machine_labels_guards_and_fallbacks() -> None:
    """The run machine's edges read as the reviewer expects: guards, [else] fallbacks, spent budgets."""
    text = to_mermaid(RUN_MACHINE)
    assert "Proposing --> Executing: judge [call_allowed]" in text
    assert "Executing --> Ready: observe [else]" in text
    assert "Ready --> Proposing: next_turn [else] / spends turns" in text
    assert (
        "AwaitingApproval --> Executing: approve / spends decisions\n" in text
    )  # the only edge of its event: no [else]


def test_mermaid_parses_with_the_real_parser(mermaid_parse) -> None:
    """mermaid's own parser accepts every catalog diagram and reads back exactly the declared states and edges."""
    catalog = list(machines().values())
    reports = mermaid_parse([to_mermaid(m) for m in catalog])
    for machine, report in zip(catalog, reports):
        assert report["ok"], report.get("error")
        assert report["type"] == "stateDiagram"
        assert _parsed_relations(report) == _expected_relations(machine)
        parsed = {s["id"]: s for s in report["states"]}
        assert set(parsed) == {s.name for s in machine.states} | {"root_start", "root_end"}
        for state in machine.states:
            kind_class = {"paused": ["paused"], "absorbing": ["absorbing"]}.get(state.kind, [])
            assert parsed[state.name]["classes"] == kind_class, state.name
            if state.kind == "paused":
                assert parsed[state.name]["note"].startswith("paused: decided by")


def test_mermaid_parser_rejects_broken_text(mermaid_parse) -> None:
    """The parser check can fail: a broken transition line is reported as a parse error."""
    text = to_mermaid(RUN_MACHINE).replace("[*] --> Ready", "[*] --> --> Ready")
    (report,) = mermaid_parse([text])
    assert not report["ok"]
    assert "Parse error" in report["error"]


def test_mermaid_escapes_awkward_names(mermaid_parse) -> None:
    """Reserved words, quotes, ';', '#', '<b>' and colons in names survive the real parser unchanged."""
    rng = random.Random(7)
    alphabet = "ab Z9_;#:\"'<>&%[]{}()|-.end state"
    machines_ = [AWKWARD]
    for index in range(20):
        words = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(8)]
        names = list(dict.fromkeys(w.strip() or "blank" for w in words[:4]))
        while len(names) < 4:
            names.append(f"state{len(names)}")
        machines_.append(_awkward_machine(names, [w or "e" for w in words[4:]], name=f"fuzz{index}"))
    reports = mermaid_parse([to_mermaid(m) for m in machines_])
    for machine, report in zip(machines_, reports):
        assert report["ok"], (machine, report.get("error"))
        collapse = lambda text: " ".join(text.split())
        expected = sorted((collapse(a), collapse(b), collapse(c)) for a, b, c in _expected_relations(machine))
        assert _parsed_relations(report) == expected


def test_path_highlight_parses_and_marks_visited_states(mermaid_parse) -> None:
    """A run's path diagram parses; visited states, the ending and every edge's count are what the run did."""
    result = _demo_result()
    path = path_of(result)
    (report,) = mermaid_parse([to_mermaid(RUN_MACHINE, path=path)])
    assert report["ok"], report.get("error")
    suffix = {edge: f" (taken ×{count})" for edge, count in path.counts().items()}
    assert _parsed_relations(report) == _expected_relations(RUN_MACHINE, suffix)
    classes = {s["id"]: s["classes"] for s in report["states"]}
    assert classes["Answered"] == ["absorbing", "ended"]
    assert {name for name, found in classes.items() if "visited" in found} == {
        "Ready",
        "Proposing",
        "Executing",
        "Denied",
    }
    assert "visited" not in classes["AwaitingApproval"]


def test_path_counts_match_the_demo_run() -> None:
    """The demo run takes next_turn four times, executes twice and is denied once."""
    counts = {(e.source, e.dest): n for e, n in path_of(_demo_result()).counts().items()}
    assert counts == {
        ("Ready", "Proposing"): 4,
        ("Proposing", "Executing"): 2,
        ("Executing", "Ready"): 2,
        ("Proposing", "Denied"): 1,
        ("Denied", "Ready"): 1,
        ("Proposing", "Answered"): 1,
    }
    assert "Ready --> Proposing: next_turn [else] / spends turns (taken ×4)" in to_mermaid(
        RUN_MACHINE, path=path_of(_demo_result())
    )


def test_path_of_another_machine_is_refused() -> None:
    """A path through one machine cannot be drawn on another."""
    with pytest.raises(ValueError, match="'run', not 'awkward: \"names\"'"):
        to_mermaid(AWKWARD, path=path_of(_demo_result()))


# --- path reconstruction ----------------------------------------------------------


@pytest.mark.parametrize("shape", sorted(KNOWN_SHAPES))
def test_path_of_known_shapes(shape: str) -> None:
    """The reconstructed path equals both the expected shape and the states the real engine entered."""
    make, expected = KNOWN_SHAPES[shape]
    with _recording() as entered:
        result = make(_desk_tools())
    path = path_of(result)
    assert _states(path) == entered == expected.split()
    assert path.end == result.state.machine_state
    assert path_of(load_trace(result.state.to_json())) == path


def test_path_of_a_continued_conversation_skips_the_history() -> None:
    """A run started with an earlier run's messages as history is drawn from its own task on."""
    tools = make_support_desk().tools
    first = run(TASK, overreaching_model(), tools, gate=refund_gate)
    with _recording() as entered:
        second = run(
            "And order A-17's status?", _InOrder([_reply(("x", *LOOKUP)), ANSWER]), tools, history=first.state.messages
        )
    assert _states(path_of(second)) == entered == ["Ready", "Proposing", "Executing", "Ready", "Proposing", "Answered"]


def test_path_of_human_rejection_goes_through_the_pause() -> None:
    """A call a human rejected is drawn AwaitingApproval --reject--> Denied, as the engine went."""
    tools = make_support_desk().tools
    script = ScriptedModel([_reply(("a", *SMALL_REFUND)), ANSWER])
    with _recording() as entered:
        paused = run(TASK, script, tools, gate=ask_for_effects(tools))
        done = resume(paused.state, script, tools, approve=False, gate=ask_for_effects(tools), reason="not today")
    path = path_of(done)
    expected = ["Ready", "Proposing", "AwaitingApproval", "Denied", "Ready", "Proposing", "Answered"]
    assert _states(path) == entered == expected
    assert ("AwaitingApproval", "reject", "Denied") in [(e.source, e.event, e.dest) for e in path.steps]


def test_path_of_human_approval_comes_from_the_recorded_path() -> None:
    """An approved call is drawn through the pause, as the engine went; reconstruction alone cannot tell it."""
    tools = make_support_desk().tools
    script = ScriptedModel([_reply(("a", *SMALL_REFUND)), ANSWER])
    with _recording() as entered:
        paused = run(TASK, script, tools, gate=ask_for_effects(tools))
        done = resume(paused.state, script, tools, approve=True, gate=ask_for_effects(tools))
    assert entered == ["Ready", "Proposing", "AwaitingApproval", "Executing", "Ready", "Proposing", "Answered"]
    assert _states(path_of(done)) == entered
    assert ("AwaitingApproval", "approve", "Executing") in [(e.source, e.event, e.dest) for e in path_of(done).steps]
    # without the recorded path, an approval leaves no mark: documented limit of reconstruct_path
    assert _states(reconstruct_path(done)) == [s for s in entered if s != "AwaitingApproval"]


def test_a_recorded_path_that_is_not_a_walk_is_refused() -> None:
    """A recorded path with a jump no edge allows, or ending elsewhere than the run rests, is a TraceError."""
    state = _demo_result().state
    state.path.insert(1, "Answered")
    with pytest.raises(TraceError, match="not one edge of the run machine"):
        path_of(state)
    state = _demo_result().state
    state.path.pop()
    with pytest.raises(TraceError, match="but the run rests in 'Answered'"):
        path_of(state)


_PROPOSALS = {
    "charge": CHARGE,
    "lookup": LOOKUP,
    "missing": MISSING,
    "policy": POLICY,
    "small": SMALL_REFUND,
    "big": BIG_REFUND,
    "unknown": UNKNOWN,
    "broken": BROKEN,
}


@given(
    turns=st.lists(
        st.one_of(st.none(), st.lists(st.sampled_from(sorted(_PROPOSALS)), min_size=1, max_size=3)), max_size=6
    ),
    gate=st.sampled_from(["refund", "ask", "default"]),
    limits=st.builds(
        Limits,
        max_turns=st.integers(0, 6),
        max_prompt_tokens=st.sampled_from([200, 700, 4000]),
        repeated_denials=st.integers(1, 3),
        max_tool_calls=st.none() | st.integers(0, 4),
    ),
    rejections=st.integers(0, 3),
)
def test_path_of_matches_the_engine_on_random_runs(turns, gate, limits, rejections) -> None:
    """For any script, gate, budgets and human rejections, the reconstruction is the path the engine took."""
    script = ScriptedModel(
        [
            ANSWER if turn is None else _reply(*((f"t{n}c{i}", *_PROPOSALS[p]) for i, p in enumerate(turn)))
            for n, turn in enumerate(turns)
        ],
        last_word=DEFAULT_LAST_WORD,  # a random script need not end
    )
    tools = _desk_tools()
    chosen = {"refund": refund_gate, "ask": ask_for_effects(tools), "default": None}[gate]
    with _recording() as entered:
        result = run(TASK, script, tools, gate=chosen, limits=limits)
        for _ in range(rejections):
            if result.state.machine_state != "AwaitingApproval":
                break
            result = resume(result.state, script, tools, approve=False, gate=chosen, limits=limits)
    path = path_of(result)
    assert _states(path) == entered == ["Ready", *result.state.path]
    assert reconstruct_path(result) == path  # the transcript alone tells the same route (no approvals here)
    assert RunPath.from_steps(RUN_MACHINE, [(e.source, e.event, e.dest) for e in path.steps]) == path


def test_reconstruct_path_refuses_an_inconsistent_record() -> None:
    """A record whose observations, turn count or resting state do not fit the machine is a TraceError."""
    state = _demo_result().state
    state.observations.pop(0)
    with pytest.raises(TraceError, match="answers call 'call_2', but the transcript's next call is 'call_1'"):
        reconstruct_path(state)
    state = _demo_result().state
    state.turns = 7
    with pytest.raises(TraceError, match="4 model call"):
        reconstruct_path(state)
    state = _demo_result().state
    state.machine_state = "StepLimit"
    with pytest.raises(TraceError, match="leads to 'Answered', but the run rests in 'StepLimit'"):
        reconstruct_path(state)
    state = _demo_result().state
    state.messages.append(dict(state.messages[-1]))
    state.turns += 1
    with pytest.raises(TraceError, match="goes on after the run stopped in 'Answered'"):
        reconstruct_path(state)
    state.machine_state = "Elsewhere"
    with pytest.raises(TraceError, match="not a state of the run machine"):
        reconstruct_path(state)


def test_run_path_from_steps_checks_each_step() -> None:
    """Steps recorded elsewhere must be edges of the machine and join end to start."""
    path = RunPath.from_steps(RUN_MACHINE, [("Ready", "next_turn", "Proposing"), ("Proposing", "judge", "Answered")])
    assert path.end == "Answered" and path.visited == {"Ready", "Proposing", "Answered"}
    with pytest.raises(TraceError, match="no edge Ready --judge--> Answered"):
        RunPath.from_steps(RUN_MACHINE, [("Ready", "judge", "Answered")])
    with pytest.raises(TraceError, match="step 1 leaves 'Ready' but the path is in 'Proposing'"):
        RunPath.from_steps(RUN_MACHINE, [("Ready", "next_turn", "Proposing"), ("Ready", "next_turn", "StepLimit")])


def test_load_trace_reads_plain_and_wrapped_states() -> None:
    """A saved RunState loads as it is, or from under the 'state' key (as an object or as JSON text)."""
    state = _demo_result().state
    text = state.to_json()
    assert load_trace(text) == state
    assert load_trace(json.dumps({"task": TASK, "state": json.loads(text)})) == state
    assert load_trace(json.dumps({"state": text})) == state


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "trace is not JSON"),
        ("[1, 2]", "got a JSON list"),
        ('{"state": 3}', "got a JSON int"),
        ('{"state": "{broken"}', "is a string that is not JSON"),
        ('{"messages": []}', "format 2 expected"),
        ('{"format": 2, "turns": "many"}', "malformed"),
    ],
)
def test_load_trace_rejects_what_is_not_a_saved_run(text: str, message: str) -> None:
    """Unreadable traces raise TraceError (a ValueError) saying what was expected."""
    with pytest.raises(TraceError, match=message):
        load_trace(text)


# --- sequence diagrams -----------------------------------------------------------


def test_sequence_diagram_of_the_demo_run(mermaid_parse) -> None:
    """The demo's transcript parses as a sequence: four model turns, the gate's denial, two tool calls, the ending."""
    (report,) = mermaid_parse([sequence_diagram(_demo_result())])
    assert report["ok"], report.get("error")
    assert [a["name"] for a in report["actors"]] == ["model", "engine", "gate", "tool"]
    messages = [(m["from"], m["to"], _decoded(m["text"])) for m in report["messages"]]
    assert [t for f, to, t in messages if (f, to) == ("engine", "model") and t.startswith("turn")] == [
        f"turn {n}, prompt ≈ {tokens} tokens" for n, tokens in enumerate(_demo_result().state.prompt_token_log, 1)
    ]
    assert ("gate", "engine", "deny: refunds above 5000 cents need a manager") in messages
    assert [t.split()[0] for f, to, t in messages if (f, to) == ("engine", "tool")] == ["lookup_order", "refund_order"]
    assert messages[-1] == ("engine", "engine", "stop: answered")


def test_sequence_diagram_draws_humans_faults_and_hostile_text(mermaid_parse) -> None:
    """A human rejection, a pause, a provider fault and model text full of Mermaid syntax all parse as drawn."""
    tools = make_support_desk().tools
    hostile = answer_message("done; end\n%% not a comment #1 <script>x</script> A->>B: fake")
    script = ScriptedModel([_reply(("a", *SMALL_REFUND)), _reply(("b", *SMALL_REFUND)), hostile])
    paused = run(TASK, script, tools, gate=ask_for_effects(tools))
    rejected = resume(paused.state, script, tools, approve=False, gate=ask_for_effects(tools), reason="no; #never")
    faulty = run(TASK, _Unreachable([]), tools)
    finished = run(TASK, ScriptedModel([hostile]), tools)
    reports = mermaid_parse([sequence_diagram(r) for r in (rejected, faulty, finished)])
    assert all(r["ok"] for r in reports), reports
    first, fault, last = ([(m["from"], m["to"], _decoded(m["text"])) for m in r["messages"]] for r in reports)
    assert "human" in [a["name"] for a in reports[0]["actors"]]
    assert ("human", "engine", "rejected by a human reviewer: no; #never") in first
    assert ("gate", "engine", "ask: refund_order needs a human's approval") in first  # the second call is paused
    assert first[-1] == ("engine", "engine", "stop: awaiting_approval")
    assert ("model", "engine", "provider error: connection refused") in fault
    assert ("model", "engine", "answers: done; end %% not a comment #1 <script>x</script> A->>B: fake") in last
    assert len(last) == 4  # task note, turn, answer, ending: the hostile text added no message


def test_sequence_diagram_marks_calls_left_unjudged(mermaid_parse) -> None:
    """Calls after the one a run stopped or paused on are drawn as not judged, never as asked or run."""
    tools = make_support_desk().tools
    stalled = run(
        TASK, ScriptedModel([_reply(("a", *BIG_REFUND), ("b", *BIG_REFUND), ("c", *LOOKUP))]), tools, gate=refund_gate
    )
    paused = run(
        TASK, ScriptedModel([_reply(("a", *SMALL_REFUND), ("b", *SMALL_REFUND))]), tools, gate=ask_for_effects(tools)
    )
    spent = run(TASK, ScriptedModel([_reply(("a", *LOOKUP), ("b", *POLICY))]), tools, limits=Limits(max_tool_calls=1))
    assert (stalled.state.machine_state, paused.state.machine_state, spent.state.machine_state) == (
        "NoProgress",
        "AwaitingApproval",
        "ToolLimit",
    )
    reports = mermaid_parse([sequence_diagram(r) for r in (stalled, paused, spent)])
    assert all(r["ok"] for r in reports), reports
    stalled_, paused_, spent_ = ([_decoded(m["text"]) for m in r["messages"]] for r in reports)
    assert "lookup_order [c] is not judged: the run stopped first" in stalled_
    assert [t for t in stalled_ if t.startswith("deny:")] == ["deny: refunds above 5000 cents need a manager"] * 2
    assert "refund_order [b] waits behind the paused call" in paused_
    assert [t for t in paused_ if t.startswith("approve or reject")] == ["approve or reject refund_order [a]?"]
    assert "tool budget spent: read_policy [b] is not run" in spent_


# --- Graphviz ----------------------------------------------------------------------


def _dot_json(source: str) -> dict[str, Any]:
    done = subprocess.run([DOT, "-Tjson0"], input=source, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def _dot_unescape(label: str) -> str:
    return label.replace("\\\\", "\\")


@needs_dot
@pytest.mark.parametrize("machine", [*machines().values(), AWKWARD], ids=lambda m: m.name)
def test_dot_is_read_by_the_real_dot(machine: MachineSpec) -> None:
    """`dot` reads the DOT text back as the declared states (shaped by kind), the initial point and labelled edges."""
    graph = _dot_json(to_dot(machine))
    objects = graph["objects"]
    nodes = {o["name"]: o for o in objects}
    assert set(nodes) == {s.name for s in machine.states} | {"__start__"}
    assert nodes["__start__"]["shape"] == "point"
    for state in machine.states:
        shape = {"absorbing": "doublecircle"}.get(state.kind, "box")
        assert nodes[state.name]["shape"] == shape
        assert ("dashed" in nodes[state.name]["style"]) == (state.kind == "paused")
    edges = sorted(
        (objects[e["tail"]]["name"], objects[e["head"]]["name"], _dot_unescape(e.get("label", "")))
        for e in graph["edges"]
    )
    expected = [("__start__", machine.initial, "")] + [(e.source, e.dest, _label(machine, e)) for e in machine.edges]
    assert edges == sorted(expected)


@needs_dot
def test_dot_path_highlight_is_read_by_the_real_dot() -> None:
    """On a run's path, taken edges are bold with their count and the others fade; visited states are filled."""
    path = path_of(_demo_result())
    graph = _dot_json(to_dot(RUN_MACHINE, path=path))
    objects = graph["objects"]
    # Two edges may join the same states under different guards: an edge is its ends and its own label.
    counts = {(e.source, e.dest, _label(RUN_MACHINE, e)): n for e, n in path.counts().items()}
    for edge in graph["edges"]:
        ends = (objects[edge["tail"]]["name"], objects[edge["head"]]["name"])
        if ends[0] == "__start__":
            continue
        label = _dot_unescape(edge["label"])
        taken = [key for key in counts if key[:2] == ends and label.startswith(key[2])]
        if taken:
            ends = taken[0]
            assert edge["penwidth"] == "2.5" and edge["label"].endswith(f"taken ×{counts[ends]}")
        else:
            assert edge["color"] == "#adb5bd" and "taken" not in edge["label"]
    filled = {o["name"] for o in objects if o.get("fillcolor") == "#d3f9d8"}
    assert filled == {"Ready", "Proposing", "Executing", "Denied", "Answered"}
    assert {o["name"]: o.get("penwidth") for o in objects}["Answered"] == "4"


@needs_dot
def test_render_svg_and_png_with_dot() -> None:
    """SVG is well-formed and holds every state; PNG is a PNG; the same input draws the same SVG twice."""
    svg = render(RUN_MACHINE, "svg")
    titles = {t.text for t in ET.fromstring(svg).iter("{http://www.w3.org/2000/svg}title")}
    assert {s.name for s in RUN_MACHINE.states} <= titles
    assert "Proposing->Executing" in titles
    assert render(RUN_MACHINE, "svg") == svg
    assert render(RUN_MACHINE, "png", path=path_of(_demo_result())).startswith(b"\x89PNG\r\n\x1a\n")
    with pytest.raises(ValueError, match="'svg' or 'png'"):
        render(RUN_MACHINE, "gif")  # type: ignore[arg-type]


# --- committed diagrams --------------------------------------------------------------


def _svg_texts(data: bytes) -> list[str]:
    """What an SVG says (titles and labels), leaving out where Graphviz placed it."""
    root = ET.fromstring(data)
    return sorted(el.text or "" for el in root.iter() if el.tag.rsplit("}", 1)[-1] in ("title", "text"))


def _svg_generator(data: bytes) -> str | None:
    found = re.search(rb"Generated by graphviz version ([^\n]+)", data)
    return found.group(1).decode().strip() if found else None


@needs_dot
def test_committed_diagrams_do_not_drift(tmp_path: Path) -> None:
    """diagrams/ equals a fresh regeneration; SVG exactly under the same Graphviz, else in its texts."""
    written = write_all(tmp_path)
    committed = ROOT / "diagrams"
    fix = f"diagrams/ is stale: regenerate it with `{REGENERATE_COMMAND}` and commit the result"
    charts = set(CHART_FILES)  # drawn by `agent-fsm charts`, drift-tested in tests/test_charts.py
    on_disk = sorted(p.name for p in committed.iterdir() if not p.name.startswith(".") and p.name not in charts)
    assert on_disk == sorted(p.name for p in written), fix
    for fresh in written:
        old = (committed / fresh.name).read_bytes()
        new = fresh.read_bytes()
        if fresh.suffix != ".svg" or _svg_generator(old) == _svg_generator(new):
            assert old == new, f"{fresh.name}: {fix}"
        else:  # another Graphviz lays out differently; what the SVG says must still agree
            assert _svg_texts(old) == _svg_texts(new), f"{fresh.name}: {fix}"


def test_readme_shows_the_plain_agents_machine_then_the_whole_table_with_its_legend() -> None:
    """
    The README's run machine section shows diagrams/agent-plain.mmd byte for byte, then the whole table
    (diagrams/run.svg) and the legend of what each option adds, as generated from RUN_OPTIONS.
    """
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## The run machine\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```mermaid\n(.*?)```", section, re.DOTALL)
    assert block is not None, "README's run machine section has no ```mermaid block"
    assert block.group(1) == (ROOT / "diagrams" / "agent-plain.mmd").read_text(encoding="utf-8")
    assert section.index("```mermaid") < section.index("(diagrams/run.svg)") < section.index(option_legend())


@needs_dot
def test_docs_examples_run() -> None:
    """Every Python block of docs/diagrams.md runs, in order, in one namespace."""
    text = (ROOT / "docs" / "diagrams.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text, re.DOTALL)
    assert blocks, "docs/diagrams.md has no python examples"
    namespace: dict[str, Any] = {}
    for block in blocks:
        exec(compile(block, "docs/diagrams.md", "exec"), namespace)


# --- the package's own shape ---------------------------------------------------------


def _diagram_imports(planted: dict[str, str] | None = None) -> dict[str, list[str]]:
    """Each diagrams module and the diagrams modules it imports anywhere, inside functions too."""
    folder = ROOT / "agent_fsm" / "diagrams"
    names = {f"agent_fsm.diagrams.{p.stem}" for p in folder.glob("*.py") if p.stem != "__init__"}
    graph: dict[str, list[str]] = {}
    for name in sorted(names):
        source = (folder / f"{name.rsplit('.', 1)[1]}.py").read_text(encoding="utf-8")
        source += (planted or {}).get(name, "")
        found = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module in names:
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names if alias.name in names)
        graph[name] = sorted(found)
    return graph


def test_no_diagrams_module_imports_one_that_imports_it_back() -> None:
    """Each module is one concept: none needs another that needs it, not even through a deferred import."""
    assert cycles(_diagram_imports()) == []
    planted = "\n\ndef _later():\n    from agent_fsm.diagrams.folder import write_all\n"
    assert cycles(_diagram_imports({"agent_fsm.diagrams.catalog": planted})) != []  # the check sees deferred imports


def test_only_the_catalog_machines_carry_the_regenerate_comment() -> None:
    """ships() is what decides the comment: every catalog machine is shipped, an equal-named copy is not."""
    assert all(ships(m) and REGENERATE_COMMAND in to_mermaid(m) for m in machines().values())
    lookalike = MachineSpec(
        name=RUN_MACHINE.name,
        initial="Ready",
        states=(StateSpec("Ready", "working", "Waiting."), StateSpec("Done", "absorbing", "Done.", stop="done")),
        edges=(Edge("Ready", "finish", "Done"),),
    )
    assert not ships(lookalike) and REGENERATE_COMMAND not in to_mermaid(lookalike)
