"""agent_fsm.evals: datasets, evaluators (each a score and its reason), the runner, repeats and the shared budget."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

from agent_fsm.engine import (
    Limits,
    ModelReply,
    Price,
    Prices,
    ScriptedModel,
    Stop,
    answer_message,
    tool_call_message,
)
from agent_fsm.evals import (
    Budgets,
    Case,
    Check,
    Dataset,
    Effects,
    Ending,
    EvalBudget,
    Expectations,
    Judge,
    JudgeError,
    MachinePath,
    Output,
    Score,
    ToolCallPattern,
    Trajectory,
    load_dataset,
    run_eval,
    wilson_interval,
)
from agent_fsm.examples.support_desk import environment
from agent_fsm.scenarios import ModelSpec, SpecFormatError, load_scenario
from agent_fsm.testing import RecordingModel, ReplayModel

SPECS = Path(__file__).parent.parent / "specs" / "support_desk"
LOOKUP = tool_call_message("c1", "lookup_order", {"order_id": "A-17"})
REFUND = tool_call_message("c2", "refund_order", {"order_id": "A-17", "amount_cents": 4999})
DONE = answer_message("Refunded A-17: 4999 cents.")


def scripted(*turns, name="case", evaluators=(), gate="refund", **fields) -> Case:
    return Case(name, "Sort out A-17.", evaluators, model=ModelSpec(turns=turns), gate=gate, **fields)


def one(case: Case, **options):
    """The single run of ``case``."""
    report = run_eval(Dataset("t", [case]), environment, **options)
    return report.cases[0].runs[0]


# --- evaluators -------------------------------------------------------------------


def test_ending_and_effects_score_with_their_reasons():
    """Ending and Effects pass on the happy path and say what they saw; a wrong expectation fails with both sides."""
    receipt = [{"order_id": "A-17", "refunded_cents": 4999}]
    run = one(
        scripted(
            LOOKUP, REFUND, DONE,
            evaluators=[
                Ending(Stop.ANSWERED, "answered"), Effects(receipt), Effects(predicate=lambda log: len(log) == 2),
            ],
        )
    )  # fmt: skip
    ending, exact, counted = run.scores
    assert (ending.passed, exact.passed, counted.passed) == (True, True, False)
    assert "ended answered (answered)" in ending.reason
    assert "predicate failed" in counted.reason and "4999" in counted.reason
    assert not run.passed


def test_effects_needs_exactly_one_of_its_two_forms():
    """Effects() and Effects(expected, predicate=...) are set-up mistakes, refused at once."""
    with pytest.raises(TypeError):
        Effects()
    with pytest.raises(TypeError):
        Effects([], predicate=bool)


@pytest.mark.parametrize(
    ("mode", "made", "passed"),
    [
        ("strict", [LOOKUP, REFUND], True),
        ("strict", [REFUND, LOOKUP], False),
        ("unordered", [REFUND, LOOKUP], True),
        ("unordered", [LOOKUP], False),
        ("subset", [LOOKUP], True),  # did no more than expected
        ("subset", [LOOKUP, REFUND, tool_call_message("c3", "read_policy", {})], False),
        ("superset", [LOOKUP, tool_call_message("c3", "read_policy", {}), REFUND], True),  # did at least that
        ("superset", [LOOKUP], False),
    ],
)
def test_trajectory_modes(mode, made, passed):
    """The four trajectory modes of agentevals over the proposed calls, with exact argument matching."""
    expected = [ToolCallPattern("lookup_order", {"order_id": "A-17"}), ToolCallPattern("refund_order")]
    run = one(scripted(*made, DONE, evaluators=[Trajectory(expected, mode=mode)]))
    score = run.scores[0]
    assert score.passed is passed, score.reason
    assert score.reason.startswith(f"{mode}: expected [lookup_order")
    assert (score.value == 1.0) is passed


def test_trajectory_arguments_by_predicate_and_exact_mismatch():
    """A predicate accepts a call's arguments; an exact mapping that differs by one value does not match."""
    at_most = ToolCallPattern("refund_order", lambda args: args["amount_cents"] <= 5000)
    wrong = ToolCallPattern("refund_order", {"order_id": "A-17", "amount_cents": 5000})
    run = one(
        scripted(
            REFUND, DONE,
            evaluators=[Trajectory([at_most], name="by predicate"), Trajectory([wrong], name="exact")],
        )
    )  # fmt: skip
    assert [s.passed for s in run.scores] == [True, False]
    assert "<lambda>" in run.scores[0].reason


