"""
Typed output: ``output=`` makes the final answer JSON of a schema, sent back while ``Limits.output_retries`` lasts.
"""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
from typing import Any, Literal, TypedDict

import attrs
import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_fsm import (
    Agent,
    Limits,
    OutputDefinitionError,
    OutputSpec,
    RunState,
    ScriptedModel,
    StateError,
    Stop,
    ToolSpec,
    answer_message,
    arun,
    run,
    tool_call_message,
)
from agent_fsm.diagrams import path_of, reconstruct_path
from agent_fsm.engine import DEFAULT_LAST_WORD, RUN_MACHINE, check_machine, output_spec


class Size(enum.Enum):
    SMALL = "small"
    LARGE = "large"


@dataclasses.dataclass
class Line:
    sku: str
    quantity: int


@dataclasses.dataclass
class Order:
    order_id: str
    lines: list[Line]
    size: Size
    note: str | None = None


@attrs.frozen
class Refund:
    order_id: str
    cents: int = attrs.field(validator=attrs.validators.ge(0))
    reason: Literal["damaged", "late"] = "late"


class Ticket(TypedDict):
    title: str
    tags: list[str]


class City(pydantic.BaseModel):
    city: str
    country: str


REFUND_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "cents": {"type": "integer", "minimum": 0}},
    "required": ["order_id", "cents"],
    "additionalProperties": False,
}


def _answers(*texts: str) -> ScriptedModel:
    return ScriptedModel([answer_message(t) for t in texts])


def _run(output: Any, *texts: str, **limits: Any) -> Any:
    return Agent(_answers(*texts), {}, output=output, limits=Limits(**limits)).run("task")


# --- each kind of output -------------------------------------------------------------


def test_a_json_schema_gives_the_answer_as_a_dict():
    """A schema (a dict) is the contract; the output is the validated JSON object itself."""
    result = _run(REFUND_SCHEMA, '{"order_id": "A-17", "cents": 1299}')
    assert result.stop is Stop.ANSWERED
    assert result.output == {"order_id": "A-17", "cents": 1299}
    assert result.answer == '{"order_id": "A-17", "cents": 1299}'  # the text stays the answer


def test_a_dataclass_gives_an_instance_with_nested_dataclasses_enums_and_optionals():
    """Nested dataclasses, an Enum and an optional field are built into the caller's types."""
    text = '{"order_id": "A-17", "lines": [{"sku": "mug", "quantity": 2}], "size": "large"}'
    result = _run(Order, text)
    assert result.output == Order("A-17", [Line("mug", 2)], Size.LARGE, None)


def test_an_attrs_class_gives_an_instance_and_its_validators_refuse_like_the_schema():
    """An attrs class is built with its own validators; one refusing is an invalid answer, sent back."""
    result = _run(Refund, '{"order_id": "A-17", "cents": -5}', '{"order_id": "A-17", "cents": 5}')
    assert result.output == Refund("A-17", 5)
    sent_back = [m for m in result.state.messages if m["role"] == "user"][-1]
    assert "cents" in json.loads(sent_back["content"])["content"]


def test_a_typeddict_gives_a_dict():
    """A TypedDict is a dict of its keys; a missing required key is named when the answer is sent back."""
    result = _run(Ticket, '{"title": "broken mug"}', '{"title": "broken mug", "tags": ["refund"]}')
    assert result.output == {"title": "broken mug", "tags": ["refund"]}
    assert "'tags' is a required property" in result.state.messages[3]["content"]


def test_a_pydantic_model_gives_an_instance():
    """A pydantic model's own schema is the contract and model_validate builds the value."""
    result = _run(City, '{"city": "Mexico City", "country": "Mexico"}')
    assert result.output == City(city="Mexico City", country="Mexico")
    assert output_spec(City).kind == "pydantic"


