"""
A git desk: a fresh repository with staged notes, and ``mcp-server-git``'s tools for a scenario spec to use.

The world names its MCP server (``git``); a spec joins its tools with an
``[[mcp]]`` table (``server = "git"``) and never gives a command to run.
The ``committer`` model reads the status, then commits; the ``one_commit``
check reads the repository itself: whether the commit landed, and once.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from agent_fsm.engine import Model, RunResult, ScriptedModel, answer_message, tool_call_message
from agent_fsm.mcp import MCPServer
from agent_fsm.scenarios import Environment

__all__ = ["environment"]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def environment() -> Environment:
    """A repository with one commit and staged notes; ``mcp-server-git`` on it as the server ``git``."""
    repo = Path(tempfile.mkdtemp(prefix="agent-fsm-git-desk-")) / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "desk@example.com")
    _git(repo, "config", "user.name", "desk")
    (repo / "notes.txt").write_text("first\n")
    _git(repo, "add", "notes.txt")
    _git(repo, "commit", "-q", "-m", "first")
    (repo / "notes.txt").write_text("second\n")
    _git(repo, "add", "notes.txt")

    def committer() -> Model:
        where = {"repo_path": str(repo)}
        return ScriptedModel(
            [
                tool_call_message("call_1", "git_status", where),
                tool_call_message("call_2", "git_commit", {**where, "message": "Update the notes"}),
                answer_message("Committed the notes."),
            ]
        )

    def one_commit(result: RunResult) -> bool:
        return _git(repo, "log", "--format=%s").split("\n")[:2] == ["Update the notes", "first"]

    def server() -> MCPServer:
        return MCPServer.stdio(sys.executable, ["-m", "mcp_server_git", "--repository", str(repo)], timeout=60)

    models = {"committer": committer}
    return Environment(tools={}, models=models, checks={"one_commit": one_commit}, mcp={"git": server})