def test_trajectory_refuses_an_unknown_mode():
    """A misspelt mode is a set-up error naming the four."""
    with pytest.raises(ValueError, match="strict"):
        Trajectory([], mode="exactly")  # type: ignore[arg-type]


def test_machine_path_exact_and_in_order():
    """MachinePath compares the states the run entered, exactly or as an ordered subsequence."""
    run = one(
        scripted(
            LOOKUP, DONE,
            evaluators=[
                MachinePath(["Proposing", "Executing", "Proposing", "Answered"], mode="contains"),
                MachinePath(["Answered", "Proposing"], mode="contains"),
                MachinePath(["Answered"]),
            ],
        )
    )  # fmt: skip
    assert [s.passed for s in run.scores] == [True, False, False]
    assert "took ['Ready'" in run.scores[2].reason or "took [" in run.scores[2].reason


def test_budgets_spent():
    """Budgets passes within the ceilings and names the one passed."""
    run = one(scripted(LOOKUP, REFUND, DONE, evaluators=[Budgets(max_turns=3), Budgets(max_turns=2, name="tight")]))
    assert [s.passed for s in run.scores] == [True, False]
    assert "spent 3 turns" in run.scores[1].reason and "over on turns" in run.scores[1].reason


def test_user_functions_return_bools_numbers_pairs_or_scores():
    """Check reads a bool, a number against its threshold, a (value, reason) pair, or a Score as given."""
    checks = [
        Check(lambda run: run.result.stop is Stop.ANSWERED, name="answered"),
        Check(lambda run: 0.5, name="half", threshold=0.6),
        Check(lambda run: (0.75, "three quarters"), name="pair", threshold=0.5),
        Check(lambda run: Score("own", 0.0, False, "said so"), name="own"),
    ]
    run = one(scripted(DONE, evaluators=checks))
    assert [(s.name, s.value, s.passed) for s in run.scores] == [
        ("answered", 1.0, True), ("half", 0.5, False), ("pair", 0.75, True), ("own", 0.0, False),
    ]  # fmt: skip
    assert run.scores[2].reason == "three quarters"


def test_a_user_function_returning_nonsense_fails_loudly():
    """A check returning something that is not a score is a programmer error: raised, not scored."""
    with pytest.raises(TypeError, match="return a bool"):
        one(scripted(DONE, evaluators=[Check(lambda run: "yes")]))


def test_typed_output_by_equality_schema_and_function():
    """Output scores a typed answer three ways, and fails with a reason when the run gave none."""
    schema = {"type": "object", "properties": {"cents": {"type": "integer"}}, "required": ["cents"]}
    evaluators = [
        Output(equals={"cents": 4999}),
        Output(schema={"type": "object", "properties": {"cents": {"maximum": 4000}}}),
        Output(check=lambda out: out["cents"] > 0),
    ]
    reply = answer_message('{"cents": 4999}')
    run = one(Case("typed", "How much?", evaluators, model=ModelSpec(turns=(reply,)), output=schema))
    assert [s.passed for s in run.scores] == [True, False, True]
    assert "4999" in run.scores[1].reason
    untyped = one(Case("plain", "How much?", [Output(equals=1)], model=ModelSpec(turns=(DONE,))))
    assert untyped.scores[0].reason == "no typed output (the run ended answered)"


def test_spec_expectations_are_scored_by_the_scenario_runner():
    """A case read from a spec scores its [expect] table: the share of claims that held, failures listed."""
    spec = load_scenario(SPECS / "happy_path.toml")
    good = Case.__new__(Case)
    good = Case("happy", spec.task, [Expectations()], model=spec.model, gate=spec.gate, scenario=spec)
    assert one(good).scores[0].passed
    broken = Case("happy", spec.task, [Expectations()], scenario=spec, model_factory=lambda seed: ScriptedModel([DONE]))
    score = one(broken).scores[0]
    assert not score.passed and 0 < score.value < 1
    assert "FAILED  effects" in score.reason