def test_a_fenced_json_answer_is_read():
    """A model that wraps its JSON in a ```json fence still answers with that JSON."""
    result = _run(REFUND_SCHEMA, '```json\n{"order_id": "A-17", "cents": 1}\n```')
    assert result.output == {"order_id": "A-17", "cents": 1}


def test_the_module_level_run_and_arun_take_output():
    """``run(..., output=...)`` and ``arun`` delegate to an agent with that output."""
    result = run("task", _answers('{"title": "t", "tags": []}'), {}, output=Ticket)
    assert result.output == {"title": "t", "tags": []}
    result = asyncio.run(arun("task", _answers('{"city": "Lyon", "country": "France"}'), {}, output=City))
    assert result.output == City(city="Lyon", country="France")


def test_without_output_the_answer_stays_free_text():
    """No output=: nothing is parsed, the output is None, no instruction is added to the prompt."""
    result = Agent(_answers("plain words"), {}).run("task")
    assert result.stop is Stop.ANSWERED and result.output is None and result.state.output is None
    assert "JSON Schema" not in result.state.messages[0]["content"]


def test_the_system_prompt_states_the_schema():
    """A model asked without native structured output reads the schema in the system prompt."""
    result = _run(Ticket, '{"title": "t", "tags": []}')
    assert json.dumps(output_spec(Ticket).schema, separators=(",", ":")) in result.state.messages[0]["content"]


# --- the retry edge and its budget --------------------------------------------------------


def test_an_invalid_answer_goes_back_as_an_invalid_observation_and_the_next_one_counts():
    """Not JSON, then the wrong shape, then valid: two retries, each naming what failed, then answered."""
    result = _run(REFUND_SCHEMA, "It is done.", '{"order_id": "A-17"}', '{"order_id": "A-17", "cents": 5}')
    assert result.stop is Stop.ANSWERED and result.output == {"order_id": "A-17", "cents": 5}
    assert result.state.output_rejections == 2
    assert result.state.path.count("OutputInvalid") == 2
    sent = [json.loads(m["content"]) for m in result.state.messages[2:] if m["role"] == "user"]
    assert [s["kind"] for s in sent] == ["invalid", "invalid"] and not any(s["ok"] for s in sent)
    assert "not JSON" in sent[0]["content"] and "'cents' is a required property" in sent[1]["content"]


def test_the_retries_run_out_and_the_run_ends_answer_rejected_output_invalid():
    """Past Limits.output_retries the run ends answer_rejected, code output_invalid, output None, transcript kept."""
    result = _run(REFUND_SCHEMA, "no", "still no", "never", output_retries=1)
    assert result.stop is Stop.ANSWER_REJECTED
    assert result.code == "output_invalid" and result.state.code == "output_invalid"
    assert result.output is None and result.state.output is None
    assert "not JSON" in (result.reason or "")
    assert result.state.turns == 2 and result.state.output_rejections == 1
    assert [m["content"] for m in result.state.messages if m["role"] == "assistant"] == ["no", "still no"]


def test_zero_retries_rejects_the_first_invalid_answer():
    """output_retries=0: the first invalid answer ends the run."""
    result = _run(REFUND_SCHEMA, "no", output_retries=0)
    assert result.stop is Stop.ANSWER_REJECTED and result.code == "output_invalid" and result.state.turns == 1


def test_a_tool_call_before_the_answer_runs_as_usual():
    """Typed output changes only what an answer must be; tools are proposed, judged and run as before."""
    look = ToolSpec("look up an order", {"order_id": str}, lambda order_id: {"total": 1299})
    model = ScriptedModel(
        [tool_call_message("c1", "look", {"order_id": "A-17"}), answer_message('{"order_id": "A-17", "cents": 1299}')]
    )
    result = Agent(model, {"look": look}, output=REFUND_SCHEMA).run("refund A-17")
    assert result.output == {"order_id": "A-17", "cents": 1299}
    assert result.state.observations[0].ok


