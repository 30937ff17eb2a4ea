"""notes: an MCP server on the official Python SDK that knows nothing of agentpool.

It serves MCP's streamable HTTP transport at ``/mcp`` with sessions (``Mcp-Session-Id``): each
session keeps its own notes in the server's memory, so every request of a session must reach
the server process that began it. A pool with ``sessions.header: Mcp-Session-Id``
(``examples/http/mcp-pool.yaml``) pins each session to one agent; the ``mcp`` client reaches it
through the gateway with the pool's proxy path as its URL and a Kubernetes token. Tools:
``remember`` keeps a note in the session, ``recall`` lists the session's notes, and ``whoami``
names the server process. Run it by hand with
``uvicorn examples.http.mcp_server:app --port 8080``.
"""

from __future__ import annotations

import os
import socket

from mcp.server.mcpserver import Context, MCPServer

server = MCPServer("notes")
#: Notes by session id: state a session finds only on the server that began it.
_notes: dict[str, list[str]] = {}


def _session(ctx: Context) -> str:
    """The id of the session a request belongs to, from its Mcp-Session-Id header."""
    request = ctx.request_context.request
    return str(request.headers.get("mcp-session-id", "")) if request is not None else ""


@server.tool()
def remember(note: str, ctx: Context) -> int:
    """Keep a note in this session; how many it holds."""
    notes = _notes.setdefault(_session(ctx), [])
    notes.append(note)
    return len(notes)


@server.tool()
def recall(ctx: Context) -> list[str]:
    """The notes this session kept."""
    return _notes.get(_session(ctx), [])


@server.tool()
def whoami() -> str:
    """The server process that serves this session."""
    return f"{socket.gethostname()}:{os.getpid()}"


# Any host: the pool's agents are reached by their pod's address, not a name of localhost.
app = server.streamable_http_app(host="0.0.0.0")
