"""
A server's tools as a registry: each remote tool a :class:`agent_fsm.ToolSpec`, held to the same rules as a local one.

What the engine makes of a tool's annotations (hints elsewhere; here they decide)::

    readOnlyHint    destructiveHint   idempotentHint   ->  effectful  idempotent
    true            (any)             (any)                no         idempotentHint
    false / absent  (any)             true                 yes        yes (retried under one key if asked)
    false / absent  (any)             false / absent       yes        no  (one attempt, then a person)
    no annotations                                         yes        no

Effectful is the secure default: only a tool that says it is read-only runs
without the gate's consent. ``destructiveHint`` changes nothing the engine
does (every effect already waits for the gate); it is shown by
``agent-fsm mcp list`` so a person writing the gate can see it.

A call crosses the engine's one boundary like any other (validated against
the tool's input schema, gated, approved); only then does the handler send
``tools/call`` with the validated arguments and the call's idempotency key in
the request's ``_meta`` (:data:`IDEMPOTENCY_KEY`). Its answer becomes the
observation (:mod:`agent_fsm.mcp.results`). When the answer does not come (the
server died, the call timed out), an effect-free tool's call is an ``error``
and an effectful tool's raises :class:`agent_fsm.OutcomeUnknown`: the engine
never guesses whether an effect happened.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from agent_fsm.engine import (
    ASKED,
    ApprovalNeeded,
    OutcomeUnknown,
    OutputDefinitionError,
    RunEvent,
    ToolContext,
    ToolDefinitionError,
    ToolError,
    ToolSpec,
    check_registry,
    output_spec,
)
from agent_fsm.mcp.elicitation import Asked, Elicitation
from agent_fsm.mcp.errors import Lost, NotSent, ToolsRefused
from agent_fsm.mcp.results import DEFAULT_MAX_RESULT_CHARS, answer_of

if TYPE_CHECKING:
    from agent_fsm.mcp.connection import MCPServer

__all__ = ["IDEMPOTENCY_KEY", "Combined", "MCPProgress", "MCPTools", "RemoteTool", "combine", "treatment"]

IDEMPOTENCY_KEY = "agent-fsm/idempotency-key"
"""The ``_meta`` key of a ``tools/call`` that carries the call's idempotency key (a server may dedupe on it)."""

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


@attrs.frozen
class MCPProgress(RunEvent):
    """A progress notification of one MCP call, as ``server.tools(on_event=...)`` hears it (a run: ToolProgress)."""

    type: ClassVar[str] = "mcp_progress"
    call_id: str
    tool: str
    progress: float
    total: float | None
    message: str | None


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def treatment(annotations: Any) -> tuple[bool, bool]:
    """``(effectful, idempotent)`` for a tool's annotations (``None``: it has none): see the module's table."""
    read_only = getattr(annotations, "read_only_hint", None) is True
    idempotent = getattr(annotations, "idempotent_hint", None) is True
    return (not read_only, idempotent)


@attrs.frozen
class RemoteTool:
    """One tool of a server's list, as the engine will treat it (what ``agent-fsm mcp list`` prints)."""

    name: str
    description: str
    schema: dict[str, Any]
    effectful: bool
    idempotent: bool
    destructive: bool
    output_schema: dict[str, Any] | None = None
    """The tool's ``outputSchema`` (None: it declares none); a structured result is checked against it."""

    @classmethod
    def of(cls, tool: Any, server: MCPServer) -> RemoteTool:
        """Read an ``mcp.types.Tool``; every string passes through the server's redaction first."""
        effectful, idempotent = treatment(getattr(tool, "annotations", None))
        redact = server.secrets.redact
        schema = getattr(tool, "input_schema", None)
        destructive = getattr(getattr(tool, "annotations", None), "destructive_hint", None) is not False
        output = getattr(tool, "output_schema", None)
        return cls(
            name=server.secrets.text(str(getattr(tool, "name", ""))),  # a name spelling a secret is refused, redacted
            description=redact(str(getattr(tool, "description", None) or getattr(tool, "title", None) or "")),
            schema=redact(dict(schema))
            if isinstance(schema, Mapping)
            else {"<not an object>": redact(repr(schema))[:200]},
            effectful=effectful,
            idempotent=idempotent,
            destructive=effectful and destructive,  # the MCP default: a tool that writes may destroy
            output_schema=None if output is None else redact(dict(output)) if isinstance(output, Mapping) else {},
        )


