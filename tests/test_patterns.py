"""Tests for agent_fsm.patterns: each pattern's distinctive move, its machine, and its invariants."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_fsm import (
    Agent,
    DefinitionError,
    Limits,
    NotPaused,
    ProviderFailure,
    RunError,
    Stop,
    ToolCall,
    ToolError,
    ToolSpec,
    Verdict,
    answer_message,
    ask_for_effects,
    run,
    tool_call_message,
)
from agent_fsm.diagrams.catalog import machines
from agent_fsm.engine import check_machine
from agent_fsm.examples.compare import (
    AFTER_FAN_OUT,
    BRANCHES,
    CORRECT_EFFECTS,
    FAN_OUT,
    REFUND_PLAN,
    states_refunded_amount,
)
from agent_fsm.examples.demo import TASK, overreaching_model
from agent_fsm.examples.support_desk import make_support_desk, refund_gate
from agent_fsm.patterns import (
    AGENT_MACHINE,
    CHAIN_MACHINE,
    EVALUATOR_MACHINE,
    MACHINES,
    PARALLEL_MACHINE,
    ROUTER_MACHINE,
    PatternEnding,
    PatternResult,
    Plan,
    ScriptedReplies,
    agent,
    chain,
    evaluator,
    parallel,
    resume_agent,
    router,
)
from agent_fsm.patterns.meter import Meter

POLICY_TASK = "How do you handle refunds on goods that break?"


class _Recording(ScriptedReplies):
    """Scripted replies that also keep every prompt they were sent."""

    def __init__(self, replies: list[Any]) -> None:
        super().__init__(replies)
        self.prompts: list[str] = []

    def chat(self, messages, tools=()):
        self.prompts.append(messages[-1]["content"])
        return super().chat(messages, tools)


# --- the machines -----------------------------------------------------------------


@pytest.mark.parametrize("spec", MACHINES, ids=lambda s: s.name)
def test_every_pattern_machine_passes_the_static_checker(spec):
    """Reachable, able to end, absorbing states closed, every cycle budgeted."""
    report = check_machine(spec)
    assert report.ok, str(report)


@pytest.mark.parametrize("spec", MACHINES, ids=lambda s: s.name)
def test_every_pattern_machine_is_documented_and_in_the_catalog(spec):
    """Diagrams need a doc on every state and a meaning on every edge; the catalog lists each machine."""
    assert machines()[spec.name] is spec
    assert all(s.doc for s in spec.states), [s.name for s in spec.states if not s.doc]
    assert all(e.meaning for e in spec.edges), [e for e in spec.edges if not e.meaning]


def test_agent_endings_are_the_run_machines_endings():
    """The adaptive agent rests exactly where the run machine can rest, with the same stops."""
    from agent_fsm import RUN_MACHINE

    resting = {(s.name, s.kind, s.stop) for s in RUN_MACHINE.states if s.is_resting}
    assert {(s.name, s.kind, s.stop) for s in AGENT_MACHINE.states if s.is_resting} == resting


# --- chain ------------------------------------------------------------------------


def test_chain_runs_the_fixed_steps_and_asks_the_model_once():
    """Lookup, refund what was paid, one draft: the correct single refund lands."""
    desk = make_support_desk()
    model = _Recording([answer_message("Refund sent: 4999 cents.")])
    result = chain(REFUND_PLAN, model, desk.tools, gate=refund_gate)
    assert result.ending is PatternEnding.REPLIED and result.output == "Refund sent: 4999 cents."
    assert desk.effects == CORRECT_EFFECTS
    assert [o.call_id for o in result.observations] == ["lookup", "refund"]
    assert (result.spend.model_calls, result.spend.tool_calls) == (1, 2)
    assert '"refunded_cents": 4999' in model.prompts[0]


def test_chain_stops_at_a_refused_step_with_the_secure_default():
    """Without a gate the refund is denied: the chain ends step_failed and never drafts."""
    desk = make_support_desk()
    model = _Recording([answer_message("Refund sent: 4999 cents.")])
    result = chain(REFUND_PLAN, model, desk.tools)
    assert result.ending is PatternEnding.STEP_FAILED and result.output is None
    assert desk.effects == [] and model.prompts == []
    assert "refund_order [refund] came back denied" in result.reason


def test_chain_reports_an_unreachable_model_as_provider_error():
    """A model that cannot be reached ends provider_error; the refund before it still stands."""
    desk = make_support_desk()
    result = chain(
        REFUND_PLAN, ScriptedReplies([ProviderFailure("timed out", kind="timeout")]), desk.tools, gate=refund_gate
    )
    assert result.ending is PatternEnding.PROVIDER_ERROR and result.output is None
    assert "timed out" in result.reason and desk.effects == CORRECT_EFFECTS


def test_a_model_bug_is_not_a_provider_error():
    """A model raising something other than OSError is a bug and propagates."""
    from agent_fsm import RunError

    with pytest.raises(RunError, match="ZeroDivisionError"):
        chain(REFUND_PLAN, ScriptedReplies([ZeroDivisionError("bug")]), make_support_desk().tools, gate=refund_gate)


def test_plan_requires_exactly_one_way_to_reply():
    """A plan with both draft and compose, or neither, is refused when declared."""
    with pytest.raises(DefinitionError, match="draft= .* or compose="):
        Plan(steps=())
    with pytest.raises(DefinitionError):
        Plan(draft=lambda r: "x", compose=lambda r: "y")


def test_drafting_grants_no_tools():
    """A tool call in a drafting reply is never executed: only text counts."""
    desk = make_support_desk()
    sneaky = tool_call_message("x", "refund_order", {"order_id": "A-17", "amount_cents": 10})
    result = chain(REFUND_PLAN, ScriptedReplies([sneaky]), desk.tools, gate=refund_gate)
    assert result.ending is PatternEnding.REPLIED and result.output == ""
    assert desk.effects == CORRECT_EFFECTS and len(result.observations) == 2


# --- router -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("task", "script", "route", "calls", "effects"),
    [
        (TASK, ["billing", "Refund sent: 4999 cents for A-17."], "billing", (2, 2), CORRECT_EFFECTS),
        (POLICY_TASK, ["policy"], "policy", (1, 1), []),
    ],
)
def test_router_takes_a_different_branch_for_each_task(task, script, route, calls, effects):
    """Billing refunds and drafts; policy only reads and never touches the refund tool."""
    desk = make_support_desk()
    model = _Recording([answer_message(t) for t in script])
    result = router(task, BRANCHES, model, desk.tools, gate=refund_gate)
    assert result.ending is PatternEnding.REPLIED and result.route == route
    assert (result.spend.model_calls, result.spend.tool_calls) == calls
    assert desk.effects == effects
    assert task in model.prompts[0]
    if route == "policy":
        assert result.output.startswith("Our policy: Damaged goods")
        assert all(o.call_id != "refund" for o in result.observations)


def test_router_refuses_a_route_that_names_no_branch():
    """An answer outside the branch set ends unroutable; no branch runs."""
    desk = make_support_desk()
    result = router(TASK, BRANCHES, ScriptedReplies([answer_message("shipping")]), desk.tools, gate=refund_gate)
    assert result.ending is PatternEnding.UNROUTABLE and result.route is None
    assert result.observations == () and desk.effects == []
    assert "'shipping' names no branch" in result.reason


def test_router_tolerates_case_and_a_full_stop_only():
    """'Policy.' routes to policy; 'policy please' does not."""
    desk = make_support_desk()
    assert router(POLICY_TASK, BRANCHES, ScriptedReplies([answer_message(" Policy. ")]), desk.tools).route == "policy"
    wordy = router(POLICY_TASK, BRANCHES, ScriptedReplies([answer_message("policy please")]), desk.tools)
    assert wordy.ending is PatternEnding.UNROUTABLE


def test_router_needs_a_branch():
    """An empty branch set is a usage error, said plainly."""
    with pytest.raises(ValueError, match="at least one branch"):
        router(TASK, {}, ScriptedReplies([]), make_support_desk().tools)


# --- parallel ----------------------------------------------------------------------


def _racing_tools(first: str, finished: list[str]) -> dict[str, ToolSpec]:
    """Two reads where ``first`` is forced to finish before the other starts finishing."""
    done = {name: threading.Event() for name in ("alpha", "beta")}
    lock = threading.Lock()

    def handler(name: str):
        def read(key: str) -> dict[str, str]:
            if name != first and not done[first].wait(timeout=10):
                raise ToolError(f"{name} never saw {first} finish: the reads did not run concurrently")
            with lock:
                finished.append(name)
            done[name].set()
            return {"source": name, "key": key}

        return read

    return {name: ToolSpec(f"Read {name}.", {"key": str}, handler(name)) for name in ("alpha", "beta")}


@pytest.mark.parametrize("first", ["alpha", "beta"])
def test_parallel_joins_reads_by_call_id_whatever_order_they_finish(first):
    """Forced completion orders change nothing: observations come back in declared order, each under its id."""
    finished: list[str] = []
    tools = _racing_tools(first, finished)
    reads = [ToolCall("a", "alpha", {"key": "k1"}), ToolCall("b", "beta", {"key": "k2"})]
    plan = Plan(compose=lambda results: f"{results['a']['source']}+{results['b']['source']}")
    result = parallel(reads, plan, ScriptedReplies([]), tools)
    assert finished[0] == first and sorted(finished) == ["alpha", "beta"]
    assert result.ending is PatternEnding.REPLIED and result.output == "alpha+beta"
    assert [(o.call_id, o.content) for o in result.observations] == [
        ("a", {"source": "alpha", "key": "k1"}),
        ("b", {"source": "beta", "key": "k2"}),
    ]
    assert result.spend.tool_calls == 2 and result.spend.model_calls == 0


def test_parallel_on_the_desk_reads_then_refunds_once():
    """Order and policy fan out, then one refund of what was paid, then one draft."""
    desk = make_support_desk()
    model = _Recording([answer_message("Refunded 4999 cents.")])
    result = parallel(FAN_OUT, AFTER_FAN_OUT, model, desk.tools, gate=refund_gate)
    assert result.ending is PatternEnding.REPLIED and desk.effects == CORRECT_EFFECTS
    assert [o.call_id for o in result.observations] == ["order", "policy", "refund"]
    assert "Damaged goods" in model.prompts[0] and '"refunded_cents": 4999' in model.prompts[0]


def test_parallel_refuses_to_fan_out_an_effectful_call():
    """A refund in the batch refuses the whole batch: nothing runs, nothing is charged."""
    desk = make_support_desk()
    reads = [*FAN_OUT, ToolCall("r", "refund_order", {"order_id": "A-17", "amount_cents": 4999})]
    result = parallel(reads, AFTER_FAN_OUT, ScriptedReplies([]), desk.tools, gate=refund_gate)
    assert result.ending is PatternEnding.FAN_OUT_REFUSED
    assert desk.effects == [] and result.observations == () and result.spend.tool_calls == 0
    assert "refund_order [r] is effectful" in result.reason


def test_parallel_refuses_repeated_call_ids():
    """Two reads with one id could not be told apart in the join, so the batch is refused."""
    desk = make_support_desk()
    reads = [ToolCall("x", "read_policy", {}), ToolCall("x", "lookup_order", {"order_id": "A-17"})]
    result = parallel(reads, AFTER_FAN_OUT, ScriptedReplies([]), desk.tools)
    assert result.ending is PatternEnding.FAN_OUT_REFUSED and "call id 'x' is used 2 times" in result.reason


def test_parallel_stops_when_a_read_fails():
    """A read of an unknown order fails; the refund after it never runs."""
    desk = make_support_desk()
    reads = [ToolCall("order", "lookup_order", {"order_id": "Z-9"}), ToolCall("policy", "read_policy", {})]
    result = parallel(reads, AFTER_FAN_OUT, ScriptedReplies([]), desk.tools, gate=refund_gate)
    assert result.ending is PatternEnding.STEP_FAILED and desk.effects == []
    assert [o.kind for o in result.observations] == ["error", "result"]


# --- evaluator ---------------------------------------------------------------------


def test_evaluator_spends_a_second_round_when_the_first_draft_fails():
    """The vague draft is rejected, the critique is fed back, the exact one is accepted."""
    desk = make_support_desk()
    model = _Recording([answer_message("The money will follow soon."), answer_message("Refund sent: 4999 cents.")])
    result = evaluator(REFUND_PLAN, states_refunded_amount, model, desk.tools, gate=refund_gate)
    assert result.ending is PatternEnding.ACCEPTED and result.output == "Refund sent: 4999 cents."
    assert result.drafts == ("The money will follow soon.", "Refund sent: 4999 cents.")
    assert result.spend.model_calls == 2
    assert "not accepted" not in model.prompts[0] and "exact amount refunded (4999 cents)" in model.prompts[1]


def test_evaluator_ends_typed_when_no_draft_passes():
    """Every draft failing spends the revision budget: a typed ending, no silent last draft."""
    desk = make_support_desk()
    model = ScriptedReplies([answer_message(f"Sorry, attempt {i}.") for i in range(5)])
    result = evaluator(REFUND_PLAN, states_refunded_amount, model, desk.tools, gate=refund_gate, max_rounds=3)
    assert result.ending is PatternEnding.REVISION_BUDGET_EXHAUSTED
    assert result.output is None and len(result.drafts) == 3 and result.spend.model_calls == 3
    assert "3 of 3 drafts" in result.reason


def test_evaluator_checks_its_arguments():
    """A composed plan or a non-positive budget is refused before anything runs."""
    desk = make_support_desk()
    with pytest.raises(DefinitionError, match="draft="):
        evaluator(Plan(compose=lambda r: "x"), states_refunded_amount, ScriptedReplies([]), desk.tools)
    with pytest.raises(ValueError, match="max_rounds must be a positive integer, got 0"):
        evaluator(REFUND_PLAN, states_refunded_amount, ScriptedReplies([]), desk.tools, max_rounds=0)
    assert desk.effects == []


# --- agent -------------------------------------------------------------------------


def test_agent_is_the_run_machine_with_a_meter():
    """The agent's ending, answer and observations are the kernel run's; the meter agrees with the run's log."""
    desk = make_support_desk()
    result = agent(TASK, Agent(overreaching_model(), desk.tools, gate=refund_gate))
    reference = run(TASK, overreaching_model(), make_support_desk().tools, gate=refund_gate)
    assert result.ending is Stop.ANSWERED and result.output == reference.answer
    assert result.observations == tuple(reference.state.observations)
    assert result.spend.model_calls == reference.state.turns == 4
    assert result.spend.prompt_tokens == sum(reference.state.prompt_token_log)
    assert result.spend.tool_calls == 3 and desk.effects == CORRECT_EFFECTS