# --- the judge --------------------------------------------------------------------


def _judge_reply(passed: bool, score: float, reason: str):
    return answer_message(json.dumps({"passed": passed, "score": score, "reason": reason}))


def test_llm_judge_with_a_scripted_model():
    """The judge is asked through the model interface with the rubric and the run; its JSON verdict is the score."""
    judge_model = ScriptedModel([_judge_reply(True, 0.9, "refund matches the order")])
    judge = Judge(judge_model, rubric="The refund must equal the amount paid.")
    run = one(scripted(LOOKUP, REFUND, DONE, evaluators=[judge]))
    assert run.scores[0] == Score("judge", 0.9, True, "refund matches the order")


def test_llm_judge_replayed_from_a_recorded_cassette(tmp_path):
    """A judge recorded once replays offline; the replay checks the judge was asked exactly the same thing."""
    cassette = tmp_path / "judge.json"
    rubric = "The answer must cite the refunded amount."
    recorded = Judge(RecordingModel(ScriptedModel([_judge_reply(False, 0.2, "no amount")]), cassette), rubric)
    first = one(scripted(LOOKUP, DONE, evaluators=[recorded]))
    replayed = one(scripted(LOOKUP, DONE, evaluators=[Judge(ReplayModel(cassette), rubric)]))
    assert first.scores == replayed.scores
    assert replayed.scores[0].reason == "no amount"
    asked = json.loads(cassette.read_text())["interactions"][0]["request"]["messages"][1]["content"]
    assert rubric in asked and "lookup_order" in asked
    with pytest.raises(AssertionError, match="differs"):
        one(scripted(LOOKUP, REFUND, DONE, evaluators=[Judge(ReplayModel(cassette), rubric)]))


def test_llm_judge_through_a_provider_adapter_recorded_then_replayed(tmp_path):
    """The judge speaks the OpenAI wire format over real HTTP on 127.0.0.1; its cassette then serves it offline."""
    from agent_fsm.providers import OpenAIChat
    from tests.providers.loopback import LoopbackServer, openai_answer

    verdict = json.dumps({"passed": True, "score": 1.0, "reason": "one refund of the amount paid"})
    cassette = tmp_path / "judge.json"
    rubric = "Exactly one refund, of the amount paid."
    server = LoopbackServer().start()
    try:
        server.script(openai_answer(verdict))
        adapter = OpenAIChat(base_url=server.url + "/v1", model="judge-model", api_key="sk-judge-0123456789abcdef",
                             max_retries=0, read_timeout=5.0)  # fmt: skip
        live = one(scripted(LOOKUP, REFUND, DONE, evaluators=[Judge(RecordingModel(adapter, cassette), rubric)]))
        asked = server.requests[0].body
    finally:
        server.stop()
    assert live.scores[0] == Score("judge", 1.0, True, "one refund of the amount paid")
    assert rubric in asked["messages"][1]["content"] and asked["model"] == "judge-model"
    assert "sk-judge" not in cassette.read_text()  # the key never reaches the cassette
    replayed = one(scripted(LOOKUP, REFUND, DONE, evaluators=[Judge(ReplayModel(cassette), rubric)]))
    assert replayed.scores == live.scores


@pytest.mark.parametrize("text", ["looks fine", '{"passed": "yes", "score": 1}', '{"passed": true, "score": 7}'])
def test_a_judge_reply_that_is_no_verdict_raises(text):
    """A judge that cannot be read is a set-up problem: JudgeError quoting the reply."""
    judge = Judge(ScriptedModel([answer_message(text)]), rubric="r")
    with pytest.raises(JudgeError, match="the judge replied"):
        one(scripted(DONE, evaluators=[judge]))


# --- datasets ---------------------------------------------------------------------


