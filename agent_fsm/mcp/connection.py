"""
One connection to one MCP server, on an event loop the connection owns.

Why a loop of its own: the engine's sync driver calls handlers from plain
threads, and its async driver runs ``blocking`` handlers in worker threads;
an MCP session, though, is an asyncio object bound to the loop it was
opened on. So the session lives on one loop, in one daemon thread, for the
connection's whole life, and every caller (sync ``with``, ``async with``,
any thread) hands it work through :func:`asyncio.run_coroutine_threadsafe`.
One mechanism, whatever the caller.

What a call can end as, and why it matters (see :mod:`agent_fsm.mcp.toolset`):

* an answer: the server replied (``isError`` or not);
* *not sent*: the connection was known to be gone, or the server refused the
  request as malformed before running anything (a JSON-RPC parse, request,
  method or params error): no effect happened;
* *lost*: the request left and no answer came (the server died, the call
  timed out, the answer could not be read): the effect may or may not have
  happened.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import queue
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from agent_fsm.mcp.elicitation import Asked, Elicitation, OpenCall, OpenCalls
from agent_fsm.mcp.errors import Lost, NotSent, ServerUnavailable
from agent_fsm.mcp.secrets import Secrets

if TYPE_CHECKING:
    from agent_fsm.mcp.toolset import MCPTools

__all__ = ["DEFAULT_TIMEOUT", "Lost", "MCPServer", "NotSent", "Progress"]

DEFAULT_TIMEOUT = 30.0
"""Seconds a call may take before its outcome is declared unknown (its request may still be running)."""

# JSON-RPC errors that mean the server refused the request itself: nothing was run.
_REFUSED = frozenset({-32700, -32600, -32601, -32602})
_GRACE = 5.0  # beyond the SDK's own timeout, before this side gives up waiting
_STOP_WAIT = 15.0  # for a session to end: the SDK's bounded shutdown (close stdin, terminate, kill) fits in it


Progress = Callable[[float, float | None, str | None], None]
"""Told of each progress notification of one call: progress, total, message (already redacted)."""


def _described(exc: BaseException) -> str:
    """
    An exception's type and text; an SDK validation error is named, never quoted.

    A pydantic ``ValidationError`` quotes the value it refused (``input_value=``,
    abbreviated to its head and tail): from a server, that value is anything
    it sent, its secrets included. So what a refused answer becomes is fixed
    text naming each field and what was wrong with it, and nothing it held.
    """
    errors = getattr(exc, "errors", None)
    if type(exc).__name__ == "ValidationError" and callable(errors):
        try:
            found = errors(include_url=False, include_context=False, include_input=False)
        except Exception:  # not pydantic's after all: its own text, redacted by the caller
            return f"{type(exc).__name__}: {exc}"
        named = [f"{'.'.join(map(str, e.get('loc', ()))) or '(the whole answer)'}: {e.get('type')}" for e in found]
        more = f" (and {len(named) - 5} more)" if len(named) > 5 else ""
        return f"the server's answer does not fit the MCP schema: {'; '.join(named[:5])}{more}"
    return f"{type(exc).__name__}: {exc}"


class _RedactingFilter(logging.Filter):
    """
    Redacts the secrets of every live server from each record of the SDK's loggers, before any handler sees it.

    The SDK logs what a server sends when it cannot read it (a line on
    stdout that is not JSON-RPC, quoted in full, with a traceback quoting it
    again): the server's secrets would reach this process's stderr or the
    user's log files. A record carries no server's name, so every live
    server's secrets are redacted from it; the message is formatted here and
    its traceback rendered to text (both redacted), so no handler formats
    the raw values later.
    """

    def __init__(self) -> None:
        super().__init__("agent_fsm.mcp")
        self.lock = threading.Lock()  # servers open in any thread while the SDK logs in others
        self.servers: weakref.WeakSet[Secrets] = weakref.WeakSet()

    def add(self, secrets: Secrets) -> None:
        with self.lock:
            self.servers.add(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        with self.lock:
            secrets = [s for s in self.servers if s]
        if not secrets:
            return True

        def redact(text: str) -> str:
            for each in secrets:
                text = each.text(text)
            return text

        with contextlib.suppress(Exception):  # a record that cannot be formatted is the handler's to report
            record.msg, record.args = redact(record.getMessage()), ()
        if record.exc_info:
            record.exc_text = redact(_FORMATTER.formatException(record.exc_info))
            record.exc_info = None
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


_FORMATTER = logging.Formatter()
_REDACTING = _RedactingFilter()


# The SDK's loggers, and its HTTP stack's (whose INFO line quotes each request's URL, query and all).
_SDK_LOGGERS = ("mcp", "httpx2", "httpcore2")


def _guard_sdk_logs(secrets: Secrets) -> None:
    """Redact ``secrets`` from the SDK's log records: the filter goes on each of its loggers that exists now."""
    _REDACTING.add(secrets)
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if not isinstance(logger, logging.Logger) or name.split(".")[0] not in _SDK_LOGGERS:
            continue
        if _REDACTING not in logger.filters:
            logger.addFilter(_REDACTING)


