"""nobind: an agent of an older protocol, which serves /healthz, /invoke and /status but no /bind.

The lease tests run it as a pool's agent (``python tests/integration/agents/nobind.py``) to prove
that a lease on such an agent fails as BindUnsupported instead of handing out the pool's token.
Standard library only, so nothing of the agent SDK is in it.
"""

from __future__ import annotations

import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKEN = os.environ["AGENTPOOL_TOKEN"]


class Handler(BaseHTTPRequestHandler):
    def _answer(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        return self.headers.get("Authorization") == f"Bearer {TOKEN}"

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._answer(200, {"ready": True})
        elif not self._authorized():
            self._answer(401, {"error": {"reason": "Unauthorized", "message": "no token"}})
        elif self.path == "/status":
            self._answer(200, {"busy": False, "current": None, "uses": 0})
        else:
            self._answer(404, {"error": {"reason": "NotFound", "message": self.path}})

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if not self._authorized():
            self._answer(401, {"error": {"reason": "Unauthorized", "message": "no token"}})
        elif self.path == "/invoke":
            self._answer(200, {"output": None})
        else:
            self._answer(404, {"error": {"reason": "NotFound", "message": self.path}})

    def log_message(self, format: str, *args: object) -> None:
        pass


if __name__ == "__main__":
    address = (os.environ.get("AGENT_HOST", "0.0.0.0"), int(os.environ.get("AGENT_PORT", "8080")))
    ThreadingHTTPServer(address, Handler).serve_forever()
