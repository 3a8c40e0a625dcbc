"""The durable decision log of `calimon serve`: every answered request and its decision, keyed by
request id, written before the answer is sent.

`DecisionLog` is the interface a server uses; `SQLiteDecisionLog` implements it on a SQLite file
in WAL mode with ``synchronous=FULL`` (a commit survives a killed process and a power cut). The
table (`TABLE_SQL`) uses only types and statements PostgreSQL also has (``TEXT``, ``INTEGER``,
``DOUBLE PRECISION``, ``INSERT ... ON CONFLICT (request_id) DO NOTHING``), so a PostgreSQL
implementation holds the same rows: `calimon.serve.pg_log.PostgresDecisionLog` implements the
methods of `DecisionLog` on that schema (with ``%s`` placeholders), and `open_log`
dispatches ``postgresql://`` URLs to it. Beside ``decisions``, the log keeps the steps of
sessions and the metrics of a deployment's servers (`calimon.serve.session_log`).

Idempotency: the first answer logged under a request id wins. `DecisionLog.record` never
overwrites; it returns what the log holds under the id afterwards, so two racing writers (two
replicas, or a retry racing the original) answer the client with the same logged decision.
A retried request is answered from `DecisionLog.lookup` without being scored again.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from calimon.errors import InputError
from calimon.migrations import Schema, open_durable
from calimon.serve import policy_log
from calimon.serve.policy_log import PolicyChange, m004_shadow_and_changes
from calimon.serve.session_log import (
    LoggedStep,
    Statements,
    StepTaken,
    m002_session_steps,
    m003_replica_metrics,
    snapshot_rows,
    write_group,
)

TABLE_SQL = """
CREATE TABLE IF NOT EXISTS decisions (
    request_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    session_id TEXT,
    step INTEGER,
    received_at DOUBLE PRECISION NOT NULL,
    request_sha256 TEXT NOT NULL,
    status TEXT NOT NULL,
    decision TEXT NOT NULL,
    action TEXT NOT NULL,
    audit INTEGER NOT NULL,
    p_raw DOUBLE PRECISION,
    p_cal DOUBLE PRECISION,
    policy_hash TEXT NOT NULL,
    model_revision TEXT NOT NULL,
    response TEXT NOT NULL
)"""
INDEX_SQL = "CREATE INDEX IF NOT EXISTS decisions_session ON decisions (session_id, step)"
COLUMNS = ("request_id", "kind", "session_id", "step", "received_at", "request_sha256",
           "status", "decision", "action", "audit", "p_raw", "p_cal", "policy_hash",
           "model_revision", "response")


def m001_decisions(db: sqlite3.Connection) -> None:
    """The decisions table and its session index."""
    db.execute(TABLE_SQL)
    db.execute(INDEX_SQL)


SCHEMA = Schema("decision log", (m001_decisions, m002_session_steps, m003_replica_metrics,
                                 m004_shadow_and_changes))  # append only (calimon.migrations)


@dataclass(frozen=True)
class LoggedDecision:
    """One logged request: its id, kind (``score`` or ``step``), session and step (steps
    only), when it arrived (unix seconds), the sha256 of its body (a reused id with another
    body is refused) and the response answered, as JSON (the other columns are read from it).
    ``body``: a step's task text and messages (`calimon.serve.session_log.step_body`), kept in
    ``session_steps`` so that any server can continue the session; None for a score.
    ``shadow_row``: the shadow policy's decision on the same request
    (`calimon.serve.policy_log.shadow_values`), logged with it when it is new."""

    request_id: str
    kind: str
    request_sha256: str
    response: dict[str, Any]
    session_id: str | None = None
    step: int | None = None
    received_at: float = 0.0
    body: dict[str, Any] | None = None
    shadow_row: tuple | None = None

    def row(self) -> tuple:
        """The row's values, in `COLUMNS` order."""
        r = self.response
        return (self.request_id, self.kind, self.session_id, self.step,
                self.received_at or time.time(), self.request_sha256, r["status"],
                r["decision"], r["action"], int(bool(r["audit"])), r.get("p_raw"),
                r.get("p_cal"), r["policy_hash"], r["model_revision"],
                json.dumps(r, sort_keys=True, allow_nan=False))

    @classmethod
    def from_row(cls, row: tuple) -> LoggedDecision:
        """The entry a row in `COLUMNS` order holds."""
        d = dict(zip(COLUMNS, row, strict=True))
        return cls(request_id=d["request_id"], kind=d["kind"],
                   request_sha256=d["request_sha256"], response=json.loads(d["response"]),
                   session_id=d["session_id"], step=d["step"], received_at=d["received_at"])


