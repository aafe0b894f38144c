"""
The spec format: a TOML file parsed and validated into a :class:`Scenario`, or a
:class:`SpecFormatError` that names the file and the key.

Loading imports nothing a spec names; the world is resolved later, by the
runner (:mod:`agent_fsm.scenarios.runner`), through its allowlist.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable, Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, cast

import attrs

from agent_fsm.engine import AgentFSMError, Limits, Price, Prices, Stop

__all__ = [
    "MCPUse",
    "ModelSpec",
    "Resume",
    "Scenario",
    "SpecFormatError",
    "discover",
    "load_scenario",
    "scenario_from_data",
]

_TOP_KEYS = {
    "name",
    "description",
    "environment",
    "task",
    "system_prompt",
    "gate",
    "history",
    "limits",
    "model",
    "resume",
    "expect",
    "mcp",
    "prices",
    "tool_caps",
}
_EXPECT_KEYS = {
    "stop",
    "code",
    "answer_contains",
    "effects",
    "turns",
    "tool_attempts",
    "observations",
    "observation_kinds",
    "reason_contains",
    "checks",
    "invariants",
    "cost",
}
BUILTIN_GATES = ("allow_all", "deny_effects", "ask_for_effects")
REFERENCE = re.compile(r"^(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):(?P<attr>[A-Za-z_]\w*)$")
_KINDS = ("result", "invalid", "denied", "error")


class SpecFormatError(AgentFSMError, ValueError):
    """
    A scenario spec cannot be used: unreadable, not TOML, or a key holds the wrong thing.

    ``path`` is the spec file and ``key`` the dotted key at fault (``None``
    when the whole file is at fault), so the message can point at the line to fix.
    """

    def __init__(self, path: str | Path, key: str | None, problem: str) -> None:
        where = f"{path}" if key is None else f"{path}: key {key!r}"
        super().__init__(f"{where}: {problem}")
        self.path = str(path)
        self.key = key
        self.problem = problem


# --- the parsed spec -----------------------------------------------------------


@attrs.frozen
class ModelSpec:
    """
    Either a script (``turns`` plus ``reactions``, as wire messages) or ``name``,
    a key of the environment's ``models``.
    """

    turns: tuple[Mapping[str, Any], ...] = ()
    reactions: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict, hash=False)
    name: str | None = None


@attrs.frozen
class Resume:
    """One human decision applied while the run is awaiting approval."""

    approve: bool
    reason: str = ""


@attrs.frozen
class MCPUse:
    """
    One ``[[mcp]]`` table: the tools of an MCP server the world names, joined to the world's own tools.

    ``server`` is a key of the environment's ``mcp`` table (a spec names a
    server, it never gives a command to run); ``allow`` and ``prefix`` are
    those of :meth:`agent_fsm.mcp.MCPServer.tools`.
    """

    server: str
    allow: tuple[str, ...] | None = None
    prefix: str | None = None


@attrs.frozen
class Scenario:
    """A validated spec: everything needed to run it and judge the outcome."""

    path: str
    name: str
    description: str
    environment: str
    task: str
    model: ModelSpec
    expect: Mapping[str, Any] = attrs.field(hash=False)
    system_prompt: str | None = None
    gate: str | None = None
    history: tuple[Mapping[str, Any], ...] = ()
    limits: Limits = Limits()
    resumes: tuple[Resume, ...] = ()
    mcp: tuple[MCPUse, ...] = ()
    prices: Prices | None = None  # [prices]: the price table the run is charged by
    tool_caps: Mapping[str, int] = attrs.field(factory=dict, hash=False)  # [tool_caps]: max_calls by tool name


# --- loading -------------------------------------------------------------------


class _Reader:
    """Typed access to one spec's tables; every failure names the file and the dotted key."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, key: str | None, problem: str) -> SpecFormatError:
        return SpecFormatError(self.path, key, problem)

    def typed(self, value: Any, key: str, kind: type | tuple[type, ...], what: str) -> Any:
        # bool is an int in Python; a spec that writes `turns = true` is wrong, not 1.
        if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            raise self.fail(key, f"expected {what}, got a boolean")
        if not isinstance(value, kind):
            raise self.fail(key, f"expected {what}, got {_toml_type(value)} {value!r}")
        return value

    def table(self, value: Any, key: str, allowed: Iterable[str] | None = None) -> dict[str, Any]:
        self.typed(value, key, dict, "a table")
        if allowed is not None:
            unknown = sorted(set(value) - set(allowed))
            if unknown:
                raise self.fail(
                    f"{key}.{unknown[0]}" if key else unknown[0], f"unknown key; expected one of {sorted(allowed)}"
                )
        return cast("dict[str, Any]", value)

    def strings(self, value: Any, key: str) -> tuple[str, ...]:
        self.typed(value, key, list, "an array of strings")
        for index, item in enumerate(value):
            self.typed(item, f"{key}[{index}]", str, "a string")
        return tuple(value)