def test_the_retry_is_an_edge_of_the_table_that_spends_a_declared_budget():
    """Proposing -> OutputInvalid -> Ready is in the table; the checker still proves termination."""
    edges = {(e.source, e.dest): e for e in RUN_MACHINE.edges}
    assert edges[("Proposing", "OutputInvalid")].guard == "output_retry_left"
    assert edges[("OutputInvalid", "Ready")].consumes == "output_retries"
    assert "output_retries" in RUN_MACHINE.budgets
    assert check_machine(RUN_MACHINE).ok


def test_too_large_too_deep_and_nan_answers_are_invalid_under_the_existing_limits():
    """The argument limits hold for answers: characters, nesting and strict JSON numbers."""
    long = json.dumps({"order_id": "x" * 200, "cents": 1})
    result = _run(REFUND_SCHEMA, long, output_retries=0, max_argument_chars=100)
    assert result.code == "output_invalid" and "at most 100" in (result.reason or "")
    deep = "[" * 40 + "]" * 40
    result = _run({"type": "array"}, deep, output_retries=0, max_argument_depth=8)
    assert result.code == "output_invalid" and "nests deeper than 8" in (result.reason or "")
    result = _run({"type": "number"}, "NaN", output_retries=0)
    assert result.code == "output_invalid" and "not JSON" in (result.reason or "")
    result = _run({"type": "array"}, "[" * 100_000, output_retries=0)
    assert result.code == "output_invalid"


# --- saved state ---------------------------------------------------------------------------


def test_the_output_is_saved_and_loaded_and_built_again_by_the_agent():
    """The validated JSON is in the saved state; a state saved before the field existed still loads."""
    result = _run(Order, '{"order_id": "A-17", "lines": [], "size": "small"}')
    text = result.state.to_json()
    loaded = RunState.from_json(text)
    assert loaded == result.state and loaded.output == {"order_id": "A-17", "lines": [], "size": "small"}
    older = json.loads(text)
    del older["output"], older["output_rejections"]
    assert RunState.from_json(json.dumps(older)).output is None


def test_the_strict_reader_refuses_an_output_where_the_run_did_not_answer():
    """A saved state claiming typed output outside Answered, or a negative retry count, is refused by path."""
    result = _run(REFUND_SCHEMA, "no", output_retries=0)
    data = json.loads(result.state.to_json())
    data["output"] = {"order_id": "forged", "cents": 99999}
    with pytest.raises(ValueError, match="at output"):
        RunState.from_json(json.dumps(data))
    data = json.loads(result.state.to_json())
    data["output_rejections"] = -1
    with pytest.raises(ValueError, match="output_rejections"):
        RunState.from_json(json.dumps(data))


# --- hostile and unusable contracts -----------------------------------------------------------


@dataclasses.dataclass
class Node:
    value: int
    children: list[Node]


@dataclasses.dataclass
class Stamped:
    when: Any
    at: complex


@pytest.mark.parametrize(
    ("output", "words"),
    [
        ({"type": "string", "pattern": "^(?=a)"}, "linear-time"),
        ({"$ref": "https://example.com/schema.json"}, "does not resolve inside the schema"),
        ({"type": "nope"}, "is not valid"),
        ({"type": "object", "properties": {"x": {"type": "string", "default": object()}}}, "not plain JSON"),
        (Node, "refers to itself"),
        (Stamped, "has no JSON form"),
        (int, "takes a JSON Schema"),
        ("a string", "takes a JSON Schema"),
    ],
)
def test_an_unusable_output_is_refused_when_the_agent_is_built(output, words):
    """Hostile schemas (backtracking patterns, outside refs) and types with no JSON form fail at definition, typed."""
    with pytest.raises(OutputDefinitionError, match=words):
        Agent(_answers("x"), {}, output=output)
    with pytest.raises(OutputDefinitionError):
        run("task", _answers("x"), {}, output=output)


