"""A stand-in OTLP/HTTP collector for the tracing benchmark: answers every export with 200.

``bench/engine.py --tracing otlp`` starts it as a process of its own on loopback, so the CPU of
receiving spans is not counted as the operator's, and points ``OTEL_EXPORTER_OTLP_ENDPOINT`` at
it. It counts the export requests and their bytes, and writes them to the file named by its
second argument when it is stopped (SIGTERM).

    python bench/otlpsink.py PORT COUNTS_FILE
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType

RECEIVED = {"requests": 0, "bytes": 0}
LOCK = threading.Lock()


class Sink(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        size = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(size)
        with LOCK:
            RECEIVED["requests"] += 1
            RECEIVED["bytes"] += size
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        return None


def main() -> None:
    port, counts = int(sys.argv[1]), Path(sys.argv[2])
    server = ThreadingHTTPServer(("127.0.0.1", port), Sink)

    def stop(signum: int, frame: FrameType | None) -> None:
        counts.write_text(json.dumps(RECEIVED))
        threading.Thread(target=server.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    print("listening", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
