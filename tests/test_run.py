"""The run driver: one example test per behaviour of the engine."""

from __future__ import annotations

import json

import pytest

from agent_fsm import (
    HandlerError,
    Limits,
    NotPaused,
    ScriptedModel,
    Stop,
    Verdict,
    allow_all,
    answer_message,
    ask_for_effects,
    check_run,
    estimate_tokens,
    function_declarations,
    resume,
    run,
    tool_call_message,
)
from agent_fsm.engine import Stop as StopEnum
from tests.warehouse import make_warehouse, ship_args


def multi_call(*calls: tuple[str, str, object]) -> dict:
    """One assistant message carrying several tool calls."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for cid, name, args in calls
        ],
    }


def tool_payloads(result) -> list[dict]:
    """The decoded content of every tool message in the transcript."""
    return [json.loads(m["content"]) for m in result.state.messages if m["role"] == "tool"]


def test_happy_path_answers_and_lands_one_effect():
    """A call that the gate allows runs once; the run ends answered with the effect logged."""
    tools, effects = make_warehouse()
    model = ScriptedModel([tool_call_message("c1", "ship", ship_args()), answer_message("Shipped 2 bolts.")])
    result = run("Ship 2 bolts to Ghent.", model, tools, gate=allow_all)
    assert result.stop is Stop.ANSWERED
    assert result.answer == "Shipped 2 bolts."
    assert effects == [{"sku": "BOLT", "qty": 2, "city": "Ghent"}]
    assert result.state.turns == 2 and result.state.tool_attempts == 1
    assert all(check_run(result, effects, Limits()).values())


def test_several_calls_in_one_message_run_in_order_before_the_next_turn():
    """Each call of one message is judged and executed in order, each with its own correlated observation."""
    tools, effects = make_warehouse()
    model = ScriptedModel(
        [
            multi_call(("a", "count_stock", {"sku": "BOLT"}), ("b", "ship", ship_args(qty=1)), ("c", "nope", {})),
            answer_message("done"),
        ]
    )
    result = run("t", model, tools, gate=allow_all)
    assert [o.call_id for o in result.state.observations] == ["a", "b", "c"]
    assert [o.kind for o in result.state.observations] == ["result", "result", "invalid"]
    roles = [m["role"] for m in result.state.messages]
    # system, user, one assistant with three calls, three tool messages, then the next model turn
    assert roles == ["system", "user", "assistant", "tool", "tool", "tool", "assistant"]
    assert [m.get("tool_call_id") for m in result.state.messages[3:6]] == ["a", "b", "c"]
    assert result.state.turns == 2
    assert effects == [{"sku": "BOLT", "qty": 1, "city": "Ghent"}]


@pytest.mark.parametrize(
    ("name", "arguments", "fragment"),
    [
        ("ship", '{"sku": "BOLT", "qty": 2', "not a JSON object"),  # broken JSON
        ("ship", "[1, 2]", "not a JSON object"),  # JSON, but not an object
        ("launch_rockets", "{}", "unknown tool: 'launch_rockets'"),
        ("ship", json.dumps({"sku": "BOLT", "qty": 2}), "'address' is a required property"),  # missing field
        ("ship", json.dumps({**ship_args(), "priority": True}), "Additional properties"),  # extra field
        ("ship", json.dumps(ship_args(qty="2")), "qty: '2' is not of type 'integer'"),  # wrong type
        ("ship", json.dumps(ship_args(qty=2.0)), "qty: 2.0 is not of type 'integer'"),  # float is not an int
        ("ship", json.dumps(ship_args(qty=11)), "qty: 11 is greater than the maximum of 10"),  # range
        ("ship", json.dumps(ship_args(sku="WASHER")), "sku: 'WASHER' is not one of"),  # enum
        ("ship", json.dumps(ship_args(city="")), "address/city"),  # nested object
        ("count_stock", json.dumps({"sku": 7}), "sku: 7 is not of type 'string'"),  # shorthand schema
    ],
)
def test_malformed_proposals_become_invalid_observations(name, arguments, fragment):
    """Broken JSON, unknown tools and every kind of contract violation reach the model as `invalid`."""
    tools, effects = make_warehouse()
    message = tool_call_message("c1", name, arguments)
    result = run("t", ScriptedModel([message, answer_message("ok")]), tools, gate=allow_all)
    assert result.stop is Stop.ANSWERED
    (observation,) = result.state.observations
    assert observation.kind == "invalid" and observation.ok is False
    assert fragment in observation.content
    assert tool_payloads(result)[0]["kind"] == "invalid"
    assert effects == [] and result.state.tool_attempts == 0


def test_unknown_tool_name_is_never_resolved_outside_the_registry():
    """A proposal naming a Python builtin or dunder is only ever looked up in the registry."""
    tools, _ = make_warehouse()
    names = ["__import__", "eval", "count_stock.__globals__", "ship ", "SHIP"]
    model = ScriptedModel([multi_call(*[(f"c{i}", n, {}) for i, n in enumerate(names)]), answer_message("x")])
    result = run("t", model, tools, gate=allow_all)
    assert [o.kind for o in result.state.observations] == ["invalid"] * len(names)
    assert all("unknown tool" in o.content for o in result.state.observations)


def test_model_reply_of_the_wrong_shape_never_crashes():
    """Garbage where a tool call should be becomes an invalid observation, never an exception."""
    tools, _ = make_warehouse()
    weird = {"role": "assistant", "content": None, "tool_calls": [{"function": "ship"}, 42, {"id": 5}]}
    limits = Limits(repeated_denials=5)  # the three broken calls are the same proposal; let all through
    result = run("t", ScriptedModel([weird, answer_message("x")]), tools, gate=allow_all, limits=limits)
    assert result.stop is Stop.ANSWERED
    assert [o.kind for o in result.state.observations] == ["invalid"] * 3
    assert len({m["id"] for m in result.state.messages[2]["tool_calls"]}) == 3  # ids were repaired
    assert all(check_run(result, [], limits).values())
    # with the default limits the identical broken proposal repeating is no progress
    assert run("t", ScriptedModel([weird]), tools, gate=allow_all).stop is Stop.NO_PROGRESS


def test_secure_default_runs_reads_and_denies_effects():
    """With gate=None, effect-free tools run and effectful ones are denied with a reason naming the missing gate."""
    tools, effects = make_warehouse()
    model = ScriptedModel(
        [multi_call(("a", "count_stock", {"sku": "BOLT"}), ("b", "ship", ship_args())), answer_message("x")]
    )
    result = run("t", model, tools)
    read, shipment = result.state.observations
    assert read.kind == "result" and read.content == 40
    assert shipment.kind == "denied" and "no gate authorised effects" in shipment.content
    assert effects == []


def test_tuple_gate_and_denial_the_model_recovers_from():
    """A `(bool, reason)` gate works; the denial reason reaches the model, which corrects itself."""
    tools, effects = make_warehouse()

    def small_shipments_only(call):
        if call.name == "ship" and call.arguments["qty"] > 3:
            return False, "shipments above 3 need a supervisor"
        return True, "fine"

    model = ScriptedModel(
        [tool_call_message("c1", "ship", ship_args(qty=8)), answer_message("Shipped.")],
        reactions={"supervisor": tool_call_message("c2", "ship", ship_args(qty=3))},
    )
    result = run("t", model, tools, gate=small_shipments_only)
    assert [o.kind for o in result.state.observations] == ["denied", "result"]
    assert result.state.observations[0].content == "shipments above 3 need a supervisor"
    assert effects == [{"sku": "BOLT", "qty": 3, "city": "Ghent"}]
    assert result.stop is Stop.ANSWERED and result.state.turns == 3


def test_expected_handler_failures_become_error_observations():
    """ToolError (with data), KeyError and TimeoutError are observations the model can read."""
    tools, effects = make_warehouse()
    model = ScriptedModel(
        [
            multi_call(
                ("a", "ship", ship_args(sku="NUT", qty=1)),
                ("b", "count_stock", {"sku": "RIVET"}),
                ("c", "slow_supplier", {}),
            ),
            answer_message("x"),
        ]
    )
    result = run("t", model, tools, gate=allow_all)
    a, b, c = result.state.observations
    assert (a.kind, a.content) == ("error", {"available": 0})
    assert (b.kind, b.content) == ("error", "RIVET")
    assert (c.kind, c.content) == ("error", "supplier did not answer within 2s")
    assert result.state.tool_attempts == 3 and effects == []


def test_handler_bug_propagates_loudly_with_the_state():
    """An unexpected exception from a handler stops the run; the state up to that point is on the error."""
    tools, _ = make_warehouse()
    model = ScriptedModel(
        [tool_call_message("c1", "count_stock", {"sku": "BOLT"}), tool_call_message("c2", "broken_report", {})]
    )
    with pytest.raises(HandlerError) as caught:
        run("t", model, tools, gate=allow_all)
    error = caught.value
    assert isinstance(error.__cause__, ZeroDivisionError)
    assert error.call.name == "broken_report"
    assert [o.call_id for o in error.state.observations] == ["c1"]
    assert error.state.tool_attempts == 2  # the failed attempt was issued, so it counts


def test_step_limit_stops_a_model_that_never_answers():
    """A model that keeps reading ends step_limit after exactly max_turns model calls."""
    tools, _ = make_warehouse()
    again = tool_call_message("w", "count_stock", {"sku": "BOLT"})
    result = run("t", ScriptedModel([again], reactions={"result": again}), tools, limits=Limits(max_turns=5))
    assert result.stop is Stop.STEP_LIMIT
    assert result.state.turns == 5 and len(result.state.observations) == 5
    assert result.answer is None and "5 of 5" in result.reason


def test_token_limit_refuses_the_model_call_that_would_exceed_the_budget():
    """No prompt above max_prompt_tokens is sent; the log grows every turn until the budget says no."""
    tools, _ = make_warehouse()
    again = tool_call_message("w", "count_stock", {"sku": "BOLT"})
    limits = Limits(max_turns=100, max_prompt_tokens=900)
    result = run("t", ScriptedModel([again], reactions={"result": again}), tools, limits=limits)
    log = result.state.prompt_token_log
    assert result.stop is Stop.TOKEN_LIMIT
    assert len(log) == result.state.turns and max(log) <= 900
    assert all(b > a for a, b in zip(log, log[1:]))
    declared = sum(estimate_tokens(d) for d in function_declarations(tools))
    assert result.state.message_tokens + declared > 900  # the prompt that was refused
    steps = [b - a for a, b in zip(log, log[1:])]
    # it grows by one call and one result a turn (the reused id is renamed w~2, w~3 ..., a token more at w~10)
    assert max(steps) - min(steps) <= 1


def test_token_estimate_is_incremental_and_matches_a_full_recount():
    """The running token count equals re-measuring every message, so each message is measured once."""
    from agent_fsm import estimate_tokens

    tools, _ = make_warehouse()
    again = tool_call_message("w", "count_stock", {"sku": "BOLT"})
    measured: list[dict] = []

    def counting_estimator(message):
        measured.append(message)
        return estimate_tokens(message)

    result = run(
        "t",
        ScriptedModel([again], reactions={"result": again}),
        tools,
        limits=Limits(max_turns=6),
        estimator=counting_estimator,
    )
    state = result.state
    declarations = len(tools)
    assert len(measured) == len(state.messages) + declarations  # each message measured exactly once
    assert state.message_tokens == sum(estimate_tokens(m) for m in state.messages)


def test_no_progress_when_the_same_rejected_proposal_repeats():
    """The identical denied proposal coming back repeated_denials times ends the run no_progress."""
    tools, effects = make_warehouse()
    insist = tool_call_message("s", "ship", ship_args(qty=9))
    gate = lambda call: Verdict.deny("too many") if call.arguments.get("qty", 0) > 5 else Verdict.allow()
    result = run("t", ScriptedModel([insist], reactions={"denied": insist}), tools, gate=gate)
    assert result.stop is Stop.NO_PROGRESS and result.state.turns == 2
    assert [o.kind for o in result.state.observations] == ["denied", "denied"]
    assert effects == [] and "too many" in result.reason
    # the same proposal with its keys in another order is the same proposal
    reordered = tool_call_message("s", "ship", {"address": {"city": "Ghent"}, "qty": 9, "sku": "BOLT"})
    model = ScriptedModel([insist, reordered])
    assert run("t", model, tools, gate=gate).stop is Stop.NO_PROGRESS


def test_different_rejections_do_not_count_as_no_progress():
    """Distinct rejected proposals are not 'the same proposal' and the run goes on."""
    tools, _ = make_warehouse()
    model = ScriptedModel(
        [tool_call_message(f"c{q}", "ship", ship_args(qty=q)) for q in (6, 7, 8)] + [answer_message("ok")]
    )
    gate = lambda call: Verdict.deny("too many")
    result = run("t", model, tools, gate=gate, limits=Limits(repeated_denials=2))
    assert result.stop is Stop.ANSWERED and result.state.turns == 4


def test_tool_limit_counts_failed_attempts_and_still_accepts_a_final_answer():
    """Attempts count failures too; no handler runs past max_tool_calls; an answer after the last attempt is fine."""
    tools, _ = make_warehouse()
    limits = Limits(max_tool_calls=2)
    two = ScriptedModel(
        [
            tool_call_message("a", "slow_supplier", {}),
            tool_call_message("b", "slow_supplier", {}),
            answer_message("gave up"),
        ]
    )
    result = run("t", two, tools, limits=limits)
    assert result.stop is Stop.ANSWERED and result.state.tool_attempts == 2
    three = ScriptedModel([tool_call_message(c, "slow_supplier", {}) for c in "abc"])
    result = run("t", three, tools, limits=limits)
    assert result.stop is Stop.TOOL_LIMIT and result.state.tool_attempts == 2
    # the third call did not run; it is answered so the transcript stays valid wire history
    assert [o.kind for o in result.state.observations] == ["error", "error", "denied"]
    assert result.state.messages[-1]["tool_call_id"] == "c"
    assert all(check_run(result, [], limits).values())


def test_provider_failure_ends_provider_error_and_keeps_the_transcript():
    """An OSError from the model ends provider_error: no answer is made up and nothing is lost."""
    tools, _ = make_warehouse()

    class FlakyModel:
        def __init__(self):
            self.calls = 0

        def chat(self, messages, tools=()):
            self.calls += 1
            if self.calls == 2:
                raise ConnectionResetError("peer closed the connection")
            return tool_call_message("c1", "count_stock", {"sku": "BOLT"})

    result = run("t", FlakyModel(), tools)
    assert result.stop is Stop.PROVIDER_ERROR and result.answer is None
    assert result.state.fault.type == "ConnectionResetError"
    assert result.state.fault.message == "peer closed the connection"
    assert len(result.state.observations) == 1 and result.state.messages[-1]["role"] == "tool"


def test_timeout_from_the_model_is_a_provider_error_with_kind_timeout():
    """A TimeoutError is an OSError: it ends provider_error and says it was a timeout."""
    tools, _ = make_warehouse()

    class Slow:
        def chat(self, messages, tools=()):
            raise TimeoutError("read timed out")

    result = run("t", Slow(), tools)
    assert result.stop is Stop.PROVIDER_ERROR and result.state.fault.kind == "timeout"


def test_a_model_bug_is_not_a_provider_error():
    """A model raising something other than OSError is a bug and propagates."""
    tools, _ = make_warehouse()

    class Buggy:
        def chat(self, messages, tools=()):
            raise AttributeError("oops")

    with pytest.raises(Exception) as caught:
        run("t", Buggy(), tools)
    assert isinstance(caught.value.__cause__, AttributeError)
    assert caught.value.state.turns == 1


def test_pause_for_approval_then_approve_runs_the_call_once():
    """A gate that asks pauses the run with blocked_on; approving runs exactly that call, once."""
    tools, effects = make_warehouse()
    script = [tool_call_message("c1", "ship", ship_args()), answer_message("Shipped after approval.")]
    gate = ask_for_effects(tools)
    paused = run("t", ScriptedModel(script), tools, gate=gate)
    assert paused.stop is Stop.AWAITING_APPROVAL and effects == []
    assert paused.blocked_on.call_id == "c1" and "approval" in paused.reason
    done = resume(paused.state, ScriptedModel(script), tools, approve=True, gate=gate)
    assert done.stop is Stop.ANSWERED and done.answer == "Shipped after approval."
    assert effects == [{"sku": "BOLT", "qty": 2, "city": "Ghent"}]
    assert paused.state.machine_state == "AwaitingApproval"  # the paused state itself is untouched
    assert all(check_run(done, effects, Limits()).values())


def test_pause_then_reject_becomes_a_denied_observation():
    """Rejecting turns the blocked call into a denied observation carrying the reviewer's reason."""
    tools, effects = make_warehouse()
    script = [tool_call_message("c1", "ship", ship_args()), answer_message("Not shipped.")]
    paused = run("t", ScriptedModel(script), tools, gate=ask_for_effects(tools))
    done = resume(paused.state, ScriptedModel(script), tools, approve=False, reason="wrong address")
    assert done.stop is Stop.ANSWERED and effects == []
    assert done.state.observations[-1].kind == "denied"
    assert "wrong address" in done.state.observations[-1].content


