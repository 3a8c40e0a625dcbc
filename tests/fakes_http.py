"""A scripted in-process OpenAI-style HTTP server for the backend tests (no network)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeServer:
    """An OpenAI-style server whose answers a test scripts with `plan`: a list of
    (status, body, delay_s[, headers]) consumed one per POST request, the last repeated. A body
    is JSON, a callable of the request payload, or raw bytes (sent as they are: a truncated or
    malformed answer). ``get``: the JSON every GET answers (default: a models list)."""

    def __init__(self, plan, get=None):
        self.plan = list(plan)
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, body, headers=None):
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(200, get if get is not None else {"data": [{"id": "fake-model"}]})

            def do_POST(self):
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with owner.lock:
                    owner.requests.append(payload)
                    owner.headers.append(dict(self.headers))
                    step = owner.plan.pop(0) if len(owner.plan) > 1 else owner.plan[0]
                    owner.in_flight += 1
                    owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
                status, body, delay, *extra = step
                time.sleep(delay)
                # The request stops counting before its answer is written: once the client reads
                # the answer it may send the next one, possibly before this thread runs again.
                with owner.lock:
                    owner.in_flight -= 1
                try:
                    self._send(status, body(payload) if callable(body) else body,
                               extra[0] if extra else None)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
