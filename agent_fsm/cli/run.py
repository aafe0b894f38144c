"""
``agent-fsm run``: run a scenario spec (or every spec in a directory) and say whether it held.

Exit codes: 0 every expectation and required invariant held; 1 something did
not hold, or the spec is missing or malformed (one line, no traceback); 2 a
usage error. Options choosing a real model provider belong here too, passed
on to :func:`agent_fsm.scenarios.run_scenario` as its ``model``.
"""

from __future__ import annotations

import enum
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agent_fsm.engine.transcript import format_result
from agent_fsm.scenarios import (
    ScenarioResult,
    SpecFormatError,
    discover,
    load_scenario,
    run_scenario,
)

if TYPE_CHECKING:
    from agent_fsm.engine.models import Model

__all__ = ["run_command"]

DEFAULT_ROOT = Path("specs")


class Provider(str, enum.Enum):
    """Model providers a spec can be run against instead of its scripted model."""

    openai = "openai"
    anthropic = "anthropic"
    ollama = "ollama"


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(1)


def _list(root: Path) -> int:
    paths = discover(root) if root.exists() else []
    if not paths:
        raise _fail(f"no specs found under {root}")
    status = 0
    for path in paths:
        try:
            scenario = load_scenario(path)
        except SpecFormatError as exc:
            typer.echo(f"{path}  MALFORMED: {exc.problem} (key {exc.key!r})")
            status = 1
            continue
        typer.echo(f"{path}  {scenario.name}\n    {scenario.description}")
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


def _run_one(path: Path, model: Model | None = None) -> ScenarioResult:
    try:
        return run_scenario(load_scenario(path), model=model)
    except SpecFormatError as exc:
        raise _fail(str(exc)) from None


def _show(outcome: ScenarioResult) -> None:
    scenario = outcome.scenario
    typer.echo(f"spec {scenario.name} ({scenario.path})")
    if scenario.description:
        typer.echo(f"  {scenario.description}")
    typer.echo("")
    typer.echo(format_result(outcome.result, outcome.effects))
    reason = f" ({outcome.result.reason})" if outcome.result.reason else ""
    code = f" [{outcome.result.code}]" if outcome.result.code != outcome.result.stop.value else ""
    typer.echo(f"ending: {outcome.result.stop.value}{code}{reason}")
    typer.echo("")
    typer.echo(outcome.report())


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
        model = None if provider is None else _provider_model(provider, base_url, model_name, read_timeout)
        outcomes = [_run_one(path, model) for path in paths]
        for outcome in outcomes:
            typer.echo(
                f"{'ok    ' if outcome.passed else 'FAILED'}  {outcome.scenario.name}  ({outcome.result.stop.value})"
            )
            for failure in outcome.failures:
                typer.echo(f"          {failure.line()}")
        failed = sum(not o.passed for o in outcomes)
        typer.echo(f"{len(outcomes) - failed} of {len(outcomes)} specs held")
        raise typer.Exit(1 if failed else 0)
    if not spec.exists():
        raise _fail(f"{spec}: no such spec file")
    model = None if provider is None else _provider_model(provider, base_url, model_name, read_timeout)
    outcome = _run_one(spec, model)
    _show(outcome)
    if save is not None:
        save.write_text(json.dumps(outcome.to_data(), indent=2) + "\n", encoding="utf-8")
        typer.echo(f"trace saved to {save}")
    raise typer.Exit(0 if outcome.passed else 1)