def test_resume_refuses_a_run_that_is_not_paused():
    """Only a run awaiting approval can be resumed."""
    tools, _ = make_warehouse()
    result = run("t", ScriptedModel([answer_message("hi")]), tools)
    with pytest.raises(NotPaused, match="'Answered'"):
        resume(result.state, ScriptedModel([]), tools, approve=True)


def test_answer_check_can_refuse_a_final_answer():
    """An answer check that refuses ends answer_rejected with the reason; the answer text is kept."""
    tools, _ = make_warehouse()
    check = lambda text, state: None if state.observations else "answered without looking anything up"
    result = run("t", ScriptedModel([answer_message("All fine!")]), tools, answer_check=check)
    assert result.stop is Stop.ANSWER_REJECTED and result.answer is None
    assert result.reason == "answered without looking anything up"
    assert result.state.answer == "All fine!"
    model = ScriptedModel([tool_call_message("c", "count_stock", {"sku": "NUT"}), answer_message("None left.")])
    assert run("t", model, tools, answer_check=check).stop is Stop.ANSWERED


def test_history_continues_a_conversation():
    """A second run can carry the first run's transcript; the system prompt is not repeated."""
    tools, _ = make_warehouse()
    # one script for the whole conversation: the model reads its position off the transcript
    model = ScriptedModel([answer_message("40."), answer_message("None.")])
    first = run("How many bolts?", model, tools)
    second = run("And nuts?", model, tools, history=first.state.messages)
    roles = [m["role"] for m in second.state.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    assert second.state.turns == 1 and second.answer == "None."


def test_zero_turn_budget_makes_no_model_call():
    """With max_turns=0 the model is never asked."""
    tools, _ = make_warehouse()

    class Untouchable:
        def chat(self, messages, tools=()):
            raise AssertionError("the model must not be called")

    result = run("t", Untouchable(), tools, limits=Limits(max_turns=0))
    assert result.stop is Stop.STEP_LIMIT and result.state.prompt_token_log == []


def test_stop_is_a_str_enum():
    """Stop values compare equal to their strings, so callers can branch on either."""
    assert StopEnum.ANSWERED == "answered" and str(StopEnum.NO_PROGRESS) == "no_progress"


def test_provider_token_counts_replace_the_estimate():
    """A ModelReply's prompt_tokens is logged and corrects later estimates, so the budget uses real figures."""
    from agent_fsm import ModelReply

    tools, _ = make_warehouse()

    class Counting:
        def __init__(self):
            self.inner = ScriptedModel([tool_call_message("c", "count_stock", {"sku": "BOLT"})] * 3)

        def chat(self, messages, tools=()):
            return ModelReply(self.inner.chat(messages), prompt_tokens=1000 * len(messages))

    result = run("t", Counting(), tools, limits=Limits(max_prompt_tokens=5000))
    log = result.state.prompt_token_log
    assert log == [2000, 4000, 6000]  # the provider's figures, not the estimates
    # after the third call the corrected estimate is above 5000, so no fourth call is made; an
    # estimate can only be corrected after the fact, which is why the third prompt was sent at all
    assert result.stop is Stop.TOKEN_LIMIT and result.state.turns == 3
    assert check_run(result, [], Limits(max_prompt_tokens=5000))["bounded"] is False


def test_empty_system_prompt_means_none():
    """system_prompt='' sends no system message."""
    tools, _ = make_warehouse()
    result = run("t", ScriptedModel([answer_message("hi")]), tools, system_prompt="")
    assert [m["role"] for m in result.state.messages] == ["user", "assistant"]


def test_calls_left_when_a_run_stops_are_answered_as_not_run():
    """Calls of the last reply that the run stopped before judging each get a tool message saying they did not run."""
    tools, effects = make_warehouse()
    insist = multi_call(("a", "ship", ship_args(qty=9)), ("b", "count_stock", {"sku": "BOLT"}))
    gate = lambda call: Verdict.deny("too many") if call.name == "ship" else Verdict.allow()
    result = run("t", ScriptedModel([insist, insist]), tools, gate=gate)
    assert result.stop is Stop.NO_PROGRESS
    assert [(o.call_id, o.kind) for o in result.state.observations] == [
        ("a", "denied"),
        ("b", "result"),
        ("a~2", "denied"),  # the second reply reused the ids; each call id stays unique in the transcript
        ("b~2", "denied"),
    ]
    assert result.state.observations[-1].content == "not run: the run stopped (no_progress)"
    assert result.state.tool_attempts == 1 and effects == []
    # the record is valid wire history: a follow-up run can carry it
    # The history's replies count as the script's turns played: a model that answers "ok" whatever it was told.
    again = run("and now?", ScriptedModel([], last_word="ok"), tools, history=result.state.messages)
    assert all(check_run(again, [], Limits()).values())


def test_check_run_counts_only_this_runs_tool_messages():
    """Tool messages carried in as history are the past, not this run's observations."""
    tools, _ = make_warehouse()
    first = run(
        "t", ScriptedModel([tool_call_message("c", "count_stock", {"sku": "BOLT"}), answer_message("40")]), tools
    )
    second = run("more", ScriptedModel([], last_word="ok"), tools, history=first.state.messages)  # see above
    assert second.state.opening == len(first.state.messages) + 1
    assert check_run(second, [], Limits())["observations_correlated"] is True