DATASET = """
name = "desk"
world = "agent_fsm.examples.support_desk:environment"
repeat = 2

[[case]]
spec = "{spec}"
metadata = {{ tier = "easy" }}
trajectory = {{ mode = "strict", calls = [
  {{ name = "lookup_order", arguments = {{ order_id = "A-17" }} }},
  {{ name = "refund_order" }},
] }}
path = ["Proposing", "Executing", "Ready", "Proposing", "Executing", "Ready", "Proposing", "Answered"]

[[case]]
name = "stubborn"
task = "Refund 9999 on A-17."
gate = "refund"
model = {{ name = "stubborn" }}
expect = {{ stop = "no_progress", effects = [] }}
"""


def test_a_toml_dataset_reads_cases_as_scenario_specs(tmp_path):
    """Cases are specs (inline or by file) plus metadata, trajectory and path; they run and pass."""
    path = tmp_path / "desk.toml"
    path.write_text(DATASET.format(spec=(SPECS / "happy_path.toml").as_posix()))
    dataset = load_dataset(path)
    assert [c.name for c in dataset.cases] == ["support-desk/happy-path", "stubborn"]
    assert dataset.cases[0].metadata == {"tier": "easy"}
    assert [e.name for e in dataset.cases[0].evaluators] == ["expect", "trajectory", "path"]
    report = run_eval(dataset)
    assert [(c.passed, len(c.runs)) for c in report.cases] == [(2, 2), (2, 2)], report.table()


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('name = "x"\n', "case"),
        ('nme = "x"\n[[case]]\n', "nme"),
        (
            '[[case]]\ntask = "t"\nenvironment = "agent_fsm.examples.support_desk:environment"\nmodel = {turns = []}\n',
            "expect",
        ),
        ('[[case]]\ntrajectory = {mode = "sideways", calls = []}\n', "case[0].trajectory.mode"),
        ('[[case]]\npath = "Answered"\n', "case[0].path"),
    ],
)
def test_a_malformed_dataset_names_the_key(tmp_path, text, key):
    """Every mistake in a dataset file is a SpecFormatError naming the file and the key to fix."""
    path = tmp_path / "bad.toml"
    base = (
        'task = "t"\nenvironment = "agent_fsm.examples.support_desk:environment"\n'
        'model = {turns = []}\nexpect = {stop = "answered"}\n'
    )
    if "trajectory" in text or "path =" in text:
        text = text + base
    path.write_text(text)
    with pytest.raises(SpecFormatError) as caught:
        load_dataset(path)
    assert caught.value.key == key or (caught.value.key or "").endswith(key), str(caught.value)


def test_case_names_are_unique():
    """Two cases of one name would share a row of the report: refused."""
    with pytest.raises(ValueError, match="more than once"):
        Dataset("d", [scripted(DONE), scripted(DONE)])


# --- repeats, seeds and intervals -------------------------------------------------


