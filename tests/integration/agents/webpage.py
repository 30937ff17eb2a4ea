"""webpage: a web server on the pool's port instead of an agent, as a wrong image or port gives.

It answers ``GET /healthz`` with 200, so its pod turns Ready and joins the pool, and every other
request, ``POST /invoke`` included, with the standard library's HTML 404 page: it does not speak
the agent protocol. The pool tests run it as a pool's agent (``python
tests/integration/agents/webpage.py``) to prove that such a pool says so in its Degraded
condition. Standard library only, so nothing of the agent SDK is in it.
"""

from __future__ import annotations

import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path != "/healthz":
            self.send_error(404)
            return
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_error(404)

    def log_message(self, format: str, *args: object) -> None:
        pass


if __name__ == "__main__":
    address = (os.environ.get("AGENT_HOST", "0.0.0.0"), int(os.environ.get("AGENT_PORT", "8080")))
    ThreadingHTTPServer(address, Handler).serve_forever()