def test_agent_pauses_for_approval_and_resumes():
    """An ask gate pauses the agent; approving lands the refund and the spend carries on."""
    desk = make_support_desk()
    asking = Agent(overreaching_model(), desk.tools, gate=ask_for_effects(desk.tools))
    paused = agent(TASK, asking)
    assert paused.ending is Stop.AWAITING_APPROVAL and desk.effects == []
    assert paused.run.blocked_on.arguments["amount_cents"] == 9999
    rejected = resume_agent(paused, asking, approve=False, reason="too much")
    assert rejected.ending is Stop.AWAITING_APPROVAL and rejected.run.blocked_on.arguments["amount_cents"] == 4999
    assert rejected.run.state.observations[-1].content.endswith(": too much")
    done = resume_agent(rejected, asking, approve=True)
    assert done.ending is Stop.ANSWERED and desk.effects == CORRECT_EFFECTS
    assert done.spend.model_calls == 4 and done.spend.tool_calls == 3
    assert done.spend.prompt_tokens > rejected.spend.prompt_tokens > paused.spend.prompt_tokens


def test_agent_takes_its_limits_and_prompt_from_the_agent():
    """The agent value's budgets bind the pattern, and its system prompt opens the run."""
    desk = make_support_desk()
    short = Agent(
        overreaching_model(), desk.tools, gate=refund_gate, limits=Limits(max_turns=2), system_prompt="Be brief."
    )
    result = agent(TASK, short)
    assert result.ending is Stop.STEP_LIMIT and result.output is None
    assert result.spend.model_calls == result.run.state.turns == 2
    assert result.run.state.messages[0] == {"role": "system", "content": "Be brief."}


