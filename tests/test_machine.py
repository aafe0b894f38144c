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


# --- guard chains: each state's guards written out in one function ---


def _over_two(run):
    """A guard with an assignment before its test: written out in its chain."""
    level = run.level
    return level > 2


def _under_two(run):
    """The same shape, the other test: its code stands behind _over_two's text in the impostor test."""
    level = run.level
    return level < 2


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


def test_a_chain_moves_as_trying_each_guard_in_table_order_does():
    """Written-out and called guards mixed: the first edge whose guard holds is taken, reported under its label."""
    limit = 2

    def even(run):  # a closure: called, not written out
        return run.level % 2 == 0 and limit > 0

    machine = _levels_machine("levels", _over_two, even)
    for level in range(7):
        run_ = _Leveled(level)
        machine.advance(run_)
        dest, label = ("High", "_over_two") if level > 2 else ("Even", "even") if level % 2 == 0 else ("Other", None)
        assert (run_.machine_state, run_.moves) == (dest, [("A", "go", label)])
    import linecache

    chain = machine.without(frozenset())[0][("A", "go")]
    source = "".join(linecache.getlines(chain.__code__.co_filename))
    assert "level > 2" in source and "_guard0(run)" not in source  # the plain guard written out
    assert "_guard1(run)" in source  # the closure called as it is


def test_a_guard_whose_source_is_not_its_code_is_called():
    """The source read is checked against the guard's bytecode: what runs is the code, never the file's text."""
    import types

    # _under_two's code under _over_two's name and lines: the file there reads "level > 2".
    code = _under_two.__code__.replace(co_name="_over_two", co_firstlineno=_over_two.__code__.co_firstlineno)
    impostor = types.FunctionType(code, globals(), "_over_two")
    machine = _levels_machine("impostor", impostor, lambda run: False)
    run_ = _Leveled(3)  # over two: the file's text would move it to High, the code does not
    machine.advance(run_)
    assert run_.machine_state == "Other"


def test_the_run_machines_own_guards_are_written_out():
    """A move from Ready tries its guards in one function, calling none of the run loop's own."""
    import linecache

    from agent_fsm.engine._run import MACHINE

    chain = MACHINE.without(frozenset())[0][("Ready", "next_turn")]
    source = "".join(linecache.getlines(chain.__code__.co_filename))
    assert "run.state.turns >= run.limits.max_turns" in source
    for i, (guard, *_) in enumerate(MACHINE._rows[("Ready", "next_turn")]):
        # Only a guard of another module (a screen's) is called; the chain runs in the run loop's globals.
        elsewhere = guard is not None and guard.__module__ != "agent_fsm.engine._run"
        assert (f"_guard{i}(run)" in source) == elsewhere


def _spanning(run):
    """A test written over several lines, a name on each: written out with its own text."""
    level = run.level
    return (
        level > 2  # a comment inside the parentheses
        and run.level < 100
    )


def test_a_guard_written_over_several_lines_is_written_out_alike():
    """The chain carries the guard's own text, its locals renamed in place, and moves as the guard does."""
    import linecache

    machine = _levels_machine("spanning", _spanning, _under_two)
    for level in (0, 1, 3, 150):
        run_ = _Leveled(level)
        machine.advance(run_)
        expected = "High" if 2 < level < 100 else "Even" if level < 2 else "Other"
        assert run_.machine_state == expected
    chain = machine.without(frozenset())[0][("A", "go")]
    source = "".join(linecache.getlines(chain.__code__.co_filename))
    assert "_spanning_level > 2" in source and "run.level < 100" in source and "_guard0(run)" not in source
