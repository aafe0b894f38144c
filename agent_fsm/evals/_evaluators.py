"""
Evaluators: each scores one finished run of a case and says why, as a :class:`Score`.

An evaluator is anything with ``name`` and ``evaluate(run) -> Score``; the
common ones are here. Each reads the run (:class:`Judged`: the result, the
world's effect log, the environment), never the model's own account of
events. A score is a number from 0 to 1 and a pass or fail; the reason is
written for the reader of a failing report.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Literal, Protocol, runtime_checkable

import attrs
import jsonschema

from agent_fsm.engine import (
    Model,
    ModelReply,
    Prices,
    RunResult,
    Stop,
    TokenEstimator,
    ToolCall,
    Usage,
    call_spent,
    estimate_tokens,
    parse_tool_calls,
    to_json_data,
)
from agent_fsm.evals._budget import Ledger
from agent_fsm.scenarios import Environment, Scenario, evaluate_expectations

__all__ = [
    "Budgets",
    "Check",
    "Effects",
    "Ending",
    "Evaluator",
    "Expectations",
    "Judge",
    "JudgeError",
    "Judged",
    "MachinePath",
    "Output",
    "Score",
    "ToolCallPattern",
    "Trajectory",
    "TrajectoryMode",
    "proposed_calls",
]


@attrs.frozen
class Score:
    """
    One evaluator's verdict on one run: ``value`` from 0 to 1, ``passed``, and the ``reason`` in words.

    ``value`` is ``None`` when no score could be given (a judge the eval's
    budget could not pay for); such a verdict does not pass.
    """

    name: str
    value: float | None
    passed: bool
    reason: str

    def to_data(self) -> dict[str, Any]:
        """The JSON form saved in a report."""
        return {"name": self.name, "value": self.value, "passed": self.passed, "reason": self.reason}


@attrs.frozen
class Judged:
    """
    What an evaluator reads: the case's run, the world's effect log, and the world itself.

    ``scenario`` is the spec the agent was built from (its ``[expect]`` table
    when the case was written as a spec); ``resumes_used`` is how many of its
    decisions were applied; ``ledger`` is the eval's shared account, from
    which an evaluator that calls a model (the :class:`Judge`) pays.
    """

    result: RunResult
    effects: Sequence[Any]
    environment: Environment
    scenario: Scenario
    resumes_used: int = 0
    ledger: Ledger | None = attrs.field(default=None, eq=False)


@runtime_checkable
class Evaluator(Protocol):
    """Scores a finished run: ``name`` labels its column in a report."""

    @property
    def name(self) -> str: ...

    def evaluate(self, run: Judged) -> Score: ...


def _verdict(name: str, passed: bool, reason: str, value: float | None = None) -> Score:
    return Score(name, float(passed) if value is None else value, passed, reason)


def _show(value: Any) -> str:
    return json.dumps(to_json_data(value), sort_keys=True, default=str)[:300]


@attrs.frozen
class Ending:
    """The run ended with ``stop`` (and the world's ``code``, when given)."""

    stop: Stop
    code: str | None = None
    name: str = "ending"

    def evaluate(self, run: Judged) -> Score:
        """Pass when the stop (and code) are the ones expected."""
        result = run.result
        held = result.stop is self.stop and (self.code is None or result.code == self.code)
        want = self.stop.value if self.code is None else f"{self.stop.value} ({self.code})"
        return _verdict(self.name, held, f"expected {want}, ended {result.stop.value} ({result.code})")


@attrs.frozen
class Effects:
    """The world's effect log equals ``expected`` (as JSON data), or ``predicate(effects)`` holds."""

    expected: Sequence[Any] | None = None
    predicate: Callable[[Sequence[Any]], bool] | None = attrs.field(default=None, eq=False)
    name: str = "effects"

    def __attrs_post_init__(self) -> None:
        if (self.expected is None) == (self.predicate is None):
            raise TypeError("Effects takes exactly one of expected= (the exact log) or predicate= (a function)")

    def evaluate(self, run: Judged) -> Score:
        """Pass when the log is the expected one, or the predicate accepts it."""
        actual = to_json_data(list(run.effects))
        if self.predicate is not None:
            held = bool(self.predicate(list(run.effects)))
            return _verdict(self.name, held, f"predicate {'held' if held else 'failed'} on {_show(actual)}")
        expected = to_json_data(list(self.expected or ()))
        return _verdict(self.name, actual == expected, f"expected {_show(expected)}, got {_show(actual)}")


@attrs.frozen
class Output:
    """
    The typed output (``RunResult.output``) equals ``equals``, is valid under ``schema``, or passes ``check``.

    Give one of the three. A run with no output fails with that reason.
    """

    equals: Any = None
    schema: Mapping[str, Any] | None = None
    check: Callable[[Any], bool] | None = attrs.field(default=None, eq=False)
    name: str = "output"

    def __attrs_post_init__(self) -> None:
        given = [x for x in (self.equals, self.schema, self.check) if x is not None]
        if len(given) != 1:
            raise TypeError("Output takes exactly one of equals=, schema= or check=")
        if self.schema is not None:
            jsonschema.validators.validator_for(self.schema).check_schema(dict(self.schema))

    def evaluate(self, run: Judged) -> Score:
        """Pass when the output matches the one condition given."""
        output = run.result.output
        if output is None:
            return _verdict(self.name, False, f"no typed output (the run ended {run.result.stop.value})")
        if self.equals is not None:
            return _verdict(self.name, output == self.equals, f"expected {_show(self.equals)}, got {_show(output)}")
        if self.schema is not None:
            data = to_json_data(attrs.asdict(output) if attrs.has(type(output)) else output)
            errors = sorted(jsonschema.Draft202012Validator(self.schema).iter_errors(data), key=str)
            reason = "valid under the schema" if not errors else f"not valid: {errors[0].message}"
            return _verdict(self.name, not errors, reason)
        assert self.check is not None
        held = bool(self.check(output))
        return _verdict(self.name, held, f"check {'held' if held else 'failed'} on {_show(output)}")


# --- trajectories ------------------------------------------------------------------

TrajectoryMode = Literal["strict", "unordered", "subset", "superset"]
_MODES = ("strict", "unordered", "subset", "superset")


@attrs.frozen
class ToolCallPattern:
    """
    An expected tool call: the tool's ``name`` and its ``arguments``.

    ``arguments`` is ``None`` (any), a mapping (the call's arguments equal it
    exactly) or a predicate over the call's arguments.
    """

    name: str
    arguments: Mapping[str, Any] | Callable[[Mapping[str, Any]], bool] | None = attrs.field(default=None, eq=False)

    def matches(self, call: ToolCall) -> bool:
        """Same tool, and arguments equal (or accepted by the predicate)."""
        if call.name != self.name:
            return False
        if self.arguments is None:
            return True
        arguments = call.arguments if call.arguments is not None else {}
        if callable(self.arguments):
            return bool(self.arguments(arguments))
        same: bool = to_json_data(dict(arguments)) == to_json_data(dict(self.arguments))
        return same

    def describe(self) -> str:
        """``name(arguments)`` for a reason."""
        if self.arguments is None:
            return f"{self.name}(...)"
        if callable(self.arguments):
            return f"{self.name}(<{getattr(self.arguments, '__name__', 'predicate')}>)"
        return f"{self.name}({_show(self.arguments)})"


def _patterns(calls: Iterable[ToolCallPattern]) -> tuple[ToolCallPattern, ...]:
    return tuple(calls)


def _names(states: Iterable[str]) -> tuple[str, ...]:
    return tuple(states)


def proposed_calls(result: RunResult) -> list[ToolCall]:
    """Every tool call the run's model proposed, in order (denied and invalid ones included)."""
    return [call for message in result.state.messages for call in parse_tool_calls(message)]


def _matching(patterns: Sequence[ToolCallPattern], calls: Sequence[ToolCall]) -> int:
    """The size of a largest one-to-one matching of patterns to calls (augmenting paths; lists are short)."""
    owner: dict[int, int] = {}

    def place(p: int, seen: set[int]) -> bool:
        for c, call in enumerate(calls):
            if c in seen or not patterns[p].matches(call):
                continue
            seen.add(c)
            if c not in owner or place(owner[c], seen):
                owner[c] = p
                return True
        return False

    return sum(place(p, set()) for p in range(len(patterns)))


@attrs.frozen
class Trajectory:
    """
    The run's proposed tool calls against ``calls``, after agentevals' four modes.

    ``strict``: the same calls in the same order; ``unordered``: the same
    calls in any order; ``subset``: every call the run made is among the
    expected ones (it did no more); ``superset``: every expected call is among
    the run's (it did at least that). Each pattern matches one call at most.
    The value is the share of the larger side matched; passing needs the mode's condition.
    """

    calls: tuple[ToolCallPattern, ...] = attrs.field(converter=_patterns)
    mode: TrajectoryMode = "strict"
    name: str = "trajectory"

    def __attrs_post_init__(self) -> None:
        if self.mode not in _MODES:
            raise ValueError(f"mode must be one of {list(_MODES)} (got {self.mode!r})")

    def evaluate(self, run: Judged) -> Score:
        """Match the run's calls to the expected ones in the chosen mode."""
        calls = proposed_calls(run.result)
        expected = list(self.calls)
        made = ", ".join(f"{c.name}({_show(c.arguments)})" for c in calls) or "no calls"
        want = ", ".join(p.describe() for p in expected) or "no calls"
        if self.mode == "strict":
            prefix = 0
            for pattern, call in zip(expected, calls, strict=False):
                if not pattern.matches(call):
                    break
                prefix += 1
            held = prefix == len(expected) == len(calls)
            value = prefix / max(len(expected), len(calls), 1)
        else:
            matched = _matching(expected, calls)
            held = {
                "unordered": matched == len(expected) == len(calls),
                "subset": matched == len(calls),
                "superset": matched == len(expected),
            }[self.mode]
            value = matched / max(len(expected), len(calls), 1)
        return _verdict(self.name, held, f"{self.mode}: expected [{want}], made [{made}]", value if not held else 1.0)


@attrs.frozen
class MachinePath:
    """
    The machine states the run entered (``RunState.path``): exactly ``states``, or containing them in order.

    ``mode="contains"`` passes when ``states`` appear in the path in this order, others between.
    """

    states: tuple[str, ...] = attrs.field(converter=_names)
    mode: Literal["exact", "contains"] = "exact"
    name: str = "path"

    def evaluate(self, run: Judged) -> Score:
        """Compare the run's path with the states expected."""
        path = list(run.result.state.path)
        if self.mode == "exact":
            held = path == list(self.states)
        else:
            remaining = iter(path)
            held = all(state in remaining for state in self.states)
        return _verdict(self.name, held, f"{self.mode}: expected {list(self.states)}, took {path}")


@attrs.frozen
class Budgets:
    """The run spent at most ``max_turns`` model calls, ``max_tokens`` tokens and ``max_cost`` money."""

    max_turns: int | None = None
    max_tokens: int | None = None
    max_cost: Decimal | None = None
    name: str = "budgets"

    def evaluate(self, run: Judged) -> Score:
        """Pass when every given ceiling holds; the reason lists what was spent."""
        usage, turns = run.result.usage, run.result.state.turns
        over = [
            what
            for what, spent, ceiling in (
                ("turns", turns, self.max_turns),
                ("tokens", usage.tokens, self.max_tokens),
                ("cost", usage.cost, self.max_cost),
            )
            if ceiling is not None and spent > ceiling
        ]
        spent = f"spent {turns} turns, {usage.tokens} tokens, cost {usage.cost}"
        return _verdict(self.name, not over, spent + (f"; over on {', '.join(over)}" if over else ""))


@attrs.frozen
class Expectations:
    """
    The spec's own ``[expect]`` table, judged by the scenario runner: the share of its claims that held.

    Only meaningful for a case written as a spec (or carrying ``scenario=``); with none it passes vacuously.
    """

    name: str = "expect"

    def evaluate(self, run: Judged) -> Score:
        """Judge every claim of ``[expect]``; the reason lists those that failed."""
        if not run.scenario.expect:
            return _verdict(self.name, True, "the case states no [expect] table")
        found = evaluate_expectations(run.scenario, run.result, run.environment, run.resumes_used)
        failed = [e.line() for e in found if not e.held]
        held = len(found) - len(failed)
        reason = f"{held} of {len(found)} held" + ("".join(f"; {line}" for line in failed) if failed else "")
        return _verdict(self.name, not failed, reason, held / max(len(found), 1))


@attrs.frozen
class Check:
    """
    The user's own function of the run: it returns a bool, a number from 0 to 1, a ``(value, reason)`` pair or a Score.

    A number passes at ``threshold`` or above.
    """

    function: Callable[[Judged], Any] = attrs.field(eq=False)
    name: str = "check"
    threshold: float = 1.0

    def evaluate(self, run: Judged) -> Score:
        """Call the function and read its answer as a score."""
        answer = self.function(run)
        reason = ""
        if isinstance(answer, Score):
            return answer
        if isinstance(answer, tuple) and len(answer) == 2:
            answer, reason = answer
        if isinstance(answer, bool):
            return _verdict(self.name, answer, reason or ("held" if answer else "failed"))
        if isinstance(answer, (int, float)) and 0 <= answer <= 1:
            value = float(answer)
            return _verdict(self.name, value >= self.threshold, reason or f"scored {value:.3g}", value)
        raise TypeError(
            f"evaluator {self.name!r} returned {answer!r}; return a bool, a number from 0 to 1,"
            " (value, reason) or a Score"
        )


# --- the judge --------------------------------------------------------------------


class JudgeError(ValueError):
    """The judge model's reply was not the verdict asked for (JSON with ``passed``, ``score`` and ``reason``)."""


def _model_name(model: Any) -> str | None:
    name = getattr(model, "model", None)
    return name if isinstance(name, str) else None


_JUDGE_PROMPT = (
    "You grade one run of an agent against a rubric. Read the task, the agent's final answer and the tool calls it"
    " made. Reply with one JSON object and nothing else: "
    '{"passed": true or false, "score": a number from 0 to 1, "reason": "one sentence"}.'
)


@attrs.frozen
class Judge:
    """
    An LLM judge: ``model`` (any :class:`agent_fsm.Model`: an adapter, a cassette) grades the run by ``rubric``.

    The judge is shown the task, the answer and the calls with their
    outcomes, and must reply with JSON ``{"passed", "score", "reason"}``; a
    reply of any other shape raises :class:`JudgeError` (a judge that cannot
    be read is a set-up problem, not a failing run).

    Its calls are spent from the eval's budget like a run's: one turn each,
    priced by ``prices`` at the worst case (the prompt as ``estimator``
    measures it, the whole ``max_output_tokens`` reply) and checked against
    what remains *before* the call; a call the budget cannot cover is not
    made, and the score is ``None`` with the reason ``"budget spent"``. After
    the call the provider's figures are charged (the estimates where it
    reports none). A money budget needs ``prices`` and ``max_output_tokens``,
    a token budget ``max_output_tokens``: without them the worst case is unknown.
    """

    model: Model = attrs.field(eq=False)
    rubric: str
    name: str = "judge"
    prices: Prices | None = attrs.field(default=None, kw_only=True)
    max_output_tokens: int | None = attrs.field(default=None, kw_only=True)
    estimator: TokenEstimator = attrs.field(default=estimate_tokens, kw_only=True, eq=False)

    def messages(self, run: Judged) -> list[dict[str, Any]]:
        """What the judge is asked: the rubric, then the run as text."""
        outcomes = {o.call_id: o for o in run.result.state.observations}
        lines = []
        for call in proposed_calls(run.result):
            seen = outcomes.get(call.call_id)
            kind = seen.kind if seen is not None else "not run"
            lines.append(f"- {call.name}({_show(call.arguments)}) -> {kind}")
        transcript = "\n".join(lines) or "- no tool calls"
        task = run.scenario.task
        body = (
            f"Rubric: {self.rubric}\n\nTask: {task}\n\nTool calls:\n{transcript}\n\n"
            f"Ending: {run.result.stop.value}\nFinal answer: {run.result.answer or '(none)'}"
        )
        return [{"role": "system", "content": _JUDGE_PROMPT}, {"role": "user", "content": body}]

    def _worst_case(self, ledger: Ledger, prompt: int) -> tuple[int, Decimal]:
        budget, cap = ledger.budget, self.max_output_tokens
        if (budget.max_cost is not None or budget.max_tokens is not None) and cap is None:
            raise ValueError(f"judge {self.name!r}: a money or token budget needs Judge(max_output_tokens=...)")
        if budget.max_cost is None:
            return prompt + (cap or 0), Decimal(0)
        price = None if self.prices is None else self.prices.of(_model_name(self.model))
        if price is None:
            raise ValueError(f"judge {self.name!r}: an eval money budget needs Judge(prices=...) naming its model")
        assert cap is not None
        return prompt + cap, price.worst_case(prompt, cap)

    def _spent(self, reply: Any, message: Any, prompt: int) -> Usage:
        """What the call spent: the provider's figures where reported, else the estimates (as a run's call)."""
        measured = self.estimator(message) if isinstance(message, Mapping) else 0
        reported = reply if isinstance(reply, ModelReply) else None
        name, prompt, output, cached = call_spent(
            reported, prompt, measured, self.max_output_tokens, _model_name(self.model)
        )
        price = None if self.prices is None else self.prices.of(name)
        cost = Decimal(0) if price is None else price.cost(prompt, output, cached)
        return Usage(input_tokens=prompt, output_tokens=output, cached_tokens=cached, cost=cost)

    def evaluate(self, run: Judged) -> Score:
        """Ask the judge model, if what remains of the eval's budget covers the call, and read its verdict."""
        messages = self.messages(run)
        ledger = run.ledger
        prompt = sum(self.estimator(m) for m in messages)
        if ledger is not None and not ledger.affords(*self._worst_case(ledger, prompt)):
            return Score(self.name, None, False, "budget spent")
        extra = {}
        if self.max_output_tokens is not None and getattr(self.model, "takes_output_cap", False):
            extra["max_output_tokens"] = self.max_output_tokens
        reply = self.model.chat(messages, (), **extra)
        message = reply.message if isinstance(reply, ModelReply) else reply
        if ledger is not None:
            ledger.charge(self._spent(reply, message, prompt))
        text = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(text, str):
            raise JudgeError(f"the judge replied without text: {_show(message)}")
        start, end = text.find("{"), text.rfind("}")
        try:
            verdict = json.loads(text[start : end + 1]) if start >= 0 else None
        except ValueError:
            verdict = None
        if (
            not isinstance(verdict, dict)
            or not isinstance(verdict.get("passed"), bool)
            or isinstance(verdict.get("score"), bool)
            or not isinstance(verdict.get("score"), (int, float))
            or not 0 <= verdict["score"] <= 1
        ):
            raise JudgeError(
                f'expected {{"passed": bool, "score": 0..1, "reason": text}}, the judge replied {text[:200]!r}'
            )
        return Score(self.name, float(verdict["score"]), verdict["passed"], str(verdict.get("reason", "")))
