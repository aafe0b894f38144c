"""Machine declarations and the shared, compiled run machine."""

from __future__ import annotations

import pytest
import transitions

from agent_fsm import (
    RUN_MACHINE,
    Edge,
    MachineDefinitionError,
    MachineSpec,
    ScriptedModel,
    StateSpec,
    Stop,
    answer_message,
    compile_machine,
    run,
    tool_call_message,
)
from tests.warehouse import make_warehouse


def test_run_machine_declares_the_designed_states():
    """The table has the working, absorbing and paused states of the design, each with a doc."""
    kinds = {s.name: s.kind for s in RUN_MACHINE.states}
    assert {n for n, k in kinds.items() if k == "working"} == {
        "Ready",
        "Proposing",
        "Executing",
        "Denied",
        "ScreeningInput",
        "ScreeningResult",
        "Compacting",
        "OutputInvalid",
        "TakingAnswer",
        "WrappingUp",
    }
    assert {n for n, k in kinds.items() if k == "paused"} == {"AwaitingApproval"}
    assert {n for n, k in kinds.items() if k == "absorbing"} >= {
        "Answered",
        "StepLimit",
        "TokenLimit",
        "NoProgress",
        "ToolLimit",
        "ProviderError",
    }
    assert all(s.doc for s in RUN_MACHINE.states)


def test_every_stop_has_exactly_one_state():
    """Each typed ending is reported by one resting state, and every resting state reports one."""
    stops = [RUN_MACHINE.stop_of(s.name) for s in RUN_MACHINE.states if s.is_resting]
    assert sorted(stops) == sorted(Stop)


def test_working_states_leave_by_one_event_each():
    """The driver fires exactly one event from each working state; resting states have none."""
    assert RUN_MACHINE.auto_event("Ready") == "next_turn"
    assert RUN_MACHINE.auto_event("Proposing") == "judge"
    assert RUN_MACHINE.auto_event("Answered") is None
    assert RUN_MACHINE.auto_event("AwaitingApproval") is None


def test_no_machine_is_built_per_run(monkeypatch):
    """Runs use the machine built at import: constructing or attaching per run would cost a whole run."""
    built: list[object] = []
    attached: list[object] = []
    original_init = transitions.Machine.__init__
    original_add = transitions.Machine.add_model
    monkeypatch.setattr(
        transitions.Machine, "__init__", lambda self, *a, **k: (built.append(1), original_init(self, *a, **k))[1]
    )
    monkeypatch.setattr(
        transitions.Machine, "add_model", lambda self, *a, **k: (attached.append(1), original_add(self, *a, **k))[1]
    )
    tools, _ = make_warehouse()
    for _ in range(3):
        run("t", ScriptedModel([tool_call_message("c", "count_stock", {"sku": "BOLT"}), answer_message("x")]), tools)
    assert built == [] and attached == []


def test_compile_is_cached_per_process():
    """Compiling the same declaration with the same functions twice returns the same machine."""
    guard = lambda run: True
    spec = MachineSpec(
        "tiny",
        "A",
        (StateSpec("A", "working"), StateSpec("B", "absorbing", stop="answered")),
        (Edge("A", "go", "B", guard="always"),),
    )
    assert compile_machine(spec, {"always": guard}) is compile_machine(spec, {"always": guard})


def test_compile_names_missing_functions():
    """A guard or effect the vocabulary lacks is a definition error naming it."""
    spec = MachineSpec(
        "tiny2",
        "A",
        (StateSpec("A", "working", on_enter=("prepare",)), StateSpec("B", "absorbing", stop="answered")),
        (Edge("A", "go", "B", guard="ready"),),
    )
    with pytest.raises(MachineDefinitionError, match=r"\['prepare', 'ready'\]"):
        compile_machine(spec, {})


def test_inconsistent_declarations_report_every_problem():
    """Unknown states, undeclared budgets, several events and missing stops are all listed at once."""
    with pytest.raises(MachineDefinitionError) as caught:
        MachineSpec(
            "broken",
            "Start",
            (
                StateSpec("A", "working"),
                StateSpec("A", "absorbing"),
                StateSpec("B", "working"),
            ),
            (
                Edge("A", "go", "Nowhere", consumes="fuel"),
                Edge("B", "x", "A"),
                Edge("B", "y", "A"),
            ),
        )
    message = str(caught.value)
    for fragment in (
        "'A' is declared twice",
        "initial state 'Start'",
        "undeclared state 'Nowhere'",
        "undeclared budget 'fuel'",
        "exactly one event, has ['x', 'y']",
        "absorbing state 'A' names no stop",
    ):
        assert fragment in message


def test_a_gap_in_the_guards_raises_invalid_transition():
    """If no guard holds, the driver raises instead of looping or stopping silently."""
    from agent_fsm import InvalidTransition

    spec = MachineSpec(
        "gappy",
        "A",
        (StateSpec("A", "working"), StateSpec("B", "absorbing", stop="answered")),
        (Edge("A", "go", "B", guard="never"),),
    )
    machine = compile_machine(spec, {"never": lambda run: False})

    class Thing:
        machine_state = "A"

    with pytest.raises(InvalidTransition) as caught:
        machine.advance(Thing())
    assert caught.value.machine_state == "A" and caught.value.event == "go"


# --- the dispatch table: the first edge whose guard holds, in table order ---


def _over_two(run):
    level = run.level
    return level > 2


def _levels_machine(name: str, over: object, even: object) -> object:
    spec = MachineSpec(
        name,
        "A",
        (
            StateSpec("A", "working"),
            StateSpec("High", "absorbing", stop="answered"),
            StateSpec("Even", "absorbing", stop="answered"),
            StateSpec("Other", "absorbing", stop="answered"),
        ),
        (
            Edge("A", "go", "High", guard="over_two"),
            Edge("A", "go", "Even", guard="even"),
            Edge("A", "go", "Other"),
        ),
    )
    return compile_machine(spec, {"over_two": over, "even": even})


class _Leveled:
    def __init__(self, level: int) -> None:
        self.level = level
        self.machine_state = "A"
        self.moves: list[tuple[str, str, str | None]] = []

    def entered(self, source: str, event: str, guard: str | None) -> None:
        self.moves.append((source, event, guard))


def test_a_move_takes_the_first_edge_whose_guard_holds_reported_under_its_label():
    """Guards tried in table order: the first that holds moves the run, and its name is what "entered" hears."""

    def even(run):
        return run.level % 2 == 0

    machine = _levels_machine("levels", _over_two, even)
    for level in range(7):
        run_ = _Leveled(level)
        machine.advance(run_)
        dest, label = ("High", "_over_two") if level > 2 else ("Even", "even") if level % 2 == 0 else ("Other", None)
        assert (run_.machine_state, run_.moves) == (dest, [("A", "go", label)])
