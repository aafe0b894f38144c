"""
``agent-fsm runs``: the runs in a store: list, show, decide a pause, recover crashed runs, export a state, fork.

Every command takes ``--store URL`` (``sqlite:///runs.db``,
``postgresql://user@host/db``). Deciding and recovering continue a run, so
they need the agent that runs it: ``--world MODULE:NAME`` names an
:class:`~agent_fsm.Agent`, or a function of no arguments returning one
(e.g. ``agent_fsm.examples.durable:world``). Exit codes: 0 done,
1 a failure said in one line (a pause already decided, no such run), 2 a
usage error.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from agent_fsm import Agent
from agent_fsm.cli._text import clean
from agent_fsm.engine import RunResult, RunState, blocked_call, format_transcript
from agent_fsm.store import (
    DifferentAgent,
    StoreError,
    answer,
    approve,
    cancel,
    decide_reply,
    fork,
    open_store,
    recover,
    reject,
    reply_of,
)
from agent_fsm.store.records import RunSummary
from agent_fsm.store.sql import SqlStore

__all__ = ["runs_app"]

runs_app = typer.Typer(
    name="runs",
    help="The runs kept in a store: list, show, approve, reject, recover, export, fork.",
    no_args_is_help=True,
)

StoreOption = Annotated[str, typer.Option("--store", help="sqlite:///PATH or postgresql://USER@HOST:PORT/DB")]
WorldOption = Annotated[
    str, typer.Option("--world", help="MODULE:NAME of an Agent, or of a function of no arguments returning one")
]


def _fail(message: str) -> typer.Exit:
    typer.echo(clean("error: " + " ".join(message.split())), err=True)  # one line, whatever the message holds
    return typer.Exit(1)


def _say(text: str) -> None:
    typer.echo(clean(text))  # stored text may hold what the terminal cannot print (a lone surrogate)


@contextlib.contextmanager
def _store_errors() -> Iterator[None]:
    """A store's failure (a damaged database, an unreadable row) as one line and exit 1."""
    try:
        yield
    except StoreError as exc:
        raise _fail(str(exc)) from None


def open_url(url: str, *, create: bool = False) -> SqlStore:
    """
    The store at ``url``, or exit 1 saying why not.

    Commands that only read or decide never create one (a mistyped path is not
    an empty store); a command that starts runs passes ``create=True``.
    """
    try:
        return open_store(url, create=create)
    except (ValueError, StoreError) as exc:
        raise _fail(str(exc)) from None


