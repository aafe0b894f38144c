"""
agent_fsm.mcp against servers that attack the adapter itself: pieces of secrets, the SDK's logs, odd schemas, silence.

Every server here is a real process on stdio: tests/mcp_servers/raw.py
speaks JSON-RPC by hand (so it can send what no SDK would), and
tests/mcp_servers/hostile.py is written with the SDK's server API. A secret
counts as leaked when any 8 characters of it in a row reach the output
(:func:`_pieces`): whole-value redaction alone would miss a quoted fragment.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_fsm import (
    Agent,
    OutcomeUnknown,
    ScriptedModel,
    Stop,
    ToolContext,
    allow_all,
    answer_message,
    tool_call_message,
)

pytest.importorskip("mcp", reason="the MCP SDK is in the test extra: pip install -e '.[test]'")

from agent_fsm.mcp import REDACTED, MCPServer, ServerUnavailable, ToolsRefused
from tests.test_mcp import serving_http

HERE = Path(__file__).parent / "mcp_servers"
RAW = str(HERE / "raw.py")
HOSTILE = str(HERE / "hostile.py")
SECRET = "sk-live-Q7x9P2m4K8v1R5t3W6y0Z2a4C6e8G0i2K4m6O8q0"
ROOT = str(Path(__file__).parent.parent)


def _pieces(text: str, secret: str = SECRET) -> list[str]:
    """Every 8-character run of ``secret`` found in ``text`` (empty: not a piece of it leaked)."""
    return [secret[i : i + 8] for i in range(len(secret) - 7) if secret[i : i + 8] in text]


def _raw(mode: str, *extra: str, timeout: float = 10.0) -> MCPServer:
    return MCPServer.stdio(sys.executable, [RAW, mode, *extra], env={"RAW_SECRET": SECRET}, timeout=timeout)


def _context() -> ToolContext:
    return ToolContext("run-1", "c0", "key-c0")


def _model(name: str, arguments: dict[str, Any]) -> ScriptedModel:
    return ScriptedModel([tool_call_message("c0", name, arguments), answer_message("done")])


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, *sys.path])}


def test_the_pieces_check_sees_a_fragment() -> None:
    """The leak check is not vacuous: a head or a tail of the secret is a piece, a redaction is not."""
    assert _pieces(f"input_value='token={SECRET[:24]}...{SECRET[-24:]}'")
    assert _pieces(f"{SECRET[20:30]}") and not _pieces(f"token={REDACTED}")


def test_a_long_error_is_redacted_before_it_is_cut() -> None:
    """A JSON-RPC error quoting the secret just before the 2,000th character: no piece of it survives the cut."""
    with _raw("tools") as server:
        tools = server.tools()
        with pytest.raises(OutcomeUnknown) as unknown:
            tools["long_error"].handler(context=_context())
        assert "token=" in str(unknown.value) and _pieces(str(unknown.value)) == []
        result = Agent(_model("long_error", {}), tools, gate=allow_all).run("err")
    assert result.stop is Stop.AWAITING_APPROVAL and _pieces(result.state.to_json()) == []


def test_a_malformed_result_is_named_not_quoted() -> None:
    """A result that breaks the MCP schema: a fixed message naming the field; no piece of the value it held."""
    with _raw("tools") as server:
        tools = server.tools()
        with pytest.raises(OutcomeUnknown) as unknown:
            tools["malformed"].handler(context=_context())
        message = str(unknown.value)
        assert "content" in message and "list_type" in message, message
        assert _pieces(message) == [] and "input_value" not in message
        result = Agent(_model("malformed", {}), tools, gate=allow_all).run("bad")
    assert _pieces(result.state.to_json()) == [] and _pieces(repr(result)) == []


def test_a_malformed_tool_list_is_named_not_quoted() -> None:
    """A ``tools/list`` answer that breaks the schema: ServerUnavailable naming the field, no piece of the value."""
    with _raw("tools", "badlist") as server, pytest.raises(ServerUnavailable) as failed:
        server.tools()
    assert "tools: list_type" in str(failed.value) and _pieces(str(failed.value)) == []


def test_a_debug_line_on_stdout_reaches_no_log_with_the_secret(caplog: pytest.LogCaptureFixture) -> None:
    """A server printing a non-JSON-RPC line: the SDK's logger records it, with every piece of the secret redacted."""
    caplog.set_level(logging.DEBUG)
    with _raw("noisy") as server:
        assert "echo" in server.tools()
    records = [r for r in caplog.records if r.name.startswith("mcp")]
    assert records, "the SDK logged nothing: the check would be vacuous"
    formatted = "\n".join(logging.Formatter().format(r) for r in records)
    assert "debug: starting" in formatted and _pieces(formatted) == []


