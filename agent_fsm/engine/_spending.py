"""
What a run spends and may spend: each model call charged from its usage figures, the worst case checked before it,
the next model of a fallback chain admitted, each capped tool's calls counted against its cap.

Rationale: a money budget noticed after the call that broke it is no budget.
So the guard before a model call (``cost_over_budget``, and ``can_fall_back``
before the next model of a chain) prices the worst case: the whole prompt
estimate at the input price and the whole output cap (``max_output_tokens``)
at the output price. After the call the provider's own figures are charged
(the estimates when it reports none), and the difference stays unspent.
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from agent_fsm.engine import _events as events
from agent_fsm.engine._errors import RunError
from agent_fsm.engine._limits import Limits, Price
from agent_fsm.engine._messages import Observation, estimate_tokens
from agent_fsm.engine._models import ModelReply, is_count, model_name
from agent_fsm.engine._tools import ToolCall, measure

if TYPE_CHECKING:
    from agent_fsm.engine._run import RunContext
    from agent_fsm.engine._state import RunState

__all__ = [
    "REPEATED_RESULT",
    "WRAP_UP",
    "WRAP_UP_NOTE",
    "admits",
    "call_spent",
    "cap_refusal",
    "charge",
    "charge_nested",
    "count_rejection",
    "count_result",
    "fall_back",
    "last_turn_due",
    "may_fall_back",
    "no_progress",
    "no_progress_reason",
    "over_budget",
    "price_of",
    "wrap_up_cause",
    "wrap_up_fits",
    "wrapped_for_cost",
    "wrapped_for_time",
    "wrapped_for_tokens",
]


# --- spending ---


def price_of(run: RunContext, name: str | None) -> Price | None:
    """
    The price of the model called ``name`` under the agent's prices (``None``: no prices, nothing is charged).

    Raises:
        RunError: a cost budget without prices, or a model the prices do not name (a set-up mistake: loud).
    """
    prices = run.agent.prices if run.agent is not None else None
    if prices is None:
        if run.limits.max_cost is None:
            return None
        raise RunError("Limits(max_cost=...) needs prices: give the agent prices=Prices(...)", state=run.state)
    price = prices.of(name)
    if price is None:
        raise RunError(
            f"no price for the model {name!r}: add it to Prices(models=...) or give a default", state=run.state
        )
    return price


def over_budget(run: RunContext, model: Any) -> bool:
    """Whether the next call to ``model`` could take the run past ``max_cost``: prompt estimate in, output cap out."""
    return not admits(run, model, run.next_prompt_tokens())


def admits(run: RunContext, model: Any, prompt_tokens: int) -> bool:
    """Whether a call to ``model`` with ``prompt_tokens`` in and the output cap out stays within ``max_cost``."""
    limit, cap = run.limits.max_cost, run.limits.max_output_tokens
    if limit is None:
        return True
    price = price_of(run, model_name(model))
    assert cap is not None and price is not None, "Limits requires max_output_tokens; price_of raises for no price"
    return run.state.usage.cost + price.worst_case(prompt_tokens, cap) <= limit


def may_fall_back(run: RunContext) -> bool:
    """The call failed with a kind the FallbackModel lists, a model is left, and turns, time and cost admit it."""
    state, chain, limits = run.state, run.fallback, run.limits
    fault = state.fault
    if fault is None or chain is None or fault.kind not in chain.on or state.model_attempt + 1 >= len(chain.models):
        return False
    if state.turns >= limits.max_turns or (limits.max_seconds is not None and run.elapsed() >= limits.max_seconds):
        return False
    return limits.max_cost is None or not over_budget(run, chain.models[state.model_attempt + 1])


def fall_back(run: RunContext) -> None:
    """Set the run on to the next model of its chain after a listed failure (the fault is kept in the event)."""
    state = run.state
    fault = state.fault
    assert fault is not None and run.fallback is not None, "entered by can_fall_back only"
    state.fault = None
    state.model_attempt += 1
    if run.outbox is not None:
        attempt = state.model_attempt - 1
        run.post(events.FellBack(run.run_id, time.time(), state.turns, attempt, fault.kind, fault.message))


_ZERO = Decimal(0)


def call_spent(
    reply: ModelReply | None, estimate: int, measured: int, cap: int | None, name: str | None
) -> tuple[str | None, int, int, int]:
    """
    What one model call spent, ``(model, prompt, output, cached)`` in tokens: the reply's figures, else the estimates.

    A figure is taken when the provider reported a count (:func:`is_count`: a whole number up to
    ``MAX_REPORTED``); else the prompt is ``estimate`` and the output the reply's ``measured`` size, at most the
    output ``cap`` (a capped model cannot have written more). Cached tokens are at most the prompt. The price is
    that of the model the reply names, else of ``name`` (the model asked). A pure function: a run's charge and
    an eval's judge take a call's figures by the same rule.
    """
    output = measured if cap is None or measured <= cap else cap
    if reply is None:
        return name, estimate, output, 0
    given = reply.prompt_tokens if is_count(reply.prompt_tokens) else estimate
    if is_count(reply.output_tokens):
        output = reply.output_tokens  # type: ignore[assignment]
    cached = min(reply.cached_tokens, given) if is_count(reply.cached_tokens) else 0  # type: ignore[type-var]
    return (reply.model if isinstance(reply.model, str) else name), given, output, cached  # type: ignore[return-value]


def charge(run: RunContext, reply: ModelReply | None, estimate: int, measured: int, model: Any = None) -> None:
    """
    Add the call just made to the run's usage (see :func:`call_spent`).

    ``model``: the model called, when it is not the run's (a summarizer's call).
    """
    state = run.state
    name = model_name(run.model if model is None else model)
    name, given, output, cached = call_spent(reply, estimate, measured, run.limits.max_output_tokens, name)
    price = price_of(run, name)
    usage = state.usage
    usage.input_tokens += given
    usage.output_tokens += output
    usage.cached_tokens += cached
    cost = _ZERO if price is None else price.cost(given, output, cached)
    if price is not None:
        usage.cost += cost
    if model is None:
        state.model_attempt = 0  # a reply of the run's model: the next turn starts from a chain's primary
    if run.outbox is not None:
        spent, total = format(cost, "f"), format(state.usage.cost, "f")
        run.post(events.Charged(run.run_id, time.time(), state.turns, name, given, output, cached, spent, total))


def cap_refusal(run: RunContext, call: ToolCall) -> str | None:
    """Why ``call`` is refused under its tool's ``max_calls`` (``None``: the tool has no cap, or calls left)."""
    spec = run.tools.get(call.name)
    cap = spec.max_calls if spec is not None else None
    if cap is None or run.state.tool_uses.get(call.name, 0) < cap:
        return None
    return (
        f"not run: {call.name} may be called at most {cap} time(s) in a run and it was; use what it returned,"
        " another tool, or answer"
    )


