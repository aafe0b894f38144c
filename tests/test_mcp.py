"""
agent_fsm.mcp against real servers: mcp-server-git, mcp-server-time, server-everything (stdio and HTTP), a hostile one.

No server here is a mock: the reference servers are the published packages
(PyPI, npm: tests/mcp_servers), and the hostile server is written with the
SDK's own server API (tests/mcp_servers/hostile.py). Servers are started once
per module where the tests leave them as they found them; a test that kills
or changes its server starts its own.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_fsm import (
    MAX_PART_BYTES,
    Agent,
    File,
    Image,
    Limits,
    OutcomeUnknown,
    ScriptedModel,
    Stop,
    ToolContext,
    ToolDefinitionError,
    ToolError,
    ToolProgress,
    ToolSpec,
    Verdict,
    allow_all,
    answer_message,
    ask_for_effects,
    tool_call_message,
)
from tests.system_parts import unavailable

mcp = pytest.importorskip("mcp", reason="the MCP SDK is in the test extra: pip install -e '.[test]'")

from agent_fsm.mcp import (  # noqa: E402  (after the SDK's presence is known)
    IDEMPOTENCY_KEY,
    REDACTED,
    MCPProgress,
    MCPServer,
    ServerUnavailable,
    ToolsRefused,
    combine,
    treatment,
)
from agent_fsm.mcp.results import answer_of  # noqa: E402
from agent_fsm.mcp.secrets import Secrets  # noqa: E402

HERE = Path(__file__).parent / "mcp_servers"
HOSTILE = str(HERE / "hostile.py")
EVERYTHING = HERE / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"
SECRET = "sk-live-7f3a9c2e41d84b6f"
BIN = Path(sys.executable).parent


def _program(name: str) -> str:
    found = shutil.which(name, path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if found is None:
        unavailable(f"{name} is not installed (it is in the test extra: pip install -e '.[test]')")
    return found


def _node_server() -> tuple[str, Path]:
    node = shutil.which("node")
    if node is None or not EVERYTHING.is_file():
        unavailable("server-everything is not installed: run `npm ci` in tests/mcp_servers (.ci/run does)")
    return node, EVERYTHING


def _model(*calls: tuple[str, dict[str, Any]], answer: str = "done") -> ScriptedModel:
    return ScriptedModel(
        [tool_call_message(f"c{i}", name, args) for i, (name, args) in enumerate(calls)] + [answer_message(answer)]
    )


def _limits() -> Limits:
    return Limits(max_turns=20, max_tool_calls=20, max_prompt_tokens=200_000)


def _context(call_id: str = "c0") -> ToolContext:
    return ToolContext("run-1", call_id, f"key-{call_id}")


def _ledger(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# --- the hostile server ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile") / "ledger.jsonl"


def _hostile(ledger: Path, *args: str, timeout: float = 20.0) -> MCPServer:
    return MCPServer.stdio(
        sys.executable,
        [HOSTILE, "stdio", *args],
        env={"HOSTILE_SECRET": SECRET, "HOSTILE_LEDGER": str(ledger)},
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def hostile(ledger: Path) -> Iterator[MCPServer]:
    with _hostile(ledger) as server:
        yield server


def test_annotations_decide_the_effect_and_the_secure_default() -> None:
    """Read-only means effect-free; anything else (no annotations at all included) is an effect."""
    from mcp_types import ToolAnnotations

    assert treatment(None) == (True, False)
    assert treatment(ToolAnnotations()) == (True, False)
    assert treatment(ToolAnnotations(read_only_hint=True)) == (False, False)
    assert treatment(ToolAnnotations(read_only_hint=False, idempotent_hint=True)) == (True, True)
    assert treatment(ToolAnnotations(destructive_hint=True)) == (True, False)


def test_a_hostile_tool_list_is_refused_whole_and_typed(ledger: Path) -> None:
    """A remote $ref, a backtracking pattern, control characters or a secret in a name: refused at build time."""
    with _hostile(ledger, "refused") as server:
        with pytest.raises(ToolsRefused) as refused:
            server.tools()
        problems = refused.value.problems
        assert set(problems) == {"remote_ref", "backtracking", "bell\x07\x1b[31mred", REDACTED}
        assert SECRET not in str(refused.value)  # a tool named after the server's secret is refused, redacted
        assert "nothing is ever fetched" in problems["remote_ref"]
        assert "linear-time regex engine" in problems["backtracking"]
        assert "\x1b" not in str(refused.value)  # quoted, never written to a terminal raw
        assert isinstance(refused.value, ToolDefinitionError)
        assert list(server.tools(allow=["fine"])) == ["fine"]


def test_the_registry_follows_the_annotations(hostile: MCPServer) -> None:
    """Each tool is a ToolSpec whose flags come from its annotations, its description kept."""
    tools = hostile.tools()
    assert not tools["leak"].effectful and tools["write"].effectful and not tools["write"].idempotent
    assert tools["write"].description.startswith("An effect")
    assert tools["write"].json_schema["required"] == ["note"]


def test_an_effect_is_denied_without_a_gate_and_never_reaches_the_server(hostile: MCPServer, ledger: Path) -> None:
    """No gate: a read runs, the write is denied, and the server never hears of it."""
    before = _ledger(ledger)
    result = Agent(_model(("write", {"note": "nope"}), ("leak", {"where": "result"})), hostile.tools()).run("w")
    kinds = [o.kind for o in result.state.observations]
    assert kinds == ["denied", "result"]
    assert _ledger(ledger) == before


def test_an_invalid_call_is_refused_before_the_server(hostile: MCPServer, ledger: Path) -> None:
    """The tool's input schema is the contract: a call that breaks it is invalid, and nothing is sent."""
    before = _ledger(ledger)
    result = Agent(_model(("write", {"note": 5})), hostile.tools(), gate=allow_all).run("w")
    assert result.state.observations[0].kind == "invalid"
    assert _ledger(ledger) == before