def test_the_http_clients_log_keeps_no_piece_of_a_url_secret(caplog: pytest.LogCaptureFixture) -> None:
    """Over Streamable HTTP the SDK's HTTP client logs each request's URL: its query's secret is redacted."""
    env = {**_env(), "HOSTILE_SECRET": "unused-secret-value", "HOSTILE_LEDGER": os.devnull}
    with serving_http(lambda port: ([sys.executable, HOSTILE, "http", str(port), "clean"], env)) as url:
        caplog.set_level(logging.INFO)
        with MCPServer.http(f"{url}?key={SECRET}", timeout=20) as server:
            assert "leak" in server.tools()
    formatted = "\n".join(logging.Formatter().format(r) for r in caplog.records)
    assert "HTTP Request: POST" in formatted, "the HTTP client logged no request: the check would be vacuous"
    assert _pieces(formatted) == []


def test_cli_mcp_list_prints_no_piece_of_an_env_value() -> None:
    """``agent-fsm mcp list --env RAW_SECRET=...`` against a noisy server: neither stream holds a piece of it."""
    done = subprocess.run(
        [sys.executable, "-m", "agent_fsm.cli", "mcp", "list", "--env", f"RAW_SECRET={SECRET}"]
        + ["--", sys.executable, RAW, "noisy"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "echo" in done.stdout and "debug: starting" in done.stderr
    assert _pieces(done.stdout + done.stderr) == []


def test_a_wrapped_server_log_line_keeps_no_piece_of_the_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A list change adding a name twice: the server logs the clash, wrapped mid-secret; the relay keeps no piece."""
    secret = "sk-live-7f3a9c2e41d84b6f"
    env = {"HOSTILE_SECRET": secret, "HOSTILE_LEDGER": str(tmp_path / "ledger.jsonl")}
    with MCPServer.stdio(sys.executable, [HOSTILE, "stdio"], env=env, timeout=20) as server:
        server.tools()["clash"].handler(context=_context())
        seen = ""
        deadline = time.monotonic() + 10
        while "already exists" not in seen and time.monotonic() < deadline:
            time.sleep(0.05)
            seen += capsys.readouterr().err
        time.sleep(0.3)
        seen += capsys.readouterr().err
    assert "already exists" in seen
    assert _pieces(seen, secret) == [], seen


def test_an_argument_named_self_reaches_the_server() -> None:
    """A tool whose argument is named ``self``: the call runs (the handler's own parameters never clash)."""
    with _raw("tools") as server:
        tools = server.tools()
        result = Agent(_model("echo", {"self": "hi"}), tools).run("echo")
    assert [(o.kind, o.content) for o in result.state.observations] == [("result", "echo hi")]


def test_properties_null_is_refused_typed() -> None:
    """``properties: null`` in a tool's schema: ToolsRefused naming the tool; the others are still usable."""
    with _raw("tools", "nulls") as server:
        with pytest.raises(ToolsRefused) as refused:
            server.tools()
        assert set(refused.value.problems) == {"nulls"}
        assert "properties" in refused.value.problems["nulls"]
        assert "echo" in server.tools(allow=["echo", "malformed"])


def test_cli_mcp_list_shows_properties_null_as_refused() -> None:
    """``agent-fsm mcp list`` on that server: a refused row, exit 0, no traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "agent_fsm.cli", "mcp", "list", "--", sys.executable, RAW, "tools", "nulls"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    [row] = [line for line in done.stdout.splitlines() if line.startswith("nulls")]
    assert "refused" in row and "properties" in row


_REDOS_CHILD = """
import sys, time
from agent_fsm import ToolContext, ToolError
from agent_fsm.mcp import MCPServer
with MCPServer.stdio(sys.executable, [sys.argv[1], "tools"], timeout=2) as server:
    tools = server.tools()
    started = time.monotonic()
    try:
        tools["redos"].handler(context=ToolContext("r", "c", "k"))
        print("answered")
    except ToolError as exc:
        print("error:", exc)
    print(f"seconds: {time.monotonic() - started:.2f}")
"""


def test_a_backtracking_output_pattern_answers_within_the_timeout() -> None:
    """An output schema's pattern that backtracks on the answer: a typed error within the call's timeout."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _REDOS_CHILD, RAW], capture_output=True, text=True, env=_env(), timeout=60
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the call stalled the process past its timeout")
    assert done.returncode == 0, done.stderr
    assert "error:" in done.stdout and "output schema" in done.stdout, done.stdout
    assert float(done.stdout.split("seconds:")[1]) < 2 + 5  # the call's timeout and the grace


def test_a_backreference_in_an_output_schema_is_refused_at_listing() -> None:
    """An output pattern the linear-time engine cannot run is refused with the tool, like an input one."""
    with _raw("tools", "backref") as server, pytest.raises(ToolsRefused) as refused:
        server.tools()
    assert set(refused.value.problems) == {"backref"}
    assert "output schema" in refused.value.problems["backref"]


def _running(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_a_server_that_never_answers_initialize() -> None:
    """Silence at the handshake: ServerUnavailable within the server's timeout, and its process is stopped."""
    marker = f"silent-{uuid.uuid4().hex}"
    server = _raw("silent", marker, timeout=2)
    started = time.monotonic()
    with pytest.raises(ServerUnavailable, match="did not answer within 2s"):
        server.open()
    elapsed = time.monotonic() - started
    server.close()
    deadline = time.monotonic() + 5
    while _running(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _running(marker) == [], "the server's process was left running"
    assert elapsed < 2 + 5, elapsed


def test_a_silent_server_in_a_run_is_an_error_not_a_hang() -> None:
    """The same silence behind a registry: the failure is typed before any run (nothing waits 60 seconds)."""
    server = _raw("silent", timeout=1)
    started = time.monotonic()
    with pytest.raises(ServerUnavailable), server:
        server.tools()
    assert time.monotonic() - started < 1 + 5


def test_cli_mcp_list_env_without_a_name_is_refused_without_its_value() -> None:
    """``--env VALUE`` (the name forgotten): a usage error that names the mistake, never the value."""
    from typer.testing import CliRunner

    from agent_fsm.cli import app

    for option in ("--env", "--header"):
        target = ["--url", "http://127.0.0.1:9/mcp"] if option == "--header" else ["--", sys.executable, RAW, "tools"]
        out = CliRunner().invoke(app, ["mcp", "list", option, SECRET, *target])
        assert out.exit_code == 2, out.output
        assert option in out.output and _pieces(out.output) == [], out.output


def _expected(text: str, secret: str) -> str:
    """The oracle, by brute force: from left to right, each longest run of 8+ characters of ``secret`` is redacted."""
    out, at = [], 0
    while at < len(text):
        end = max((j for j in range(at + 8, len(text) + 1) if text[at:j] in secret), default=0)
        out.append(REDACTED if end else text[at])
        at = end or at + 1
    return "".join(out)


@given(
    secret=st.text(alphabet="abcdef0123-_xyz", min_size=8, max_size=40),
    chunks=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 40), st.text(max_size=12)), max_size=8),
)
def test_every_run_of_eight_characters_of_a_secret_is_redacted(secret: str, chunks: list[tuple[int, int, str]]) -> None:
    """Text spliced from pieces of a secret and other text: each whole run is redacted, and nothing else."""
    from agent_fsm.mcp.secrets import Secrets

    text = "".join(secret[start : start + size] + other for start, size, other in chunks)
    redacted = Secrets([secret]).text(text)
    assert redacted == _expected(text, secret)
    assert _pieces(redacted, secret) == []