def test_the_deciding_agent_judges_the_resumed_call():
    """An approval goes through the gate of the agent given to resume_agent: a variant that denies, denies."""
    desk = make_support_desk()
    asking = Agent(overreaching_model(), desk.tools, gate=ask_for_effects(desk.tools))
    paused = agent(TASK, asking)
    refusing = asking.replace(gate=lambda call: Verdict.deny("refunds are closed today"))
    denied = resume_agent(paused, refusing, approve=True)
    assert desk.effects == [] and denied.observations[-1].kind != "result"
    assert "refunds are closed today" in denied.observations[-1].content


def test_only_a_paused_agent_resumes():
    """Resuming a finished pattern is refused with the reason."""
    desk = make_support_desk()
    finished = chain(REFUND_PLAN, ScriptedReplies([]), desk.tools, gate=refund_gate)
    with pytest.raises(NotPaused, match="chain pattern ended replied"):
        resume_agent(finished, Agent(ScriptedReplies([]), desk.tools), approve=True)


# --- properties: typed endings and authorised effects whatever the model and gate -----

_TOOL_NAMES = ("lookup_order", "read_policy", "refund_order")

_texts = st.one_of(
    st.sampled_from(["billing", "policy", "Billing.", "Refund sent: 4999 cents.", "Sorry.", "", "4999"]),
    st.text(max_size=30),
)
_arguments = st.one_of(
    st.fixed_dictionaries({"order_id": st.sampled_from(["A-17", "B-2", "bad id"])}),
    st.fixed_dictionaries(
        {
            "order_id": st.sampled_from(["A-17", "B-2"]),
            "amount_cents": st.one_of(st.integers(-5, 20000), st.just("lots")),
        }
    ),
    st.just({}),
    st.just("{not json"),
)
_replies = st.lists(
    st.one_of(
        _texts.map(answer_message),
        st.builds(
            tool_call_message,
            st.sampled_from(["c1", "c2", "c1"]),
            st.sampled_from([*_TOOL_NAMES, "delete_everything"]),
            _arguments,
        ),
        st.just(ProviderFailure("unreachable")),
        st.integers(),
    ),
    max_size=6,
)
_verdicts = st.sampled_from(
    [Verdict.allow("ok"), Verdict.deny("no"), Verdict.ask("a human decides"), (True, "ok"), (False, "no")]
)
_gates = st.fixed_dictionaries({name: _verdicts for name in _TOOL_NAMES})


