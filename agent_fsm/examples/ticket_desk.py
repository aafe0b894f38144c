"""
A ticket desk: a conversation with a rule-based policy that searches, shows, closes and deletes tickets.

Closing and deleting are effectful: the secure default refuses them, the
``ask`` gate pauses the run for a human, and :meth:`agent_fsm.Agent.resume`
goes on after the decision. A run has three endings a caller must tell apart, and
each is a typed stop::

    answer  -> answered            code answer   the policy gave its final answer
    guard   -> step_limit          code guard    max_turns model calls were spent (tool_limit if a tool budget is set)
    pause   -> awaiting_approval   code pause    a destructive call waits for a human; ``blocked_on`` names it

The policy knows four intents, as the reference desk does: search, look up,
close (by id, by topic, or "that one") and create; deleting is a fifth.
Creating a ticket is an effect too, but not a destructive one: the ``desk``
gate lets it run and asks a human only before a close or a delete.

:class:`Session` keeps what lives *across* the runs of one conversation:
the history (earlier questions and answers, passed to the next run as
``history``), a memo of effect-free tool results, and a log of every call.
Caching and logging wrap the tool handlers, so the engine's loop stays the
same whatever the session does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from agent_fsm import Agent
from agent_fsm.engine import (
    DecisionPolicy,
    FinalDecision,
    Gate,
    Limits,
    Model,
    RunError,
    RunResult,
    Stop,
    ToolSpec,
    ask_for_effects,
    observations_of,
)
from agent_fsm.examples.tickets import TicketDesk, desk_gate
from agent_fsm.scenarios.environment import Environment

__all__ = [
    "ENDINGS",
    "FINAL",
    "LIMITS",
    "Session",
    "TicketDesk",
    "ToolCallRecord",
    "desk_gate",
    "environment",
    "policy",
    "reply_text",
    "rules",
    "stubborn",
]

LIMITS = Limits(max_turns=6)
"""The loop guard: at most six model calls per question."""

FINAL = FinalDecision()
ENDINGS = {Stop.ANSWERED: "answer", Stop.STEP_LIMIT: "guard", Stop.TOOL_LIMIT: "guard", Stop.AWAITING_APPROVAL: "pause"}
"""The desk's three endings, named as its callers know them."""
SYSTEM_PROMPT = "You run a support ticket desk through the tools below. Closing and deleting tickets need permission."

# --- the policy: a deterministic router behind decide(task, observations) -------

_INTENTS = (
    ("create", re.compile(r"\b(?:create|open|file) (?:a )?(?:new )?ticket (?:about|for|saying) (.+?)[.?!]*$", re.I)),
    ("close_topic", re.compile(r"\bclose (?:the )?ticket about ([\w ]+?)[.?!]*$", re.IGNORECASE)),
    ("close_id", re.compile(r"\bclose (?:ticket )?(TKT-\d+)", re.IGNORECASE)),
    ("close_that", re.compile(r"\bclose (?:that(?: one)?|it)\b", re.IGNORECASE)),
    ("delete_id", re.compile(r"\bdelete (?:ticket )?(TKT-\d+)", re.IGNORECASE)),
    ("show_id", re.compile(r"\b(?:show|look up) (?:ticket )?(TKT-\d+)", re.IGNORECASE)),
    ("search", re.compile(r"\btickets? (?:mention|about|mentioning) ([\w ]+?)[.?!]*$", re.IGNORECASE)),
)


def _intent(task: str, conversation: Sequence[Mapping[str, str]]) -> tuple[str, str]:
    for name, pattern in _INTENTS:
        match = pattern.search(task)
        if match is None:
            continue
        if name != "close_that":
            return name, match.group(1)
        # "close that one": the referent is the ticket the desk last answered about.
        for message in reversed(conversation):
            found = re.findall(r"TKT-\d+", message["content"]) if message["role"] == "assistant" else []
            if found:
                return "close_id", found[0]
        return "unclear", "which ticket do you mean?"
    return "unclear", "I can search, show, create, close or delete tickets."


def _answer(text: str) -> dict[str, str]:
    return {"action": "final", "answer": text}


