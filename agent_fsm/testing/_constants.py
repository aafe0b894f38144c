"""
The constants a gate compares against: where a boundary bug lives, so where the kit's values go.

A boundary such as ``hours > 3`` or ``due < CLOSING_DAY`` is read from the
gate's code and from everything that code reaches: the globals it names
(dicts, sets, tuples, enums, other functions), the values it closes over
(lambdas a gate factory wraps, the limits a rule factory baked in), default
arguments, ``functools.partial`` and bound methods, and the attributes of a
callable object. Random values almost never land on a boundary; a constant
one level away from the gate's own code is as much a boundary as a literal in it.

Rationale: the walk stops at code that is not the user's (the standard
library, agent_fsm's engine, Hypothesis and the other libraries below), so
that ``Verdict.ask`` does not bring the engine's own numbers in, and it keeps
to a bounded depth and count so that a gate naming a large table stays cheap.
"""

from __future__ import annotations

import datetime as dt
import enum
import functools
import sys
import types
from collections.abc import Iterable, Mapping
from typing import Any

from agent_fsm.engine import Registry
from agent_fsm.testing._formats import is_format

__all__ = ["constants_of", "gate_constants"]

_MAX_DEPTH = 6
"""Hops from the gate (a global, a cell, a container, a function) after which the walk stops."""

_MAX_CONSTANTS = 512
"""More constants than this dilute the search more than they help it."""

_MAX_CONTAINER = 256
"""Larger tables are data, not thresholds: only their first members are read."""

# Libraries whose code is not the user's policy (the engine's examples are user code).
_FOREIGN_ROOTS = frozenset(sys.stdlib_module_names) | {
    "builtins",
    "agent_fsm",
    "hypothesis",
    "attr",
    "attrs",
    "cattrs",
    "transitions",
    "pytest",
    "_pytest",
    "jsonschema",
    "typing_extensions",
}


def _is_foreign(value: Any) -> bool:
    module = getattr(value, "__module__", None)
    if not isinstance(module, str):
        return False
    if module.startswith("agent_fsm.examples"):
        return False
    return module.partition(".")[0] in _FOREIGN_ROOTS


