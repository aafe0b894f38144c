"""
What the engine needs of a model, and the deterministic stand-in that speaks its wire format.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from agent_fsm.engine._errors import ScriptExhausted
from agent_fsm.engine._messages import TokenEstimator, answer_message, assistant_text, estimate_tokens

__all__ = [
    "FALLBACK_KINDS",
    "MAX_REPORTED",
    "FallbackModel",
    "Model",
    "ModelReply",
    "ScriptedModel",
    "is_count",
    "model_estimator",
    "model_name",
    "not_a_message",
]


# --- models ---


@attrs.frozen
class ModelReply:
    """
    An assistant message plus what the provider reported about the call.

    A model may return this instead of a bare message so that the engine can
    replace its token estimate with the provider's real ``prompt_tokens``.

    ``finish`` says how the reply ended, in the adapters' common words:
    ``"stop"`` (a complete answer), ``"tool_calls"``, ``"length"`` (cut off
    at the output token limit), ``"refusal"`` (the model declined; the text
    is in the message's ``refusal`` or ``content``), ``"content_filter"``
    (the provider withheld the reply), or ``None`` when not reported. The
    engine never executes a call from a ``"length"`` reply and does not
    accept a ``"length"``, ``"refusal"`` or ``"content_filter"`` reply as an
    answer (see :class:`agent_fsm.Limits` ``accept_truncated``).

    ``output_tokens`` (the reply's length) and ``cached_tokens`` (how many of
    the prompt's tokens the provider served from its cache) are the usage
    figures a run's cost is computed from; ``model`` names the model that
    answered, which picks its price. ``None``: not reported (the engine
    estimates, or prices by the model asked). ``reasoning_tokens`` is the
    part of ``output_tokens`` the model spent thinking, when the provider says.
    A figure that is not a whole number from 0 to :data:`MAX_REPORTED` (a
    float, text, an infinity, an absurd count) or a ``finish`` or ``model``
    that is not text makes the engine refuse the reply as a ``bad_response``
    provider failure (see :meth:`problem`): taken, it could make the run's
    state unsaveable.
    """

    message: Mapping[str, Any]
    prompt_tokens: int | None = None
    finish: str | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    model: str | None = None
    reasoning_tokens: int | None = None

    def problem(self) -> str | None:
        """Why the engine cannot take what this reply reports (``None``: it can), checked where replies enter."""
        for name in ("prompt_tokens", "output_tokens", "cached_tokens", "reasoning_tokens"):
            value = getattr(self, name)
            if value is not None and not is_count(value):
                return (
                    f"the provider reported {name} = {_shown(value)}: a usage figure must be a whole number"
                    f" from 0 to {MAX_REPORTED:,}"
                )
        for name in ("finish", "model"):
            value = getattr(self, name)
            if value is not None and type(value) is not str:
                return f"the provider reported {name} = {_shown(value)}: it must be text or absent"
        return None


MAX_REPORTED = 10**12
"""The largest usage figure a reply may report: no model call takes or writes a trillion tokens."""


def is_count(value: Any) -> bool:
    """A usage figure the engine takes: a whole number (not a bool) from 0 to :data:`MAX_REPORTED`."""
    return type(value) is int and 0 <= value <= MAX_REPORTED


def _shown(value: Any) -> str:
    """A short, safe rendering of a reported value (a count past Python's 4,300-digit limit has no repr)."""
    if type(value) is int and not -(10**18) < value < 10**18:
        return f"a whole number of {value.bit_length()} bits"
    try:
        return f"{value!r:.60} ({type(value).__name__})"
    except Exception:  # a value whose repr fails: its type says enough
        return f"a {type(value).__name__}"


@runtime_checkable
class Model(Protocol):
    """
    Anything that proposes: transcript in, one assistant message out.

    ``tools`` are the registry's OpenAI-compatible declarations. Raise any
    ``OSError`` (for example :class:`agent_fsm.ProviderFailure`) when the model
    cannot be reached; the run then ends ``provider_error``.
    """

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any: ...


def not_a_message(reply: Any) -> str:
    """
    What a model returned instead of an assistant message, and what to return instead.

    An awaitable means an async model handed to the sync driver; a coroutine
    is closed here so it is not reported as never awaited as well.
    """
    if inspect.isawaitable(reply):
        if inspect.iscoroutine(reply):
            reply.close()
        return "chat() returned an awaitable (an async model); use the async API, or return the message itself"
    if reply is None:
        return "chat() returned None; return an assistant message, e.g. answer_message(text) or a dict with tool_calls"
    return (
        f"chat() returned {type(reply).__name__} {reply!r:.80}; return an assistant message"
        " (a mapping with role, content and/or tool_calls) or a ModelReply"
    )


DEFAULT_LAST_WORD = "That is all I can say on this."


class ScriptedModel:
    """
    A model whose whole behaviour is a visible script.

    ``turns`` are played in order. Before the next turn, if the latest
    message is a tool message whose text contains a key of ``reactions``, the
    reply listed under that key is given in its place (no turn is used up), so
    a script can answer denials and still be fully deterministic. Asked again
    once the script is spent, it raises :class:`agent_fsm.ScriptExhausted`
    (a script that lacks its final answer is a broken test, not an answer),
    unless ``last_word`` is given: then that text is its answer
    (``last_word=DEFAULT_LAST_WORD`` for the closing line earlier versions made up).

    The model keeps no hidden position: which turn comes next is read off the
    transcript it is given, so a run saved, loaded elsewhere and resumed with a
    fresh ``ScriptedModel`` of the same script continues exactly where it was.
    """

    def __init__(
        self,
        turns: Sequence[Mapping[str, Any]],
        reactions: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        last_word: str | None = None,
    ) -> None:
        if last_word is not None and not isinstance(last_word, str):
            raise TypeError(
                f"'last_word' must be a str or None (got {last_word!r} that is a {type(last_word).__name__})"
            )
        self.last_word = last_word
        self.turns = [dict(t) for t in turns]
        self.reactions = {k: dict(v) for k, v in (reactions or {}).items()}
        # Incremental replay cache: the transcript last read, how far, its last
        # message read, and the scripted turns counted so far. Holding the list
        # itself (not its id) means a different transcript is never mistaken for it.
        self._seen: tuple[Any, int, Any, int] = (None, 0, None, 0)

    def __repr__(self) -> str:
        last = "" if self.last_word is None else f", last_word={self.last_word!r}"
        return f"ScriptedModel(turns={self.turns!r}, reactions={self.reactions!r}{last})"

    def _reaction_to(self, message: Mapping[str, Any]) -> dict[str, Any] | None:
        if message.get("role") != "tool":
            return None
        text = message.get("content")
        if type(text) is list:  # a result with images or files: its text part
            text = assistant_text(message)
        if not isinstance(text, str):
            return None
        for needle, reply in self.reactions.items():
            if needle in text:
                return reply
        return None

    def _turns_used(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """How many scripted turns the transcript already holds (reactions excluded)."""
        seen, read, last, used = self._seen
        if seen is not messages or read > len(messages) or (read and messages[read - 1] is not last):
            read, used = 0, 0
        for index in range(max(read, 1), len(messages)):
            if messages[index].get("role") == "assistant" and self._reaction_to(messages[index - 1]) is None:
                used += 1
        self._seen = (messages, len(messages), messages[-1] if messages else None, used)
        return used

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
        """
        The next scripted message, a reaction, or ``last_word`` past the script (the engine copies what it keeps).

        Raises:
            ScriptExhausted: the script is spent and no ``last_word`` was given.
        """
        if messages:
            reaction = self._reaction_to(messages[-1])
            if reaction is not None:
                return reaction
        used = self._turns_used(messages)
        if used < len(self.turns):
            return self.turns[used]
        if self.last_word is None:
            raise ScriptExhausted(
                f"the script's {len(self.turns)} turns are spent and the model was asked for turn {used + 1}:"
                " end the script with its final answer (answer_message(...)), or pass last_word=... to"
                " ScriptedModel if a closing answer past the script is what the test means"
            )
        return answer_message(self.last_word)


def model_name(model: Any) -> str | None:
    """The name a model goes by for its price: its ``model`` attribute when that is a string (as adapters have)."""
    name = getattr(model, "model", None)
    return name if isinstance(name, str) else None


def model_estimator(model: Any) -> TokenEstimator:
    """
    The token estimate ``model`` offers (an adapter's: its provider's rule for images and files), else the default.

    What an :class:`agent_fsm.Agent` built without ``estimator=`` measures its prompts with.
    """
    own = getattr(model, "estimator", None)
    return own if callable(own) else estimate_tokens


def wrapped_estimator(attribute: str) -> property:
    """
    A model wrapper's ``estimator``: the one of the model it holds in ``attribute``, read afresh.

    An agent given the wrapper then measures its prompts as it would the model
    itself (an adapter's provider rule for images and files), not by the default.
    """
    return property(lambda wrapper: model_estimator(getattr(wrapper, attribute)))


def _dearest(estimators: Sequence[TokenEstimator]) -> TokenEstimator:
    def estimate(message: Mapping[str, Any]) -> int:
        return max(estimator(message) for estimator in estimators)

    return estimate


FALLBACK_KINDS = frozenset({"timeout", "transport", "http", "bad_response", "truncated", "disconnected"})
"""The provider failures a :class:`FallbackModel` answers by asking the next model, unless told otherwise."""


class FallbackModel:
    """
    A chain of models: when one fails with a listed kind of provider failure, the next is asked.

    ``on`` names the failure kinds (``ProviderFailure.kind``: ``timeout``,
    ``transport``, ``http``, ``bad_response``, ``truncated``, ``disconnected``,
    ``request_limit``; a bare ``TimeoutError`` is ``timeout``, any other
    ``OSError`` ``transport``); by default every kind but ``request_limit``.
    Under the engine each attempt is a model call of its own, charged to
    the budgets (a turn, the time, the worst-case cost) and visible as the
    edge ``Proposing --judge[can_fall_back]--> Proposing``; the run ends
    ``provider_error`` only when every model failed or the budgets admit no
    further attempt. Called directly, :meth:`chat` tries the chain in order.

    Raises:
        TypeError: fewer than two models, a model without ``chat``/``achat``, or ``on`` not a set of names.
    """

    def __init__(self, primary: Model, *backups: Model, on: Iterable[str] = FALLBACK_KINDS) -> None:
        models = (primary, *backups)
        if len(models) < 2:
            raise TypeError("a FallbackModel needs a primary model and at least one backup")
        for model in models:
            if not callable(getattr(model, "chat", None)) and not callable(getattr(model, "achat", None)):
                raise TypeError(f"every model of a FallbackModel needs chat() or achat(); got {model!r}")
        kinds = frozenset(on) if not isinstance(on, str) else None
        if not kinds or not all(isinstance(kind, str) for kind in kinds):
            raise TypeError(f"'on' must name failure kinds, e.g. {{'timeout', 'http'}} (got {on!r})")
        self.models: tuple[Model, ...] = models
        self.on: frozenset[str] = kinds
        rules = list(dict.fromkeys(model_estimator(model) for model in models))
        self._estimator = rules[0] if len(rules) == 1 else _dearest(rules)

    @property
    def estimator(self) -> TokenEstimator:
        """
        The most conservative of its models' estimates (each message at the largest): any model of the chain may be
        the one asked, so a prompt budget must hold by the dearest rule among them.
        """
        return self._estimator

    def __repr__(self) -> str:
        listed = ", ".join(map(repr, self.models))
        return f"FallbackModel({listed}, on={sorted(self.on)!r})"

    def handles(self, error: OSError) -> bool:
        """Whether ``error`` is a failure of a listed kind (the next model is then asked)."""
        kind = getattr(error, "kind", "timeout" if isinstance(error, TimeoutError) else "transport")
        return kind in self.on

    def chat(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] = ()) -> Any:
        """The first reply of the chain, outside a run (the engine asks the models one by one itself)."""
        for model in self.models[:-1]:
            try:
                return model.chat(messages, tools)
            except OSError as exc:
                if not self.handles(exc):
                    raise
        return self.models[-1].chat(messages, tools)