def _schema_shape_problem(tool: RemoteTool) -> str | None:
    # What the engine's schema rules would trip on as a Python error rather than name: wrong JSON types.
    properties = tool.schema.get("properties", {})
    if not isinstance(properties, Mapping):
        return f'its input schema\'s "properties" must be an object, got {json.dumps(properties)[:40]}'
    required = tool.schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return f'its input schema\'s "required" must be a list of names, got {json.dumps(required)[:40]}'
    if tool.output_schema is not None:
        try:
            output_spec(tool.output_schema)
        except OutputDefinitionError as exc:
            return f"its output schema is refused: {exc}"
    return None


def _name_problem(name: str) -> str | None:
    if not name:
        return "the name is empty"
    bad = sorted({c for c in name if c not in _NAME_CHARS})
    if bad:
        return f"the name holds characters a provider refuses: {''.join(bad)!r}"
    return None


class _Call:
    """The handler of one remote tool: send ``tools/call`` once, read the answer into an observation's content."""

    def __init__(self, tools: MCPTools, remote: str, shown: str, effectful: bool) -> None:
        self._tools = tools
        self._remote = remote
        self._shown = shown
        self._effectful = effectful
        self.asks_mid_call = tools.server.elicitation  # its server may ask a person during the call

    def __repr__(self) -> str:
        return f"<MCP tool {self._remote!r} on {self._tools.server!r}>"

    def asking(self, key: str) -> Elicitation | None:
        """The server's question the call with idempotency key ``key`` waits on, open here (read by the decider)."""
        return self._tools.server.asking(key)

    def __call__(self, /, context: ToolContext, **arguments: Any) -> Any:
        # ``self`` is positional-only: a tool's argument may be named "self" (it lands in ``arguments``).
        tools = self._tools
        server = tools.server
        sink = tools.on_event

        def progress(done: float, total: float | None, message: str | None) -> None:
            # Told in this (the handler's) thread. The run's listeners hear it as a ToolProgress event;
            # a value JSON cannot carry, from a server, is not passed on.
            if not _finite(done) or not (total is None or _finite(total)) or not isinstance(message, str | None):
                return
            context.progress(done, total, message)
            if sink is not None:
                sink(MCPProgress(context.run_id, time.time(), context.call_id, self._shown, done, total, message))

        try:
            result = server.call(
                self._remote,
                arguments,
                meta={IDEMPOTENCY_KEY: context.idempotency_key},
                timeout=tools.timeout,
                progress=progress,
                key=context.idempotency_key,
            )
        except Asked as asked:  # the call stays open on the connection; the run pauses on it (see elicitation)
            raise ApprovalNeeded(f"{self._shown} {ASKED} (MCP elicitation): {asked.question.question}") from None
        except NotSent as exc:
            raise ToolError(f"{self._shown} was not run: {exc}") from None
        except Lost as exc:
            if self._effectful:
                raise OutcomeUnknown(
                    f"the outcome of {self._shown} is unknown: {exc}; it may or may not have run on the server"
                ) from None
            raise ToolError(f"{self._shown} failed: {exc}") from None
        answer = answer_of(result, secrets=server.secrets, limit=tools.max_result_chars)
        if not answer.ok:
            raise ToolError(answer.content)
        return answer.content


