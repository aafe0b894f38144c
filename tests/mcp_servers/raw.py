"""
A hostile MCP server that speaks JSON-RPC over stdio by hand, for tests/test_mcp_trust.py.

    python tests/mcp_servers/raw.py MODE

The SDK's server API cannot send what this one sends: answers the protocol
does not allow, schemas no SDK would build. ``MODE`` picks the hostility:

* ``silent``: reads every request and never answers one (not even ``initialize``);
* ``noisy``: prints a debug line that is not JSON-RPC, quoting the secret, on stdout first;
* ``tools``: lists the tools below; each misbehaves when called.

Tools: ``malformed`` answers a ``tools/call`` with a result that breaks the
schema (its ``content`` is the secret, not a list); ``long_error`` answers a
JSON-RPC error whose message quotes ``token=<secret>`` just before character
2,000; ``echo`` takes an argument named ``self``; ``redos`` declares an
output schema whose pattern backtracks, and answers a value that makes it.
With ``nulls`` among the arguments, a tool declaring ``properties: null`` is
listed too; with ``backref``, one whose output pattern has a back-reference;
with ``badlist``, the tool list itself is the secret, not a list.
The secret is ``RAW_SECRET`` from the environment.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

SECRET = os.environ.get("RAW_SECRET", "")
MODE = sys.argv[1] if len(sys.argv) > 1 else "tools"

TOOLS: list[dict[str, Any]] = [
    {"name": "malformed", "description": "Answers a result that breaks the schema.", "inputSchema": {"type": "object"}},
    {"name": "long_error", "description": "Answers a long JSON-RPC error.", "inputSchema": {"type": "object"}},
    {
        "name": "echo",
        "description": "Echoes its argument named self.",
        "inputSchema": {"type": "object", "properties": {"self": {"type": "string"}}, "required": ["self"]},
        "annotations": {"readOnlyHint": True},
    },
    {
        "name": "redos",
        "description": "Declares an output pattern that backtracks.",
        "inputSchema": {"type": "object"},
        "outputSchema": {"type": "object", "properties": {"v": {"type": "string", "pattern": "^(a+)+$"}}},
        "annotations": {"readOnlyHint": True},
    },
]
EXTRA = {
    "nulls": {
        "name": "nulls",
        "description": "Properties: null.",
        "inputSchema": {"type": "object", "properties": None},
    },
    "backref": {
        "name": "backref",
        "description": "An output pattern with a back-reference.",
        "inputSchema": {"type": "object"},
        "outputSchema": {"type": "object", "properties": {"v": {"type": "string", "pattern": "^(a+)\\1$"}}},
    },
}


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def answer(request: dict[str, Any]) -> dict[str, Any] | None:
    method, ident = request.get("method"), request.get("id")
    if ident is None:
        return None  # a notification
    if method == "initialize":
        version = request.get("params", {}).get("protocolVersion", "2025-06-18")
        info = {"name": "raw", "version": "1"}
        return {"id": ident, "result": {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info}}
    if method == "tools/list" and "badlist" in sys.argv:
        return {"id": ident, "result": {"tools": f"token={SECRET}"}}
    if method == "tools/list":
        listed = TOOLS + [tool for name, tool in EXTRA.items() if name in sys.argv]
        return {"id": ident, "result": {"tools": listed}}
    if method == "tools/call":
        params = request.get("params", {})
        name, arguments = params.get("name"), params.get("arguments") or {}
        if name == "malformed":
            return {"id": ident, "result": {"content": f"token={SECRET}", "isError": False}}
        if name == "long_error":
            message = "x" * 1960 + f" token={SECRET} and more"
            return {"id": ident, "error": {"code": -32603, "message": message}}
        if name == "echo":
            return {"id": ident, "result": {"content": [{"type": "text", "text": f"echo {arguments.get('self')}"}]}}
        if name == "redos":
            content = {"v": "a" * 40 + "!"}
            text = json.dumps(content)
            return {"id": ident, "result": {"content": [{"type": "text", "text": text}], "structuredContent": content}}
    return {"id": ident, "error": {"code": -32601, "message": f"method not found: {method}"}}


def main() -> None:
    if MODE == "noisy":
        print(f"debug: starting with token={SECRET}", flush=True)
    for line in sys.stdin:
        if MODE == "silent":
            continue
        try:
            request = json.loads(line)
        except ValueError:
            continue
        reply = answer(request)
        if reply is not None:
            send(reply)


if __name__ == "__main__":
    main()
