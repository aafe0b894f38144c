"""
``agent-fsm run``: run a scenario spec (or every spec in a directory) and say whether it held.

Exit codes: 0 every expectation and required invariant held; 1 something did
not hold, or the spec is missing or malformed (one line, no traceback); 2 a
usage error. A directory run goes on past a failed or malformed spec, shows
its progress, and ends with a table of every spec. A spec may name a world in
``agent_fsm.examples``, in a package given with ``--allow-module``, or in one
listed under ``[tool.agent_fsm] spec-modules`` in the project's ``pyproject.toml``.
Options choosing a real model provider belong here too, passed
on to :func:`agent_fsm.scenarios.run_scenario` as its ``model``.
"""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agent_fsm.cli._text import clean
from agent_fsm.cli.follow import Follower
from agent_fsm.engine import format_result
from agent_fsm.scenarios import (
    ScenarioResult,
    SpecFormatError,
    allowed_packages,
    discover,
    load_scenario,
    project_spec_modules,
    run_scenario,
)

if TYPE_CHECKING:
    from agent_fsm.engine import Model

__all__ = ["run_command"]

DEFAULT_ROOT = Path("specs")


class Provider(str, enum.Enum):
    """Model providers a spec can be run against instead of its scripted model."""

    openai = "openai"
    openai_responses = "openai-responses"
    anthropic = "anthropic"
    gemini = "gemini"
    ollama = "ollama"


def _fail(message: str) -> typer.Exit:
    typer.echo(clean(f"error: {message}"), err=True)
    return typer.Exit(1)


def _echo(text: str) -> None:
    typer.echo(clean(text))


def _list(root: Path) -> int:
    paths = discover(root) if root.exists() else []
    if not paths:
        raise _fail(f"no specs found under {root}")
    status = 0
    for path in paths:
        try:
            scenario = load_scenario(path)
        except SpecFormatError as exc:
            where = f" (key {exc.key})" if exc.key else ""
            _echo(f"{path}  MALFORMED: {exc.problem}{where}")
            status = 1
            continue
        _echo(f"{path}  {scenario.name}\n    {scenario.description}")
    return status


def _provider_model(provider: Provider, base_url: str | None, model: str | None, read_timeout: float | None) -> Model:
    try:
        from agent_fsm.providers import ProviderConfigError, build_model
    except ImportError as exc:
        raise _fail(str(exc)) from None
    options: dict[str, Any] = {} if read_timeout is None else {"read_timeout": read_timeout}
    try:
        # The API key comes from the provider's environment variable only, never a flag:
        # flags end up in shell history and process listings.
        return build_model(provider.value, base_url=base_url, model=model, **options)
    except ProviderConfigError as exc:
        raise _fail(str(exc)) from None


def _allowed(spec: Path, flags: Sequence[str]) -> tuple[str, ...]:
    """Packages given with --allow-module and in the project's pyproject.toml; their project root becomes importable."""
    try:
        configured, pyproject = project_spec_modules(spec if spec.exists() else Path.cwd())
        allowed = allowed_packages([*flags, *configured])
    except (SpecFormatError, ValueError) as exc:
        raise _fail(str(exc)) from None
    # A user's worlds live in their project, which the console script does not
    # put on the import path: add the project's root (and the working directory).
    for root in [Path.cwd(), *([pyproject.parent] if pyproject is not None else [])]:
        if str(root) not in sys.path:
            sys.path.append(str(root))
    return allowed


def _follower(follow: bool) -> Follower | None:
    return Follower(lambda text: typer.echo(text, nl=False)) if follow else None


def _run_one(
    path: Path, model: Model | None = None, allowed: Sequence[str] = (), follow: bool = False
) -> ScenarioResult:
    try:
        scenario = load_scenario(path)
        if follow:
            _echo(f"following {scenario.name} ({path})")
        outcome = run_scenario(scenario, model=model, allowed=allowed, on_event=_follower(follow))
    except SpecFormatError as exc:
        raise _fail(str(exc)) from None
    if follow:
        _echo("")
    return outcome


def _show(outcome: ScenarioResult) -> None:
    scenario = outcome.scenario
    _echo(f"spec {scenario.name} ({scenario.path})")
    if scenario.description:
        _echo(f"  {scenario.description}")
    _echo("")
    _echo(format_result(outcome.result, outcome.effects))
    reason = f" ({outcome.result.reason})" if outcome.result.reason else ""
    code = f" [{outcome.result.code}]" if outcome.result.code != outcome.result.stop.value else ""
    _echo(f"ending: {outcome.result.stop.value}{code}{reason}")
    _echo("")
    _echo(outcome.report())