def load_world(spec: str) -> Agent:
    """The agent ``--world MODULE:NAME`` names (an Agent, or a function returning one), or exit saying what is wrong."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise typer.BadParameter(f"expected MODULE:NAME, got {spec!r}", param_hint="--world")
    if str(Path.cwd()) not in sys.path:  # the console script's path starts at its own folder, not the caller's
        sys.path.append(str(Path.cwd()))
    try:
        named = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise _fail(f"cannot load the world {spec!r}: {exc}") from None
    world = named
    if not isinstance(named, Agent) and callable(named):
        try:
            world = named()
        except Exception as exc:  # the world is the user's code: whatever it raises is said in one line
            raise _fail(f"cannot build the world {spec!r}: {type(exc).__name__}: {exc}") from None
    if not isinstance(world, Agent):
        got = f"is a {type(named).__name__}" if world is named else f"returned a {type(world).__name__}"
        hint = " (build Agent(model, tools, gate=...) from its parts)" if isinstance(world, Mapping) else ""
        raise _fail(f"the world {spec!r} {got}, not an Agent or a function returning one{hint}")
    return world


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at)) + " UTC"


def _line(summary: RunSummary) -> str:
    if summary.problem is not None:
        return f"{summary.run_id}  damaged  {summary.problem}"
    text = f"{summary.run_id}  {summary.status:<7}  {summary.stop or '-':<17}  {_when(summary.updated_at)}"
    if summary.status == "failed":  # a bug stopped it: the error, as its store recorded it
        text += f"\n    error: {summary.reason}"
    if summary.status == "paused" and summary.blocked is not None:
        call = summary.blocked
        # A call of a nested run is addressed in the one run id tree: the run, the calls down to it.
        nested = f" (call {summary.run_id}/{'/'.join(summary.blocked_path)})" if len(summary.blocked_path) > 1 else ""
        text += (
            f"\n    pause {summary.pause_id}: {call.name} {json.dumps(call.arguments)}{nested}"
            f"\n    reason: {summary.reason}"
        )
        if summary.claim is not None:
            text += f"\n    claimed by {summary.claim.reviewer} until {_when(summary.claim.expires_at)}"
    return text


def _tree(state: RunState, run_id: str, depth: int = 0) -> Iterator[str]:
    """The run and the runs nested in it, a line each: its id in the tree, its agent, where it is, what it waits on."""
    line = f"{'  ' * depth}{run_id}  {state.agent or '-'}  {state.machine_state}"
    if state.machine_state == "AwaitingApproval" and state.pending:
        call, path = blocked_call(state)
        line += f"  blocked: {call.name} {run_id}/{'/'.join(path)}"
    yield line
    for call_id, child in (state.children or {}).items():
        yield from _tree(child, f"{run_id}/{call_id}", depth + 1)


def _ended(run_id: str, result: RunResult) -> str:
    text = f"{run_id}: {result.stop.value}"
    return f"{text} ({result.reason})" if result.reason else text


@runs_app.command("list")
def list_command(
    store: StoreOption,
    status: Annotated[str | None, typer.Option("--status", help="running, paused, ended or failed")] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", help="Paused runs per page (1-500); prints the next page's --cursor.")
    ] = None,
    cursor: Annotated[str | None, typer.Option("--cursor", help="Where the page before ended.")] = None,
    tool: Annotated[str | None, typer.Option("--tool", help="Paused runs blocked on this tool.")] = None,
    agent: Annotated[str | None, typer.Option("--agent", help="Paused runs of this agent.")] = None,
    reason: Annotated[str | None, typer.Option("--reason", help="Paused runs whose gate's reason holds this.")] = None,
    claimed: Annotated[str | None, typer.Option("--claimed-by", help="Paused runs this reviewer has claimed.")] = None,
) -> None:
    """List the stored runs, most recent first; a paused run shows its blocked call and the reason.

    Any of --limit, --cursor, --tool, --agent, --reason, --claimed-by lists the paused runs a page at a time.
    """
    paging = any(option is not None for option in (limit, cursor, tool, agent, reason, claimed))
    if paging and status not in (None, "paused"):
        raise _fail(f"--limit, --cursor and the filters list paused runs; --status {status} cannot be paged")
    with open_url(store) as opened, _store_errors():
        if paging:
            try:
                page = opened.paused(
                    limit=50 if limit is None else limit,
                    cursor=cursor,
                    tool=tool,
                    agent=agent,
                    reason=reason,
                    claimed=claimed,
                    count=True,
                )
            except ValueError as exc:  # a bad cursor (BadCursor is one) or limit
                raise _fail(str(exc)) from None
            summaries: list[RunSummary] = list(page)
        else:
            summaries = opened.runs(status)
    for summary in summaries:
        _say(_line(summary))
    if not summaries:
        typer.echo("no runs" + (f" {status}" if status else "") + (" on this page" if cursor else ""))
    if paging:
        typer.echo(f"{page.total} paused run(s) match" + (f"; next page: --cursor {page.next}" if page.next else ""))
    broken = [summary.run_id for summary in summaries if summary.problem is not None]
    if broken:
        raise _fail(f"{len(broken)} stored run(s) cannot be read: {', '.join(broken)}")


@runs_app.command("show")
def show_command(
    run_id: str,
    store: StoreOption,
    diagram: Annotated[
        bool, typer.Option("--diagram", help="Also draw the run's path on the machine (Mermaid).")
    ] = False,
    world: Annotated[
        str | None,
        typer.Option(
            "--world",
            help="MODULE:NAME of the run's Agent: --diagram draws its machine as configured, not the whole table.",
        ),
    ] = None,
    full: Annotated[
        bool, typer.Option("--full", help="With --world: draw the whole run machine, not the agent's own.")
    ] = False,
) -> None:
    """Show one run: status, transcript, the path it took, its effects and the decisions on its pauses."""
    if full and world is None:
        raise typer.BadParameter("--full is for --world (without it the whole table is drawn)", param_hint="--full")
    agent = load_world(world) if world is not None and diagram else None
    with open_url(store) as opened, _store_errors():
        stored = opened.load(run_id)
        effects, history = opened.effects(run_id), opened.history(run_id)
        parent, checkpoints = opened.forked_from(run_id), opened.checkpoints(run_id)
    _say(_line(stored.summary))
    if parent is not None:
        _say(f"forked from {parent.parent} at its checkpoint {parent.point}, {_when(parent.forked_at)}")
    _say(format_transcript(stored.state.messages))
    _say("path: " + " -> ".join(stored.state.path))
    if stored.state.children:  # runs nested in it: the tree, each addressed RUN/CALL_ID
        _say("runs:\n" + "\n".join("  " + line for line in _tree(stored.state, run_id)))
    for effect in effects:
        where = f"{run_id}/{effect.call_id}" if "/" in effect.call_id else effect.call_id  # a nested run's call
        _say(f"effect: {effect.tool} {where} key {effect.idempotency_key}: {effect.outcome or 'in flight'}")
    for decision in history:
        why = f" ({decision.reason})" if decision.reason else ""
        _say(f"decision: {decision.decision} by {decision.reviewer} at {_when(decision.at)}{why}")
    for point in checkpoints:
        _say(f"checkpoint {point.point}: {point.machine_state}" + (f" ({point.stop})" if point.stop else ""))
    if diagram:
        from agent_fsm.diagrams.labels import agent_title
        from agent_fsm.diagrams.mermaid import to_mermaid
        from agent_fsm.diagrams.path import TraceError, path_on_agent
        from agent_fsm.engine import RUN_MACHINE

        try:
            path = path_on_agent(stored.state, agent, full=full)
        except TraceError as exc:
            raise _fail(str(exc)) from None
        title = None if agent is None else agent_title(agent.name, path.machine, RUN_MACHINE)
        typer.echo(to_mermaid(path.machine, path=path, title=title))


@runs_app.command("export")
def export_command(
    run_id: str,
    store: StoreOption,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="File to write (default: stdout).")] = None,
) -> None:
    """Write the run's state as JSON: what ``agent-fsm diagram --trace`` and ``RunState.from_json`` read."""
    with open_url(store) as opened, _store_errors():
        text = opened.load(run_id).state.to_json()
    if output is None:
        typer.echo(text)
    else:
        output.write_text(text + "\n", encoding="utf-8")


