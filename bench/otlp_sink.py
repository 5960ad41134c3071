"""``python -m bench.otlp_sink --port N``: an OTLP/HTTP receiver that discards what it gets.

The collector end of the tracing benchmark (``bench.tracing``): it reads each export in
full and answers 200 with an empty ``ExportTraceServiceResponse``, as a collector would,
counting the bytes it received.
"""

from __future__ import annotations

import argparse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["main"]


class _Sink(BaseHTTPRequestHandler):
    # Keep-alive, as a collector does: HTTP/1.0 (the default here) would make the exporter
    # open a new connection for every batch, a cost no real deployment pays.
    protocol_version = "HTTP/1.1"
    received = 0
    exports = 0

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        _Sink.received += len(body)
        _Sink.exports += 1
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")  # an empty message: nothing rejected
        self.end_headers()

    def do_GET(self) -> None:
        """Readiness, and how many bytes of spans arrived so far, in how many exports."""
        answer = f"{_Sink.received} bytes in {_Sink.exports} exports".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:
        return None


def main() -> None:
    """Serve on loopback until killed."""
    parser = argparse.ArgumentParser(description="An OTLP/HTTP receiver that discards spans.")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    ThreadingHTTPServer(("127.0.0.1", args.port), _Sink).serve_forever()


if __name__ == "__main__":
    main()
