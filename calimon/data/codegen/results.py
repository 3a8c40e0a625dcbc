"""A cache of sandboxed code-check results, keyed by what was run.

Building a code benchmark runs thousands of sandboxed scripts (`calimon.data.codegen.runner`):
each variant against the problem's tests, and the request's proxy grader. What such a script
prints depends only on its text (the harness seeds `random`, fixes the hash seed and limits
CPU seconds, not wall time), the interpreter and the sandbox's layers, so a result is stored
under the SHA-256 of those and read back by the next build that runs the same script: a
rebuild, another version of the benchmark, or another benchmark over the same problems. A run
that hit the wall-clock limit is never stored (that depends on the machine's load).

The cache is ``$CALIMON_HOME/sandbox-results.sqlite``. ``$CALIMON_SANDBOX_CACHE`` chooses
how it is used: ``on`` (default: read and write), ``refresh`` (run everything, write the
results) or ``off`` (neither).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import sys
import threading
from pathlib import Path

from calimon.data.paths import calimon_home
from calimon.errors import InputError
from calimon.migrations import Schema, migrate
from calimon.progress import pulse
from calimon.sandbox import SandboxResult, run_python, sandbox_layers

CACHE_ENV = "CALIMON_SANDBOX_CACHE"
MODES = ("on", "refresh", "off")
_LOCK = threading.Lock()
_CONNECTIONS: dict[Path, sqlite3.Connection] = {}


def m001_results(db: sqlite3.Connection) -> None:
    """The results table as calimon 0.1.0 created it."""
    db.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, "
               "returncode INTEGER, stdout TEXT, stderr TEXT, seconds REAL)")


SCHEMA = Schema("sandbox-results cache", (m001_results,))  # append only (calimon.migrations)


def cache_mode() -> str:
    """How the cache is used now (``$CALIMON_SANDBOX_CACHE``; default ``on``)."""
    mode = os.environ.get(CACHE_ENV, "on").strip().lower() or "on"
    if mode not in MODES:
        raise InputError(f"${CACHE_ENV}: expected one of {list(MODES)}, got {mode!r}",
                         field=CACHE_ENV)
    return mode


def result_key(code: str, timeout_s: float) -> str:
    """SHA-256 of the script, its time limit, the interpreter and the sandbox's layers."""
    layers = json.dumps(sandbox_layers(), sort_keys=True, default=str)
    text = json.dumps([code, float(timeout_s), sys.version, sys.executable, layers])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def run_checked(code: str, *, timeout_s: float) -> SandboxResult:
    """`calimon.sandbox.run_python`'s result for ``code``: read from the cache when the same
    script ran before (mode ``on``), else run and stored (unless it timed out)."""
    pulse()  # one more check on the bar of the build that runs it
    mode = cache_mode()
    if mode == "off":
        return run_python(code, timeout_s=timeout_s)
    key = result_key(code, timeout_s)
    if mode == "on":
        hit = _get(key)
        if hit is not None:
            return hit
    result = run_python(code, timeout_s=timeout_s)
    if not result.timed_out:
        _put(key, result)
    return result


def _connection() -> sqlite3.Connection:
    path = calimon_home() / "sandbox-results.sqlite"
    conn = _CONNECTIONS.get(path)
    if conn is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, check_same_thread=False, timeout=60)
        try:
            migrate(conn, SCHEMA, path)
        except BaseException:
            conn.close()
            raise
        _CONNECTIONS[path] = conn
    return conn


def _get(key: str) -> SandboxResult | None:
    with _LOCK:
        row = _connection().execute("SELECT returncode, stdout, stderr, seconds FROM results "
                                    "WHERE key = ?", (key,)).fetchone()
    if row is None:
        return None
    returncode, stdout, stderr, seconds = row
    return SandboxResult(returncode=returncode, stdout=stdout, stderr=stderr, timed_out=False,
                         seconds=seconds)


def _put(key: str, result: SandboxResult) -> None:
    with _LOCK:
        conn = _connection()
        conn.execute("INSERT OR REPLACE INTO results VALUES (?, ?, ?, ?, ?)",
                     (key, result.returncode, result.stdout, result.stderr, result.seconds))
        conn.commit()