def test_the_idempotency_key_travels_in_meta(hostile: MCPServer, ledger: Path) -> None:
    """The handler sends the call's idempotency key in the request's _meta; the server receives exactly it."""
    tools = hostile.tools()
    assert tools["write"].handler(context=_context("k1"), note="keyed") == {"result": "wrote keyed"}
    assert _ledger(ledger)[-1] == {"tool": "write", "note": "keyed", "key": "key-k1"}
    assert IDEMPOTENCY_KEY == "agent-fsm/idempotency-key"


def test_secrets_never_reach_the_transcript_events_or_errors(hostile: MCPServer) -> None:
    """The server's secret, echoed in a result, an error and a progress message, is redacted from all of them."""
    events: list[Any] = []
    tools = hostile.tools(on_event=events.append)
    model = _model(("leak", {"where": "result"}), ("leak", {"where": "error"}), ("steps", {}))
    result = Agent(model, tools, gate=allow_all, limits=_limits()).run("leak", on_event=events.append)
    observations = result.state.observations
    assert [o.kind for o in observations] == ["result", "error", "result"]
    assert REDACTED in json.dumps(observations[0].content) and REDACTED in observations[1].content
    progress = [e for e in events if isinstance(e, MCPProgress)]
    assert [(p.progress, p.total) for p in progress] == [(1, 3), (2, 3), (3, 3)]
    assert progress[-1].message == f"almost, {REDACTED}" and progress[-1].call_id == "c2"
    assert SECRET not in result.state.to_json()
    assert SECRET not in repr(events) and SECRET not in repr(hostile) and SECRET not in repr(tools)