def _decide(decision: Callable[..., RunResult], run_id: str, store: str, world: str, **how: Any) -> str:
    """Apply one human decision through the store; the line that says how the run rests now."""
    agent = load_world(world)
    with open_url(store) as opened, warnings.catch_warnings(record=True) as heard:
        warnings.simplefilter("always", DifferentAgent)
        try:
            result = decision(opened, run_id, agent, **how)
        except (StoreError, ValueError) as exc:
            raise _fail(str(exc)) from None
    for warning in heard:  # a run decided by another agent than paused it: said, not refused
        if issubclass(warning.category, DifferentAgent):
            typer.echo(clean("note: " + " ".join(str(warning.message).split())), err=True)
    return _ended(run_id, result)


@runs_app.command("approve")
def approve_command(
    run_id: str,
    store: StoreOption,
    world: WorldOption,
    reviewer: Annotated[str, typer.Option("--reviewer", help="Who decides (kept in the run's history).")],
    arguments: Annotated[str | None, typer.Option("--arguments", help="The call's arguments, edited (JSON).")] = None,
    pause_id: Annotated[str | None, typer.Option("--pause", help="The pause id seen in the inbox.")] = None,
) -> None:
    """Approve a paused run's blocked call and continue the run until it rests again."""
    edited = None if arguments is None else _json_option("--arguments", arguments)
    typer.echo(_decide(approve, run_id, store, world, reviewer=reviewer, arguments=edited, pause_id=pause_id))