def _gate_of(verdicts: dict[str, Any]):
    return lambda call: verdicts[call.name]


def _refund_allowed(verdicts: dict[str, Any]) -> bool:
    verdict = verdicts["refund_order"]
    return verdict == (True, "ok") or (isinstance(verdict, Verdict) and verdict.kind == "allow")


def _assert_typed_and_authorised(result: PatternResult, spec, effects: list[Any], verdicts: dict[str, Any]) -> None:
    stops = {s.stop for s in spec.states if s.is_resting}
    assert result.ending.value in stops and type(result.ending) in (PatternEnding, Stop)
    delivered = result.ending in (PatternEnding.REPLIED, PatternEnding.ACCEPTED, Stop.ANSWERED)
    assert (result.output is not None) == delivered
    receipts = [o.content for o in result.observations if o.ok]
    assert all(any(effect == r for r in receipts) for effect in effects), "an effect without an allowed call"
    assert len(effects) <= sum(1 for r in receipts if isinstance(r, dict) and "refunded_cents" in r)
    if not _refund_allowed(verdicts):
        assert effects == [], "a refund landed though the gate never allowed one"
    assert result.spend.tool_calls == len(result.observations)


@given(replies=_replies, verdicts=_gates)
def test_chain_always_ends_typed_with_every_effect_authorised(replies, verdicts):
    """Any model, any gate: the chain rests in a declared ending and moves money only when allowed."""
    desk = make_support_desk()
    result = chain(REFUND_PLAN, ScriptedReplies(replies), desk.tools, gate=_gate_of(verdicts))
    _assert_typed_and_authorised(result, CHAIN_MACHINE, desk.effects, verdicts)
    assert result.spend.model_calls <= 1