class _Walk:
    """One walk from some roots: the constants found, in the order found, and what was visited."""

    def __init__(self) -> None:
        self.found: list[Any] = []
        self.seen: set[int] = set()

    def extend(self, candidates: Iterable[Any]) -> None:
        for c in candidates:
            if len(self.found) < _MAX_CONSTANTS and not any(c == f and type(c) is type(f) for f in self.found):
                self.found.append(c)

    def scalar(self, value: Any) -> bool:
        """Add a number, string or date with its neighbours; False if ``value`` is none of them."""
        if type(value) is int:
            self.extend([value, value - 1, value + 1])
        elif type(value) is float:
            self.extend([value])
        elif type(value) is str:
            self.extend([value])
            if is_format("date", value):
                self.scalar(dt.date.fromisoformat(value))
        elif type(value) is dt.date:
            days = [d for d in (0, -1, 1) if value.year > 1 or d >= 0]
            self.extend([(value + dt.timedelta(days=d)).isoformat() for d in days])
        elif type(value) is dt.datetime:
            self.extend([value.isoformat()])
            self.scalar(value.date())
        else:
            return False
        return True

    def visit(self, value: Any, depth: int) -> None:
        if value is None or isinstance(value, bool) or depth > _MAX_DEPTH or self.scalar(value):
            return
        if isinstance(value, enum.Enum):
            self.visit(type(value), depth)
            return
        if id(value) in self.seen:
            return
        self.seen.add(id(value))
        if isinstance(value, type):
            if issubclass(value, enum.Enum):
                for member in list(value)[:_MAX_CONTAINER]:
                    self.visit(member.value, depth + 1)
            return  # other classes are read attribute by attribute, as code names them (see code())
        if isinstance(value, Mapping):
            for key, item in list(value.items())[:_MAX_CONTAINER]:
                self.visit(key, depth + 1)
                self.visit(item, depth + 1)
        elif isinstance(value, (set, frozenset)):
            for member in sorted(value, key=repr)[:_MAX_CONTAINER]:
                self.visit(member, depth + 1)
        elif isinstance(value, (tuple, list)):
            for member in value[:_MAX_CONTAINER]:
                self.visit(member, depth + 1)
        elif isinstance(value, functools.partial):
            self.visit(value.func, depth + 1)
            for argument in (*value.args, *value.keywords.values()):
                self.visit(argument, depth + 1)
        elif isinstance(value, types.MethodType):
            self.visit(value.__func__, depth)
            self.visit(value.__self__, depth + 1)
        elif isinstance(value, types.FunctionType):
            self.function(value, depth)
        elif callable(value) and not isinstance(value, types.ModuleType) and not _is_foreign(type(value)):
            # A callable object: its __call__ and the values it holds (limits, rules, tables).
            self.visit(type(value).__call__, depth)
            for attribute in _attributes(value)[:_MAX_CONTAINER]:
                self.visit(attribute, depth + 1)

    def function(self, function: types.FunctionType, depth: int) -> None:
        if _is_foreign(function):
            return
        self.code(function.__code__, function.__globals__, depth)
        for cell in function.__closure__ or ():
            try:
                contents = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            self.visit(contents, depth + 1)
        for default in function.__defaults__ or ():
            self.visit(default, depth + 1)
        for default in (function.__kwdefaults__ or {}).values():
            self.visit(default, depth + 1)

    def code(self, code: types.CodeType, namespace: Mapping[str, Any], depth: int) -> None:
        # A function's first constant is its docstring (or None): prose, not a
        # threshold. A lambda has no docstring, so its first constant is real.
        for index, const in enumerate(code.co_consts):
            if isinstance(const, types.CodeType):
                self.code(const, namespace, depth)
            elif index > 0 or not isinstance(const, str) or code.co_name == "<lambda>":
                self.scalar(const)
        named = [namespace.get(name) for name in code.co_names]
        for value in named:
            self.visit(value, depth + 1)
        # ``config.LIMITS[...]`` or ``Policy.LIMIT``: a module or a class of the
        # user's is read for the other names the code uses, not wholesale.
        for holder in named:
            if isinstance(holder, (types.ModuleType, type)) and not _is_foreign(holder) and holder is not None:
                if isinstance(holder, type) and issubclass(holder, enum.Enum):
                    continue
                for name in code.co_names:
                    attribute = getattr(holder, name, None)
                    if attribute is not None and not isinstance(attribute, types.ModuleType):
                        self.visit(attribute, depth + 1)


def _attributes(value: Any) -> list[Any]:
    """The values an object holds, from its ``__dict__`` and its slots."""
    found = list(getattr(value, "__dict__", {}).values())
    for klass in type(value).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(value, name):
                found.append(getattr(value, name))
    return found


def constants_of(*functions: Any) -> tuple[Any, ...]:
    """
    The numbers, strings and dates a gate or predicate compares against, with
    each integer's and each date's neighbours.

    Read from the functions' code (nested functions included, docstrings
    left out) and from everything it reaches: the globals it names (numbers,
    strings, dicts, sets, tuples, lists, enums, other functions of the
    user's, attributes of the user's modules and classes), the values it
    closes over (lambdas a factory wraps included), default arguments,
    ``functools.partial`` and bound methods; for a callable object, its
    ``__call__`` and the values it holds. Code of the standard library, of
    agent_fsm's engine and of the testing libraries is not read. A boundary
    such as ``amount > LIMITS[currency]`` is where an off-by-one lives, and
    random integers almost never land on it. Dates come back as ISO strings,
    the form a tool's ``format: date`` argument takes.
    """
    walk = _Walk()
    for function in functions:
        if function is not None:
            walk.visit(function, 0)
    return tuple(walk.found)


def _property_names(schema: Any) -> set[str]:
    if isinstance(schema, Mapping):
        found = set(schema.get("properties", {})) if isinstance(schema.get("properties"), Mapping) else set()
        for value in schema.values():
            found |= _property_names(value)
        return found
    if isinstance(schema, list):
        return set().union(*map(_property_names, schema)) if schema else set()
    return set()


def gate_constants(tools: Registry, *functions: Any) -> tuple[Any, ...]:
    """
    :func:`constants_of` the functions, less the argument names the registry
    declares: ``call.arguments["due"]`` reads a key, it does not compare against ``"due"``.
    """
    names = {n for tool in tools.values() for n in _property_names(tool.json_schema)} | set(tools)
    return tuple(c for c in constants_of(*functions) if not (isinstance(c, str) and c in names))
