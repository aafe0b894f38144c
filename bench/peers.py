"""
agent_fsm against a minimal bare loop and peer frameworks, on the same scripted work.

Not a test: it prints ratios. Three scripted support-desk scenarios run
through every contestant:

* ``overreach``: the model looks the order up, asks to refund 9999 cents, the
  gate denies, the model asks for 4999, the refund runs, the model answers;
* ``wanderer``: the model repeats one lookup for N turns and the run ends
  ``step_limit``, the prompt size counted incrementally on every turn;
* ``parallel``: one assistant message carries three calls, the middle one
  denied; the model then refunds what is allowed and answers.

The contestants are a minimal bare loop (key and type checks, incremental
token count, no schema library), agent_fsm, raw ``transitions`` on one shared
machine, LangGraph, Burr, pydantic-graph and python-statemachine. Every
hand-written contestant uses the same gate, handlers, parser and token
estimator, and the same states (ready, proposing, executing, denied and the
endings) in its framework's own idiom. Before anything is timed, each one's
ending, effect log, transcript, observations and prompt-size log are checked
against agent_fsm's; a mismatch stops the benchmark.

Timings are medians of interleaved rounds (background load hits every
contestant alike), reported as ratios to the bare loop. Also measured: the
memory a paused run retains, its saved size, ``to_json``/``from_json`` of
10,000 paused runs against plain ``json.dumps``/``json.loads`` of the same
data, ``import agent_fsm`` in a fresh process, and 1000 concurrent runs with
a 5 ms model latency (threads for the sync engines, asyncio for the
async-native ones).

    pip install -e '.[bench]'
    python bench/peers.py            # about 3 minutes
    python bench/peers.py --quick    # about 20 seconds

Peers that are not installed are skipped with a note.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.util
import json
import operator
import os
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Coroutine, Generator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, NamedTuple, TypedDict

from agent_fsm import (
    Limits,
    RunState,
    ScriptedModel,
    Verdict,
    answer_message,
    estimate_tokens,
    function_declarations,
    run,
    tool_call_message,
)
from agent_fsm.examples.support_desk import (
    TASK,
    SupportDesk,
    make_support_desk,
    refund_gate,
)

SYSTEM_PROMPT = "You act only through the tools."
DECLARATIONS = function_declarations(make_support_desk().tools)
# The tool declarations are static data; a hand-written program renders them once.
DECLARATION_TOKENS = sum(estimate_tokens(d) for d in DECLARATIONS)
LATENCY = 0.005  # seconds per model call in the concurrency run


# --- scenarios ---------------------------------------------------------------


def overreach_model() -> ScriptedModel:
    """The demo's model: look up, refund 9999 (denied), refund 4999, answer."""
    return ScriptedModel(
        turns=[
            tool_call_message("call_1", "lookup_order", {"order_id": "A-17"}),
            tool_call_message("call_2", "refund_order", {"order_id": "A-17", "amount_cents": 9999}),
            answer_message("Order A-17 is refunded: 4999 cents, the amount you paid."),
        ],
        reactions={"denied": tool_call_message("call_3", "refund_order", {"order_id": "A-17", "amount_cents": 4999})},
    )


def wanderer_model() -> ScriptedModel:
    """Looks the same order up on every turn, forever."""
    again = tool_call_message("call_w", "lookup_order", {"order_id": "A-17"})
    return ScriptedModel([again], reactions={"order_id": again})


def _parallel(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [c for m in messages for c in m["tool_calls"]]}


def parallel_model() -> ScriptedModel:
    """Three calls in one message (lookup, refund 9999 which is denied, policy), then refund 4999, then answer."""
    return ScriptedModel(
        turns=[
            _parallel(
                tool_call_message("p1", "lookup_order", {"order_id": "A-17"}),
                tool_call_message("p2", "refund_order", {"order_id": "A-17", "amount_cents": 9999}),
                tool_call_message("p3", "read_policy", {}),
            ),
            tool_call_message("p4", "refund_order", {"order_id": "A-17", "amount_cents": 4999}),
            answer_message("Refunded 4999 cents, the amount paid; more needs a manager."),
        ]
    )


def manager_gate(call: Any) -> Verdict:
    """The desk's refund gate, sending what it would deny to a human instead (the run pauses)."""
    verdict = refund_gate(call)
    return Verdict.ask(verdict.reason) if verdict.kind == "deny" else verdict


@dataclass(frozen=True)
class Scenario:
    """A scripted run: its model, budgets and gate."""

    key: str
    title: str
    model: Callable[[], ScriptedModel]
    limits: Limits
    gate: Callable[[Any], Verdict] = refund_gate


def scenarios(turns: int) -> list[Scenario]:
    """The three timed scenarios, the wanderer running ``turns`` turns."""
    return [
        Scenario("overreach", "over-reach (4 turns)", overreach_model, Limits()),
        Scenario(
            "wanderer", f"wanderer ({turns} turns)", wanderer_model, Limits(max_turns=turns, max_prompt_tokens=10**9)
        ),
        Scenario("parallel", "parallel + denial (3 turns)", parallel_model, Limits()),
    ]


PAUSED = Scenario("paused", "over-reach, paused for approval", overreach_model, Limits(), manager_gate)


class Model:
    """The scripted model behind a sync ``chat`` and an async ``achat``, with an optional latency."""

    __slots__ = ("inner", "latency")

    def __init__(self, inner: ScriptedModel, latency: float = 0.0) -> None:
        self.inner = inner
        self.latency = latency

    def chat(self, messages: Sequence[Any], tools: Sequence[Any] = ()) -> Any:
        if self.latency:
            time.sleep(self.latency)
        return self.inner.chat(messages, tools)

    async def achat(self, messages: Sequence[Any], tools: Sequence[Any] = ()) -> Any:
        if self.latency:
            await asyncio.sleep(self.latency)
        return self.inner.chat(messages, tools)


@dataclass
class Job:
    """Everything one run needs: a fresh desk (empty effect log), a fresh model, budgets and a gate."""

    model: Model
    desk: SupportDesk
    limits: Limits
    gate: Callable[[Any], Verdict]


def new_job(scenario: Scenario, latency: float = 0.0) -> Job:
    return Job(Model(scenario.model(), latency), make_support_desk(), scenario.limits, scenario.gate)


@dataclass
class Outcome:
    """What is compared across contestants: the ending, the effect log and the whole record of the run."""

    stop: str
    answer: str | None
    messages: list[dict[str, Any]]
    observations: list[tuple[str, bool, str, Any]]
    effects: list[dict[str, Any]]
    prompt_log: list[int]


class Mismatch(AssertionError):
    """A contestant did not do the same work as agent_fsm."""


def verify(reference: Outcome, outcome: Outcome, who: str, scenario: str) -> None:
    """
    Check that ``outcome`` equals agent_fsm's ``reference``, field by field.

    Raises:
        Mismatch: naming the contestant, the scenario, the field and the first difference.
    """
    for name in ("stop", "answer", "effects", "prompt_log", "observations", "messages"):
        want, got = getattr(reference, name), getattr(outcome, name)
        observations = name == "observations"
        if observations:
            want, got = [list(o) for o in want], [list(o) for o in got]
        if want == got:
            continue
        detail = f"agent_fsm {want!r}, {who} {got!r}"
        if isinstance(want, list) and isinstance(got, list):
            index = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
            detail = (
                f"lengths {len(want)} and {len(got)}; first difference at [{index}]: "
                f"agent_fsm {want[index] if index < len(want) else '(none)'!r}, "
                f"{who} {got[index] if index < len(got) else '(none)'!r}"
            )
        raise Mismatch(f"{who} differs from agent_fsm on {scenario}: {name}: {detail}")


# --- the work every hand-written contestant shares ----------------------------------


