"""
The dataset: cases to score an agent on, written in Python or in the scenario TOML format.

A case is a task for the world's agent (with its history, gate, limits and
model), the evaluators that score each of its runs, and free metadata. In
TOML a case is a scenario spec (see :mod:`agent_fsm.scenarios.format`) with
a few keys of its own beside the spec's: ``cassette`` (a recorded model to
replay), ``metadata``, ``trajectory`` and ``path``. The spec's keys are
validated by the scenario loader itself, so a case reads exactly as a spec.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from agent_fsm.engine import Limits, Model, Prices
from agent_fsm.evals._evaluators import Evaluator, Expectations, MachinePath, ToolCallPattern, Trajectory
from agent_fsm.scenarios import ModelSpec, Resume, Scenario, SpecFormatError, scenario_from_data

__all__ = ["Case", "Dataset", "ModelFactory", "load_dataset"]

ModelFactory = Callable[[int], Model]
"""Builds a case's model for one run; the argument is the run's seed (fixes a scripted or sampled model)."""

_CASE_KEYS = {"cassette", "metadata", "trajectory", "path", "spec"}
_DATASET_KEYS = {"name", "description", "world", "repeat", "case", "threshold", "defaults"}


def _evaluators(items: Iterable[Evaluator]) -> tuple[Evaluator, ...]:
    return tuple(items)


def _messages(items: Iterable[Mapping[str, Any]]) -> tuple[Mapping[str, Any], ...]:
    return tuple(items)


def _cases(items: Iterable[Case]) -> tuple[Case, ...]:
    return tuple(items)


@attrs.frozen
class Case:
    """
    One task to score: what the agent is given, how its model is made, and how each run is judged.

    The model is, first found: ``model_factory`` (called with the run's seed),
    ``cassette`` (replayed with :class:`agent_fsm.testing.ReplayModel`), else
    ``model`` (scripted turns, or a named model of the world). ``gate`` names
    a gate of the world (or a built-in one), as a spec does; ``output`` asks
    the agent for typed output (scored by :class:`~agent_fsm.evals.Output`); ``scenario`` is
    the spec the case was read from, whose ``[expect]`` table is scored by
    :class:`~agent_fsm.evals.Expectations`.
    """

    name: str
    task: str
    evaluators: tuple[Evaluator, ...] = attrs.field(default=(), converter=_evaluators)
    history: tuple[Mapping[str, Any], ...] = attrs.field(default=(), converter=_messages)
    metadata: Mapping[str, Any] = attrs.field(factory=dict, hash=False)
    model: ModelSpec | None = None
    model_factory: ModelFactory | None = attrs.field(default=None, eq=False)
    cassette: str | None = None
    gate: str | None = None
    limits: Limits | None = None
    prices: Prices | None = None
    system_prompt: str | None = None
    output: Any = None  # the typed output asked of the agent (Agent(output=...)): a JSON Schema or a class
    resumes: tuple[Resume, ...] = ()
    scenario: Scenario | None = attrs.field(default=None, eq=False, repr=False)

    def as_scenario(self, world: str = "") -> Scenario:
        """The case as the spec the scenario runner builds an agent from (its gate, limits, prices, model)."""
        if self.scenario is not None:
            return self.scenario
        return Scenario(
            path=f"<case {self.name}>",
            name=self.name,
            description="",
            environment=world,
            task=self.task,
            model=self.model if self.model is not None else ModelSpec(),
            expect={},
            system_prompt=self.system_prompt,
            gate=self.gate,
            history=self.history,
            limits=self.limits if self.limits is not None else Limits(),
            resumes=self.resumes,
            prices=self.prices,
        )


@attrs.frozen
class Dataset:
    """
    Named cases, each run ``repeat`` times; ``world`` is the default ``"module:function"`` building the world.

    ``threshold`` is the pass rate a case needs for the pytest plugin (and the
    command line) to count it as passing.
    """

    name: str
    cases: tuple[Case, ...] = attrs.field(converter=_cases)
    world: str | None = None
    repeat: int = 1
    threshold: float = 1.0
    description: str = ""

    def __attrs_post_init__(self) -> None:
        names = [case.name for case in self.cases]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"dataset {self.name!r} names cases {twice} more than once; case names are their keys")
        if isinstance(self.repeat, bool) or not isinstance(self.repeat, int) or self.repeat < 1:
            raise ValueError(f"repeat must be a whole number >= 1 (got {self.repeat!r})")
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold is a pass rate from 0 to 1 (got {self.threshold!r})")


def _fail(path: Path, key: str | None, problem: str) -> SpecFormatError:
    return SpecFormatError(path, key, problem)


def _trajectory(path: Path, key: str, table: Any) -> Trajectory:
    if not isinstance(table, dict):
        raise _fail(path, key, "expected a table with calls = [...] and mode")
    unknown = sorted(set(table) - {"calls", "mode"})
    if unknown:
        raise _fail(path, f"{key}.{unknown[0]}", "unknown key; expected calls or mode")
    calls = table.get("calls")
    if not isinstance(calls, list):
        raise _fail(path, f"{key}.calls", "expected an array of {name = ..., arguments = {...}} tables")
    patterns = []
    for index, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or set(call) - {"name", "arguments"}:
            raise _fail(path, f"{key}.calls[{index}]", "expected a table with a tool name and optional arguments")
        arguments = call.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise _fail(path, f"{key}.calls[{index}].arguments", "expected a table")
        patterns.append(ToolCallPattern(call["name"], arguments))
    mode = table.get("mode", "strict")
    try:
        return Trajectory(patterns, mode=mode)
    except ValueError as exc:
        raise _fail(path, f"{key}.mode", str(exc)) from None


def _defaults(path: Path, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _fail(path, "defaults", "expected a table with limits and prices")
    unknown = sorted(set(value) - {"limits", "prices"})
    if unknown:
        raise _fail(path, f"defaults.{unknown[0]}", "unknown key; expected limits or prices")
    if not isinstance(value.get("limits", {}), dict):
        raise _fail(path, "defaults.limits", "expected a table of limits")
    return value


def _case(path: Path, index: int, table: Any, world: str | None, defaults: dict[str, Any]) -> Case:
    key = f"case[{index}]"
    if not isinstance(table, dict):
        raise _fail(path, key, "expected a [[case]] table")
    spec = {k: v for k, v in table.items() if k not in _CASE_KEYS}
    if "spec" in table:
        # A case may point at a spec file (relative to the dataset) instead of writing it inline.
        if not isinstance(table["spec"], str):
            raise _fail(path, f"{key}.spec", "expected the path of a scenario spec")
        spec_path = path.parent / table["spec"]
        try:
            spec = {**tomllib.loads(spec_path.read_text(encoding="utf-8")), **spec}
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise _fail(path, f"{key}.spec", f"cannot read {spec_path}: {exc}") from exc
    if world is not None:
        spec.setdefault("environment", world)
    # The dataset's defaults fill what a case leaves out: each limit key by key, the price table whole.
    if "limits" in defaults:
        spec["limits"] = {**defaults["limits"], **spec.get("limits", {})}
    if "prices" in defaults:
        spec.setdefault("prices", defaults["prices"])
    cassette = table.get("cassette")
    if cassette is not None and not isinstance(cassette, str):
        raise _fail(path, f"{key}.cassette", "expected the path of a cassette")
    if cassette is not None:
        spec.setdefault("model", {"turns": []})  # the cassette is the model; the spec format asks for one
    metadata = table.get("metadata", {})
    if not isinstance(metadata, dict):
        raise _fail(path, f"{key}.metadata", "expected a table")
    scenario = scenario_from_data(spec, f"{path}[{key}]")
    evaluators: list[Evaluator] = [Expectations()]
    if "trajectory" in table:
        evaluators.append(_trajectory(path, f"{key}.trajectory", table["trajectory"]))
    if "path" in table:
        states = table["path"]
        if not isinstance(states, list) or not all(isinstance(s, str) for s in states):
            raise _fail(path, f"{key}.path", "expected an array of machine state names")
        evaluators.append(MachinePath(states))
    return Case(
        name=scenario.name if "name" in spec else f"case-{index + 1}",
        task=scenario.task,
        evaluators=evaluators,
        history=scenario.history,
        metadata=metadata,
        model=scenario.model,
        cassette=str(path.parent / cassette) if cassette is not None else None,
        gate=scenario.gate,
        limits=scenario.limits,
        prices=scenario.prices,
        system_prompt=scenario.system_prompt,
        resumes=scenario.resumes,
        scenario=scenario,
    )


def load_dataset(path: str | Path) -> Dataset:
    """
    Read a dataset file: top-level ``name``, ``world``, ``repeat``, ``threshold``, and ``[[case]]`` tables.

    ``[defaults]`` holds ``limits`` (each key used where a case's spec sets
    none) and ``prices`` (a spec's ``[prices]`` table, for cases without one):
    a shared money budget needs every run priced and its replies capped.

    Each case is a scenario spec written inline (or ``spec = "file.toml"``)
    plus ``cassette``, ``metadata``, ``trajectory = {calls = [...], mode = ...}``
    and ``path = [...]``. A case without ``environment`` uses the dataset's ``world``.

    Raises:
        SpecFormatError: the file is unreadable or a key is wrong (the message names the file and the key).
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _fail(path, None, "no such dataset file") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise _fail(path, None, f"cannot be read as TOML: {exc}") from exc
    unknown = sorted(set(data) - _DATASET_KEYS)
    if unknown:
        raise _fail(path, unknown[0], f"unknown key; expected one of {sorted(_DATASET_KEYS)}")
    world = data.get("world")
    if world is not None and not isinstance(world, str):
        raise _fail(path, "world", 'expected "package.module:function"')
    defaults = _defaults(path, data.get("defaults", {}))
    cases = data.get("case", [])
    if not isinstance(cases, list) or not cases:
        raise _fail(path, "case", "expected at least one [[case]] table")
    try:
        return Dataset(
            name=str(data.get("name", path.stem)),
            cases=[_case(path, index, table, world, defaults) for index, table in enumerate(cases)],
            world=world,
            repeat=data.get("repeat", 1),
            threshold=data.get("threshold", 1.0),
            description=str(data.get("description", "")),
        )
    except (ValueError, TypeError) as exc:
        if isinstance(exc, SpecFormatError):
            raise
        raise _fail(path, None, str(exc)) from exc


def cases_named(dataset: Dataset, names: Sequence[str]) -> Dataset:
    """``dataset`` keeping only the cases named (in the dataset's order)."""
    return attrs.evolve(dataset, cases=[case for case in dataset.cases if case.name in set(names)])