def _toml_type(value: Any) -> str:
    names = {dict: "a table", list: "an array", str: "a string", bool: "a boolean", int: "an integer", float: "a float"}
    return names.get(type(value), type(value).__name__)


def _call_entry(reader: _Reader, value: Any, key: str) -> dict[str, Any]:
    call = reader.table(value, key, ("id", "name", "arguments", "raw_arguments"))
    for field in ("id", "name"):
        if field not in call:
            raise reader.fail(f"{key}.{field}", "missing; a call needs an id and a tool name")
        reader.typed(call[field], f"{key}.{field}", str, "a string")
    if "arguments" in call and "raw_arguments" in call:
        raise reader.fail(f"{key}.raw_arguments", "give either arguments (a table) or raw_arguments (text), not both")
    if "raw_arguments" in call:
        text = reader.typed(call["raw_arguments"], f"{key}.raw_arguments", str, "a string")
    else:
        text = json.dumps(reader.table(call.get("arguments", {}), f"{key}.arguments"))
    return {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": text}}


def _turn(reader: _Reader, value: Any, key: str) -> dict[str, Any]:
    """One scripted assistant message, in wire format."""
    turn = reader.table(value, key, ("call", "calls", "answer", "thought"))
    shapes = [k for k in ("call", "calls", "answer") if k in turn]
    if len(shapes) != 1:
        raise reader.fail(key, f"a turn needs exactly one of call, calls or answer; got {shapes or 'none'}")
    if "answer" in turn:
        if "thought" in turn:
            raise reader.fail(f"{key}.thought", "a thought rides beside a call; an answer is itself the text")
        return {"role": "assistant", "content": reader.typed(turn["answer"], f"{key}.answer", str, "a string")}
    thought = turn.get("thought")
    if thought is not None:
        reader.typed(thought, f"{key}.thought", str, "a string")
    if "call" in turn:
        calls = [_call_entry(reader, turn["call"], f"{key}.call")]
    else:
        items = reader.typed(turn["calls"], f"{key}.calls", list, "an array of calls")
        if not items:
            raise reader.fail(f"{key}.calls", "expected at least one call")
        calls = [_call_entry(reader, item, f"{key}.calls[{i}]") for i, item in enumerate(items)]
    return {"role": "assistant", "content": thought, "tool_calls": calls}


def _model(reader: _Reader, value: Any) -> ModelSpec:
    model = reader.table(value, "model", ("turns", "reactions", "name"))
    if "name" in model:
        if "turns" in model or "reactions" in model:
            raise reader.fail("model.name", "a named model takes no turns or reactions; use one or the other")
        return ModelSpec(name=reader.typed(model["name"], "model.name", str, "a string"))
    if "turns" not in model:
        raise reader.fail(
            "model", 'expected turns = [...] (a scripted model) or name = "..." (a model of the environment)'
        )
    turns = reader.typed(model["turns"], "model.turns", list, "an array of turns")
    reactions = reader.table(model.get("reactions", {}), "model.reactions")
    return ModelSpec(
        turns=tuple(_turn(reader, t, f"model.turns[{i}]") for i, t in enumerate(turns)),
        reactions={needle: _turn(reader, r, f"model.reactions.{needle}") for needle, r in reactions.items()},
    )


def _amount(reader: _Reader, value: Any, key: str) -> Decimal:
    """Money in a spec: decimal text such as "0.25" (TOML has no decimal type, and a float rounds)."""
    text = reader.typed(value, key, str, 'an amount as decimal text, e.g. "0.25"')
    try:
        return Decimal(text)
    except InvalidOperation:
        raise reader.fail(key, f"{text!r} is not a decimal amount") from None


def _prices(reader: _Reader, value: Any) -> Prices | None:
    if value is None:
        return None
    table = reader.table(value, "prices", ("default", "models"))

    def price(item: Any, key: str) -> Price:
        entry = reader.table(item, key, ("input", "output", "cached_input"))
        amounts = {name: _amount(reader, entry[name], f"{key}.{name}") for name in entry}
        try:
            return Price(**amounts)
        except TypeError as exc:
            raise reader.fail(key, f"not a price: {exc}") from exc

    models = reader.table(table.get("models", {}), "prices.models")
    return Prices(
        {name: price(item, f"prices.models.{name}") for name, item in models.items()},
        price(table["default"], "prices.default") if "default" in table else None,
    )


def _tool_caps(reader: _Reader, value: Any) -> dict[str, int]:
    caps = reader.table(value, "tool_caps")
    for name, cap in caps.items():
        reader.typed(cap, f"tool_caps.{name}", int, "a whole number of calls")
    return dict(caps)


def _limits(reader: _Reader, value: Any) -> Limits:
    fields = [f.name for f in attrs.fields(Limits)]
    table = reader.table(value, "limits", fields)
    if "max_cost" in table:
        table = {**table, "max_cost": _amount(reader, table["max_cost"], "limits.max_cost")}
    try:
        return Limits(**table)
    except (TypeError, ValueError) as exc:
        # attrs validators name the field; find it to point at the key.
        bad = next((name for name in table if name in str(exc)), None)
        raise reader.fail(f"limits.{bad}" if bad else "limits", f"not a valid limit: {exc}") from exc


def _expect(reader: _Reader, value: Any) -> dict[str, Any]:
    expect = dict(reader.table(value, "expect", _EXPECT_KEYS))
    if "stop" not in expect:
        raise reader.fail("expect.stop", f"missing; every spec states its ending, one of {[s.value for s in Stop]}")
    stop = reader.typed(expect["stop"], "expect.stop", str, "a string")
    try:
        expect["stop"] = Stop(stop)
    except ValueError:
        raise reader.fail(
            "expect.stop", f"{stop!r} is not a typed ending; expected one of {[s.value for s in Stop]}"
        ) from None
    for key in ("answer_contains", "reason_contains"):
        if key in expect:
            expect[key] = reader.strings(expect[key], f"expect.{key}")
    for key in ("turns", "tool_attempts", "observations"):
        if key in expect:
            reader.typed(expect[key], f"expect.{key}", int, "an integer")
    if "code" in expect:
        reader.typed(expect["code"], "expect.code", str, "a string (the world's ending code)")
    if "effects" in expect:
        reader.typed(expect["effects"], "expect.effects", list, "an array (the exact effect log)")
    if "observation_kinds" in expect:
        kinds = reader.strings(expect["observation_kinds"], "expect.observation_kinds")
        for index, kind in enumerate(kinds):
            if kind not in _KINDS:
                raise reader.fail(
                    f"expect.observation_kinds[{index}]",
                    f"{kind!r} is not an observation kind; expected one of {list(_KINDS)}",
                )
        expect["observation_kinds"] = list(kinds)
    if "checks" in expect:
        for name, truth in reader.table(expect["checks"], "expect.checks").items():
            reader.typed(truth, f"expect.checks.{name}", bool, "true or false")
    if "invariants" in expect:
        reader.typed(expect["invariants"], "expect.invariants", bool, "true or false")
    return expect


def _default_name(path: Path) -> str:
    """The path under the nearest ``specs`` directory, without ``.toml``; else the file's stem."""
    resolved = path.resolve()
    for parent in resolved.parents:
        if parent.name == "specs":
            return resolved.relative_to(parent).with_suffix("").as_posix()
    return path.stem


def load_scenario(path: str | Path) -> Scenario:
    """
    Read and validate one spec file.

    Only the file's shape is checked here; names that need the environment
    (the gate, a named model, checks) are checked by :func:`run_scenario`.

    Raises:
        SpecFormatError: the file is missing or not TOML, or a key is missing,
            unknown or of the wrong type (the message names the file and the key).
    """
    path = Path(path)
    reader = _Reader(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise reader.fail(None, "no such spec file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise reader.fail(None, f"cannot be read: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise reader.fail(None, f"is not valid TOML: {exc}") from exc
    return scenario_from_data(data, path)


def scenario_from_data(data: Mapping[str, Any], path: str | Path = "<spec>") -> Scenario:
    """
    Validate an already parsed spec (the tables ``tomllib`` returns); ``path`` names it in errors.

    Raises:
        SpecFormatError: a key is missing, unknown or of the wrong type.
    """
    path = Path(path)
    reader = _Reader(path)
    if not isinstance(data, dict):
        raise reader.fail(None, f"expected a table of spec keys, got {_toml_type(data)}")
    reader.table(data, "", _TOP_KEYS)
    for key in ("environment", "task", "model", "expect"):
        if key not in data:
            raise reader.fail(key, "missing; a spec needs environment, task, [model] and [expect]")
    text = {
        key: reader.typed(data[key], key, str, "a string")
        for key in ("name", "description", "environment", "task", "system_prompt", "gate")
        if key in data
    }
    history = reader.typed(data.get("history", []), "history", list, "an array of messages")
    for index, message in enumerate(history):
        reader.table(message, f"history[{index}]")
        reader.typed(
            message.get("role"), f"history[{index}].role", str, "a role string (system, user, assistant, tool)"
        )
    resumes = reader.typed(data.get("resume", []), "resume", list, "an array of [[resume]] tables")
    decisions = []
    for index, entry in enumerate(resumes):
        entry = reader.table(entry, f"resume[{index}]", ("approve", "reason"))
        if "approve" not in entry:
            raise reader.fail(f"resume[{index}].approve", "missing; say approve = true or false")
        decisions.append(
            Resume(
                approve=reader.typed(entry["approve"], f"resume[{index}].approve", bool, "true or false"),
                reason=reader.typed(entry.get("reason", ""), f"resume[{index}].reason", str, "a string"),
            )
        )
    servers = []
    for index, entry in enumerate(reader.typed(data.get("mcp", []), "mcp", list, "an array of [[mcp]] tables")):
        entry = reader.table(entry, f"mcp[{index}]", ("server", "allow", "prefix"))
        if "server" not in entry:
            raise reader.fail(f"mcp[{index}].server", "missing; name a server of the environment's mcp table")
        servers.append(
            MCPUse(
                server=reader.typed(entry["server"], f"mcp[{index}].server", str, "a string"),
                allow=reader.strings(entry["allow"], f"mcp[{index}].allow") if "allow" in entry else None,
                prefix=reader.typed(entry["prefix"], f"mcp[{index}].prefix", str, "a string")
                if "prefix" in entry
                else None,
            )
        )
    if not REFERENCE.match(text["environment"]):
        raise reader.fail("environment", f'expected "package.module:function", got {text["environment"]!r}')
    return Scenario(
        path=str(path),
        name=text.get("name", _default_name(path)),
        description=text.get("description", ""),
        environment=text["environment"],
        task=text["task"],
        system_prompt=text.get("system_prompt"),
        gate=text.get("gate"),
        history=tuple(dict(m) for m in history),
        limits=_limits(reader, data.get("limits", {})),
        model=_model(reader, data["model"]),
        resumes=tuple(decisions),
        expect=_expect(reader, data["expect"]),
        mcp=tuple(servers),
        prices=_prices(reader, data.get("prices")),
        tool_caps=_tool_caps(reader, data.get("tool_caps", {})),
    )


def discover(root: str | Path = "specs") -> list[Path]:
    """Every ``*.toml`` spec under ``root`` (or ``root`` itself when it is a file), sorted."""
    root = Path(root)
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*.toml") if p.is_file())