class Call(NamedTuple):
    """One parsed proposal (``arguments`` is ``None`` when they were not a JSON object)."""

    call_id: str
    name: str
    arguments: dict[str, Any] | None
    raw: str


_ORDER_ID = re.compile(r"^[A-Z]-[0-9]+$")
_CONTRACTS: dict[str, dict[str, type]] = {
    "lookup_order": {"order_id": str},
    "read_policy": {},
    "refund_order": {"order_id": str, "amount_cents": int},
}
_JSON_TYPE = {str: "string", int: "integer"}
_EXPECTED_ERRORS = (KeyError, ValueError, TimeoutError)


def opening() -> tuple[list[dict[str, Any]], int]:
    """The system prompt and the task as the first messages, and their token count."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": TASK}]
    return messages, sum(estimate_tokens(m) for m in messages)


class CallIds:
    """
    The call ids a run's transcript holds: a reused id becomes the first free ``<id>~2``, ``<id>~3`` ...

    agent_fsm keeps call ids unique this way, so every contestant does; a
    counter per id keeps a model that reuses one id every turn from scanning
    all the earlier ones.
    """

    __slots__ = ("next", "used")

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.next: dict[str, int] = {}

    def claim(self, wanted: str) -> str:
        candidate, n = wanted, self.next.get(wanted, 1)
        while candidate in self.used:
            n += 1
            candidate = f"{wanted}~{n}"
        if n > 1:
            self.next[wanted] = n
        self.used.add(candidate)
        return candidate


def parse_reply(reply: Any, turn: int, ids: CallIds) -> tuple[dict[str, Any], list[Call]]:
    """The assistant message to store and its proposals, by key and type checks only; never raises."""
    if not isinstance(reply, dict):
        return {"role": "assistant", "content": str(reply)}, []
    content = reply.get("content")
    message: dict[str, Any] = {"role": "assistant", "content": content if content is None else str(content)}
    raw_calls = reply.get("tool_calls")
    if not raw_calls:
        return message, []
    calls: list[Call] = []
    wire: list[dict[str, Any]] = []
    for index, item in enumerate(raw_calls if isinstance(raw_calls, list) else [raw_calls]):
        item = item if isinstance(item, dict) else {}
        function = item.get("function")
        function = function if isinstance(function, dict) else {}
        call_id = item.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"call_{turn}_{index}"
        call_id = ids.claim(call_id)
        name = function.get("name")
        name = name if isinstance(name, str) else ""
        raw = function.get("arguments")
        arguments: Any = None
        if isinstance(raw, str):
            try:
                arguments = json.loads(raw) if raw.strip() else {}
            except (ValueError, RecursionError):
                arguments = None
        else:
            raw = ""
        calls.append(Call(call_id, name, arguments if isinstance(arguments, dict) else None, raw))
        wire.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}})
    message["tool_calls"] = wire
    return message, calls


def check_arguments(call: Call) -> str | None:
    """The desk's contracts as direct checks: ``None`` when valid, else why not."""
    if call.arguments is None:
        return f"arguments for {call.name or '(no name)'} were not a JSON object: {call.raw!r}"
    contract = _CONTRACTS.get(call.name)
    if contract is None:
        return f"unknown tool: {call.name!r} (available: {', '.join(sorted(_CONTRACTS))})"
    arguments = call.arguments
    problems = [f"{key!r} is a required property" for key in contract if key not in arguments]
    extra = [key for key in arguments if key not in contract]
    if extra:
        problems.append(f"Additional properties are not allowed ({', '.join(map(repr, extra))} were unexpected)")
    for key, kind in contract.items():
        value = arguments.get(key)
        if key in arguments and (not isinstance(value, kind) or isinstance(value, bool)):
            problems.append(f"{key}: {value!r} is not of type {_JSON_TYPE[kind]!r}")
    if call.name == "refund_order" and not problems:
        if not _ORDER_ID.search(arguments["order_id"]):
            problems.append(f"order_id: {arguments['order_id']!r} does not match {_ORDER_ID.pattern!r}")
        if arguments["amount_cents"] < 1:
            problems.append(f"amount_cents: {arguments['amount_cents']!r} is less than the minimum of 1")
    return f"{call.name} arguments rejected: " + "; ".join(problems) if problems else None


def judge_call(call: Call, gate: Callable[[Any], Verdict]) -> tuple[str, str]:
    """``(kind, reason)``: ``invalid`` (contract broken), else the gate's ``allow``, ``denied`` or ``ask``."""
    reason = check_arguments(call)
    if reason is not None:
        return "invalid", reason
    verdict = gate(call)
    return ("denied" if verdict.kind == "deny" else verdict.kind), verdict.reason


def execute_call(call: Call, desk: SupportDesk) -> tuple[str, bool, str, Any]:
    """Run an allowed call's handler; an expected failure becomes an ``error`` observation."""
    try:
        result = desk.tools[call.name].handler(**call.arguments)  # type: ignore[arg-type]
    except _EXPECTED_ERRORS as exc:
        content = exc.args[0] if len(exc.args) == 1 and isinstance(exc.args[0], str) else str(exc)
        return call.call_id, False, "error", content
    return call.call_id, True, "result", result


def tool_message(observation: tuple[str, bool, str, Any]) -> dict[str, Any]:
    call_id, ok, kind, content = observation
    content = json.dumps({"ok": ok, "kind": kind, "content": content})
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def fingerprint(call: Call) -> str:
    return f"{call.name}:{json.dumps(call.arguments, sort_keys=True, separators=(',', ':'))}"


def not_run(call: Call, stop: str) -> tuple[str, bool, str, Any]:
    return call.call_id, False, "denied", f"not run: the run stopped ({stop})"


def tool_budget_spent(attempts: int, limits: Limits) -> bool:
    return limits.max_tool_calls is not None and attempts >= limits.max_tool_calls


# --- contestant: the minimal bare loop ------------------------------------------------


def _bare_core(job: Job) -> Generator[list[dict[str, Any]], Any, dict[str, Any]]:
    """
    The whole run as one loop; it yields the transcript when it needs a reply.

    A generator so that the sync and the async drivers share one body; a
    ``send`` per model turn is all it adds.
    """
    limits, desk, gate = job.limits, job.desk, job.gate
    messages, tokens = opening()
    observations: list[tuple[str, bool, str, Any]] = []
    log: list[int] = []
    denials: dict[str, int] = {}
    turns = attempts = 0
    pending: list[Call] = []
    answer = None
    ids = CallIds()

    def state(stop: str) -> dict[str, Any]:
        return {
            "stop": stop,
            "answer": answer,
            "messages": messages,
            "observations": observations,
            "prompt_log": log,
            "turns": turns,
            "attempts": attempts,
            "tokens": tokens,
            "denials": denials,
            "pending": pending,
        }

    while True:
        if turns >= limits.max_turns:
            return state("step_limit")
        prompt = tokens + DECLARATION_TOKENS
        if prompt > limits.max_prompt_tokens:
            return state("token_limit")
        log.append(prompt)
        turns += 1
        message, pending = parse_reply((yield messages), turns, ids)
        messages.append(message)
        tokens += estimate_tokens(message)
        if not pending:
            answer = message["content"] or ""
            return state("answered")
        while pending:
            call = pending[0]
            if tool_budget_spent(attempts, limits):
                stop = "tool_limit"
                break
            kind, reason = judge_call(call, gate)
            if kind == "ask":
                return state("awaiting_approval")
            if kind == "allow":
                attempts += 1
                observation = execute_call(call, desk)
            else:
                key = fingerprint(call)
                denials[key] = denials.get(key, 0) + 1
                observation = (call.call_id, False, kind, reason)
            observations.append(observation)
            message = tool_message(observation)
            messages.append(message)
            tokens += estimate_tokens(message)
            pending.pop(0)
            if kind != "allow" and denials[key] >= limits.repeated_denials:
                stop = "no_progress"
                break
        else:
            continue
        while pending:  # the run stops: answer the calls it will not judge
            observation = not_run(pending.pop(0), stop)
            observations.append(observation)
            message = tool_message(observation)
            messages.append(message)
            tokens += estimate_tokens(message)
        return state(stop)