@given(replies=_replies, verdicts=_gates, task=st.sampled_from([TASK, POLICY_TASK]))
def test_router_always_ends_typed_with_every_effect_authorised(replies, verdicts, task):
    """Any route text, any gate: a declared ending, a known route or none, effects only when allowed."""
    desk = make_support_desk()
    result = router(task, BRANCHES, ScriptedReplies(replies), desk.tools, gate=_gate_of(verdicts))
    _assert_typed_and_authorised(result, ROUTER_MACHINE, desk.effects, verdicts)
    assert result.route in (None, *BRANCHES)
    if result.route != "billing":
        assert desk.effects == []


_reads = st.lists(
    st.builds(
        ToolCall,
        st.sampled_from(["p1", "p2", "p3"]),
        st.sampled_from(_TOOL_NAMES),
        _arguments.filter(lambda a: isinstance(a, dict)),
    ),
    max_size=4,
)


@given(replies=_replies, verdicts=_gates, reads=_reads)
def test_parallel_always_ends_typed_with_every_effect_authorised(replies, verdicts, reads):
    """Any batch, any gate: effectful batches never run; otherwise a declared ending and authorised effects."""
    desk = make_support_desk()
    plan = Plan(compose=lambda results: ", ".join(sorted(results)))
    result = parallel(reads, plan, ScriptedReplies(replies), desk.tools, gate=_gate_of(verdicts))
    _assert_typed_and_authorised(result, PARALLEL_MACHINE, desk.effects, verdicts)
    if any(call.name == "refund_order" for call in reads):
        assert result.ending is PatternEnding.FAN_OUT_REFUSED and desk.effects == [] and result.observations == ()
    else:
        assert desk.effects == []