class DecisionLog(Protocol):
    """What a server needs of a decision log (module docstring). Methods may block; the server
    calls them from a worker thread."""

    def lookup(self, request_id: str) -> LoggedDecision | None:
        """The entry logged under ``request_id``; None when there is none."""
        ...

    def lookup_many(self, request_ids: list[str]) -> dict[str, LoggedDecision]:
        """The entries logged under any of ``request_ids`` (at most a few hundred), by id."""
        ...

    def record(self, entry: LoggedDecision) -> LoggedDecision:
        """Log ``entry`` durably unless its id is logged already; return the entry the log
        holds under the id afterwards (``entry``, or the earlier one)."""
        ...

    def record_many(self, entries: list[LoggedDecision]) -> list[LoggedDecision | StepTaken]:
        """`record` for each of ``entries`` in one transaction, committed durably before this
        returns (a group commit, `calimon.serve.log_writer`); a session step another request
        id holds is `StepTaken` in its place, and leaves the others logged."""
        ...

    def count(self) -> int:
        """Entries in the log."""
        ...

    def record_shadow(self, request_id: str, answer: dict[str, Any]) -> None:
        """Log a shadow policy's decision on ``request_id`` (`calimon.serve.policy_log`)."""
        ...

    def shadow_answers(self, policy_hash: str) -> dict[str, dict[str, Any]]:
        """The shadow decisions of the policy ``policy_hash``, by request id."""
        ...

    def record_change(self, change: PolicyChange) -> PolicyChange:
        """Log a change of the live policy; returns it as logged (with its number)."""
        ...

    def changes(self) -> list[PolicyChange]:
        """Every change of the live policy, in order."""
        ...

    def steps(self, session_id: str, since: int = 0) -> list[LoggedStep]:
        """The logged steps of a session from index ``since`` on, in order."""
        ...

    def forget(self, session_id: str) -> int:
        """Delete a session's logged steps (its decisions stay); returns how many."""
        ...

    def push_metrics(self, deployment: str, replica: str, snapshot: dict, at: float) -> None:
        """Keep ``snapshot`` as the metrics of ``replica`` of ``deployment`` (written ``at``,
        unix seconds), replacing its earlier one."""
        ...

    def pull_metrics(self, deployment: str) -> list[tuple[str, float, dict]]:
        """``(replica, written at, snapshot)`` of every replica of ``deployment``."""
        ...

    def durability(self) -> str:
        """What a commit waits for, read from the database's own settings (one line)."""
        ...

    def close(self) -> None:
        """Release the connection; safe to call twice."""
        ...