def bare_loop(job: Job) -> dict[str, Any]:
    core = _bare_core(job)
    chat = job.model.chat
    try:
        messages = next(core)
        while True:
            messages = core.send(chat(messages, DECLARATIONS))
    except StopIteration as done:
        state: dict[str, Any] = done.value
        return state


async def bare_loop_async(job: Job) -> dict[str, Any]:
    core = _bare_core(job)
    achat = job.model.achat
    try:
        messages = next(core)
        while True:
            messages = core.send(await achat(messages, DECLARATIONS))
    except StopIteration as done:
        state: dict[str, Any] = done.value
        return state


def _bare_outcome(job: Job, state: dict[str, Any]) -> Outcome:
    return Outcome(
        state["stop"], state["answer"], state["messages"], state["observations"], job.desk.effects, state["prompt_log"]
    )


def run_bare(job: Job) -> Outcome:
    return _bare_outcome(job, bare_loop(job))


async def arun_bare(job: Job) -> Outcome:
    return _bare_outcome(job, await bare_loop_async(job))


# --- contestant: agent_fsm ----------------------------------------------------------


def agent_fsm_state(job: Job) -> RunState:
    result = run(TASK, job.model, job.desk.tools, gate=job.gate, limits=job.limits, system_prompt=SYSTEM_PROMPT)
    return result.state


def run_agent_fsm(job: Job) -> Outcome:
    result = run(TASK, job.model, job.desk.tools, gate=job.gate, limits=job.limits, system_prompt=SYSTEM_PROMPT)
    state = result.state
    return Outcome(
        str(result.stop),
        result.answer,
        state.messages,
        [(o.call_id, o.ok, o.kind, o.content) for o in state.observations],
        job.desk.effects,
        state.prompt_token_log,
    )


# --- a mutable run record, for the contestants whose frameworks hold a model object ------