def test_the_servers_own_log_reaches_stderr_without_its_secrets(
    hostile: MCPServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """The SDK's server logs a failed tool's message (quoting the secret) on stderr: it arrives, redacted."""
    with pytest.raises(ToolError):
        hostile.tools()["leak"].handler(context=_context(), where="error")
    seen = ""
    deadline = time.monotonic() + 10
    while "cannot do it with" not in seen and time.monotonic() < deadline:
        time.sleep(0.05)
        seen += capsys.readouterr().err
    assert REDACTED in seen and SECRET not in seen  # (the server's logger wraps its lines as it likes)


def test_secrets_stay_out_of_a_failure_to_start() -> None:
    """A server that cannot start says so, typed, without the env it was given."""
    server = MCPServer.stdio("/nonexistent/mcp-server", ["--token", "x"], env={"TOKEN": SECRET}, timeout=5)
    with pytest.raises(ServerUnavailable) as failed:
        server.open()
    assert SECRET not in str(failed.value)
    server.close()


def test_a_huge_result_is_cut_with_a_marker(hostile: MCPServer) -> None:
    """Ten megabytes come back as the first characters and a marker saying how long the result was."""
    tools = hostile.tools(max_result_chars=1000)
    content = tools["huge"].handler(context=_context())
    assert isinstance(content, str) and len(content) < 1200
    assert "[cut: the result was 10,000,0" in content


def test_a_tool_that_never_answers(hostile: MCPServer) -> None:
    """Effect-free: an error observation after the timeout. Effectful: the outcome is unknown (OutcomeUnknown)."""
    tools = hostile.tools(timeout=1.0)
    result = Agent(_model(("never", {})), tools, gate=allow_all).run("wait")
    observation = result.state.observations[0]
    assert observation.kind == "error" and "no answer within 1s" in observation.content
    with pytest.raises(OutcomeUnknown, match="outcome of never_write is unknown"):
        tools["never_write"].handler(context=_context(), note="n")
    # The engine never guesses: the run pauses for a person, and nothing is recorded as done or not done.
    result = Agent(_model(("never_write", {"note": "n"})), tools, gate=allow_all).run("wait")
    assert result.stop is Stop.AWAITING_APPROVAL
    assert result.reason is not None and result.reason.startswith("outcome unknown: never_write")
    assert result.state.observations == []


def test_a_server_that_exits_mid_call(tmp_path: Path) -> None:
    """Death mid-call: effectful, outcome unknown; effect-free, an error; the next call starts the server again."""
    ledger = tmp_path / "ledger.jsonl"
    with _hostile(ledger) as server:
        tools = server.tools()
        with pytest.raises(OutcomeUnknown, match="connection to the server was lost"):
            tools["die"].handler(context=_context(), note="once")
        assert _ledger(ledger) == [{"tool": "die", "note": "once"}]  # it did happen: nobody may assume it did not
        model = _model(("die_read", {}), ("leak", {"where": "result"}))
        result = Agent(model, tools, gate=allow_all, limits=_limits()).run("die")
        assert [o.kind for o in result.state.observations] == ["error", "result"]
        assert result.stop is Stop.ANSWERED
    # Closed, the server is not started again behind the user's back: a call is refused, not run.
    with pytest.raises(ToolError, match="was not run: .* is not open"):
        tools["die"].handler(context=_context(), note="after close")
    assert _ledger(ledger) == [{"tool": "die", "note": "once"}]


def test_a_tool_list_that_changes_between_turns(tmp_path: Path) -> None:
    """After the server says its list changed: a vanished tool is invalid, a new one is offered with its schema."""
    ledger = tmp_path / "ledger.jsonl"
    with _hostile(ledger) as server:
        tools = server.tools()
        paused = Agent(_model(("write", {"note": "later"})), tools, gate=ask_for_effects(tools)).run("w")
        assert paused.stop is Stop.AWAITING_APPROVAL
        tools["switch"].handler(context=_context())
        deadline = time.monotonic() + 10
        while tools.get("write_v2") is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "write" not in tools and tools["write_v2"].json_schema["required"] == ["note", "count"]
        # The paused call is judged afresh against the registry as it now stands: its tool is gone.
        resumed = Agent(_model(("write", {"note": "later"})), tools, gate=ask_for_effects(tools)).resume(
            paused.state, approve=True
        )
        assert resumed.state.observations[-1].kind == "invalid"
        assert "unknown tool: 'write'" in resumed.state.observations[-1].content
        assert [e["tool"] for e in _ledger(ledger)] == []


class _Watching:
    """Plays ``replies``, noting the tools it is shown at each call; before its second, waits for the server's news."""

    def __init__(self, server: MCPServer, replies: list[dict[str, Any]]) -> None:
        self.server, self.replies, self.shown = server, replies, []
        self.generation = server.generation

    def chat(self, messages: Any, tools: Any = ()) -> dict[str, Any]:
        self.shown.append(sorted(t["function"]["name"] for t in tools))
        if len(self.shown) == 2:  # the switch was observed; its announcement may still be on the wire
            deadline = time.monotonic() + 10
            while self.server.generation == self.generation and time.monotonic() < deadline:
                time.sleep(0.02)
        return self.replies[len(self.shown) - 1]


def test_a_changed_tool_list_is_shown_at_the_next_turn_and_still_judged(tmp_path: Path) -> None:
    """After the list changes mid-run, the next model call sees it; a refused newcomer is left out; the gate judges."""
    ledger = tmp_path / "ledger.jsonl"
    with _hostile(ledger) as server:
        tools = server.tools()

        def gate(call: Any) -> Verdict:
            if call.name == "switch" or not tools[call.name].effectful:
                return Verdict.allow("the switch, and reads")
            return Verdict.ask("a write needs a person")

        model = _Watching(
            server,
            [
                tool_call_message("c1", "switch", {}),
                tool_call_message("c2", "steps", {}),
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        tool_call_message("c3", "sneaky", {"note": "x"})["tool_calls"][0],
                        tool_call_message("c4", "write_v2", {"note": "n", "count": 2})["tool_calls"][0],
                    ],
                },
            ],
        )
        agent = Agent(model, tools, gate=gate, limits=_limits())
        before = agent.digest
        paused = agent.run("switch, then write")
    assert "write" in model.shown[0] and "write_v2" not in model.shown[0]
    assert "write_v2" in model.shown[2] and "write" not in model.shown[2] and "sneaky" not in model.shown[2]
    switched, stepped, sneaky = paused.state.observations
    assert (switched.kind, stepped.kind, sneaky.kind) == ("result", "result", "invalid")
    assert "unknown tool: 'sneaky'" in sneaky.content  # its remote $ref schema kept it off the list
    assert paused.stop is Stop.AWAITING_APPROVAL and paused.blocked_on is not None
    assert (paused.blocked_on.name, paused.reason) == ("write_v2", "a write needs a person")
    assert [e["tool"] for e in _ledger(ledger)] == []  # the new effect waits for the gate's person
    assert paused.state.agent_digest == agent.digest != before  # the pause names the contracts it was judged under