class SQLiteDecisionLog:
    """The decision log in a SQLite file (created with its folder if absent)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = open_durable(self.path, SCHEMA)
        self._sql = Statements("?")
        # lookups read on a connection of their own: under WAL a reader never waits for the
        # writer's commit (its fsync), and sees every commit made before its read began
        self._read_lock = threading.Lock()
        self._reader = sqlite3.connect(self.path, timeout=60.0, isolation_level=None,
                                       check_same_thread=False)

    def lookup(self, request_id: str) -> LoggedDecision | None:
        """The entry logged under ``request_id``; None when there is none."""
        return self.lookup_many([request_id]).get(request_id)

    def lookup_many(self, request_ids: list[str]) -> dict[str, LoggedDecision]:
        """The entries logged under any of ``request_ids``, by id (one read)."""
        marks = ", ".join("?" * len(request_ids))
        with self._read_lock:
            rows = self._reader.execute(f"SELECT {', '.join(COLUMNS)} FROM decisions WHERE "
                                        f"request_id IN ({marks})", request_ids).fetchall()
        return {row[0]: LoggedDecision.from_row(row) for row in rows}

    def record(self, entry: LoggedDecision) -> LoggedDecision:
        """Log ``entry`` (committed before this returns) unless its id is logged already;
        returns what the log holds under the id."""
        [got] = self.record_many([entry])
        if isinstance(got, StepTaken):
            raise got
        return got

    def record_many(self, entries: list[LoggedDecision]) -> list[LoggedDecision | StepTaken]:
        """`record` for each of ``entries`` in one transaction, one commit (``synchronous=FULL``:
        the WAL is on disk before this returns); a session step another request id holds is
        `StepTaken` in its place."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                rows = write_group(self._db, self._sql, _INSERT, _SELECT, entries,
                                   lambda: _savepoint(self._db))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return [r if isinstance(r, StepTaken) else LoggedDecision.from_row(r) for r in rows]

    def steps(self, session_id: str, since: int = 0) -> list[LoggedStep]:
        """The logged steps of a session from index ``since`` on, in order."""
        with self._lock:
            rows = self._db.execute(self._sql.steps, (session_id, since)).fetchall()
        return [LoggedStep.from_row(r) for r in rows]

    def forget(self, session_id: str) -> int:
        """Delete a session's logged steps (its decisions stay); returns how many."""
        with self._lock:  # one statement: autocommitted
            return self._db.execute(self._sql.forget, (session_id,)).rowcount

    def push_metrics(self, deployment: str, replica: str, snapshot: dict, at: float) -> None:
        """Keep ``snapshot`` as the metrics of ``replica`` of ``deployment``."""
        with self._lock:  # one statement: autocommitted
            self._db.execute(self._sql.push, (deployment, replica, at,
                                              json.dumps(snapshot, allow_nan=False)))

    def pull_metrics(self, deployment: str) -> list[tuple[str, float, dict]]:
        """``(replica, written at, snapshot)`` of every replica of ``deployment``."""
        with self._lock:
            return snapshot_rows(self._db.execute(self._sql.pull, (deployment,)).fetchall())

    def count(self) -> int:
        """Entries in the log."""
        with self._lock:
            return int(self._db.execute("SELECT COUNT(*) FROM decisions").fetchone()[0])

    def record_shadow(self, request_id: str, answer: dict[str, Any]) -> None:
        """Log a shadow policy's decision (committed before this returns)."""
        with self._lock:
            self._db.execute(policy_log.INSERT_SHADOW,
                             policy_log.shadow_values(request_id, answer))

    def shadow_answers(self, policy_hash: str) -> dict[str, dict[str, Any]]:
        """The shadow decisions of the policy ``policy_hash``, by request id."""
        with self._lock:
            rows = self._db.execute(policy_log.SELECT_SHADOW, (policy_hash,)).fetchall()
        return {rid: json.loads(text) for rid, text in rows}

    def record_change(self, change: PolicyChange) -> PolicyChange:
        """Log a change of the live policy (committed before this returns)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(policy_log.INSERT_CHANGE, change.values())
                row = self._db.execute(policy_log.SELECT_CHANGES.replace(
                    "ORDER BY seq", "ORDER BY seq DESC LIMIT 1")).fetchone()
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return PolicyChange.from_row(row)

    def changes(self) -> list[PolicyChange]:
        """Every change of the live policy, in order."""
        with self._lock:
            rows = self._db.execute(policy_log.SELECT_CHANGES).fetchall()
        return [PolicyChange.from_row(r) for r in rows]

    def durability(self) -> str:
        """The journal mode and synchronous setting this connection commits under: with WAL
        and ``synchronous=FULL`` a commit returns once the WAL is on disk (fsync)."""
        with self._lock:
            mode = str(self._db.execute("PRAGMA journal_mode").fetchone()[0]).lower()
            sync = int(self._db.execute("PRAGMA synchronous").fetchone()[0])
        level = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(sync, str(sync))
        said = f"SQLite journal_mode={mode}, synchronous={level}"
        if mode == "wal" and sync >= 2:
            return said + ": a commit is on disk (fsync) before it returns"
        return said + ": NOT durable, a commit may be lost in a power cut"

    def close(self) -> None:
        """Close the connections; safe to call twice."""
        with self._read_lock:
            self._reader.close()
        with self._lock:
            self._db.close()


_INSERT = (f"INSERT INTO decisions ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))}) "
           "ON CONFLICT (request_id) DO NOTHING")
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM decisions WHERE request_id = ?"


@contextmanager
def _savepoint(db: sqlite3.Connection) -> Iterator[None]:
    """A savepoint of ``db``'s open transaction: released on success, rolled back to (and
    released) when the block raises."""
    db.execute("SAVEPOINT entry")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK TO entry")
        db.execute("RELEASE entry")
        raise
    db.execute("RELEASE entry")


def open_log(target: str) -> DecisionLog:
    """The decision log ``target`` names: a file path or ``sqlite:///PATH`` (SQLite, WAL), or a
    ``postgresql://`` URL (`calimon.serve.pg_log.PostgresDecisionLog`)."""
    if target.startswith(("postgresql://", "postgres://")):
        from calimon.serve.pg_log import PostgresDecisionLog

        return PostgresDecisionLog(target, schema=SCHEMA, columns=COLUMNS,
                                   from_row=LoggedDecision.from_row)
    if "://" in target and not target.startswith("sqlite:///"):
        raise InputError(f"expected a file path, sqlite:///PATH or postgresql://..., got "
                         f"{target!r}", field="log")
    return SQLiteDecisionLog(target.removeprefix("sqlite:///") if target.startswith(
        "sqlite:///") else target)
