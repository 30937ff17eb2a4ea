"""plain_http: an agent written from docs/reference/protocol.md alone, on the standard library.

It uses no agentpool code, so it is the pattern for an agent in any language: it reads its
environment, listens, starts up, then serves /healthz, /invoke (calls and casts, as many at once
as it has slots), /status, /reset, and /bind and /unbind for leases, checking the pool's token or
the bound lease's on every request but /healthz. Each item's output echoes what it was handed,
and, while the agent is bound, the lease it serves, so a reader can see the envelope and the
binding arrive::

    {"id": ..., "item": ..., "input": ..., "attempt": 1, "run": "...",
     "lease": {"lease": "chat", "context": <the lease's context>, "expireTime": "..."}}

An item ``{"fail": "why"}`` fails with HandlerError, and ``{"wait": "PATH"}`` runs until the file
PATH exists (a long item, to see a cast in ``/status``). Run it as a pool's agent with
``command: ["python", "examples/agents/plain_http.py"]``; by hand,
``AGENTPOOL_TOKEN=secret AGENT_PORT=8080 python examples/agents/plain_http.py``.
"""

from __future__ import annotations

import hmac
import json
import os
import re
import signal
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = os.environ.get("AGENTPOOL_TOKEN", "")
HOST = os.environ.get("AGENT_HOST") or "0.0.0.0"
PORT = int(os.environ.get("AGENT_PORT") or "8080")
SLOTS = int(os.environ.get("AGENTPOOL_SLOTS") or "1")
DRAIN_SECONDS = float(os.environ.get("AGENT_DRAIN_SECONDS") or "30")
RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})"
)
VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")