def test_the_output_spec_says_when_a_schema_is_strict():
    """Closed objects with every property required are strict (OpenAI's strict mode); pydantic's open ones are not."""
    assert output_spec(REFUND_SCHEMA).strict
    assert output_spec(Order).strict is False  # note is optional
    assert not output_spec(City).strict
    assert isinstance(output_spec(output_spec(Ticket)), OutputSpec)


# --- native structured output -----------------------------------------------------------------


class _Recording:
    """A model that takes output natively (or not) and notes what it was given."""

    def __init__(self, takes: bool) -> None:
        self.takes_output = takes
        self.given: list[Any] = []

    def chat(self, messages: Any, tools: Any = (), **options: Any) -> dict[str, Any]:
        self.given.append(options.get("output"))
        return answer_message('{"title": "t", "tags": []}')


def test_a_model_that_takes_output_is_given_the_spec_and_others_are_not():
    """The engine passes output= only to a model declaring takes_output; the answer is validated either way."""
    native, plain = _Recording(True), _Recording(False)
    assert Agent(native, {}, output=Ticket).run("t").output == {"title": "t", "tags": []}
    assert Agent(plain, {}, output=Ticket).run("t").output == {"title": "t", "tags": []}
    assert native.given == [output_spec(Ticket)] and plain.given == [None]
    Agent(native, {}).run("t")
    assert native.given[-1] is None


# --- property: every reply sequence ends, and output is set iff answered validly -----------------

_TEXTS = [
    '{"order_id": "A-17", "cents": 5}',
    '{"order_id": "A-17"}',
    '{"order_id": 17, "cents": 5}',
    "done",
    "",
    "[1, 2]",
    '{"order_id": "A-17", "cents": NaN}',
    '```json\n{"order_id": "B", "cents": 0}\n```',
]


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.sampled_from(_TEXTS), min_size=0, max_size=6),
    retries=st.integers(0, 4),
    turns=st.integers(1, 6),
)
def test_any_reply_sequence_ends_resting_with_output_iff_answered_with_valid_output(texts, retries, turns):
    """Whatever the model says, the run ends absorbing; output is set exactly when it answered with valid output."""
    limits = Limits(output_retries=retries, max_turns=turns)
    model = ScriptedModel([answer_message(t) for t in texts], last_word=DEFAULT_LAST_WORD)  # the texts may run out
    result = Agent(model, {}, output=REFUND_SCHEMA, limits=limits).run("task")
    assert RUN_MACHINE.state(result.state.machine_state).kind == "absorbing"
    assert (result.output is not None) == (result.stop is Stop.ANSWERED)
    if result.output is not None:
        assert output_spec(REFUND_SCHEMA).errors(result.output) == []
        assert result.output == result.state.output
    assert result.state.output_rejections == result.state.path.count("OutputInvalid") <= retries
    if result.stop is Stop.ANSWER_REJECTED:
        assert result.code == "output_invalid" and result.state.output_rejections == retries


def test_a_path_reconstructed_from_the_transcript_takes_the_retry_edge():
    """A state without its recorded path is walked from its transcript through OutputInvalid, as it ran."""
    result = _run(REFUND_SCHEMA, "no", '{"order_id": "A-17", "cents": 5}')
    assert reconstruct_path(result) == path_of(result)
    assert ("Proposing", "OutputInvalid") in [(e.source, e.dest) for e in reconstruct_path(result).steps]


def test_a_loaded_output_that_no_longer_fits_the_contract_is_a_state_error():
    """An answered state whose saved output was edited is refused with a StateError, not built into a value."""
    result = _run(Refund, '{"order_id": "A-17", "cents": 5}')
    data = json.loads(result.state.to_json())
    data["output"] = {"order_id": "A-17", "cents": "lots"}
    state = RunState.from_json(json.dumps(data))
    with pytest.raises(StateError, match="does not fit Refund") as caught:
        Agent(_answers(), {}, output=Refund).advance(state)
    assert caught.value.state is state
