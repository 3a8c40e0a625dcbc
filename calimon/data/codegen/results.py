"""A cache of sandboxed code-check results, keyed by what was run.

Building a code benchmark runs thousands of sandboxed scripts (`calimon.data.codegen.runner`):
each variant against the problem's tests, and the request's proxy grader. What such a script
prints depends only on its text (the harness seeds `random`, fixes the hash seed and limits
CPU seconds, not wall time), the interpreter and the sandbox's layers, so a result is stored
under the SHA-256 of those and read back by the next build that runs the same script: a
rebuild, another version of the benchmark, or another benchmark over the same problems. A run
that hit the wall-clock limit is never stored (that depends on the machine's load).

Two builds at once share their checks: a process claims a script before it runs it, and
another process that needs the same script while the claim stands (the claimant alive, on this
machine) waits for its result instead of running it again, at most the script's time limit and
`CLAIM_MARGIN_S` more; a claim whose process is gone is taken over. Two builds started together
on a fresh machine (a test suite's, two users') then cost about one build's checks, not two.

The cache is ``$CALIMON_HOME/sandbox-results.sqlite``. ``$CALIMON_SANDBOX_CACHE`` chooses
how it is used: ``on`` (default: read and write, waiting on claims), ``refresh`` (run
everything, write the results) or ``off`` (neither).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import sys
import threading
import time
from pathlib import Path

from calimon.data.paths import calimon_home
from calimon.errors import InputError
from calimon.migrations import Schema, migrate
from calimon.progress import pulse
from calimon.sandbox import PYTHON_FLAGS, SandboxResult, run_python, sandbox_layers

CACHE_ENV = "CALIMON_SANDBOX_CACHE"
MODES = ("on", "refresh", "off")
_LOCK = threading.Lock()
_CONNECTIONS: dict[Path, sqlite3.Connection] = {}


def m001_results(db: sqlite3.Connection) -> None:
    """The results table as calimon 0.1.0 created it."""
    db.execute("CREATE TABLE IF NOT EXISTS results (key TEXT PRIMARY KEY, "
               "returncode INTEGER, stdout TEXT, stderr TEXT, seconds REAL)")


def m002_claims(db: sqlite3.Connection) -> None:
    """The scripts under way: which process (pid, host) runs each, since when."""
    db.execute("CREATE TABLE IF NOT EXISTS claims (key TEXT PRIMARY KEY, pid INTEGER, "
               "host TEXT, since REAL)")


# append only (calimon.migrations)
SCHEMA = Schema("sandbox-results cache", (m001_results, m002_claims))
CLAIM_MARGIN_S = 30.0  # a claimed script's result is awaited its time limit and this long
POLL_S = 0.05


def cache_mode() -> str:
    """How the cache is used now (``$CALIMON_SANDBOX_CACHE``; default ``on``)."""
    mode = os.environ.get(CACHE_ENV, "on").strip().lower() or "on"
    if mode not in MODES:
        raise InputError(f"${CACHE_ENV}: expected one of {list(MODES)}, got {mode!r}",
                         field=CACHE_ENV)
    return mode


def result_key(code: str, timeout_s: float, hash_seed: int | None = None) -> str:
    """SHA-256 of the script, its time limit and hash seed, the interpreter, its flags and the
    sandbox's layers."""
    layers = json.dumps(sandbox_layers(), sort_keys=True, default=str)
    text = json.dumps([code, float(timeout_s), sys.version, sys.executable, layers,
                       list(PYTHON_FLAGS), hash_seed])
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def run_checked(code: str, *, timeout_s: float, hash_seed: int | None = None
                ) -> SandboxResult:
    """`calimon.sandbox.run_python`'s result for ``code``: read from the cache when the same
    script ran before (mode ``on``), else run and stored (unless it timed out)."""
    pulse()  # one more check on the bar of the build that runs it
    mode = cache_mode()
    if mode == "off":
        return run_python(code, timeout_s=timeout_s, hash_seed=hash_seed)
    key = result_key(code, timeout_s, hash_seed)
    if mode == "on":
        hit = _get(key)
        if hit is not None:
            return hit
        if not _claim(key):  # another process runs it now: its result, unless that goes
            hit = _await(key, timeout_s)
            if hit is not None:
                return hit
            _claim(key, take_over=True)
    else:
        _claim(key, take_over=True)
    try:
        result = run_python(code, timeout_s=timeout_s, hash_seed=hash_seed)
        if not result.timed_out:
            _put(key, result)
    finally:
        _release(key)
    return result


def _claim(key: str, take_over: bool = False) -> bool:
    """Claim ``key`` for this process; False when another claim stands (``take_over``:
    replace it)."""
    verb = "INSERT OR REPLACE" if take_over else "INSERT OR IGNORE"
    with _LOCK:
        conn = _connection()
        cur = conn.execute(f"{verb} INTO claims VALUES (?, ?, ?, ?)",
                           (key, os.getpid(), socket.gethostname(), time.time()))
        conn.commit()
    return cur.rowcount == 1


def _release(key: str) -> None:
    with _LOCK:
        conn = _connection()
        conn.execute("DELETE FROM claims WHERE key = ? AND pid = ? AND host = ?",
                     (key, os.getpid(), socket.gethostname()))
        conn.commit()


def _await(key: str, timeout_s: float) -> SandboxResult | None:
    """The result of ``key`` once the process that claimed it stores it; None when the claim
    goes without one (the run timed out, or its process died) or the wait passes the script's
    time limit and `CLAIM_MARGIN_S`."""
    deadline = time.monotonic() + float(timeout_s) + CLAIM_MARGIN_S
    while True:
        hit = _get(key)
        if hit is not None:
            return hit
        with _LOCK:
            claim = _connection().execute("SELECT pid, host FROM claims WHERE key = ?",
                                          (key,)).fetchone()
        if claim is None or not _alive(*claim) or time.monotonic() > deadline:
            return _get(key)
        time.sleep(POLL_S)


def _alive(pid: int, host: str) -> bool:
    """Whether the claimant may still be running (a process on another host is assumed to)."""
    if host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    return True


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