class Record:
    """One run in flight, for raw transitions, python-statemachine and pydantic-graph."""

    __slots__ = (
        "answer",
        "attempts",
        "denials",
        "ids",
        "job",
        "log",
        "machine_state",
        "messages",
        "observations",
        "pending",
        "state",
        "stop",
        "tokens",
        "turns",
        "verdict",
    )

    def __init__(self, job: Job) -> None:
        self.job = job
        self.messages, self.tokens = opening()
        self.observations: list[tuple[str, bool, str, Any]] = []
        self.log: list[int] = []
        self.turns = 0
        self.attempts = 0
        self.denials: dict[str, int] = {}
        self.pending: list[Call] = []
        self.verdict: tuple[str, str] | None = None
        self.answer: str | None = None
        self.stop: str | None = None
        self.ids = CallIds()
        self.machine_state = "Ready"  # raw transitions' model attribute
        self.state: Any = None  # python-statemachine's model attribute

    def outcome(self) -> Outcome:
        assert self.stop is not None, "the run has not ended"
        return Outcome(self.stop, self.answer, self.messages, self.observations, self.job.desk.effects, self.log)

    # guards: pure predicates over the record

    def turn_budget_spent(self) -> bool:
        return self.turns >= self.job.limits.max_turns

    def prompt_over_budget(self) -> bool:
        return self.tokens + DECLARATION_TOKENS > self.job.limits.max_prompt_tokens

    def reply_has_no_calls(self) -> bool:
        return not self.pending

    def tool_budget_spent(self) -> bool:
        return tool_budget_spent(self.attempts, self.job.limits)

    def call_rejected(self) -> bool:
        return self.verdict is not None and self.verdict[0] in ("invalid", "denied")

    def approval_needed(self) -> bool:
        return self.verdict is not None and self.verdict[0] == "ask"

    def call_allowed(self) -> bool:
        return self.verdict is not None and self.verdict[0] == "allow"

    def calls_pending(self) -> bool:
        return bool(self.pending)

    def denial_repeated(self) -> bool:
        threshold = self.job.limits.repeated_denials
        return any(count >= threshold for count in self.denials.values())

    def budget_stop(self) -> str | None:
        """The ending the budgets call for before another model turn, if any."""
        if self.turn_budget_spent():
            return "step_limit"
        if self.prompt_over_budget():
            return "token_limit"
        return None

    # effects

    def begin_turn(self) -> None:
        self.log.append(self.tokens + DECLARATION_TOKENS)
        self.turns += 1

    def take_reply(self, reply: Any) -> None:
        message, self.pending = parse_reply(reply, self.turns, self.ids)
        self.append(message)

    def append(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self.tokens += estimate_tokens(message)

    def judge_head(self) -> None:
        """Judge the head proposal, unless the tool budget is spent (then ``verdict`` stays ``None``)."""
        self.verdict = None
        if self.pending and not self.tool_budget_spent():
            self.verdict = judge_call(self.pending[0], self.job.gate)

    def take_proposal(self) -> None:
        if not self.pending:
            self.begin_turn()
            self.take_reply(self.job.model.chat(self.messages, DECLARATIONS))
        self.judge_head()

    def observe(self, observation: tuple[str, bool, str, Any]) -> None:
        self.observations.append(observation)
        self.append(tool_message(observation))
        self.pending.pop(0)
        self.verdict = None

    def execute_call(self) -> None:
        self.attempts += 1
        self.observe(execute_call(self.pending[0], self.job.desk))

    def record_rejection(self) -> None:
        call = self.pending[0]
        assert self.verdict is not None
        key = fingerprint(call)
        self.denials[key] = self.denials.get(key, 0) + 1
        self.observe((call.call_id, False, self.verdict[0], self.verdict[1]))

    def finish(self, stop: str) -> str:
        """Enter the ending ``stop``: keep the answer, or answer the calls left unjudged."""
        self.stop = stop
        if stop == "answered":
            self.answer = self.messages[-1]["content"] or ""
        elif stop in ("no_progress", "tool_limit"):
            while self.pending:
                self.observe(not_run(self.pending[0], stop))
        return stop


# --- contestant: raw transitions, one machine shared by every run ---------------------

_ENDINGS = {
    "Answered": "answered",
    "StepLimit": "step_limit",
    "TokenLimit": "token_limit",
    "NoProgress": "no_progress",
    "ToolLimit": "tool_limit",
    "AwaitingApproval": "awaiting_approval",
}
_AUTO = {"Ready": "next_turn", "Proposing": "judge", "Executing": "observe", "Denied": "observe"}


@cache
def _transitions_machine() -> Any:
    from transitions import Machine, State

    def ending(stop: str) -> Callable[[Record], None]:
        def enter(record: Record) -> None:
            record.finish(stop)

        return enter

    states = [
        State("Ready"),
        State("Proposing", on_enter=[Record.take_proposal]),
        State("Executing", on_enter=[Record.execute_call]),
        State("Denied", on_enter=[Record.record_rejection]),
        *(State(name, on_enter=[ending(stop)]) for name, stop in _ENDINGS.items()),
    ]
    edges = [
        ("next_turn", "Ready", "StepLimit", Record.turn_budget_spent),
        ("next_turn", "Ready", "TokenLimit", Record.prompt_over_budget),
        ("next_turn", "Ready", "Proposing", None),
        ("judge", "Proposing", "Answered", Record.reply_has_no_calls),
        ("judge", "Proposing", "ToolLimit", Record.tool_budget_spent),
        ("judge", "Proposing", "Denied", Record.call_rejected),
        ("judge", "Proposing", "AwaitingApproval", Record.approval_needed),
        ("judge", "Proposing", "Executing", Record.call_allowed),
        ("observe", "Executing", "Proposing", Record.calls_pending),
        ("observe", "Executing", "Ready", None),
        ("observe", "Denied", "NoProgress", Record.denial_repeated),
        ("observe", "Denied", "Proposing", Record.calls_pending),
        ("observe", "Denied", "Ready", None),
    ]
    return Machine(
        model=None,  # runs are passed to each event, never attached
        states=states,
        transitions=[{"trigger": t, "source": s, "dest": d, "conditions": [g] if g else []} for t, s, d, g in edges],
        initial="Ready",
        auto_transitions=False,
        send_event=False,  # guards and effects receive the record, the trigger's one argument
        model_attribute="machine_state",
        ignore_invalid_triggers=False,
        queued=False,
    )


def run_transitions(job: Job) -> Outcome:
    events = _transitions_machine().events
    record = Record(job)
    while (event := _AUTO.get(record.machine_state)) is not None:
        if not events[event].trigger(record, record):
            raise RuntimeError(f"no edge for {event} from {record.machine_state}")
    return record.outcome()


# --- contestant: python-statemachine ------------------------------------------------

_PSM_AUTO = {"ready": "next_turn", "proposing": "judge", "executing": "observe", "denied": "observe"}


@cache
def _statemachine_class() -> Any:
    from statemachine import State, StateMachine

    class RunChart(StateMachine):
        """The run machine; one instance per run, the record as its model."""

        model: Record

        ready = State(initial=True)
        proposing = State()
        executing = State()
        denied = State()
        answered = State(final=True)
        step_limit = State(final=True)
        token_limit = State(final=True)
        no_progress = State(final=True)
        tool_limit = State(final=True)
        awaiting_approval = State(final=True)

        next_turn = (
            ready.to(step_limit, cond="turn_budget_spent")
            | ready.to(token_limit, cond="prompt_over_budget")
            | ready.to(proposing)
        )
        judge = (
            proposing.to(answered, cond="reply_has_no_calls")
            | proposing.to(tool_limit, cond="tool_budget_spent")
            | proposing.to(denied, cond="call_rejected")
            | proposing.to(awaiting_approval, cond="approval_needed")
            | proposing.to(executing, cond="call_allowed")
        )
        observe = (
            executing.to(proposing, cond="calls_pending")
            | executing.to(ready)
            | denied.to(no_progress, cond="denial_repeated")
            | denied.to(proposing, cond="calls_pending")
            | denied.to(ready)
        )

        def turn_budget_spent(self) -> bool:
            return self.model.turn_budget_spent()

        def prompt_over_budget(self) -> bool:
            return self.model.prompt_over_budget()

        def reply_has_no_calls(self) -> bool:
            return self.model.reply_has_no_calls()

        def tool_budget_spent(self) -> bool:
            return self.model.tool_budget_spent()

        def call_rejected(self) -> bool:
            return self.model.call_rejected()

        def approval_needed(self) -> bool:
            return self.model.approval_needed()

        def call_allowed(self) -> bool:
            return self.model.call_allowed()

        def calls_pending(self) -> bool:
            return self.model.calls_pending()

        def denial_repeated(self) -> bool:
            return self.model.denial_repeated()

        def on_enter_proposing(self) -> None:
            self.model.take_proposal()

        def on_enter_executing(self) -> None:
            self.model.execute_call()

        def on_enter_denied(self) -> None:
            self.model.record_rejection()

        def on_enter_answered(self) -> None:
            self.model.finish("answered")

        def on_enter_step_limit(self) -> None:
            self.model.finish("step_limit")

        def on_enter_token_limit(self) -> None:
            self.model.finish("token_limit")

        def on_enter_no_progress(self) -> None:
            self.model.finish("no_progress")

        def on_enter_tool_limit(self) -> None:
            self.model.finish("tool_limit")

        def on_enter_awaiting_approval(self) -> None:
            self.model.finish("awaiting_approval")

    return RunChart


def run_statemachine(job: Job) -> Outcome:
    record = Record(job)
    chart = _statemachine_class()(model=record)
    while (event := _PSM_AUTO.get(record.state)) is not None:
        chart.send(event)
    return record.outcome()


# --- contestant: LangGraph ----------------------------------------------------------


class GraphState(TypedDict):
    """LangGraph's state: the run's data, messages and logs accumulated by reducers."""

    messages: Annotated[list[dict[str, Any]], operator.add]
    observations: Annotated[list[tuple[str, bool, str, Any]], operator.add]
    prompt_log: Annotated[list[int], operator.add]
    tokens: int
    turns: int
    attempts: int
    denials: dict[str, int]
    pending: list[Call]
    verdict: tuple[str, str] | None
    answer: str | None
    stop: str | None
    limits: Limits
    # One registry per run, updated in place: copying the set on every turn
    # would only add to the framework's cost, not show it.
    ids: CallIds


@dataclass
class GraphContext:
    """What a LangGraph run runs against (never part of its state)."""

    job: Job


def _initial_graph_state(job: Job) -> dict[str, Any]:
    messages, tokens = opening()
    return {
        "messages": messages,
        "observations": [],
        "prompt_log": [],
        "tokens": tokens,
        "turns": 0,
        "attempts": 0,
        "denials": {},
        "pending": [],
        "verdict": None,
        "answer": None,
        "stop": None,
        "limits": job.limits,
        "ids": CallIds(),
    }


def _graph_judge(pending: list[Call], attempts: int, job: Job) -> tuple[str, str] | None:
    if not pending or tool_budget_spent(attempts, job.limits):
        return None
    return judge_call(pending[0], job.gate)


def _graph_reply(state: Any, reply: Any, job: Job) -> dict[str, Any]:
    """The update a model reply makes: the turn counted, the message appended, its calls pending and judged."""
    turns = state["turns"] + 1
    message, pending = parse_reply(reply, turns, state["ids"])
    return {
        "prompt_log": [state["tokens"] + DECLARATION_TOKENS],
        "turns": turns,
        "messages": [message],
        "tokens": state["tokens"] + estimate_tokens(message),
        "pending": pending,
        "verdict": _graph_judge(pending, state["attempts"], job),
    }


def _graph_observe(state: Any, observation: tuple[str, bool, str, Any], **more: Any) -> dict[str, Any]:
    message = tool_message(observation)
    return {
        "observations": [observation],
        "messages": [message],
        "tokens": state["tokens"] + estimate_tokens(message),
        "pending": state["pending"][1:],
        "verdict": None,
        **more,
    }


def _graph_next_turn(state: Any) -> str:
    """Where a run goes between turns: an ending if a budget says so, else the model."""
    limits = state["limits"]
    if state["turns"] >= limits.max_turns:
        return "step_limit"
    if state["tokens"] + DECLARATION_TOKENS > limits.max_prompt_tokens:
        return "token_limit"
    return "propose"


def _graph_after_proposal(state: Any) -> str:
    if not state["pending"]:
        return "answered"
    verdict = state["verdict"]
    if verdict is None:
        return "tool_limit"
    return {"invalid": "deny", "denied": "deny", "ask": "awaiting_approval", "allow": "execute"}[verdict[0]]


def _graph_after_execution(state: Any) -> str:
    return "judge" if state["pending"] else _graph_next_turn(state)


def _graph_after_denial(state: Any) -> str:
    threshold = state["limits"].repeated_denials
    if any(count >= threshold for count in state["denials"].values()):
        return "no_progress"
    return _graph_after_execution(state)


@cache
def _langgraph(asynchronous: bool) -> Any:
    from langgraph.graph import END, START, StateGraph
    from langgraph.runtime import Runtime

    def propose(state: GraphState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
        job = runtime.context.job
        return _graph_reply(state, job.model.chat(state["messages"], DECLARATIONS), job)

    async def apropose(state: GraphState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
        job = runtime.context.job
        return _graph_reply(state, await job.model.achat(state["messages"], DECLARATIONS), job)

    def judge(state: GraphState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
        """The next call of the same reply."""
        job = runtime.context.job
        return {"verdict": _graph_judge(state["pending"], state["attempts"], job)}

    def execute(state: GraphState, runtime: Runtime[GraphContext]) -> dict[str, Any]:
        observation = execute_call(state["pending"][0], runtime.context.job.desk)
        return _graph_observe(state, observation, attempts=state["attempts"] + 1)

    def deny(state: GraphState) -> dict[str, Any]:
        call = state["pending"][0]
        verdict = state["verdict"]
        assert verdict is not None
        key = fingerprint(call)
        denials = {**state["denials"], key: state["denials"].get(key, 0) + 1}
        return _graph_observe(state, (call.call_id, False, verdict[0], verdict[1]), denials=denials)

    def ending(stop: str) -> Any:
        def end(state: GraphState) -> dict[str, Any]:
            update: dict[str, Any] = {"stop": stop}
            if stop == "answered":
                update["answer"] = state["messages"][-1]["content"] or ""
            elif stop in ("no_progress", "tool_limit"):
                closing = [not_run(call, stop) for call in state["pending"]]
                messages = [tool_message(o) for o in closing]
                update.update(
                    observations=closing,
                    messages=messages,
                    pending=[],
                    tokens=state["tokens"] + sum(estimate_tokens(m) for m in messages),
                )
            return update

        return end

    graph = StateGraph(GraphState, context_schema=GraphContext)
    graph.add_node("propose", apropose if asynchronous else propose)
    graph.add_node("judge", judge)
    graph.add_node("execute", execute)
    graph.add_node("deny", deny)
    endings = ("answered", "step_limit", "token_limit", "no_progress", "tool_limit", "awaiting_approval")
    for stop in endings:
        graph.add_node(stop, ending(stop))
        graph.add_edge(stop, END)
    turn = ["propose", "step_limit", "token_limit"]
    graph.add_conditional_edges(START, _graph_next_turn, turn)
    proposal = ["answered", "tool_limit", "deny", "awaiting_approval", "execute"]
    graph.add_conditional_edges("propose", _graph_after_proposal, proposal)
    graph.add_conditional_edges("judge", _graph_after_proposal, proposal)
    graph.add_conditional_edges("execute", _graph_after_execution, ["judge", *turn])
    graph.add_conditional_edges("deny", _graph_after_denial, ["no_progress", "judge", *turn])
    return graph.compile()


def _graph_outcome(job: Job, state: dict[str, Any]) -> Outcome:
    return Outcome(
        state["stop"], state["answer"], state["messages"], state["observations"], job.desk.effects, state["prompt_log"]
    )


def _graph_config(job: Job) -> dict[str, Any]:
    return {"recursion_limit": 4 * job.limits.max_turns + 50}


def run_langgraph(job: Job) -> Outcome:
    state = _langgraph(False).invoke(_initial_graph_state(job), _graph_config(job), context=GraphContext(job))
    return _graph_outcome(job, state)


async def arun_langgraph(job: Job) -> Outcome:
    state = await _langgraph(True).ainvoke(_initial_graph_state(job), _graph_config(job), context=GraphContext(job))
    return _graph_outcome(job, state)


# --- contestant: Burr ---------------------------------------------------------------

_BURR_ENDINGS = ("answered", "step_limit", "token_limit", "no_progress", "tool_limit", "awaiting_approval")


# Burr's State is immutable, and each update deep-copies the fields it
# writes (State.apply_operation): appending one message copies the whole
# transcript, so a Burr run costs O(n^2) in its length. That is measured
# as it is; the wanderer shows it.


@cache
def _burr_graph() -> Any:
    from burr.core import Condition, GraphBuilder, State, action, default

    @action(reads=[], writes=[])
    def ready(state: State[Any]) -> State[Any]:
        """Where a run starts: the budgets are checked on leaving it."""
        return state

    @action(
        reads=["messages", "tokens", "turns", "attempts", "pending", "ids"],
        writes=["messages", "tokens", "turns", "prompt_log", "pending", "verdict"],
    )
    def propose(state: State[Any], job: Job) -> State[Any]:
        pending = state["pending"]
        if not pending:
            turns = state["turns"] + 1
            reply = job.model.chat(state["messages"], DECLARATIONS)
            message, pending = parse_reply(reply, turns, state["ids"])
            state = state.append(prompt_log=state["tokens"] + DECLARATION_TOKENS, messages=message).update(
                turns=turns, tokens=state["tokens"] + estimate_tokens(message), pending=pending
            )
        verdict = None
        if pending and not tool_budget_spent(state["attempts"], job.limits):
            verdict = judge_call(pending[0], job.gate)
        return state.update(verdict=verdict)

    @action(
        reads=["pending", "tokens", "attempts"],
        writes=["observations", "messages", "tokens", "pending", "verdict", "attempts"],
    )
    def execute(state: State[Any], job: Job) -> State[Any]:
        observation = execute_call(state["pending"][0], job.desk)
        message = tool_message(observation)
        return state.append(observations=observation, messages=message).update(
            tokens=state["tokens"] + estimate_tokens(message),
            pending=state["pending"][1:],
            verdict=None,
            attempts=state["attempts"] + 1,
        )

    @action(
        reads=["pending", "tokens", "verdict", "denials"],
        writes=["observations", "messages", "tokens", "pending", "verdict", "denials"],
    )
    def deny(state: State[Any]) -> State[Any]:
        call = state["pending"][0]
        kind, reason = state["verdict"]
        key = fingerprint(call)
        observation = (call.call_id, False, kind, reason)
        message = tool_message(observation)
        return state.append(observations=observation, messages=message).update(
            tokens=state["tokens"] + estimate_tokens(message),
            pending=state["pending"][1:],
            verdict=None,
            denials={**state["denials"], key: state["denials"].get(key, 0) + 1},
        )

    def ending(stop: str) -> Any:
        @action(
            reads=["messages", "pending", "tokens"],
            writes=["stop", "answer", "observations", "messages", "pending", "tokens"],
        )
        def end(state: State[Any]) -> State[Any]:
            state = state.update(stop=stop)
            if stop == "answered":
                return state.update(answer=state["messages"][-1]["content"] or "")
            if stop in ("no_progress", "tool_limit"):
                for call in state["pending"]:
                    observation = not_run(call, stop)
                    message = tool_message(observation)
                    state = state.append(observations=observation, messages=message).update(
                        tokens=state["tokens"] + estimate_tokens(message)
                    )
                state = state.update(pending=[])
            return state

        return end

    def when_(keys: list[str], test: Callable[[Any], bool], name: str) -> Condition:
        return Condition(keys, test, name=name)

    turn_spent = when_(["turns", "limits"], lambda s: s["turns"] >= s["limits"].max_turns, "turn_budget_spent")
    over_budget = when_(
        ["tokens", "limits"],
        lambda s: s["tokens"] + DECLARATION_TOKENS > s["limits"].max_prompt_tokens,
        "prompt_over_budget",
    )
    pending = when_(["pending"], lambda s: bool(s["pending"]), "calls_pending")
    no_calls = when_(["pending"], lambda s: not s["pending"], "reply_has_no_calls")
    no_verdict = when_(["verdict"], lambda s: s["verdict"] is None, "tool_budget_spent")
    rejected = when_(["verdict"], lambda s: s["verdict"][0] in ("invalid", "denied"), "call_rejected")
    ask = when_(["verdict"], lambda s: s["verdict"][0] == "ask", "approval_needed")
    repeated = when_(
        ["denials", "limits"],
        lambda s: any(n >= s["limits"].repeated_denials for n in s["denials"].values()),
        "denial_repeated",
    )

    def next_turn(source: str) -> list[tuple[str, str, Any]]:
        return [(source, "step_limit", turn_spent), (source, "token_limit", over_budget), (source, "propose", default)]

    return (
        GraphBuilder()  # type: ignore[no-untyped-call]
        .with_actions(ready=ready, propose=propose, execute=execute, deny=deny, **{s: ending(s) for s in _BURR_ENDINGS})
        .with_transitions(
            *next_turn("ready"),
            ("propose", "answered", no_calls),
            ("propose", "tool_limit", no_verdict),
            ("propose", "deny", rejected),
            ("propose", "awaiting_approval", ask),
            ("propose", "execute", default),
            ("execute", "propose", pending),
            *next_turn("execute"),
            ("deny", "no_progress", repeated),
            ("deny", "propose", pending),
            *next_turn("deny"),
        )
        .build()
    )


def run_burr(job: Job) -> Outcome:
    from burr.core import ApplicationBuilder

    messages, tokens = opening()
    app: Any = (
        ApplicationBuilder()  # type: ignore[no-untyped-call]
        .with_graph(_burr_graph())
        .with_entrypoint("ready")
        .with_state(
            messages=messages,
            observations=[],
            prompt_log=[],
            tokens=tokens,
            turns=0,
            attempts=0,
            denials={},
            pending=[],
            verdict=None,
            answer=None,
            stop=None,
            limits=job.limits,
            ids=CallIds(),  # updated in place, as LangGraph's: see GraphState
        )
        .build()
    )
    _, _, state = app.run(halt_after=list(_BURR_ENDINGS), inputs={"job": job})
    return Outcome(
        state["stop"], state["answer"], state["messages"], state["observations"], job.desk.effects, state["prompt_log"]
    )


# --- contestant: pydantic-graph ------------------------------------------------------


@cache
def _pydantic_graph() -> Any:
    # The node classes live in this function so that pydantic-graph stays an
    # optional import; their return annotations (the graph's edges) are
    # resolved from these locals, which is what GraphBuilder.node() reads.
    from pydantic_graph import BaseNode, End, GraphBuilder, GraphRunContext
    from pydantic_graph.step import NodeStep

    Context = GraphRunContext[Record, Job]

    def after_observation(record: Record) -> Propose | End[str]:
        if record.pending:
            return Propose()
        stop = record.budget_stop()
        return Propose() if stop is None else End(record.finish(stop))

    @dataclass
    class Ready(BaseNode[Record, Job, str]):
        """Where a run starts: the budgets are checked on leaving it."""

        async def run(self, ctx: Context) -> Propose | End[str]:
            stop = ctx.state.budget_stop()
            return Propose() if stop is None else End(ctx.state.finish(stop))

    @dataclass
    class Propose(BaseNode[Record, Job, str]):
        """The next proposal is taken (asking the model when the reply is used up) and judged."""

        async def run(self, ctx: Context) -> Execute | Deny | End[str]:
            record = ctx.state
            if not record.pending:
                record.begin_turn()
                record.take_reply(await ctx.deps.model.achat(record.messages, DECLARATIONS))
            if not record.pending:
                return End(record.finish("answered"))
            record.judge_head()
            if record.verdict is None:
                return End(record.finish("tool_limit"))
            kind = record.verdict[0]
            if kind == "allow":
                return Execute()
            if kind == "ask":
                return End(record.finish("awaiting_approval"))
            return Deny()

    @dataclass
    class Execute(BaseNode[Record, Job, str]):
        """One allowed call crosses the effect boundary."""

        async def run(self, ctx: Context) -> Propose | End[str]:
            ctx.state.execute_call()
            return after_observation(ctx.state)

    @dataclass
    class Deny(BaseNode[Record, Job, str]):
        """A rejected proposal's reason goes back to the model."""

        async def run(self, ctx: Context) -> Propose | End[str]:
            ctx.state.record_rejection()
            if ctx.state.denial_repeated():
                return End(ctx.state.finish("no_progress"))
            return after_observation(ctx.state)

    builder = GraphBuilder(state_type=Record, deps_type=Job, input_type=Ready, output_type=str)
    builder.add(
        builder.edge_from(builder.start_node).to(NodeStep(Ready)),
        builder.node(Ready),
        builder.node(Propose),
        builder.node(Execute),
        builder.node(Deny),
    )
    return builder.build(), Ready


async def arun_pydantic_graph(job: Job) -> Outcome:
    graph, ready = _pydantic_graph()
    record = Record(job)
    await graph.run(state=record, deps=job, inputs=ready())
    return record.outcome()


# --- the contestants --------------------------------------------------------------------


@dataclass(frozen=True)
class Contestant:
    """One implementation: how it runs synchronously and/or on asyncio, and what it needs installed."""

    name: str
    sync: Callable[[Job], Outcome] | None = None
    asynchronous: Callable[[Job], Coroutine[Any, Any, Outcome]] | None = None
    requires: str | None = None  # the module to import; None: always available
    package: str = ""
    # Async-native frameworks run concurrently on asyncio only, not on threads.
    async_native: bool = False

    @property
    def available(self) -> bool:
        return self.requires is None or importlib.util.find_spec(self.requires) is not None


CONTESTANTS = [
    Contestant("bare loop", run_bare),
    Contestant("bare loop (async)", asynchronous=arun_bare),
    Contestant("agent_fsm", run_agent_fsm),
    Contestant("transitions (shared machine)", run_transitions, requires="transitions", package="transitions"),
    Contestant(
        "LangGraph", run_langgraph, arun_langgraph, requires="langgraph", package="langgraph", async_native=True
    ),
    Contestant("Burr", run_burr, requires="burr", package="apache-burr"),
    Contestant("pydantic-graph", asynchronous=arun_pydantic_graph, requires="pydantic_graph", package="pydantic-graph"),
    Contestant("python-statemachine", run_statemachine, requires="statemachine", package="python-statemachine"),
]
PEERS_PACKAGES = [c.package for c in CONTESTANTS if c.package]


def missing_peers() -> list[str]:
    """The peer packages that are not installed (``pip install -e '.[bench]'`` brings them)."""
    return [c.package for c in CONTESTANTS if not c.available]


def run_once(contestant: Contestant, job: Job, *, use_async: bool = False) -> Outcome:
    """One run of ``job`` by ``contestant`` (its async form when asked or when it has no sync one)."""
    if contestant.sync is not None and not use_async:
        return contestant.sync(job)
    assert contestant.asynchronous is not None
    return asyncio.run(contestant.asynchronous(job))


def reference(scenario: Scenario) -> Outcome:
    return run_agent_fsm(new_job(scenario))


def verify_all(contestants: Sequence[Contestant], scenario: Scenario) -> None:
    """
    Run every contestant (and every async form) once on ``scenario`` and compare it with agent_fsm.

    Raises:
        Mismatch: the first contestant whose ending, effects or record differ.
    """
    want = reference(scenario)
    for contestant in contestants:
        if contestant.sync is not None:
            verify(want, contestant.sync(new_job(scenario)), contestant.name, scenario.title)
        if contestant.asynchronous is not None:
            got = run_once(contestant, new_job(scenario), use_async=True)
            verify(want, got, f"{contestant.name} (async)", scenario.title)


def verify_paused() -> None:
    """The bare loop pauses where agent_fsm does, with the same record and the same call waiting."""
    engine_job, job = new_job(PAUSED), new_job(PAUSED)
    state, bare = agent_fsm_state(engine_job), bare_loop(job)
    if state.machine_state != "AwaitingApproval" or bare["stop"] != "awaiting_approval":
        raise Mismatch(f"both must pause: agent_fsm is in {state.machine_state}, the bare loop ended {bare['stop']}")
    got = Outcome("paused", None, bare["messages"], bare["observations"], job.desk.effects, bare["prompt_log"])
    want = Outcome(
        "paused",
        None,
        state.messages,
        [(o.call_id, o.ok, o.kind, o.content) for o in state.observations],
        engine_job.desk.effects,
        state.prompt_token_log,
    )
    verify(want, got, "bare loop", PAUSED.title)
    head, waiting = state.pending[0], bare["pending"][0]
    if (head.call_id, head.name, head.arguments) != (waiting.call_id, waiting.name, waiting.arguments):
        raise Mismatch(f"bare loop waits on {waiting!r}, agent_fsm on {head!r}")


# --- measurements -------------------------------------------------------------------------


def _time_batch(contestant: Contestant, scenario: Scenario, repeat: int) -> float:
    """Seconds per run over ``repeat`` runs, each on a freshly built desk and model (built untimed)."""
    jobs = [new_job(scenario) for _ in range(repeat)]
    gc.collect()
    if contestant.sync is not None:
        fn = contestant.sync
        start = time.perf_counter()
        for job in jobs:
            fn(job)
        return (time.perf_counter() - start) / repeat
    afn = contestant.asynchronous
    assert afn is not None

    async def batch() -> float:
        begin = time.perf_counter()
        for job in jobs:
            await afn(job)
        return time.perf_counter() - begin

    # One event loop for the batch: its start-up is not a cost of a run.
    return asyncio.run(batch()) / repeat


def time_scenario(
    contestants: Sequence[Contestant], scenario: Scenario, rounds: int, sample: float
) -> tuple[float, dict[str, float]]:
    """
    The bare loop's median seconds per run, and every contestant's median ratio to it.

    A round runs the bare loop, one contestant, the bare loop again, the
    next contestant, and so on (the contestants in an order that rotates
    from round to round). A contestant's ratio in a round is its time over
    the mean of the two bare-loop batches around it, so load that comes and
    goes on a shared machine weighs on both sides of each ratio alike.
    Batches last about ``sample`` seconds.
    """
    base = next(c for c in contestants if c.name == "bare loop")
    others = [c for c in contestants if c is not base]
    repeat = {}
    for contestant in contestants:  # calibrate: enough runs for a batch to last about ``sample`` seconds
        once = min(_time_batch(contestant, scenario, 1) for _ in range(3))
        repeat[contestant.name] = max(1, round(sample / max(once, 1e-7)))
    bare: list[float] = []
    ratios: dict[str, list[float]] = {c.name: [] for c in others}
    for index in range(rounds):
        shift = index % len(others)
        before = _time_batch(base, scenario, repeat[base.name])
        bare.append(before)
        for contestant in [*others[shift:], *others[:shift]]:
            took = _time_batch(contestant, scenario, repeat[contestant.name])
            after = _time_batch(base, scenario, repeat[base.name])
            bare.append(after)
            ratios[contestant.name].append(took / ((before + after) / 2))
            before = after
    medians = {name: statistics.median(values) for name, values in ratios.items()}
    return statistics.median(bare), {base.name: 1.0, **medians}


def retained(make: Callable[[], Any], count: int) -> tuple[float, list[Any]]:
    """Bytes still allocated per object made by ``make`` with ``count`` kept alive (tracemalloc), and the objects."""
    make()  # warm every cache first, so only what one run keeps is counted
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [make() for _ in range(count)]
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return (after - before) / count, kept


def measure_memory(count: int) -> tuple[dict[str, float], list[RunState]]:
    """
    Retained bytes and saved size of a paused over-reach run, agent_fsm against the bare loop.

    Returns the figures and agent_fsm's ``count`` paused states (the serialization measure reuses them).
    """

    def engine_paused() -> RunState:
        return agent_fsm_state(new_job(PAUSED))

    def bare_paused() -> dict[str, Any]:
        return bare_loop(new_job(PAUSED))

    engine, states = retained(engine_paused, count)
    bare, kept = retained(bare_paused, count)
    figures = {
        "count": count,
        "engine": engine,
        "bare": bare,
        "engine_saved": len(states[0].to_json()),
        "bare_saved": len(json.dumps(kept[0])),
    }
    return figures, states


def measure_serialization(states: list[RunState], rounds: int) -> dict[str, float]:
    """``to_json``/``from_json`` of paused runs against ``json.dumps``/``json.loads`` of the same data."""
    texts = [s.to_json() for s in states]
    plain = [json.loads(t) for t in texts]  # the very fields to_json writes, as plain data
    if json.dumps(plain[0]) != texts[0] or RunState.from_json(texts[0]) != states[0]:
        raise Mismatch("json.dumps of the plain data must write to_json's text, and from_json restore the state")

    def timed(fn: Callable[[Any], Any], items: list[Any]) -> float:
        gc.collect()
        start = time.perf_counter()
        for item in items:
            fn(item)
        return time.perf_counter() - start

    samples: dict[str, list[float]] = {"to_json": [], "dumps": [], "from_json": [], "loads": []}
    for _ in range(rounds):
        samples["to_json"].append(timed(RunState.to_json, states))
        samples["dumps"].append(timed(json.dumps, plain))
        samples["from_json"].append(timed(RunState.from_json, texts))
        samples["loads"].append(timed(json.loads, texts))
    result: dict[str, float] = {name: statistics.median(values) for name, values in samples.items()}
    # Ratios are paired within a round, as in the timing table.
    result["write"] = statistics.median(a / b for a, b in zip(samples["to_json"], samples["dumps"]))
    result["read"] = statistics.median(a / b for a, b in zip(samples["from_json"], samples["loads"]))
    result["count"] = len(states)
    return result


# Run in a fresh interpreter: the import, then the over-reach run, through public names only.
_FRESH = """
import time
t = time.perf_counter()
import agent_fsm
imported = time.perf_counter() - t
from agent_fsm.examples.support_desk import TASK, make_support_desk, refund_gate
call = agent_fsm.tool_call_message
model = agent_fsm.ScriptedModel(
    [
        call("call_1", "lookup_order", {"order_id": "A-17"}),
        call("call_2", "refund_order", {"order_id": "A-17", "amount_cents": 9999}),
        agent_fsm.answer_message("Refunded 4999 cents."),
    ],
    reactions={"denied": call("call_3", "refund_order", {"order_id": "A-17", "amount_cents": 4999})},
)
assert agent_fsm.run(TASK, model, make_support_desk().tools, gate=refund_gate).stop == "answered"
print(imported, time.perf_counter() - t)
"""


def measure_import(times: int) -> dict[str, float]:
    """Median seconds of ``import agent_fsm`` and of import plus a first run, each in a fresh interpreter."""
    import agent_fsm

    env = dict(os.environ)
    # The subprocess imports the very agent_fsm measured here.
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(agent_fsm.__file__))

    imports, first = [], []
    for _ in range(times):
        out = subprocess.run([sys.executable, "-c", _FRESH], env=env, capture_output=True, text=True, check=True)
        imported, ran = map(float, out.stdout.split())
        imports.append(imported)
        first.append(ran)
    return {
        "import": statistics.median(imports),
        "import_min": min(imports),
        "first_run": statistics.median(first),
        "first_run_min": min(first),
    }


def _check_concurrent(outcome: Outcome) -> None:
    if outcome.stop != "answered" or outcome.effects != [{"order_id": "A-17", "refunded_cents": 4999}]:
        raise Mismatch(f"a concurrent run ended {outcome.stop} with effects {outcome.effects}")


def concurrent_wall(contestant: Contestant, count: int, use_async: bool) -> float:
    """Seconds for ``count`` over-reach runs at once, each model call taking 5 ms."""
    scenario = scenarios(1)[0]
    jobs = [new_job(scenario, LATENCY) for _ in range(count)]
    outcomes: list[Outcome] = []
    gc.collect()
    if use_async:
        afn = contestant.asynchronous
        assert afn is not None

        async def everything() -> float:
            begin = time.perf_counter()
            outcomes.extend(await asyncio.gather(*(afn(job) for job in jobs)))
            return time.perf_counter() - begin

        wall = asyncio.run(everything())
    else:
        fn = contestant.sync
        assert fn is not None
        go = threading.Event()

        def one(job: Job) -> None:
            go.wait()
            outcomes.append(fn(job))

        # Every thread is started and waiting before the clock starts: what is
        # timed is the runs, not the creation of a thousand threads.
        threads = [threading.Thread(target=one, args=(job,)) for job in jobs]
        for thread in threads:
            thread.start()
        start = time.perf_counter()
        go.set()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - start
    if len(outcomes) != count:
        raise Mismatch(f"{contestant.name}: {len(outcomes)} of {count} concurrent runs finished")
    for outcome in outcomes:
        _check_concurrent(outcome)
    return wall


SLOW_WALL = 2.0  # seconds: a contestant this far behind is measured once, not every round


def measure_concurrency(contestants: Sequence[Contestant], count: int, rounds: int) -> list[tuple[str, str, float]]:
    """
    Median wall time of ``count`` concurrent runs: threads for sync contestants, asyncio for async ones.

    A contestant whose first round takes over ``SLOW_WALL`` seconds is not
    run again: it is many times slower than the bare loop, so more rounds
    would only add minutes, not change what the figure says.
    """
    entries = [(c, "threads", False) for c in contestants if c.sync is not None and not c.async_native]
    entries += [(c, "asyncio", True) for c in contestants if c.asynchronous is not None]
    walls: dict[int, list[float]] = {i: [] for i in range(len(entries))}
    for index in range(rounds):
        order = list(range(len(entries)))
        order = order[index % len(order) :] + order[: index % len(order)]
        for i in order:
            if index and walls[i][0] > SLOW_WALL:
                continue
            contestant, _, use_async = entries[i]
            walls[i].append(concurrent_wall(contestant, count, use_async))
    return [(c.name, how, statistics.median(walls[i])) for i, (c, how, _) in enumerate(entries)]


# --- the report ---------------------------------------------------------------------------


def machine_line() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return f"{os.cpu_count()} cores, {model}, Python {platform.python_version()}"


def versions() -> str:
    from importlib.metadata import PackageNotFoundError, version

    found = []
    for package in ["agent_fsm", *PEERS_PACKAGES]:
        with contextlib.suppress(PackageNotFoundError):
            found.append(f"{package} {version(package)}")
    return ", ".join(found)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").strip().split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (about 20 s) with fewer rounds and runs")
    parser.add_argument("--rounds", type=int, help="interleaved rounds per scenario (default 11, quick 3)")
    parser.add_argument("--turns", type=int, help="turns of the wanderer (default 200, quick 50)")
    parser.add_argument("--concurrent", type=int, help="runs at once in the concurrency test (default 1000, quick 200)")
    args = parser.parse_args(argv)
    quick = args.quick
    rounds = args.rounds or (3 if quick else 11)
    turns = args.turns or (50 if quick else 200)
    concurrent = args.concurrent or (200 if quick else 1000)
    sample = 0.01 if quick else 0.02
    paused = 1000 if quick else 10_000

    contestants = [c for c in CONTESTANTS if c.available]
    print(f"machine: {machine_line()}")
    print(f"versions: {versions()}")
    for package in missing_peers():
        print(f"skipped: {package} is not installed (pip install -e '.[bench]')")

    started = time.perf_counter()
    timed = scenarios(turns)
    for scenario in timed:
        verify_all(contestants, scenario)
    verify_paused()
    print("verified: every contestant ends, acts and records exactly as agent_fsm does on every scenario\n")
    # Every framework is imported and warmed up by now. Freezing those
    # long-lived objects keeps each batch's gc.collect() (and the collector's
    # own passes while a batch runs) to what the runs themselves allocate:
    # with the peers loaded, a full collection costs tens of milliseconds.
    gc.collect()
    gc.freeze()

    bare_seconds, ratios = {}, {}
    for scenario in timed:
        bare_seconds[scenario.key], ratios[scenario.key] = time_scenario(contestants, scenario, rounds, sample)
    print(f"[timed: {time.perf_counter() - started:.0f} s]", file=sys.stderr)
    turns_of = {s.key: len(reference(s).prompt_log) for s in timed}
    header = f"{'per run, ratio to the bare loop':32}" + "".join(f"{s.title:>30}" for s in timed)
    print(header)
    print("-" * len(header))
    for contestant in contestants:
        cells = "".join(f"{ratios[s.key][contestant.name]:29.2f}x" for s in timed)
        print(f"{contestant.name:32}{cells}")
    bare_us = "".join(f"{bare_seconds[s.key] / turns_of[s.key] * 1e6:28.1f}µs" for s in timed)
    print(f"{'(bare loop per turn)':32}{bare_us}")
    for peer in ("LangGraph", "Burr", "python-statemachine", "pydantic-graph", "transitions (shared machine)"):
        if peer in ratios[timed[0].key]:
            faster = ", ".join(f"{ratios[s.key][peer] / ratios[s.key]['agent_fsm']:.1f}x" for s in timed)
            print(f"agent_fsm is faster than {peer} by: {faster}")

    memory, states = measure_memory(paused)
    print(f"[memory: {time.perf_counter() - started:.0f} s]", file=sys.stderr)
    print(
        f"\npaused run retained (tracemalloc, {memory['count']:,} kept): agent_fsm {memory['engine']:,.0f} B,"
        f" bare loop {memory['bare']:,.0f} B ({memory['engine'] / memory['bare']:.2f}x);"
        f" {memory['count']:,} paused runs: agent_fsm {memory['engine'] * memory['count'] / 2**20:.1f} MiB,"
        f" bare loop {memory['bare'] * memory['count'] / 2**20:.1f} MiB"
    )
    print(
        f"saved size: agent_fsm to_json {memory['engine_saved']:,} B,"
        f" bare loop json.dumps {memory['bare_saved']:,} B ({memory['engine_saved'] / memory['bare_saved']:.2f}x)"
    )
    ser = measure_serialization(states, 3 if quick else 5)
    del states
    print(
        f"{ser['count']:,.0f} paused runs: to_json {ser['to_json'] * 1e3:.0f} ms,"
        f" json.dumps {ser['dumps'] * 1e3:.0f} ms"
        f" ({ser['write']:.2f}x); from_json {ser['from_json'] * 1e3:.0f} ms,"
        f" json.loads {ser['loads'] * 1e3:.0f} ms ({ser['read']:.2f}x)"
    )
    print(f"[serialization: {time.perf_counter() - started:.0f} s]", file=sys.stderr)
    imported = measure_import(3 if quick else 7)
    print(
        f"fresh process: import agent_fsm {imported['import'] * 1e3:.0f} ms"
        f" (fastest {imported['import_min'] * 1e3:.0f} ms); import and a first over-reach run"
        f" {imported['first_run'] * 1e3:.0f} ms (fastest {imported['first_run_min'] * 1e3:.0f} ms)"
    )

    print(f"[import: {time.perf_counter() - started:.0f} s]", file=sys.stderr)
    walls = measure_concurrency(contestants, concurrent, 1 if quick else 3)
    base = {how: next(w for n, h, w in walls if n.startswith("bare loop") and h == how) for _, how, _ in walls}
    ideal = 4 * LATENCY
    print(f"\n{concurrent} concurrent over-reach runs, 5 ms per model call (4 calls: {ideal * 1e3:.0f} ms at best)")
    print(f"{'contestant':32}{'how':>9}{'wall ms':>10}{'runs/s':>10}{'/ bare (threads)':>18}{'/ bare (same)':>15}")
    for name, how, wall in walls:
        print(
            f"{name:32}{how:>9}{wall * 1e3:10.0f}{concurrent / wall:10.0f}"
            f"{wall / base['threads']:17.2f}x{wall / base[how]:14.2f}x"
        )
    print(f"\n(total {time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