def _run_directory(paths: list[Path], model: Model | None, allowed: Sequence[str], follow: bool = False) -> int:
    """Run every spec, whatever the others do; print progress, then one table row per spec. Returns the exit code."""
    rows: list[tuple[str, str, str, str]] = []  # (spec, verdict, ending, detail)
    width = len(str(len(paths)))
    for number, path in enumerate(paths, start=1):
        try:
            outcome = run_scenario(load_scenario(path), model=model, allowed=allowed, on_event=_follower(follow))
        except SpecFormatError as exc:
            rows.append((str(path), "MALFORMED", "-", exc.problem + (f" (key {exc.key})" if exc.key else "")))
        else:
            failures = "; ".join(f.line().removeprefix("FAILED  ") for f in outcome.failures)
            rows.append(
                (outcome.scenario.name, "passed" if outcome.passed else "FAILED", outcome.result.stop.value, failures)
            )
        done = sum(1 for r in rows if r[1] == "passed")
        bar = "#" * (20 * number // len(paths))
        _echo(f"[{bar:<20}] {number:>{width}}/{len(paths)}  {rows[-1][1]:<9} {rows[-1][0]}  ({done} passed so far)")
    _echo("")
    headers = ("spec", "result", "ending", "detail")
    widths = [max(len(headers[i]), *(len(r[i]) for r in rows)) if i < 3 else 0 for i in range(4)]
    _echo("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip())
    _echo("  ".join("-" * max(w, len(h)) for h, w in zip(headers, widths, strict=True)))
    for row in rows:
        _echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    counts = {kind: sum(1 for r in rows if r[1] == kind) for kind in ("passed", "FAILED", "MALFORMED")}
    _echo("")
    _echo(f"{counts['passed']} of {len(rows)} specs held; {counts['FAILED']} failed, {counts['MALFORMED']} malformed")
    return 0 if counts["passed"] == len(rows) else 1


def run_command(
    spec: Annotated[
        Path | None, typer.Argument(help="A spec file, or a directory of specs (default for --list: specs/).")
    ] = None,
    list_: Annotated[bool, typer.Option("--list", help="List the specs and their descriptions; run nothing.")] = False,
    save: Annotated[
        Path | None, typer.Option("--save", help="Write the trace (spec, run state, effects, expectations) as JSON.")
    ] = None,
    provider: Annotated[
        Provider | None,
        typer.Option(
            "--provider",
            help=(
                "Run against a real model instead of the spec's own (API key from the provider's environment variable)."
            ),
        ),
    ] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="The provider's base URL.")] = None,
    model_name: Annotated[str | None, typer.Option("--model", help="The provider's model name.")] = None,
    read_timeout: Annotated[
        float | None, typer.Option("--read-timeout", help="Seconds to wait for the provider's reply.", min=0.001)
    ] = None,
    allow_module: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-module",
            help=(
                "A package whose worlds specs may name, besides agent_fsm.examples (repeatable; also read from "
                "[tool.agent_fsm] spec-modules in pyproject.toml)."
            ),
        ),
    ] = None,
    follow: Annotated[
        bool, typer.Option("--follow", help="Print the run's events as they happen, the model's streamed text inline.")
    ] = False,
) -> None:
    """Run a scenario spec: transcript, typed ending, effect log, and each expectation with ok or FAILED."""
    if provider is None and (base_url or model_name or read_timeout is not None):
        raise typer.BadParameter("--base-url, --model and --read-timeout go with --provider", param_hint="--provider")
    if list_:
        raise typer.Exit(_list(spec if spec is not None else DEFAULT_ROOT))
    if spec is None:
        raise typer.BadParameter("give a spec file or directory, or --list", param_hint="SPEC")
    if spec.is_dir():
        if save is not None:
            raise typer.BadParameter("--save takes one spec file, not a directory", param_hint="--save")
        paths = discover(spec)
        if not paths:
            raise _fail(f"no specs found under {spec}")
        allowed = _allowed(spec, allow_module or ())
        model = None if provider is None else _provider_model(provider, base_url, model_name, read_timeout)
        raise typer.Exit(_run_directory(paths, model, allowed, follow))
    if not spec.exists():
        raise _fail(f"{spec}: no such spec file")
    allowed = _allowed(spec, allow_module or ())
    model = None if provider is None else _provider_model(provider, base_url, model_name, read_timeout)
    outcome = _run_one(spec, model, allowed, follow)
    _show(outcome)
    if save is not None:
        save.write_text(json.dumps(outcome.to_data(), indent=2) + "\n", encoding="utf-8")
        _echo(f"trace saved to {save}")
    raise typer.Exit(0 if outcome.passed else 1)