def _json_option(name: str, text: str) -> Any:
    """The JSON value an option gives, or a clear refusal."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise _fail(f"{name} is not JSON: {exc}") from None
    except (ValueError, RecursionError) as exc:  # a number too long to convert; nesting Python cannot read
        said = "it nests deeper than Python can read" if isinstance(exc, RecursionError) else str(exc)
        raise _fail(f"{name} cannot be read: {said}") from None


@runs_app.command("answer")
def answer_command(
    run_id: str,
    store: StoreOption,
    world: WorldOption,
    reviewer: Annotated[str, typer.Option("--reviewer", help="Who answers (kept in the run's history).")],
    value: Annotated[str, typer.Option("--json", help="The answer, as JSON meeting the tool's result schema.")],
    pause_id: Annotated[str | None, typer.Option("--pause", help="The pause id seen in the inbox.")] = None,
) -> None:
    """Answer a paused call to a tool a person answers (checked against its result schema) and continue the run."""
    given = _json_option("--json", value)
    typer.echo(_decide(answer, run_id, store, world, reviewer=reviewer, answer=given, pause_id=pause_id))


@runs_app.command("review")
def review_command(
    run_id: str,
    store: StoreOption,
    world: WorldOption,
    reviewer: Annotated[str, typer.Option("--reviewer", help="Who decides (kept in the run's history).")],
    value: Annotated[
        str,
        typer.Option(
            "--json",
            help='Each call of the paused reply decided: {"CALL": {"approve": true} | {"arguments": {...}}'
            ' | {"reject": "why"} | {"answer": VALUE}}.',
        ),
    ],
    pause_id: Annotated[str | None, typer.Option("--pause", help="The pause id seen in the inbox.")] = None,
) -> None:
    """Decide every call of a paused reply at once (partial decisions are refused) and continue the run."""
    try:
        reply = reply_of(_json_option("--json", value))
    except ValueError as exc:
        raise _fail(f"--json: {exc}") from None
    typer.echo(_decide(decide_reply, run_id, store, world, reviewer=reviewer, reply=reply, pause_id=pause_id))


@runs_app.command("reject")
def reject_command(
    run_id: str,
    store: StoreOption,
    world: WorldOption,
    reviewer: Annotated[str, typer.Option("--reviewer", help="Who decides (kept in the run's history).")],
    reason: Annotated[str, typer.Option("--reason", help="Why, in words the model is told.")],
    pause_id: Annotated[str | None, typer.Option("--pause", help="The pause id seen in the inbox.")] = None,
) -> None:
    """Reject a paused run's blocked call (the model is told why) and continue the run."""
    typer.echo(_decide(reject, run_id, store, world, reviewer=reviewer, reason=reason, pause_id=pause_id))


@runs_app.command("cancel")
def cancel_command(
    run_id: str,
    store: StoreOption,
    world: WorldOption,
    reviewer: Annotated[str, typer.Option("--reviewer", help="Who cancels (kept in the run's history).")],
    reason: Annotated[str, typer.Option("--reason", help="Why, kept with the decision.")] = "",
    pause_id: Annotated[str | None, typer.Option("--pause", help="The pause id seen in the inbox.")] = None,
) -> None:
    """Cancel a paused run: it ends ``cancelled``, the call it waited on answered as not run."""
    typer.echo(_decide(cancel, run_id, store, world, reviewer=reviewer, reason=reason, pause_id=pause_id))


@runs_app.command("recover")
def recover_command(
    store: StoreOption,
    world: WorldOption,
    older_than: Annotated[
        float, typer.Option("--older-than", help="Seconds without a commit before a running run counts as crashed.")
    ] = 60.0,
) -> None:
    """Continue the runs a dead process left in flight; an interrupted non-idempotent call waits for a person."""
    agent = load_world(world)
    with open_url(store) as opened, _store_errors():
        typer.echo(f"claiming runs with no commit for {older_than:g}s ...")
        done = recover(
            opened,
            agent,
            older_than=older_than,
            progress=lambda r: _say(
                f"  {r.run_id}: " + (_ended(r.run_id, r.result).split(": ", 1)[1] if r.result else f"failed: {r.error}")
            ),
        )
    failed = sum(1 for r in done if r.error)
    typer.echo(f"recovered {len(done) - failed} run(s)" + (f", {failed} failed" if failed else ""))
    if failed:
        raise typer.Exit(1)


@runs_app.command("fork")
def fork_command(
    run_id: str,
    store: StoreOption,
    at: Annotated[int, typer.Option("--at", help="The checkpoint to start from ('runs show' lists them; 0: begun).")],
    new_run_id: Annotated[str, typer.Option("--as", help="The new run's id.")],
    world: Annotated[
        str | None,
        typer.Option("--world", help="MODULE:NAME of the Agent that drives the fork on until it rests."),
    ] = None,
) -> None:
    """Begin a new run from a stored run's checkpoint: a pause waits in the inbox, another point goes on (--world)."""
    agent = load_world(world) if world is not None else None
    with open_url(store) as opened:
        try:
            forked = fork(opened, run_id, at=at, new_run_id=new_run_id)
        except (StoreError, ValueError) as exc:
            raise _fail(str(exc)) from None
        _say(f"{new_run_id}: forked from {run_id} at checkpoint {at} ({forked.summary.machine_state})")
        if agent is None or forked.status != "running":
            return
        with _store_errors():
            result = agent.advance(forked.state, store=opened, run_id=new_run_id)
    _say(_ended(new_run_id, result))