def _install_hint(exc: ImportError) -> ServerUnavailable:
    return ServerUnavailable(f"agent_fsm.mcp needs the MCP SDK (pip install 'agent_fsm[mcp]'): {exc}")


class MCPServer:
    """
    An MCP server the engine may call tools on: started over stdio or reached over Streamable HTTP.

    Build it with :meth:`stdio` or :meth:`http`, open it with ``with`` (or
    ``async with``), and take its tools as a registry with :meth:`tools`::

        with MCPServer.stdio("mcp-server-git", ["--repository", "."]) as git:
            agent = Agent(model, git.tools())

    ``env`` and ``headers`` are secrets: they reach the server and nothing
    else (not a repr, an error, a result, an event). ``timeout`` bounds the
    handshake and each call (seconds).

    .. versionadded:: 0.2
    """

    def __init__(
        self,
        name: str,
        connect: Callable[[Any, Any], Any],
        *,
        secrets: Secrets,
        timeout: float = DEFAULT_TIMEOUT,
        shown: str,
        elicitation: bool = False,
    ) -> None:
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.name = name
        self.timeout = float(timeout)
        self.secrets = secrets
        self._connect = connect  # message handler, elicitation callback -> an un-entered mcp.Client
        self.elicitation = bool(elicitation)
        """Whether the client declares the elicitation capability: a call may pause its run to ask a person."""
        self._calls = OpenCalls()
        self._shown = shown  # what repr() says: the command or URL, never env or header values
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self._closing: asyncio.Event | None = None
        self._held: concurrent.futures.Future[None] | None = None
        self._gone = threading.Event()  # set when the held session's task has ended (its process stopped)
        self._gone.set()
        self._lost = False
        # Closed until opened, and again once closed: a call then is refused, never a server started behind
        # the user's back (its process and thread would outlive the ``with`` that meant to end them).
        self._closed = True
        self._outputs: dict[str, Any] = {}  # each listed tool's output schema (None: it declares none)
        self.generation = 0
        """How many times the server said its tool list changed (a registry re-lists when it moved)."""

    # --- building ---

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | Path | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        name: str | None = None,
        elicitation: bool = False,
    ) -> MCPServer:
        """
        A server the adapter starts as ``command args...`` and talks to over its stdin and stdout.

        ``env`` is added to the few variables the SDK passes on (``PATH``,
        ``HOME``...; not the whole environment); its values are secrets.
        ``elicitation=True`` declares the elicitation capability: a server's
        question during a call pauses the run for a person (docs/mcp.md).
        """
        if isinstance(args, str):
            raise TypeError(f"args must be a sequence of arguments, not one string (got {args!r})")
        arguments = [str(a) for a in args]
        extra = {str(k): str(v) for k, v in (env or {}).items()}

        secrets = Secrets.of(env=extra)

        def connect(handler: Any, elicit: Any) -> Any:
            from mcp import Client
            from mcp.client.stdio import StdioServerParameters, stdio_client

            parameters = StdioServerParameters(
                command=command, args=arguments, env=extra or None, cwd=str(cwd) if cwd is not None else None
            )
            transport = _StdioTransport(parameters, stdio_client, secrets)
            return Client(transport, message_handler=handler, elicitation_callback=elicit, cache=None)

        shown = " ".join([command, *arguments])
        return cls(
            name or Path(command).name, connect, secrets=secrets, timeout=timeout, shown=shown, elicitation=elicitation
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        name: str | None = None,
        elicitation: bool = False,
    ) -> MCPServer:
        """
        A server reached over Streamable HTTP at ``url``; ``headers`` (an ``Authorization``, say) are secrets.

        ``elicitation=True`` declares the elicitation capability, as for :meth:`stdio`.
        """
        sent = {str(k): str(v) for k, v in (headers or {}).items()}
        secrets = Secrets.of(headers=sent, url=url)

        def connect(handler: Any, elicit: Any) -> Any:
            from mcp import Client
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            return Client(
                _HttpTransport(url, sent, streamable_http_client, create_mcp_http_client),
                message_handler=handler,
                elicitation_callback=elicit,
                cache=None,
            )

        shown = secrets.text(url)
        return cls(name or "http", connect, secrets=secrets, timeout=timeout, shown=shown, elicitation=elicitation)

    def __repr__(self) -> str:
        return f"<MCPServer {self.name!r}: {self._shown}>"

    # --- lifecycle ---

    def open(self) -> MCPServer:
        """Start (or reach) the server and hold a session open; a second call does nothing."""
        with self._lock:
            self._closed = False
            if self._client is not None and not self._lost:
                return self
            self._reset()
            self._start()
        return self

    def close(self) -> None:
        """End the session (a stdio server is stopped) and the loop's thread."""
        with self._lock:
            self._closed = True
            self._calls.withdraw_all()  # a question nobody can answer any more: the server hears cancel
            self._reset()
            loop, self._loop = self._loop, None
            if loop is not None:
                loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=10)
                self._thread = None

    def __enter__(self) -> MCPServer:
        return self.open()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    async def __aenter__(self) -> MCPServer:
        return await asyncio.to_thread(self.open)

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.close)

    def _start(self) -> None:
        try:
            import mcp  # noqa: F401  (fail here, with the extra's name, rather than in the loop)
        except ImportError as exc:
            raise _install_hint(exc) from None
        _guard_sdk_logs(self.secrets)
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name=f"mcp-{self.name}", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._gone = gone = threading.Event()
        self._held = asyncio.run_coroutine_threadsafe(self._hold(ready, gone), self._loop)
        try:
            ready.result(timeout=self.timeout)  # the handshake is bounded like any request
        except concurrent.futures.TimeoutError:
            self._reset()
            raise ServerUnavailable(f"MCP server {self!r} did not answer within {self.timeout:g}s") from None
        except Exception as exc:
            self._reset()
            raise ServerUnavailable(f"MCP server {self!r} could not be used: {self._why(exc)}") from None
        self._lost = False

    def _reset(self) -> None:
        # Ends the held session (if any) and waits for its task to be gone, so the transport has stopped the
        # server's process (a future cancelled mid-handshake reports done at once, before its task has unwound:
        # hence the event); called under the lock.
        held, closing, loop = self._held, self._closing, self._loop
        self._held = self._closing = self._client = None
        if held is None or loop is None:
            return
        if closing is not None:
            loop.call_soon_threadsafe(closing.set)
        else:
            held.cancel()
        self._gone.wait(timeout=_STOP_WAIT)

    async def _hold(self, ready: concurrent.futures.Future[None], gone: threading.Event) -> None:
        # The session is entered and left in this one task, as anyio's cancel scopes require.
        closing = asyncio.Event()
        try:
            async with self._connect(self._notified, self._elicited if self.elicitation else None) as client:
                _guard_sdk_logs(self.secrets)  # the transport's modules, and their loggers, are loaded by now
                # The SDK checks a result against the tool's output schema with Python's backtracking regex engine,
                # in this loop's thread and holding the GIL: a server's pattern could stall the whole process past
                # any timeout. The engine's own checker (RE2 patterns, linear time) does it instead.
                client.session.validate_tool_result = self._output_check(client)
                self._closing = closing
                self._client = client
                watching = asyncio.ensure_future(self._watch(client))
                ready.set_result(None)
                try:
                    await closing.wait()
                finally:
                    watching.cancel()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            if not isinstance(exc, Exception):
                raise
        finally:
            self._lost = True
            gone.set()

    async def _notified(self, message: Any) -> None:
        # Handshake-era servers announce a changed tool list with a notification.
        if getattr(message, "method", None) == "notifications/tools/list_changed":
            self.generation += 1

    async def _elicited(self, context: Any, params: Any) -> Any:
        # A server's question during a call (see agent_fsm.mcp.elicitation): it waits here, on the loop, for a person.
        from mcp import types

        from agent_fsm.engine import ToolDefinitionError

        if getattr(params, "mode", None) == "url" or not isinstance(getattr(params, "requested_schema", None), dict):
            return types.ElicitResult(action="decline")  # a web page to open: not carried (docs/mcp.md)
        call = self._calls.asker()
        if call is None or call.key is None:
            why = "no call of a run is waiting alone on this connection, so nobody can be asked"
            return types.ErrorData(code=types.INVALID_REQUEST, message=f"elicitation refused: {why}")
        try:
            question = Elicitation(
                self.secrets.redact(dict(params.requested_schema)),
                self.secrets.text(str(params.message))[:2000],
                lambda: self._calls.end(call),
            )
        except ToolDefinitionError as exc:
            return types.ErrorData(code=types.INVALID_PARAMS, message=f"the requested schema is refused: {exc}")
        call.asking = question
        call.inbox.put(("asked", question))
        try:
            action, content = await asyncio.wrap_future(question.reply)
        finally:
            call.asking = None
        return types.ElicitResult(action=action, content=content)

    def asking(self, key: str) -> Elicitation | None:
        """The question the call with idempotency key ``key`` is asking a person, open on this connection."""
        return self._calls.question(key)

    async def _watch(self, client: Any) -> None:
        # 2026-era servers announce it on a subscription stream instead; a server without one is simply not watched.
        with contextlib.suppress(Exception):
            capabilities = client.server_capabilities
            if not (capabilities.tools and capabilities.tools.list_changed):
                return
            async with client.listen(tools_list_changed=True) as subscription:
                async for _event in subscription:
                    self.generation += 1

    def _why(self, exc: BaseException) -> str:
        # An exception's text, every secret (and piece of one) redacted before it is cut; groups (anyio's) are opened.
        if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
            return self._why(exc.exceptions[0])
        return self.secrets.text(_described(exc))[:2000]

    # --- requests ---

    def _session(self) -> tuple[asyncio.AbstractEventLoop, Any]:
        with self._lock:
            if self._closed:
                raise ServerUnavailable(f"MCP server {self!r} is not open (use `with server:` or server.open())")
            if self._client is None or self._lost:
                self._reset()
                self._start()  # a server that died since the last call is started again
            assert self._loop is not None
            return self._loop, self._client

    def request(self, work: Callable[[Any], Any], timeout: float | None = None) -> Any:
        """Run ``work(client)`` (a coroutine) on the session's loop and wait for it; for listings, not calls."""
        loop, client = self._session()
        future = asyncio.run_coroutine_threadsafe(work(client), loop)
        try:
            return future.result(timeout=(timeout or self.timeout) + _GRACE)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ServerUnavailable(f"MCP server {self!r} did not answer within {self.timeout:.0f}s") from None
        except Exception as exc:
            raise ServerUnavailable(f"MCP server {self!r} failed: {self._why(exc)}") from None

    async def _listing(self, client: Any) -> list[Any]:
        found: list[Any] = []
        cursor = None
        for _ in range(100):  # a paginator that never ends cannot hang the registry
            page = await client.list_tools(cursor=cursor)
            found.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        self._outputs = {str(tool.name): getattr(tool, "output_schema", None) for tool in found}
        return found

    def list_tools(self) -> list[Any]:
        """Every tool the server lists (``mcp.types.Tool`` values, every page)."""
        result: list[Any] = self.request(self._listing)
        return result

    def _output_check(self, client: Any) -> Callable[[str, Any], Any]:
        async def validate_tool_result(name: str, result: Any) -> None:
            # What the SDK's own check raises (RuntimeError), so a call fails as it would have: see _failure.
            from agent_fsm.engine import OutputDefinitionError, output_spec

            if name not in self._outputs:
                await self._listing(client)
            schema = self._outputs.get(name)
            if schema is None or getattr(result, "is_error", False):
                return
            structured = getattr(result, "structured_content", None)
            if structured is None:
                raise RuntimeError(f"tool {name} has an output schema but returned no structured content")
            try:
                problems = output_spec(dict(schema)).errors(structured)
            except OutputDefinitionError as exc:
                raise RuntimeError(f"tool {name}'s output schema is refused: {exc}") from None
            if problems:
                raise RuntimeError(
                    f"the structured content of tool {name} does not fit its output schema: {problems[0]}"
                )

        return validate_tool_result

    def call(
        self,
        tool: str,
        arguments: Mapping[str, Any],
        *,
        meta: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        progress: Progress | None = None,
        key: str | None = None,
    ) -> Any:
        """
        Send ``tools/call`` and wait for the answer (a ``CallToolResult``), in the calling thread.

        Progress notifications are handed to ``progress`` in this thread, as
        they arrive, so an event sink never runs on the session's loop.
        ``key`` (the call's idempotency key) names the call of a run: with elicitation
        declared, a question from the server raises :class:`Asked` and the
        call stays open under that key; called again with the key, it goes on
        (the reply the person left is sent) instead of being sent anew.

        Raises:
            NotSent: nothing reached a tool (the server could not be started, or refused the request).
            Lost: the request left and no answer came within ``timeout``, or the connection died.
            Asked: the server asked a person (only with ``key``, on a server with elicitation declared).
        """
        seconds = float(timeout if timeout is not None else self.timeout)
        opened = self._calls.take(key) if key is not None else None
        if opened is not None:  # paused on a question: the reply the person left goes, and the call goes on
            if opened.asking is not None:  # (none: the connection ended meanwhile, and so did the call)
                opened.asking.send_held()
            return self._wait(opened, seconds, progress)
        try:
            loop, client = self._session()
        except ServerUnavailable as exc:
            raise NotSent(str(exc)) from None
        opened = OpenCall(key if self.elicitation else None)

        async def told(done: float, total: float | None, message: str | None) -> None:
            opened.inbox.put(("progress", (done, total, self.secrets.text(message) if message else message)))

        async def calling() -> Any:
            return await client.call_tool(
                tool,
                dict(arguments),
                # With elicitation a call may wait for a person: the wait is bounded here, a person's time apart.
                read_timeout_seconds=None if self.elicitation else seconds,
                progress_callback=told if progress is not None else None,
                meta=dict(meta) if meta else None,
            )

        self._calls.start(opened)
        opened.future = future = asyncio.run_coroutine_threadsafe(calling(), loop)

        def landed(done: concurrent.futures.Future[Any]) -> None:
            self._calls.landed(opened)
            opened.inbox.put(("done", done))

        future.add_done_callback(landed)
        return self._wait(opened, seconds, progress)

    def _wait(self, opened: OpenCall, seconds: float, progress: Progress | None) -> Any:
        # What the call hears, in the caller's thread, until its answer, a question, or the deadline.
        future = opened.future
        assert future is not None
        deadline = time.monotonic() + seconds + _GRACE
        while True:
            remaining = deadline - time.monotonic()
            try:
                kind, item = opened.inbox.get(timeout=max(remaining, 0.0))
            except queue.Empty:
                future.cancel()
                self._calls.end(opened)
                raise Lost(f"no answer within {seconds:g}s") from None
            if kind == "progress":
                if progress is not None:
                    progress(*item)
                continue
            if kind == "asked":
                self._calls.pause(opened)  # open, under its key, until the person's reply (or the connection ends)
                raise Asked(item)
            break
        self._calls.end(opened)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            self._lost = True
            raise Lost("the call was cancelled before its answer came") from None
        except Exception as exc:
            raise self._failure(exc, seconds) from None

    def _failure(self, exc: BaseException, seconds: float) -> Exception:
        code = getattr(exc, "code", None)
        why = self._why(exc)
        if code in _REFUSED:
            return NotSent(f"the server refused the request: {why}")
        if code == -32001 or isinstance(exc, TimeoutError):
            return Lost(f"no answer within {seconds:g}s")
        if code == -32000:
            self._lost = True
            return Lost(f"the connection to the server was lost ({why})")
        self._lost = self._lost or not isinstance(exc, RuntimeError)
        return Lost(why)

    def tools(
        self,
        allow: Sequence[str] | Callable[[str], bool] | None = None,
        prefix: str | None = None,
        *,
        timeout: float | None = None,
        max_result_chars: int | None = None,
        on_event: Callable[[Any], Any] | None = None,
    ) -> MCPTools:
        """
        The server's tools as a registry (name to :class:`agent_fsm.ToolSpec`): see :class:`~agent_fsm.mcp.MCPTools`.

        ``allow`` keeps only the tools named (or those the predicate
        accepts); ``prefix`` offers each as ``prefix_name``; ``timeout``
        bounds each call (the server's by default); ``max_result_chars``
        cuts longer results; ``on_event`` is told of each call's progress
        (:class:`~agent_fsm.mcp.MCPProgress`; the run's own listeners hear
        it without it, as :class:`agent_fsm.ToolProgress`).

        Raises:
            ToolsRefused: a tool kept breaks the engine's rules (every problem listed).
            ServerUnavailable: the server could not be reached.
        """
        from agent_fsm.mcp.toolset import MCPTools

        return MCPTools(
            self, allow=allow, prefix=prefix, timeout=timeout, max_result_chars=max_result_chars, on_event=on_event
        )