def test_a_combined_registry_follows_the_server_and_a_newcomer_never_shadows(tmp_path: Path) -> None:
    """Mixed with local tools, a changed list still shows next turn; a new name that clashes is left out."""
    local = {"write_v2": ToolSpec("The local writer.", {"text": str}, lambda text: text)}
    with _hostile(tmp_path / "ledger.jsonl") as server:
        tools = combine(local, server.tools())
        replies = [tool_call_message("c1", "switch", {}), tool_call_message("c2", "steps", {}), answer_message("ok")]
        model = _Watching(server, replies)
        gate = lambda call: Verdict.allow("the switch, and reads")
        result = Agent(model, tools, gate=gate, limits=_limits()).run("switch")
    assert result.stop is Stop.ANSWERED
    assert "write" in model.shown[0] and "write" not in model.shown[2] and model.shown[2].count("write_v2") == 1
    assert tools["write_v2"] is local["write_v2"] and "sneaky" not in tools


def test_combine_refuses_a_clash_and_a_prefix_resolves_it(hostile: MCPServer) -> None:
    """Local and MCP tools mix in one registry; a name offered twice is refused, never shadowed."""
    local = {"leak": ToolSpec("A local tool.", {"x": int}, lambda x: x)}
    with pytest.raises(ToolDefinitionError, match="offered twice: 'leak'"):
        combine(local, hostile.tools())
    mixed = combine(local, hostile.tools(prefix="h"))
    assert {"leak", "h_leak", "h_write"} <= set(mixed)
    assert mixed["h_leak"].handler(context=_context(), where="result")["result"].startswith("the secret is")