def charge_nested(state: RunState, child: RunState) -> None:
    """What a child spent, charged to its parent: model calls (with their prompt sizes), attempts, tokens, money."""
    state.turns += child.turns
    state.prompt_token_log.extend(child.prompt_token_log)
    state.tool_attempts += child.tool_attempts
    usage, spent = state.usage, child.usage
    usage.input_tokens += spent.input_tokens
    usage.output_tokens += spent.output_tokens
    usage.cached_tokens += spent.cached_tokens
    usage.cost += spent.cost


# --- the last word ---

WRAP_UP = "wrap_up"
"""The code of a run answered by the wrap-up call (``Limits(wrap_up=True)``), not in the run's normal course."""

WRAP_UP_NOTE = (
    "The budget of this run is spent: this is your last reply and no tools are available. "
    "Give your final answer now, from what you have gathered."
)
"""The message the wrap-up call tells the model the budget is spent with."""


def wrap_up_fits(run: RunContext) -> bool:
    """
    Whether the wrap-up call fits the budgets: its prompt is the transcript and the note, without tool declarations.

    It must fit ``max_prompt_tokens`` and, under a money budget, its worst case what is left (else the last turn
    is a normal one).
    """
    prompt = _wrap_up_prompt(run)
    return prompt <= run.limits.max_prompt_tokens and (run.limits.max_cost is None or admits(run, run.model, prompt))


def _wrap_up_prompt(run: RunContext) -> int:
    """The wrap-up call's prompt estimate: the transcript and the note, without tool declarations."""
    note = {"role": "user", "content": WRAP_UP_NOTE}
    if run.state.messages and run.state.messages[-1] == note:  # sent once already (a wrap-up cancelled in flight)
        return run.state.message_tokens + run.state.usage_offset
    size = estimate_tokens(note) if run.estimator is estimate_tokens else measure(run.estimator, note)
    return run.state.message_tokens + run.state.usage_offset + size


def wrap_up_cause(run: RunContext) -> str | None:
    """
    The budget that admits exactly one more model call, as the code of the stop it would end with (``None``: none).

    Turns: one is left. Money: what is left does not cover both the next normal call's worst case and, after it,
    the wrap-up's, its prompt grown by the average growth per turn so far. Time: less is left than two turns at
    the run's pace so far (seconds spent per model call made), so the turn after the next would likely not be
    admitted. Prompt tokens (unless the agent compacts, which keeps the prompt within its budget itself): the
    next prompt does not fit ``max_prompt_tokens``, or it does but, grown by the average growth, the one after
    it would not.
    """
    state, limits = run.state, run.limits
    if state.turns + 1 == limits.max_turns:
        return "step_limit"
    if limits.max_cost is not None and not _leaves_the_wrap_up(run):
        return "cost_limit"
    left = run.remaining_seconds()
    if left is not None and state.turns and left < 2 * run.elapsed() / state.turns:
        return "time_limit"
    if run.compact is None and _prompt_outgrows(run):
        return "token_limit"
    return None


def _prompt_outgrows(run: RunContext) -> bool:
    """The next prompt passes ``max_prompt_tokens``, or the one after it will at the average growth per turn."""
    upcoming, most = run.next_prompt_tokens(), run.limits.max_prompt_tokens
    return upcoming > most or upcoming + _growth(run, upcoming) > most