class _StdioTransport:
    """
    The stdio transport, with the server's stderr passed on line by line with its secrets redacted.

    A server logs what it likes (the SDK's own server logs a failed tool's
    message, which may quote its environment); the lines still reach this
    process's stderr, for whoever debugs the server, but not its secrets.
    """

    def __init__(self, parameters: Any, transport: Any, secrets: Secrets) -> None:
        self._parameters, self._transport, self._secrets = parameters, transport, secrets
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> Any:
        reading, writing = os.pipe()
        threading.Thread(target=self._relay, args=(reading,), name="mcp-stderr", daemon=True).start()
        with open(writing, "w", encoding="utf-8", errors="replace", closefd=True) as errlog:
            # Once the process is started it holds its own copy of the pipe: this one is closed on leaving,
            # so the relay ends when the server does.
            return await self._stack.enter_async_context(self._transport(self._parameters, errlog=errlog))

    async def __aexit__(self, *exc: Any) -> None:
        await self._stack.__aexit__(*exc)

    def _relay(self, reading: int) -> None:
        with open(reading, encoding="utf-8", errors="replace", closefd=True) as lines:
            for line in lines:
                with contextlib.suppress(Exception):
                    sys.stderr.write(self._secrets.text(line))
                    sys.stderr.flush()


class _HttpTransport:
    """The Streamable HTTP transport with its own HTTP client (carrying ``headers``), closed with it."""

    def __init__(self, url: str, headers: dict[str, str], transport: Any, make_client: Any) -> None:
        self._url, self._headers = url, headers
        self._transport, self._make_client = transport, make_client
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> Any:
        http = await self._stack.enter_async_context(self._make_client(headers=self._headers))
        return await self._stack.enter_async_context(self._transport(self._url, http_client=http))

    async def __aexit__(self, *exc: Any) -> None:
        await self._stack.__aexit__(*exc)