def _report(observation: dict[str, Any], done: Callable[[dict[str, Any]], str]) -> dict[str, str]:
    if observation["ok"]:
        return _answer(done(observation["result"]))
    ticket_id = (observation["arguments"] or {}).get("ticket_id", "the ticket")
    return _answer(f"{ticket_id} was left as it was: {observation['result']}")


def rules(
    task: str, observations: list[dict[str, Any]], conversation: Sequence[Mapping[str, str]] = ()
) -> dict[str, Any]:
    """Route the question to a plan and use the number of observations as the step in it."""
    intent, arg = _intent(task, conversation)
    n = len(observations)
    if intent == "unclear":
        return _answer(arg[0].upper() + arg[1:])
    if intent == "search":
        if n == 0:
            return {"action": "search_tickets", "query": arg}
        hits = observations[0]["result"] if observations[0]["ok"] else []
        if not hits:
            return _answer(f"No open ticket mentions {arg!r}.")
        return _answer(f"Open tickets about {arg}: " + "; ".join(f"{t['id']} ({t['subject']})" for t in hits) + ".")
    if intent == "create":
        if n == 0:
            return {"action": "create_ticket", "subject": arg[0].upper() + arg[1:]}
        if observations[0]["ok"]:
            ticket = observations[0]["result"]
            return _answer(f"Created {ticket['id']}: '{ticket['subject']}'.")
        return _answer(f"No ticket was created: {observations[0]['result']}")
    if intent == "show_id":
        if n == 0:
            return {"action": "get_ticket", "ticket_id": arg}
        return _report(observations[0], lambda t: f"{t['id']} is {t['status']}: {t['subject']}.")
    if intent == "close_topic":
        if n == 0:
            return {"action": "search_tickets", "query": arg}
        if n == 1:
            hits = observations[0]["result"] if observations[0]["ok"] else []
            if not hits:
                return _answer(f"No open ticket found about {arg!r}.")
            return {"action": "close_ticket", "ticket_id": hits[0]["id"]}
        return _report(observations[1], lambda t: f"Closed {t['id']}: '{t['subject']}'.")
    action = "close_ticket" if intent == "close_id" else "delete_ticket"
    if n == 0:
        return {"action": action, "ticket_id": arg}
    verb = "Closed" if action == "close_ticket" else "Deleted"
    return _report(observations[0], lambda t: f"{verb} {t['id']}: '{t['subject']}'.")


def stubborn(
    task: str, observations: list[dict[str, Any]], conversation: Sequence[Mapping[str, str]] = ()
) -> dict[str, Any]:
    """Never satisfied: searches the same words again and again, so only the guard ends it."""
    return {"action": "search_tickets", "query": "login"}


def policy(decide: Callable[..., dict[str, Any]] = rules) -> DecisionPolicy:
    """``decide`` behind the decision interface, with the earlier conversation in view."""
    return DecisionPolicy(decide, final=FINAL, conversation=True)


def environment() -> Environment:
    """A fresh desk: four open tickets, the ``ask`` gate, and the ``rules`` and ``stubborn`` policies."""
    desk = TicketDesk()
    tools = desk.tools()
    return Environment(
        tools=tools,
        effects=desk.effects,
        gates={"ask": ask_for_effects(tools, "is destructive and needs a human's approval"), "desk": desk_gate(tools)},
        models={"rules": policy, "stubborn": lambda: policy(stubborn)},
        checks={
            "tkt3_closed": lambda result: desk.tickets["TKT-3"]["status"] == "closed",
            "all_open": lambda result: all(t["status"] == "open" for t in desk.tickets.values()),
        },
        answer_check=FINAL.check(),
        system_prompt=SYSTEM_PROMPT,
        endings=ENDINGS,
    )


# --- the session: state that outlives one run -------------------------------


@attrs.frozen
class ToolCallRecord:
    """One attempted call of the conversation: which question, which call, what came of it."""

    exchange: int
    call_id: str
    tool: str
    arguments: Any
    kind: str


def _memo_key(name: str, arguments: dict[str, Any]) -> str:
    return f"{name}:{json.dumps(arguments, sort_keys=True)}"


