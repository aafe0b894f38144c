"""
The compact form a paused run's state rests in until it is used again.

A paused run may wait days for a human, and an application may hold thousands of them (an inbox, a queue of
approvals). Most of a paused state is its transcript: a dict per message, per tool call and per function,
each several times the size of its text. At rest the transcript is held pickled (bytes), and the
containers still empty are not held at all; the state's class is then _Resting, whose descriptors for exactly
those fields thaw it, in place, on their first use: the same values again, in a plain RunState. Every other
field (the pause, the pending call, the counters) is read as it stands, without thawing. A live run is never
at rest, so a turn pays nothing for any of this. Which field rests how is declared beside the field
(``rests=`` in its saved form's declaration).
"""

from __future__ import annotations

import functools
import threading
from typing import Any, SupportsIndex

import attrs

from agent_fsm.engine._state import RunState

__all__ = ["rest"]


# Declared beside each field (agent_fsm.engine._saved.Codec.rests): the one held pickled, and those held as None
# while empty (a new one on thawing, as attrs' default makes it).
_RESTS = {f.name: f.metadata["saved"].rests for f in attrs.fields(RunState)}
[_PACKED] = [name for name, how in _RESTS.items() if how == "packed"]
_VACANT = tuple(name for name, how in _RESTS.items() if how == "vacant")
_FACTORIES = {f.name: f.default.factory for f in attrs.fields(RunState) if f.name in _VACANT}  # type: ignore[union-attr]
_SLOTS: dict[str, Any] = {name: RunState.__dict__[name] for name in (_PACKED, *_VACANT)}  # their member descriptors
_messages_slot = _SLOTS[_PACKED]
_VACANT_SLOTS = tuple((_SLOTS[name], _FACTORIES[name]) for name in _VACANT)

_THAWING = threading.Lock()


def rest(state: RunState) -> None:
    """
    Let a paused ``state`` (and the runs nested in it) wait compact, in place, until one of its fields is used.

    Its transcript is held pickled and its empty containers are not held (see the banner above); a transcript
    holding anything but builtin values (an enum, an object of the caller's) is kept as it is.
    Reading or writing ``messages`` or an emptied field, comparing, ``repr`` or pickling the state thaws it.
    """
    if type(state) is not RunState:  # at rest already (or a caller's own subclass, left alone)
        return
    for child in state.children.values():
        rest(child)
    packed = _packed(state.messages)
    vacant = [slot for slot, factory in _VACANT_SLOTS if type(value := slot.__get__(state)) is factory and not value]
    if packed is None and not vacant:
        return
    if packed is not None:
        _messages_slot.__set__(state, packed)
    for slot in vacant:
        slot.__set__(state, None)
    state.__class__ = _Resting


def _packed(messages: Any) -> bytes | None:
    """
    The transcript pickled, or None unless it holds only the builtin types pickle copies exactly (str, int, dict...).

    Pickled, not JSON: made without a check in Python per value, and read back with the very types (a tuple stays
    a tuple). Anything else (an enum, a user's object) is refused, so no class is ever reduced or rebuilt. The
    bytes never leave this state: a resting state pickled or saved is thawed first.
    """
    if type(messages) is not list:
        return None
    pickler, make_buffer, protocol = _plain_pickler()
    buffer = make_buffer()
    try:
        pickler(buffer, protocol).dump(messages)
    except Exception:  # refused (_NotPlain), nesting too deep, anything pickle cannot: the transcript stays as it is
        return None
    packed: bytes = buffer.getvalue()
    return packed


@functools.cache
def _plain_pickler() -> Any:
    """The refusing pickler's class, made on the first pause (so ``import agent_fsm`` does not load pickle)."""
    import io
    import pickle

    class Plain(pickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:  # pickle asks only for what is not an exact builtin
            raise _NotPlain

    return Plain, io.BytesIO, pickle.HIGHEST_PROTOCOL


class _NotPlain(Exception):
    """A value in the transcript is not of a builtin type pickle copies exactly."""


def _thaw(state: RunState) -> None:
    """A resting state as a plain :class:`RunState` again, every value as it was before :func:`rest`."""
    with _THAWING:  # two threads using one resting state thaw it once
        if type(state) is not _Resting:
            return
        for slot, factory in _VACANT_SLOTS:
            try:
                if slot.__get__(state) is None:
                    slot.__set__(state, factory())
            except AttributeError:  # not set yet: a state being built (attrs.evolve of a resting one)
                pass
        try:
            packed = _messages_slot.__get__(state)
        except AttributeError:
            packed = None
        if type(packed) is bytes:
            import pickle

            _messages_slot.__set__(state, pickle.loads(packed))  # bytes rest() made, in this process
        object.__setattr__(state, "__class__", RunState)


def _plain_copy(state: RunState) -> RunState:
    """A plain :class:`RunState` with what a resting ``state`` holds (its transcript unpickled); ``state`` rests on."""
    import pickle

    plain = object.__new__(RunState)
    for name, slot in _FIELD_SLOTS:
        try:
            value = slot.__get__(state)
        except AttributeError:  # not set yet: a state being built
            continue
        if name == _PACKED and type(value) is bytes:
            value = pickle.loads(value)  # bytes rest() made, in this process
        elif value is None and name in _FACTORIES:
            value = _FACTORIES[name]()
        slot.__set__(plain, value)
    return plain


_FIELD_SLOTS = tuple((f.name, RunState.__dict__[f.name]) for f in attrs.fields(RunState))


class _Thawing:
    """A field of a resting state: any use thaws the state, then reads or writes the field's own slot."""

    __slots__ = ("slot",)

    def __init__(self, slot: Any) -> None:
        self.slot = slot

    def __get__(self, state: RunState | None, owner: type | None = None) -> Any:
        if state is None:
            return self
        _thaw(state)
        return self.slot.__get__(state, owner)

    def __set__(self, state: RunState, value: Any) -> None:
        _thaw(state)
        self.slot.__set__(state, value)

    def __delete__(self, state: RunState) -> None:
        _thaw(state)
        self.slot.__delete__(state)


class _Resting(RunState):
    """A :class:`RunState` at rest (see :func:`rest`): the same slots; some fields held compact until used."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        _thaw(self)
        return self == other

    def __repr__(self) -> str:
        # Looked at, not used: a repr (a log line; asyncio's of the finished task that holds the result, which
        # asyncio.run makes on Python 3.11) shows the values and leaves the state at rest.
        return repr(_plain_copy(self))

    def __reduce_ex__(self, protocol: SupportsIndex) -> str | tuple[Any, ...]:
        _thaw(self)
        return self.__reduce_ex__(protocol)


for _name, _slot in _SLOTS.items():
    setattr(_Resting, _name, _Thawing(_slot))
