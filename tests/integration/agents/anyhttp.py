"""anyhttp: a web server that knows nothing of agentpool, as an HTTP pool runs one.

It serves ``GET /`` with a greeting and answers anything else with the standard library's 404
page: no ``/healthz``, no agent protocol, no token. It listens on ``AGENT_HOST`` and
``AGENT_PORT`` and prints a line for every connection (``connection``) and every request
(``request METHOD PATH``) to stdout, so a test reads from its pod's log what was sent to it: the
HTTP pool test (``tests/integration/test_pools_http.py``) checks that the operator sent it
nothing but its readiness probe. Standard library only, so nothing of agentpool is in it.
"""

from __future__ import annotations

import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def setup(self) -> None:
        super().setup()
        print("connection", flush=True)

    def do_GET(self) -> None:
        if self.path != "/":
            self.send_error(404)
            return
        body = b"hello\n"
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_error(404)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        print(f"request {self.command} {self.path}", flush=True)

    def log_message(self, format: str, *args: object) -> None:
        pass


if __name__ == "__main__":
    address = (os.environ.get("AGENT_HOST", "0.0.0.0"), int(os.environ.get("AGENT_PORT", "8080")))
    ThreadingHTTPServer(address, Handler).serve_forever()
