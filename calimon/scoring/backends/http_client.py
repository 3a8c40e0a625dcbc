"""One JSON-over-HTTP client for the backends that talk to a server (`http`, `chat`): retries
with exponential backoff and jitter on connection errors, timeouts and retryable statuses,
honouring ``Retry-After``; one-line errors that name the method, the endpoint and the HTTP
status. Standard library only.

The API key is read from an environment variable at request time and only ever put in the
``Authorization`` header: it is never stored in options, logs, errors or run files.
"""

from __future__ import annotations

import json
import os
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

from calimon.errors import BackendError, InputError

RETRY_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
DEFAULT_KEY_ENVS = ("CALIMON_API_KEY", "OPENAI_API_KEY")


class RequestFailed(BackendError):
    """A request that failed for good: ``status`` is the last HTTP status (None for a
    connection error or timeout) and ``retryable`` says whether a later run may succeed
    (retries exhausted) or the server refused this request (a 4xx)."""

    def __init__(self, message: str, *, status: int | None = None, retryable: bool = False):
        super().__init__(message)
        self.status = status
        self.retryable = retryable


@dataclass
class JsonClient:
    """POST/GET JSON to ``base_url`` + endpoint with retries. ``api_key_env`` names the
    environment variables tried, in order, for a bearer token (none set: no header)."""

    base_url: str
    timeout_s: float = 120.0
    retries: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 20.0
    api_key_env: tuple[str, ...] = DEFAULT_KEY_ENVS
    api_key: str | None = None  # tests and library callers only; never from a config file
    sleep: Callable[[float], None] = time.sleep

    def url(self, endpoint: str) -> str:
        """The full URL of ``endpoint``; an InputError for a base URL that is not http(s)."""
        if not self.base_url.startswith(("http://", "https://")):
            raise InputError(f"expected an http(s) URL such as http://127.0.0.1:8000/v1, got "
                             f"{self.base_url!r}", field="base_url")
        return self.base_url.rstrip("/") + "/" + endpoint

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = self.api_key or next((os.environ[e] for e in self.api_key_env
                                    if os.environ.get(e)), None)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def request(self, method: str, endpoint: str, payload: dict | None) -> dict:
        """The server's JSON answer. Connection errors, timeouts, retryable statuses and a body
        that is not JSON (a connection cut mid-answer) are retried; other statuses are raised at
        once. Raises `RequestFailed` naming the endpoint and the last error."""
        url = self.url(endpoint)
        body = None if payload is None else json.dumps(payload).encode()
        last, status = "", None
        for attempt in range(self.retries + 1):
            wait = min(self.max_backoff_s, self.backoff_s * 2 ** attempt) * \
                (0.5 + random.random() / 2)
            try:
                req = urllib.request.Request(url, data=body, headers=self._headers(),
                                             method=method)
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    raw = resp.read()
                try:
                    return json.loads(raw)
                except ValueError:
                    last, status = f"answer is not JSON: {raw[:200]!r}", None
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:300].decode("utf-8", "replace")
                last, status = f"HTTP {exc.code}: {detail}", exc.code
                if exc.code not in RETRY_STATUS:
                    raise RequestFailed(f"{method} {url} failed with {last}",
                                        status=exc.code) from None
                wait = _retry_after(exc, wait, self.max_backoff_s)
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                last, status = f"{type(reason).__name__}: {reason}", None
            if attempt < self.retries:
                self.sleep(wait)
        raise RequestFailed(f"{method} {url} failed after {self.retries + 1} attempts; last "
                            f"error: {last} (timeout {self.timeout_s:g} s per attempt)",
                            status=status, retryable=True)


def reach(client: JsonClient, endpoint: str = "models", timeout_s: float = 10.0) -> str | None:
    """Whether the server at ``client.base_url`` answers: None when it does (any HTTP status:
    a 401 or 404 is a server that is there), else the connection error in a few words. One
    GET of ``endpoint``, retried once, within ``timeout_s`` per attempt."""
    probe = JsonClient(client.base_url, timeout_s=min(timeout_s, client.timeout_s), retries=1,
                       backoff_s=0.2, max_backoff_s=1.0, api_key_env=client.api_key_env,
                       api_key=client.api_key, sleep=client.sleep)
    try:
        probe.request("GET", endpoint, None)
    except RequestFailed as exc:
        if exc.status is not None:
            return None
        return str(exc).rsplit("last error: ", 1)[-1].split(" (timeout ", 1)[0]
    return None


def _retry_after(exc: urllib.error.HTTPError, default: float, cap: float) -> float:
    """The wait a ``Retry-After`` header asks for (seconds form), capped; else ``default``."""
    after = exc.headers.get("Retry-After") if exc.headers else None
    if after and after.replace(".", "", 1).isdigit():
        return min(cap, float(after))
    return default