def test_wilson_interval_known_values():
    """Wilson's 95% interval: 0/10 is [0, 0.278], 10/10 is [0.722, 1], 5/10 is [0.237, 0.763]."""
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(10, 10) == pytest.approx((0.7225, 1.0), abs=1e-4)
    assert wilson_interval(5, 10) == pytest.approx((0.2366, 0.7634), abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_repeats_use_seeded_models_and_give_a_pass_rate():
    """Each repeat's model is made from its seed; the case's pass rate and interval follow from the runs."""
    seen = []

    def flaky(seed: int) -> ScriptedModel:
        seen.append(seed)
        return ScriptedModel([LOOKUP, DONE] if seed % 2 == 0 else [DONE])

    case = Case("flaky", "t", [Trajectory([ToolCallPattern("lookup_order")], mode="superset")], model_factory=flaky)
    report = run_eval(Dataset("d", [case]), environment, repeat=4, seed=10)
    assert sorted(seen) == [10, 11, 12, 13]
    row = report.cases[0]
    assert (row.passed, row.pass_rate) == (2, 0.5)
    assert row.interval == wilson_interval(2, 4)


def test_runs_go_concurrently_on_the_async_driver():
    """With concurrency 3, three async models are in flight at once (each waits for the others to start)."""
    import asyncio

    started = 0
    everyone = asyncio.Event()

    class Waiting:
        async def achat(self, messages, tools=()):
            nonlocal started
            started += 1
            if started == 3:
                everyone.set()
            await asyncio.wait_for(everyone.wait(), 5)
            return DONE

        def chat(self, messages, tools=()):
            raise AssertionError("the async driver awaits achat")

    cases = [Case(f"c{i}", "t", [Ending(Stop.ANSWERED)], model_factory=lambda seed: Waiting()) for i in range(3)]
    report = run_eval(Dataset("d", cases), environment, concurrency=3)
    assert report.pass_rate == 1.0


# --- the shared budget ------------------------------------------------------------


PRICES = Prices(default=Price(input=Decimal("2.50"), output=Decimal("10.00")))


def test_the_shared_budget_stops_further_runs_typed():
    """Turns summed over the eval stay within the budget; runs it cannot fund are recorded budget_spent."""
    wanderer = Case("wander", "Investigate A-17.", [Ending(Stop.STEP_LIMIT)], model=ModelSpec(name="wanderer"),
                    gate="refund", limits=Limits(max_turns=4))  # fmt: skip
    report = run_eval(Dataset("d", [wanderer]), environment, repeat=5, budget=EvalBudget(max_turns=10))
    runs = report.cases[0].runs
    assert report.spent_turns == sum(r.turns for r in runs) <= 10
    assert [r.turns for r in runs if r.skipped is None] == [4, 4, 2]
    assert [r.skipped for r in runs][3:] == ["budget_spent", "budget_spent"]
    assert report.stopped and "budget spent: 2 runs not started" in report.table()


def test_the_money_budget_is_never_passed_and_needs_prices_and_output_caps():
    """Money summed over every run stays within the budget; a budget without prices or output caps is refused."""
    limits = Limits(max_turns=30, max_prompt_tokens=100_000, max_output_tokens=200, max_cost=Decimal("0.01"))
    case = Case("wander", "Investigate A-17.", [], model=ModelSpec(name="wanderer"), gate="refund", limits=limits,
                prices=PRICES)  # fmt: skip
    budget = EvalBudget(max_cost=Decimal("0.025"))
    report = run_eval(Dataset("d", [case]), environment, repeat=4, budget=budget, concurrency=2)
    assert report.spent_cost == sum(r.cost for r in report.runs) <= Decimal("0.025")
    assert report.spent_cost > Decimal("0.02")  # the budget was used, not refused
    # The third run started with what was left, not its own 0.01, and stopped before passing it; what then
    # remained could not pay for one reply (200 tokens at 10.00 per million): the fourth was not started.
    assert [r.stop for r in report.runs] == ["cost_limit"] * 3 + [None]
    assert report.runs[2].cost < Decimal("0.01") and report.runs[3].skipped == "budget_spent"
    assert Decimal("0.025") - report.spent_cost < Decimal("0.002") and report.stopped
    with pytest.raises(ValueError, match="no Prices"):
        run_eval(Dataset("d", [attrs_evolve(case, prices=None)]), environment, budget=budget)
    with pytest.raises(ValueError, match="max_output_tokens"):
        run_eval(Dataset("d", [attrs_evolve(case, limits=Limits())]), environment, budget=budget)


def attrs_evolve(case: Case, **changes) -> Case:
    import attrs

    return attrs.evolve(case, **changes)


def test_a_run_that_raises_is_a_failed_run_charged_its_whole_share():
    """A case whose model raises is recorded as an error and failed, its share counted as spent; others go on."""

    class Broken:
        def chat(self, messages, tools=()):
            raise AssertionError("cassette exhausted")

    cases = [
        Case("broken", "t", [], model_factory=lambda seed: Broken(), limits=Limits(max_turns=3)),
        scripted(DONE, name="fine", evaluators=[Ending(Stop.ANSWERED)]),
    ]
    report = run_eval(Dataset("d", cases), environment)
    broken, fine = report.cases
    assert broken.runs[0].error == "RunError: the model raised AssertionError: cassette exhausted"
    assert not broken.runs[0].passed
    assert broken.runs[0].turns == 3 and fine.pass_rate == 1.0


def test_runs_kept_in_a_store_are_the_ones_the_report_links(tmp_path):
    """With store=, every run is saved under the run id the report records (and the HTML page links)."""
    from agent_fsm.evals import report_html
    from agent_fsm.store import SqliteStore

    store = SqliteStore(tmp_path / "runs.db")
    try:
        report = run_eval(Dataset("d", [scripted(LOOKUP, DONE)]), environment, repeat=3, store=store)
        ids = [run.run_id for run in report.runs]
        assert len(set(ids)) == 3
        assert sorted(ids) == sorted(summary.run_id for summary in store.runs())
        assert all(store.load(run_id).state.machine_state == "Answered" for run_id in ids)
        page = report_html(report, run_href="/runs/{run_id}")
        assert all(f'href="/runs/{run_id}"' in page for run_id in ids)
    finally:
        store.close()


class _CountingModel:
    """A judge model that counts the calls it is asked, so a test can see one was never made."""

    def __init__(self, reply):
        self.reply, self.calls = reply, 0

    def chat(self, messages, tools=()):
        self.calls += 1
        return self.reply


def test_a_judge_call_the_budget_cannot_cover_is_not_made():
    """The run spends the budget's last turns; the judge is then not asked, and its score says so, typed."""
    model = _CountingModel(_judge_reply(True, 1.0, "fine"))
    judge = Judge(model, rubric="Be fair.")
    run = one(scripted(LOOKUP, REFUND, DONE, evaluators=[judge]), budget=EvalBudget(max_turns=3))
    assert model.calls == 0
    assert run.scores == (Score("judge", None, False, "budget spent"),)


def _judge_cost(prompt_tokens: int | None) -> Decimal:
    """What the eval charged for one judge call whose reply reports ``prompt_tokens`` (and 7 tokens out)."""
    prices = Prices(default=Price(input=Decimal("1.00"), output=Decimal("2.00")))
    reply = ModelReply(_judge_reply(True, 1.0, "fine"), prompt_tokens=prompt_tokens, output_tokens=7)
    judge = Judge(_CountingModel(reply), "Be fair.", prices=prices, max_output_tokens=50)
    limits = Limits(max_turns=5, max_prompt_tokens=100_000, max_output_tokens=100)
    case = scripted(LOOKUP, DONE, evaluators=[judge], limits=limits, prices=prices)
    report = run_eval(Dataset("t", [case]), environment, budget=EvalBudget(max_cost=Decimal("1000"), max_turns=10))
    assert report.runs[0].scores[0].value == 1.0
    return report.judge_cost


def test_a_judge_reply_reporting_an_absurd_count_is_charged_the_estimate():
    """A judge's reported figure is taken by the engine's rule: past 10**12 tokens it is no figure, so the estimate."""
    estimated = _judge_cost(None)
    assert _judge_cost(10**13) == estimated
    assert _judge_cost(10**12) > estimated  # the largest figure taken is taken


def test_a_judge_call_is_priced_and_charged_to_the_eval():
    """With room left, the judge's call is checked at its worst case, made, and its cost and turn added to the spend."""
    prices = Prices(default=Price(input=Decimal("1.00"), output=Decimal("2.00")))
    judge = Judge(ScriptedModel([_judge_reply(True, 1.0, "fine")]), "Be fair.", prices=prices, max_output_tokens=50)
    limits = Limits(max_turns=5, max_prompt_tokens=100_000, max_output_tokens=100)
    case = scripted(LOOKUP, REFUND, DONE, evaluators=[judge], limits=limits, prices=prices)
    report = run_eval(Dataset("t", [case]), environment, budget=EvalBudget(max_cost=Decimal("1"), max_turns=10))
    run = report.runs[0]
    assert run.scores[0].value == 1.0
    assert report.spent_turns == run.turns + 1
    assert report.judge_cost > 0 and report.spent_cost == run.cost + report.judge_cost
    with pytest.raises(ValueError, match="prices"):
        unpriced_judge = Judge(ScriptedModel([DONE]), "x", max_output_tokens=9)
        unpriced = scripted(LOOKUP, DONE, evaluators=[unpriced_judge], limits=limits, prices=prices)
        run_eval(Dataset("t", [unpriced]), environment, budget=EvalBudget(max_cost=Decimal("1")))