@attrs.define
class Session:
    """
    One conversation with the desk: history, memo and call log carried across runs.

    ``history`` holds the questions and the desk's replies (one user and one
    assistant message per finished exchange); ``memo`` caches effect-free
    results, so asking the same thing twice costs the backend nothing, and is
    emptied by every effect, because a cached search could list a ticket
    that was just closed; ``log`` records every attempted call, whatever its
    outcome. A paused exchange must be decided (:meth:`decide`) before the
    next question.
    """

    desk: TicketDesk = attrs.field(factory=TicketDesk)
    model: Model = attrs.field(factory=policy)
    gate: Gate | None = None
    limits: Limits = LIMITS
    history: list[dict[str, str]] = attrs.field(factory=list)
    memo: dict[str, Any] = attrs.field(factory=dict)
    log: list[ToolCallRecord] = attrs.field(factory=list)
    memo_hits: int = 0
    paused: RunResult | None = None
    _tools: dict[str, ToolSpec] = attrs.field(init=False, repr=False)
    _question: str = attrs.field(init=False, default="", repr=False)

    def __attrs_post_init__(self) -> None:
        self._tools = {
            name: attrs.evolve(spec, handler=self._wrap(name, spec)) for name, spec in self.desk.tools().items()
        }

    @property
    def tools(self) -> dict[str, ToolSpec]:
        """The registry this session runs with: the desk's tools behind the memo."""
        return self._tools

    @property
    def agent(self) -> Agent:
        """The agent every exchange runs and resumes: the session's model, gate and limits over its tools."""
        return Agent(
            self.model,
            self._tools,
            gate=self.gate,
            limits=self.limits,
            system_prompt=SYSTEM_PROMPT,
            answer_check=FINAL.check(),
            endings=ENDINGS,
        )

    def _wrap(self, name: str, spec: ToolSpec) -> Callable[..., Any]:
        def handler(**arguments: Any) -> Any:
            if spec.effectful:
                result = spec.handler(**arguments)
                self.memo.clear()
                return result
            key = _memo_key(name, arguments)
            if key in self.memo:
                self.memo_hits += 1
                return self.memo[key]
            self.memo[key] = spec.handler(**arguments)
            return self.memo[key]

        return handler

    def ask(self, question: str) -> RunResult:
        """
        Run one question of the conversation to an ending or a pause.

        Raises:
            RunError: the previous exchange is still awaiting a human's decision.
        """
        if self.paused is not None:
            raise RunError(
                f"the previous exchange waits for approval of {self.paused.blocked_on!r}; call decide() first"
            )
        self._question = question
        return self._settle(self.agent.run(question, history=self.history))

    def decide(self, approve: bool, reason: str = "") -> RunResult:
        """Approve or reject the call the paused exchange is blocked on, and carry on."""
        if self.paused is None:
            raise RunError("no exchange is awaiting approval")
        return self._settle(self.agent.resume(self.paused.state, approve=approve, reason=reason))

    def _settle(self, result: RunResult) -> RunResult:
        exchange = len(self.history) // 2 + 1
        self.log = [r for r in self.log if r.exchange != exchange]
        for seen in observations_of(result.state.messages):
            self.log.append(ToolCallRecord(exchange, seen["call_id"], seen["action"], seen["arguments"], seen["kind"]))
        if result.stop is Stop.AWAITING_APPROVAL:
            self.paused = result
            return result
        self.paused = None
        self.history += [
            {"role": "user", "content": self._question},
            {"role": "assistant", "content": reply_text(result)},
        ]
        return result


def reply_text(result: RunResult) -> str:
    """What the desk tells the user for any ending; a guard stop is never shown as an answer."""
    if result.stop is Stop.ANSWERED and result.answer is not None:
        fields, _ = FINAL.read(result.answer)
        return fields["answer"] if fields is not None else result.answer
    if result.stop is Stop.AWAITING_APPROVAL and result.blocked_on is not None:
        call = result.blocked_on
        return f"Awaiting approval to run {call.name} with {json.dumps(call.arguments)}."
    return f"Stopped ({result.stop.value}): {result.reason}"