class MCPTools(Mapping[str, ToolSpec]):
    """
    A server's tools as a registry (name to ToolSpec) that follows the server's list.

    Built from the server's list when made: each kept tool's input schema
    is its contract, checked by the engine's schema rules like any tool's
    (a remote ``$ref``, a pattern that could backtrack, a name a provider
    would refuse are all refused here, every problem at once, as
    :class:`~agent_fsm.mcp.ToolsRefused`).

    When the server says its tool list changed, the next look-up of a tool
    by the engine's judging step (``get``) lists it again, so a call to a
    tool that vanished is ``invalid`` and a call is validated against the
    schema as it now stands. ``[]`` never re-lists: the judging step has
    already chosen the spec a call then runs with. ``version`` lists it
    again too and counts the lists built: the engine reads it as each call
    is observed, so from the next model call on the model is shown the list
    as it stands (the agent's ``digest`` follows it too). A new list is held
    to the same rules as the first: a tool it refuses is left out, the
    rest are offered, and each call is still judged by the gate.
    """

    def __init__(
        self,
        server: MCPServer,
        *,
        allow: Sequence[str] | Callable[[str], bool] | None = None,
        prefix: str | None = None,
        timeout: float | None = None,
        max_result_chars: int | None = None,
        on_event: Callable[[Any], Any] | None = None,
    ) -> None:
        if isinstance(allow, str):
            raise TypeError(f"allow must be a sequence of tool names or a predicate, not one string ({allow!r})")
        if prefix is not None and (not prefix or _name_problem(prefix) is not None):
            raise ToolDefinitionError(f"prefix must be letters, digits, '_' or '-' (got {prefix!r})")
        limit = DEFAULT_MAX_RESULT_CHARS if max_result_chars is None else max_result_chars
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise ValueError(f"max_result_chars must be a positive whole number, got {max_result_chars!r}")
        self.server = server
        self.allow = allow
        self.prefix = prefix
        self.timeout = timeout
        self.max_result_chars = limit
        self.on_event = on_event
        self._lock = threading.Lock()
        self._generation = server.generation
        self._built = 0  # lists built so far: the registry's version
        self.remote: dict[str, RemoteTool] = {}
        self._specs: dict[str, ToolSpec] = {}
        self._build()

    def _kept(self, name: str) -> bool:
        allow = self.allow
        if allow is None:
            return True
        return bool(allow(name)) if callable(allow) else name in allow

    def _build(self) -> None:
        listed = [RemoteTool.of(tool, self.server) for tool in self.server.list_tools()]
        problems: dict[str, str] = {}
        remote: dict[str, RemoteTool] = {}
        specs: dict[str, ToolSpec] = {}
        seen = {t.name for t in listed}
        if self.allow is not None and not callable(self.allow):
            for missing in sorted(set(self.allow) - seen):
                problems[missing] = "allowed, but the server does not offer it"
        for tool in listed:
            if not self._kept(tool.name):
                continue
            name = f"{self.prefix}_{tool.name}" if self.prefix else tool.name
            problem = _name_problem(tool.name) or (
                "two tools on the server's list have this name" if tool.name in remote else None
            )
            problem = problem or _schema_shape_problem(tool)
            if problem is None and "context" in tool.schema.get("properties", {}):
                problem = "it takes an argument named 'context', which the engine reserves for the call's context"
            if problem is None:
                try:
                    spec = ToolSpec(
                        tool.description,
                        tool.schema,
                        _Call(self, tool.name, name, tool.effectful),
                        effectful=tool.effectful,
                        idempotent=tool.idempotent,
                        blocking=True,  # the handler waits on the session's loop: a thread, under the async driver
                    )
                    check_registry({name: spec})
                except ToolDefinitionError as exc:
                    problem = str(exc)
            if problem is not None:
                problems[tool.name] = problem
                continue
            remote[tool.name] = tool
            specs[name] = spec
        if problems:
            lines = "\n".join(f"  {name!r}: {why}" for name, why in problems.items())
            raise ToolsRefused(
                f"{len(problems)} tool(s) of MCP server {self.server!r} refused (leave them out with allow=):\n{lines}",
                problems,
            )
        self.remote, self._specs = remote, specs
        self._built += 1

    @property
    def version(self) -> int:
        """How many lists were built: it moves when the list changed (reading it follows a change first)."""
        self._follow()
        return self._built

    def refresh(self) -> None:
        """List the server's tools again now (done for you when the server says its list changed)."""
        with self._lock:
            self._generation = self.server.generation
            self._build()

    def _follow(self) -> None:
        if self.server.generation != self._generation:
            try:
                self.refresh()
            except ToolsRefused as exc:  # the new list breaks the rules: offer only what still passes
                self.allow = _without(self.allow, set(exc.problems))
                self._follow_quietly()
            except Exception:  # the server is gone: keep the list, its calls will say so
                return

    def _follow_quietly(self) -> None:
        try:
            self._build()
        except Exception:  # judging must not raise for a server's sake; keep the last good list
            return

    def get(self, name: str, default: Any = None) -> Any:
        self._follow()
        return self._specs.get(name, default)

    def __getitem__(self, name: str) -> ToolSpec:
        return self._specs[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)

    def __repr__(self) -> str:
        return f"<MCPTools of {self.server!r}: {', '.join(self._specs) or 'none'}>"