def test_the_answer_shapes() -> None:
    """JSON text is data, other text is text, media are typed placeholders, isError is an error."""
    from mcp_types import (
        AudioContent,
        BlobResourceContents,
        CallToolResult,
        EmbeddedResource,
        ImageContent,
        ResourceLink,
        TextContent,
    )

    secrets = Secrets([SECRET])
    text = CallToolResult(content=[TextContent(type="text", text='{"a": [1, 2]}')])
    assert answer_of(text, secrets=secrets).content == {"a": [1, 2]}
    media = CallToolResult(
        content=[
            ImageContent(type="image", data="aGVsbG8=", mime_type="image/png"),
            AudioContent(type="audio", data="AAAA", mime_type="audio/wav"),
            ResourceLink(type="resource_link", uri="file:///x", name="x", mime_type="text/plain"),
            EmbeddedResource(
                type="resource", resource=BlobResourceContents(uri="file:///b", blob="AAAA", mime_type="x/y")
            ),
        ]
    )
    assert answer_of(media, secrets=secrets).content == [
        Image(data=b"hello", media_type="image/png"),  # sent on to the model; its placeholder elsewhere
        {"type": "audio", "mime_type": "audio/wav", "bytes": 3},
        {"type": "resource_link", "uri": "file:///x", "name": "x", "mime_type": "text/plain"},
        {"type": "resource", "uri": "file:///b", "mime_type": "x/y", "bytes": 3},
    ]
    blob = BlobResourceContents(uri="file:///r.pdf", blob="JVBERg==", mime_type="application/pdf")
    pdf = EmbeddedResource(type="resource", resource=blob)
    bmp = ImageContent(type="image", data="Qk0=", mime_type="image/bmp")  # no provider reads it: a placeholder
    both = answer_of(CallToolResult(content=[pdf, bmp]), secrets=secrets).content
    assert both == [File(data=b"%PDF"), {"type": "image", "mime_type": "image/bmp", "bytes": 2}]
    half = base64.b64encode(b"\0" * (MAX_PART_BYTES // 2 + 1)).decode()  # two of them pass the cap together
    pair = [ImageContent(type="image", data=half, mime_type="image/png")] * 2
    sent, held = answer_of(CallToolResult(content=pair), secrets=secrets).content
    assert isinstance(sent, Image) and held == {
        "type": "image",
        "mime_type": "image/png",
        "bytes": MAX_PART_BYTES // 2 + 1,
    }
    error = CallToolResult(content=[TextContent(type="text", text=f"denied for {SECRET}")], is_error=True)
    assert answer_of(error, secrets=secrets).content == f"denied for {REDACTED}"
    assert not answer_of(error, secrets=secrets).ok
    quoted = CallToolResult(content=[], structured_content={"v": f'he said "{SECRET}"'})
    assert SECRET not in json.dumps(answer_of(quoted, secrets=secrets).content)


# --- mcp-server-git ----------------------------------------------------------------------------------------------


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        unavailable("git is not installed")
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "agent@example.com")
    _git(repo, "config", "user.name", "agent")
    (repo / "a.txt").write_text("one\n")
    _git(repo, "add", "a.txt")
    _git(repo, "commit", "-q", "-m", "first")
    (repo / "a.txt").write_text("two\n")
    _git(repo, "add", "a.txt")  # staged: what git_commit would commit
    return repo


def _commits(repo: Path) -> int:
    return int(_git(repo, "rev-list", "--count", "HEAD"))


def _git_server(repo: Path) -> MCPServer:
    return MCPServer.stdio(_program("mcp-server-git"), ["--repository", str(repo)], timeout=60)


def test_git_reads_run_and_the_commit_waits_for_a_person_once(repo: Path, tmp_path: Path) -> None:
    """Reads run; git_commit is denied with no gate; asked, approved once through the store: exactly one commit."""
    from agent_fsm.store import AlreadyDecided, SqliteStore, approve

    path = str(repo)
    calls = [("git_status", {"repo_path": path}), ("git_commit", {"repo_path": path, "message": "second"})]
    with _git_server(repo) as git:
        tools = git.tools()
        assert (tools["git_log"].effectful, tools["git_commit"].effectful) == (False, True)
        assert (tools["git_commit"].idempotent, tools["git_reset"].effectful) == (False, True)
        denied = Agent(_model(*calls), tools).run("commit")
        assert [o.kind for o in denied.state.observations] == ["result", "denied"]
        assert "a.txt" in denied.state.observations[0].content and _commits(repo) == 1

        store = SqliteStore(str(tmp_path / "runs.db"))
        agent = Agent(_model(*calls), tools, gate=ask_for_effects(tools))
        paused = agent.run("commit", store=store, run_id="git-1")
        assert paused.stop is Stop.AWAITING_APPROVAL and _commits(repo) == 1
        done = approve(store, "git-1", Agent(_model(*calls), tools, gate=ask_for_effects(tools)), reviewer="ana")
        assert done.state.observations[-1].kind == "result" and _commits(repo) == 2
        with pytest.raises(AlreadyDecided):
            approve(store, "git-1", Agent(_model(*calls), tools, gate=ask_for_effects(tools)), reviewer="bo")
        assert _commits(repo) == 2
        assert _git(repo, "log", "-1", "--format=%s").strip() == "second"
        store.close()


def test_git_commit_approved_once_through_the_inbox(repo: Path, tmp_path: Path) -> None:
    """The same pause decided in the web inbox by a signed-in reviewer: one commit; a second decision is refused."""
    import re

    httpx = pytest.importorskip("httpx")
    pytest.importorskip("starlette")
    from agent_fsm.store import SqliteStore, open_store
    from agent_fsm.web import Reviewers, inbox_app
    from tests.web_server import serving

    token = "ana-token-0123456789"
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    commit = ("git_commit", {"repo_path": str(repo), "message": "from the inbox"})
    with _git_server(repo) as git:
        tools = git.tools()
        with SqliteStore(tmp_path / "runs.db") as store:
            Agent(_model(commit), tools, gate=ask_for_effects(tools)).run("commit", store=store, run_id="git-2")

        world = Agent(_model(commit), tools, gate=ask_for_effects(tools))
        app = inbox_app(lambda: open_store(url), world, reviewers=Reviewers.parse(f"ana:{token}"), wait=30)
        with serving(app) as base, httpx.Client(base_url=base, timeout=60) as client:
            csrf = lambda text: re.search(r'name="csrf" value="([^"]+)"', text).group(1)
            login = client.get("/login")
            client.post("/login", data={"csrf": csrf(login.text), "reviewer": "ana", "token": token})
            page = client.get("/runs/git-2")
            form = {"csrf": csrf(page.text), "pause_id": re.search(r'name="pause_id" value="([^"]+)"', page.text)[1]}
            assert client.post("/runs/git-2/decide", data={**form, "action": "approve"}).status_code == 303
            assert client.post("/runs/git-2/decide", data={**form, "action": "approve"}).status_code == 409
        with open_store(url) as store:
            assert store.load("git-2").status == "ended"
    assert _commits(repo) == 2 and _git(repo, "log", "-1", "--format=%s").strip() == "from the inbox"


@pytest.mark.temporal
def test_git_on_temporal_the_worker_owns_the_connection(repo: Path, temporal_server: Any) -> None:
    """On Temporal the MCP call is an activity of the worker holding the server: paused, approved, one commit."""
    import asyncio
    import uuid

    from temporalio.client import Client

    from agent_fsm.temporal import Timeouts, start_run
    from tests.temporal_server import ThreadWorker

    queue = f"mcp-{uuid.uuid4().hex[:8]}"
    calls = [
        ("git_status", {"repo_path": str(repo)}),
        ("git_commit", {"repo_path": str(repo), "message": "on temporal"}),
    ]
    with _git_server(repo) as git:
        tools = dict(git.tools())  # a snapshot: a workflow judges calls deterministically, with no I/O
        agents = [Agent(_model(*calls), tools, gate=ask_for_effects(tools), name="git")]
        worker = ThreadWorker(temporal_server.address, queue, agents).start()

        async def review() -> Any:
            client = await Client.connect(temporal_server.address)
            handle = await start_run(client, agent="git", task="commit", run_id=f"git-{queue}", task_queue=queue)
            for _ in range(600):
                state = await handle.state()
                if state.machine_state == "AwaitingApproval":
                    break
                await asyncio.sleep(0.05)
            assert state.machine_state == "AwaitingApproval", (state.path, state.observations)
            assert _commits(repo) == 1
            await handle.approve(reviewer="ana")
            return await handle.result()

        try:
            result = asyncio.run(asyncio.wait_for(review(), 120))
        finally:
            worker.stop()
    assert result.stop is Stop.ANSWERED and [o.kind for o in result.state.observations] == ["result", "result"]
    assert _commits(repo) == 2
    # git_commit is not idempotent: its activity gets exactly one attempt (at-least-once would mean twice).
    from agent_fsm.temporal.proxies import _retry

    assert _retry(tools["git_commit"], Timeouts()).maximum_attempts == 1  # the default settings the worker served
    assert _retry(tools["git_status"], Timeouts()).maximum_attempts > 1


_KILLED_CHILD = """
import os, signal, sys
import attrs
from agent_fsm import Agent, ScriptedModel, allow_all, tool_call_message, answer_message
from agent_fsm.mcp import MCPServer
from agent_fsm.store import SqliteStore

git_binary, repo, db = sys.argv[1:4]
with MCPServer.stdio(git_binary, ["--repository", repo], timeout=60) as git:
    tools = dict(git.tools())
    commit = tools["git_commit"].handler

    def commit_then_die(context, **arguments):
        commit(context=context, **arguments)  # the effect happened...
        os.kill(os.getpid(), signal.SIGKILL)  # ...and the process dies before its result is committed

    tools["git_commit"] = attrs.evolve(tools["git_commit"], handler=commit_then_die)
    model = ScriptedModel([tool_call_message("c0", "git_commit", {"repo_path": repo, "message": "second"}),
                           answer_message("done")])
    Agent(model, tools, gate=allow_all).run("commit", store=SqliteStore(db), run_id="killed")
"""


def test_sigkill_between_intent_and_result_leaves_an_outcome_unknown_pause(repo: Path, tmp_path: Path) -> None:
    """The worker dies after the commit, before its result is stored: recovery pauses for a person, no second commit."""
    from agent_fsm.store import OUTCOME_UNKNOWN, SqliteStore, recover, reject

    git_binary = _program("mcp-server-git")
    db = str(tmp_path / "runs.db")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.run(
        [sys.executable, "-c", _KILLED_CHILD, git_binary, str(repo), db], env=env, capture_output=True, timeout=120
    )
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()[-2000:]
    assert _commits(repo) == 2
    store = SqliteStore(db)
    with _git_server(repo) as git:
        tools = git.tools()
        killed = ("git_commit", {"repo_path": str(repo), "message": "second"})  # the killed run's script
        [recovered] = recover(store, Agent(_model(killed), tools, gate=allow_all), older_than=0)
        assert recovered.interrupted == "c0"
        assert recovered.result is not None and recovered.result.stop is Stop.AWAITING_APPROVAL
        assert (recovered.result.reason or "").startswith(OUTCOME_UNKNOWN)
        assert _commits(repo) == 2  # never run again by itself
        ended = reject(
            store, "killed", Agent(_model(killed), tools, gate=allow_all), reviewer="ana", reason="it went through"
        )
        assert ended.stop is Stop.ANSWERED and _commits(repo) == 2
    store.close()


# --- mcp-server-time ---------------------------------------------------------------------------------------------


def test_time_server_over_stdio() -> None:
    """mcp-server-time: read-only tools run with no gate; the answer (JSON text) is data."""
    with MCPServer.stdio(_program("mcp-server-time"), ["--local-timezone", "UTC"], timeout=60) as clock:
        tools = clock.tools()
        assert not tools["get_current_time"].effectful
        result = Agent(_model(("get_current_time", {"timezone": "Europe/Paris"})), tools).run("time")
        observation = result.state.observations[0]
        assert observation.kind == "result" and observation.content["timezone"] == "Europe/Paris"


# --- server-everything (npm), over stdio and Streamable HTTP ----------------------------------------------------


@pytest.fixture(scope="module")
def everything() -> Iterator[MCPServer]:
    node, index = _node_server()
    with MCPServer.stdio(node, [str(index), "stdio"], env={"EVERYTHING_TOKEN": SECRET}, timeout=60) as server:
        yield server


def test_everything_structured_content_media_and_errors(everything: MCPServer) -> None:
    """Structured content is the result; media are placeholders; isError is an error; the env's secret is redacted."""
    tools = everything.tools(allow=lambda name: name.startswith("get-") or name == "gzip-file-as-resource")
    assert tools["gzip-file-as-resource"].effectful and tools["gzip-file-as-resource"].idempotent
    calls = [
        ("get-structured-content", {"location": "Chicago"}),
        ("get-tiny-image", {}),
        ("get-resource-reference", {"resourceType": "Blob", "resourceId": 2}),
        ("get-sum", {"a": "one", "b": 2}),
        ("get-env", {}),
        ("gzip-file-as-resource", {"name": "x.gz", "data": "http://127.0.0.1:9/nothing", "outputType": "resource"}),
    ]
    result = Agent(_model(*calls), tools, gate=allow_all, limits=_limits()).run("everything")
    structured, image, resource, invalid, env, failed = result.state.observations
    assert failed.kind == "error" and failed.content == "fetch failed"  # the server's isError, with its text
    assert structured.kind == "result" and "temperature" in structured.content
    assert [part["media_type"] for part in image.media] == ["image/png"]  # the image itself goes on to the model
    assert any(isinstance(b, str) and b.startswith("[image image/png, ") for b in image.content)
    assert image.media[0]["data"] not in json.dumps(image.content)
    carried = next(m for m in result.state.messages if m.get("tool_call_id") == image.call_id)
    assert carried["content"][1:] == list(image.media)  # the tool message the model reads holds the image
    assert any(isinstance(b, dict) and b["type"] == "resource" and "bytes" in b for b in resource.content)
    assert invalid.kind == "invalid"  # refused by the contract before the server saw it
    assert env.kind == "result" and SECRET not in json.dumps(env.content) and REDACTED in json.dumps(env.content)


def test_everything_progress_of_a_long_running_call(everything: MCPServer) -> None:
    """Progress notifications of a long-running operation reach on_event, in the caller's thread."""
    events: list[Any] = []
    tools = everything.tools(allow=["trigger-long-running-operation"], on_event=events.append)
    model = _model(("trigger-long-running-operation", {"duration": 1, "steps": 3}))
    result = Agent(model, tools).run("long", on_event=events.append)
    assert result.state.observations[0].kind == "result"
    assert [(e.progress, e.total) for e in events if isinstance(e, MCPProgress)] == [(1, 3), (2, 3), (3, 3)]


def test_everything_progress_reaches_the_runs_own_listeners_as_it_comes(everything: MCPServer) -> None:
    """With no sink given to the tools, on_event and astream hear the server's progress during the call."""
    import asyncio

    tools = everything.tools(allow=["trigger-long-running-operation"])

    def model() -> ScriptedModel:
        return _model(("trigger-long-running-operation", {"duration": 1.5, "steps": 3}))

    heard: list[tuple[float, Any]] = []
    Agent(model(), tools, limits=_limits()).run("long", on_event=lambda e: heard.append((time.monotonic(), e)))

    async def streamed() -> list[tuple[float, Any]]:
        return [(time.monotonic(), e) async for e in Agent(model(), tools, limits=_limits()).astream("long")]

    for events in (heard, asyncio.run(streamed())):
        progress = [(at, e) for at, e in events if isinstance(e, ToolProgress)]
        assert [(e.progress, e.total, e.call_id, e.name) for _, e in progress] == [
            (step, 3, "c0", "trigger-long-running-operation") for step in (1, 2, 3)
        ]
        [observed_at] = [at for at, e in events if e.type == "observed"]
        assert observed_at - progress[0][0] > 0.5  # heard while the server was still working, not after the call


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def serving_http(start: Callable[[int], tuple[list[str], dict[str, str]]], cwd: Path | None = None) -> Iterator[str]:
    """A Streamable HTTP server on a free port of 127.0.0.1 (``start(port)``: its command and environment): its URL."""
    port = _free_port()
    command, env = start(port)
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture(scope="module")
def everything_http() -> Iterator[str]:
    node, _ = _node_server()
    with serving_http(lambda port: ([node, "everything-http.mjs"], {**os.environ, "PORT": str(port)}), HERE) as url:
        yield url


def test_everything_over_streamable_http(everything_http: str) -> None:
    """The same server over Streamable HTTP on 127.0.0.1: structured content, progress; the header stays secret."""
    events: list[Any] = []
    headers = {"Authorization": f"Bearer {SECRET}"}
    with MCPServer.http(everything_http, headers=headers, timeout=60) as server:
        assert SECRET not in repr(server)
        tools = server.tools(allow=["get-structured-content", "trigger-long-running-operation"], on_event=events.append)
        model = _model(
            ("get-structured-content", {"location": "New York"}),
            ("trigger-long-running-operation", {"duration": 1, "steps": 2}),
        )
        result = Agent(model, tools).run("http", on_event=events.append)
    assert [o.kind for o in result.state.observations] == ["result", "result"]
    assert "temperature" in result.state.observations[0].content
    assert [e.progress for e in events if isinstance(e, MCPProgress)] == [1, 2]
    assert [e.progress for e in events if isinstance(e, ToolProgress)] == [1, 2]  # the run heard it too


def test_an_unreachable_http_server_is_typed_and_keeps_its_secrets() -> None:
    """No server on the port: ServerUnavailable, without the bearer token or the URL's credentials."""
    url = f"http://user:{SECRET}@127.0.0.1:{_free_port()}/mcp?key={SECRET}"
    server = MCPServer.http(url, headers={"Authorization": f"Bearer {SECRET}"}, timeout=5)
    with pytest.raises(ServerUnavailable) as failed:
        server.open()
    server.close()
    assert SECRET not in str(failed.value) and SECRET not in repr(server)


# --- async with, and the CLI ------------------------------------------------------------------------------------


def test_async_with_and_an_async_run(ledger: Path) -> None:
    """``async with`` opens the same connection; under arun the blocking handler runs in a worker thread."""
    import asyncio

    async def main() -> Any:
        async with _hostile(ledger) as server:
            return await Agent(_model(("leak", {"where": "result"})), server.tools()).arun("async")

    result = asyncio.run(main())
    assert result.state.observations[0].kind == "result"


def test_cli_mcp_list(ledger: Path) -> None:
    """``agent-fsm mcp list -- COMMAND ARGS`` prints each tool with how the engine will treat it."""
    from typer.testing import CliRunner

    from agent_fsm.cli import app

    out = CliRunner().invoke(app, ["mcp", "list", "--", sys.executable, HOSTILE, "stdio", "clean"])
    assert out.exit_code == 0, out.output
    rows = {line.split()[0]: line for line in out.output.splitlines() if line.strip()}
    assert "effect-free" in rows["leak"] and "effect" in rows["write"] and "not idempotent" in rows["write"]


def test_importing_agent_fsm_mcp_loads_no_sdk() -> None:
    """The SDK is imported when a server is opened, not by ``import agent_fsm.mcp``."""
    probe = "import sys, agent_fsm.mcp; print('mcp' in sys.modules or 'mcp_types' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == "False"