@given(replies=_replies, verdicts=_gates, max_rounds=st.integers(1, 4))
def test_evaluator_always_ends_typed_with_every_effect_authorised(replies, verdicts, max_rounds):
    """Any drafts, any gate: accepted drafts meet the criterion, the budget is never overspent."""
    desk = make_support_desk()
    result = evaluator(
        REFUND_PLAN,
        states_refunded_amount,
        ScriptedReplies(replies),
        desk.tools,
        gate=_gate_of(verdicts),
        max_rounds=max_rounds,
    )
    _assert_typed_and_authorised(result, EVALUATOR_MACHINE, desk.effects, verdicts)
    assert len(result.drafts) <= max_rounds and result.spend.model_calls <= max_rounds
    if result.ending is PatternEnding.ACCEPTED:
        assert "4999" in result.output
    if result.ending is PatternEnding.REVISION_BUDGET_EXHAUSTED:
        assert len(result.drafts) == max_rounds and not any("4999" in d for d in result.drafts)


@given(replies=_replies, verdicts=_gates)
def test_agent_always_ends_typed_with_every_effect_authorised(replies, verdicts):
    """Any proposals, any gate: the agent rests in a run-machine stop and the meter matches the run."""
    desk = make_support_desk()
    meter = Meter()
    try:
        result = agent(TASK, Agent(ScriptedReplies(replies), desk.tools, gate=_gate_of(verdicts)), meter=meter)
    except RunError as exc:  # a number is not a message: the run stops loudly, saying what came back
        assert "chat() returned int" in exc.message and any(type(r) is int for r in replies)
        assert exc.state is not None and exc.state.turns >= 1
        return
    _assert_typed_and_authorised(result, AGENT_MACHINE, desk.effects, verdicts)
    assert result.spend.model_calls == result.run.state.turns