def _leaves_the_wrap_up(run: RunContext) -> bool:
    """The next normal call at its worst leaves the wrap-up's worst case one turn of average growth later."""
    price, cap, limit = price_of(run, model_name(run.model)), run.limits.max_output_tokens, run.limits.max_cost
    assert price is not None and cap is not None and limit is not None, "under max_cost only (see admits)"
    upcoming, later = run.next_prompt_tokens(), _wrap_up_prompt(run)
    later += _growth(run, upcoming)
    return run.state.usage.cost + price.worst_case(upcoming, cap) + price.worst_case(later, cap) <= limit


def _growth(run: RunContext, upcoming: int) -> int:
    """
    The prompt's average growth per model call so far, rounded up (0 before the first call, or when it shrank).

    ``upcoming`` is the next prompt's size; rounding up keeps ``n + growth > most`` exact for whole ``n``, ``most``.
    """
    log = run.state.prompt_token_log
    return max(0, -((log[0] - upcoming) // len(log))) if log else 0


def last_turn_due(run: RunContext) -> bool:
    """
    Wrap-up is asked for, a budget admits exactly one more model call (see wrap_up_cause), and that call fits.

    The guards that price the next call (``prompt_over_budget``, ``cost_over_budget``, ``compaction_due``) then
    price the wrap-up, not a normal call with its tool declarations: a normal call the budgets refuse may still
    leave room for the last word.
    """
    return run.limits.wrap_up and wrap_up_cause(run) is not None and wrap_up_fits(run)


def wrapped_for_cost(run: RunContext) -> bool:
    """The wrap-up the money left called proposed a call all the same."""
    return bool(run.state.pending) and run.wrapping == "cost_limit"


def wrapped_for_time(run: RunContext) -> bool:
    """The wrap-up the time left called proposed a call all the same."""
    return bool(run.state.pending) and run.wrapping == "time_limit"


def wrapped_for_tokens(run: RunContext) -> bool:
    """The wrap-up the prompt's growth called proposed a call all the same."""
    return bool(run.state.pending) and run.wrapping == "token_limit"


# --- progress: a run that keeps proposing what was refused, or asking what it was told (O(1) per call) ---


def count_rejection(state: RunState, key: str) -> None:
    """Count the rejection of the proposal fingerprinted ``key``."""
    state.denials[key] = state.denials.get(key, 0) + 1
    recent = state.recent_rejections
    if len(recent) == 2 and key == recent[0] and key != recent[1]:
        state.alternation += 1  # ... A, B, A: the alternation goes on
    elif recent and key != recent[-1]:
        state.alternation = 2  # B after A: an alternation may be starting
    else:
        state.alternation = 1
    state.recent_rejections = [*recent[-1:], key]


REPEATED_RESULT = "repeated_result"
"""The code of a run that ended ``no_progress`` because an allowed call kept returning the same result."""


def count_result(run: RunContext, call: ToolCall, observation: Observation) -> None:
    """
    Count an executed call's result by a digest of the call (name, canonical arguments) and the result.

    O(1) per call, like the rejections; the guard ``result_repeated`` reads
    the flag this leaves. Errors count too: the same failure, again, is no progress.
    Nothing is counted (nor kept) while ``Limits.repeated_results`` is off.
    """
    most = run.limits.repeated_results
    if most is None or observation.kind not in ("result", "error"):
        return
    import hashlib  # loaded by the first executed call, as the call fingerprints are

    text = f"{call.fingerprint()}\x00{observation.wire_content()}"
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass"))
    for part in observation.media:  # two images of one size share a placeholder: their bytes tell them apart
        digest.update(f"\x00{part.get('data') or part.get('url')}".encode())
    key = digest.hexdigest()[:32]
    repeats = run.state.repeats
    if not repeats:  # an empty one may be the value shared by every state saved without counts: never fill it
        run.state.repeats = repeats = {}
    repeats[key] = count = repeats.get(key, 0) + 1
    run.repeating = count >= most


def _repeated(state: RunState, limits: Limits) -> bool:
    return (
        bool(state.recent_rejections) and state.denials.get(state.recent_rejections[-1], 0) >= limits.repeated_denials
    )


def no_progress(state: RunState, limits: Limits) -> bool:
    """The latest rejection crossed a threshold (only it can have: O(1))."""
    return bool(state.recent_rejections) and (_repeated(state, limits) or state.alternation >= limits.oscillation)


def no_progress_reason(state: RunState, limits: Limits, last: object) -> str:
    """Why the run ended ``no_progress``, in words, ending with the last rejection's reason (or the repeated result)."""
    if state.code == REPEATED_RESULT:
        return f"the same call returned the same result {limits.repeated_results} times: {last}"
    if _repeated(state, limits):
        return f"the same rejected proposal came back {limits.repeated_denials} times: {last}"
    return f"two rejected proposals alternated over {state.alternation} consecutive rejections: {last}"