def _without(allow: Any, refused: set[str]) -> Callable[[str], bool]:
    before = allow

    def kept(name: str) -> bool:
        if name in refused:
            return False
        if before is None:
            return True
        return bool(before(name)) if callable(before) else name in before

    return kept


def combine(*registries: Mapping[str, ToolSpec]) -> Combined:
    """
    One registry of several (local tools, servers' tools): a name offered twice is refused, never shadowed.

    The result follows each registry that follows its server (a
    :class:`MCPTools`): a changed list is offered from the next turn on. A
    name a changed list brings that another registry already offers is left
    out (the earlier registry keeps it), as any tool the engine refuses is.

    Raises:
        ToolDefinitionError: two registries offer the same name (give a server a ``prefix``).
    """
    return Combined(registries)


class Combined(Mapping[str, ToolSpec]):
    """Several registries offered as one (see :func:`combine`); its ``version`` moves when any of theirs does."""

    def __init__(self, registries: Sequence[Mapping[str, ToolSpec]]) -> None:
        self._registries = tuple(registries)
        self._version = self._versions()
        self._merged = _merged(self._registries, refuse=True)

    def _versions(self) -> tuple[Any, ...]:
        return tuple(getattr(registry, "version", None) for registry in self._registries)

    @property
    def version(self) -> tuple[Any, ...]:
        """The registries' versions (reading it follows a change first)."""
        versions = self._versions()
        if versions != self._version:
            self._merged = _merged(self._registries, refuse=False)
            self._version = versions
        return versions

    def get(self, name: str, default: Any = None) -> Any:
        self.version  # noqa: B018  (follows a changed list before the engine judges a call)
        return self._merged.get(name, default)

    def __getitem__(self, name: str) -> ToolSpec:
        return self._merged[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._merged)

    def __len__(self) -> int:
        return len(self._merged)

    def __repr__(self) -> str:
        return f"<combined registry: {', '.join(self._merged) or 'none'}>"


def _merged(registries: Sequence[Mapping[str, ToolSpec]], *, refuse: bool) -> dict[str, ToolSpec]:
    merged: dict[str, ToolSpec] = {}
    owner: dict[str, int] = {}
    clashes = []
    for index, registry in enumerate(registries):
        check_registry(registry)
        for name, spec in registry.items():
            if name in merged:
                clashes.append(f"{name!r} (registries {owner[name] + 1} and {index + 1})")
                continue
            merged[name] = spec
            owner[name] = index
    if clashes and refuse:
        raise ToolDefinitionError(
            f"tool names offered twice: {', '.join(clashes)}; give a server's tools a prefix (tools(prefix=...))"
        )
    return merged