class Agent:
    """The agent's state: readiness, busy slots, uses and the lease it is bound to."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ready = False
        self.draining = False
        self.items: list[Any] = []  # ids being served, oldest first
        self.exclusive = False  # a reset or an unbind is running: no item may start
        self.uses = 0
        self.lease: dict[str, Any] | None = None  # lease, token, expires, expireTime, context

    def take_slot(self, item_id: Any) -> bool:
        with self.lock:
            if self.exclusive or len(self.items) >= SLOTS:
                return False
            self.items.append(item_id)
            self.uses += 1
            return True

    def give_back(self, item_id: Any) -> None:
        with self.lock:
            self.items.remove(item_id)

    def status(self) -> dict[str, Any]:
        with self.lock:
            return {
                "busy": bool(self.items) or self.exclusive,
                "current": self.items[0] if self.items else None,
                "slots": SLOTS,
                "busySlots": len(self.items),
                "items": list(self.items),
                "uses": self.uses,
                "ready": self.ready,
                "draining": self.draining,
                "lease": self.lease["lease"] if self.lease else None,
            }

    def lease_token_opens(self, token: str) -> bool:
        with self.lock:
            lease = self.lease
        if lease is None or datetime.now(UTC) >= lease["expires"]:
            return False
        return hmac.compare_digest(token.encode(), lease["token"].encode())


AGENT = Agent()


def log(message: str) -> None:
    print(f"{datetime.now(UTC).isoformat()} {message}", flush=True)


def parse_time(text: Any) -> datetime | None:
    if not isinstance(text, str) or RFC3339.fullmatch(text) is None:
        return None
    try:
        return datetime.fromisoformat(text.upper())
    except ValueError:
        return None


def parse_envelope(body: Any) -> dict[str, Any] | str:
    """The envelope with its defaults, or why the body is not one."""
    if not isinstance(body, dict):
        return "the body must be a JSON object with 'id' and 'item'"
    if "id" not in body:
        return "the body has no 'id'"
    if isinstance(body["id"], bool) or not isinstance(body["id"], str | int):
        return "'id' must be a string or an integer"
    if "item" not in body:
        return "the body has no 'item'"
    attempt = body.get("attempt", 1)
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        return "'attempt' must be an integer of at least 1"
    run = body.get("run")
    if run is not None and not isinstance(run, str):
        return "'run' must be a string or null"
    if body.get("mode", "Call") not in ("Call", "Cast"):
        return "'mode' must be 'Call' or 'Cast'"
    return {
        "id": body["id"],
        "item": body["item"],
        "input": body.get("input"),
        "attempt": attempt,
        "run": run,
        "cast": body.get("mode") == "Cast",
    }


def run_item(envelope: dict[str, Any]) -> Any:
    """The work: raise to fail the item, return any JSON as its output."""
    item = envelope["item"]
    if isinstance(item, dict) and "fail" in item:
        raise ValueError(str(item["fail"]))
    if isinstance(item, dict) and isinstance(item.get("wait"), str):
        while not os.path.exists(item["wait"]):
            time.sleep(0.05)
    output = {key: envelope[key] for key in ("id", "item", "input", "attempt", "run")}
    with AGENT.lock:
        lease = AGENT.lease
    if lease is not None:
        output["lease"] = {key: lease[key] for key in ("lease", "context", "expireTime")}
    return output


def attempt(envelope: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Run one item in the slot taken for it, and give the slot back."""
    try:
        output = run_item(envelope)
        json.dumps(output, allow_nan=False)
        return 200, {"output": output}
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}"[:2000]
        log(f"item {json.dumps(envelope['id'])} failed: {message}")
        return 500, {"error": {"reason": "HandlerError", "message": message}}
    finally:
        AGENT.give_back(envelope["id"])


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep connections alive, as the operator does

    def answer(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def error(self, status: int, reason: str, message: str, **headers: str) -> None:
        self.answer(status, {"error": {"reason": reason, "message": message}}, headers)

    def token(self) -> str | None:
        scheme, _, token = self.headers.get("Authorization", "").strip().partition(" ")
        return token.strip() if scheme.lower() == "bearer" else None

    def allowed(self, *, lease: bool) -> bool:
        """The pool's token opens every path; the bound lease's opens /invoke and /status."""
        token = self.token()
        if token is not None and TOKEN and hmac.compare_digest(token.encode(), TOKEN.encode()):
            return True
        if token is not None and lease and AGENT.lease_token_opens(token):
            return True
        self.error(
            401,
            "Unauthorized",
            "a valid 'Authorization: Bearer <token>' header is required",
            **{"WWW-Authenticate": "Bearer"},
        )
        return False

    def unavailable(self) -> bool:
        if AGENT.draining:
            self.error(503, "Draining", "the agent is shutting down and takes no work")
            return True
        if not AGENT.ready:
            self.error(503, "NotReady", "the agent's start-up has not finished")
            return True
        return False

    def read_json(self) -> tuple[bool, Any]:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            return True, json.loads(raw or b"null", parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:
            return False, f"the body is not JSON: {exc}"

    def do_GET(self) -> None:
        if self.path == "/healthz":
            ok = AGENT.ready and not AGENT.draining
            self.answer(200 if ok else 503, {"ready": ok})
        elif self.path == "/status":
            if self.allowed(lease=True):
                self.answer(200, AGENT.status())
        else:
            self.error(404, "NotFound", f"no such path: GET {self.path}")

    def do_POST(self) -> None:
        parsed, body = self.read_json()
        routes = {
            "/invoke": self.invoke,
            "/bind": self.bind,
            "/unbind": self.unbind,
            "/reset": self.reset,
        }
        route = routes.get(self.path)
        if route is None:
            self.error(404, "NotFound", f"no such path: POST {self.path}")
        elif not self.allowed(lease=self.path == "/invoke") or (
            self.path != "/unbind" and self.unavailable()
        ):
            return
        elif not parsed and self.path != "/reset":
            self.error(400, "BadRequest", body)
        else:
            route(body)

    def invoke(self, body: Any) -> None:
        envelope = parse_envelope(body)
        if isinstance(envelope, str):
            self.error(400, "BadRequest", envelope)
            return
        if not AGENT.take_slot(envelope["id"]):
            self.error(409, "Busy", f"all {SLOTS} slots of the agent are busy")
            return
        prefer = self.headers.get("Prefer", "").lower()
        if envelope["cast"] or "respond-async" in prefer:
            threading.Thread(target=attempt, args=(envelope,), daemon=True).start()
            self.answer(202, {"accepted": True})
        else:
            self.answer(*attempt(envelope))

    def bind(self, body: Any) -> None:
        if not isinstance(body, dict):
            self.error(400, "BadRequest", "the body must be a JSON object")
            return
        lease, token = body.get("lease"), body.get("token")
        expires = parse_time(body.get("expireTime"))
        if not isinstance(lease, str) or not lease:
            self.error(400, "BadRequest", "'lease' must be a non-empty string naming the lease")
        elif not isinstance(token, str) or VISIBLE_ASCII.fullmatch(token) is None:
            self.error(400, "BadRequest", "'token' must be a non-empty string of visible ASCII")
        elif expires is None:
            self.error(400, "BadRequest", "'expireTime' must be an RFC 3339 time with an offset")
        else:
            with AGENT.lock:
                bound = AGENT.lease
                if bound is not None and bound["lease"] != lease:
                    other = json.dumps(bound["lease"])
                    self.error(409, "AlreadyBound", f"the agent is bound to lease {other}")
                    return
                # A renewal moves only the expiry; the first bind's token and context stay.
                first = bound or {"lease": lease, "token": token, "context": body.get("context")}
                AGENT.lease = {**first, "expires": expires, "expireTime": body["expireTime"]}
            log(f"lease {json.dumps(lease)} {'renewed' if bound else 'bound'} until {expires}")
            self.answer(200, {"lease": lease, "expireTime": body["expireTime"]})

    def unbind(self, body: Any) -> None:
        lease = body.get("lease") if isinstance(body, dict) else None
        if not isinstance(lease, str) or not lease:
            self.error(400, "BadRequest", "'lease' must be a non-empty string naming the lease")
            return
        with AGENT.lock:
            if AGENT.lease is None or AGENT.lease["lease"] != lease:
                self.answer(200, {})  # not this lease's agent, or unbound already
                return
            # The token and context go first, so no request with them starts from here on.
            AGENT.lease = None
            AGENT.exclusive = True
        while AGENT.status()["busySlots"]:  # items the lease's holder started finish first
            time.sleep(0.05)
        with AGENT.lock:
            AGENT.exclusive = False  # nothing else to reset: the lease was the only state
        log(f"unbound from lease {json.dumps(lease)}")
        self.answer(200, {})

    def reset(self, body: Any) -> None:
        # This agent keeps nothing between items but a lease, which /unbind clears.
        self.error(501, "ResetUnsupported", "this agent keeps no state between items")

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request would drown the log


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def main() -> int:
    if not TOKEN:
        print(
            "AGENTPOOL_TOKEN is not set: the operator sets it on every agent pod", file=sys.stderr
        )
        return 2
    server = ThreadingHTTPServer((HOST, PORT), Handler)
    server.daemon_threads = True
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log(f"listening on http://{HOST}:{server.server_address[1]}, starting up")
    # The expensive start-up (a model to load, tools to open) goes here, after listening and
    # before ready: /healthz answers 503 until then.
    AGENT.ready = True
    log("ready")
    stop.wait()
    AGENT.draining = True
    deadline = time.monotonic() + DRAIN_SECONDS
    while AGENT.status()["busySlots"] and time.monotonic() < deadline:
        time.sleep(0.05)
    server.shutdown()
    log(f"drained after {AGENT.uses} items, exiting")
    return 1 if AGENT.status()["busySlots"] else 0


if __name__ == "__main__":
    sys.exit(main())
