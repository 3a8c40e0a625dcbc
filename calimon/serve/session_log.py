"""What the decision log keeps so that every server sharing it is one service: the steps of each
session (any server continues a session another one began) and each server's metrics (any
server's ``/metrics`` counts the whole deployment).

Two tables beside ``decisions``, created by the decision log's numbered migrations 2 and 3
(`calimon.serve.decision_log.SCHEMA`, on SQLite and PostgreSQL alike):

- ``session_steps``: one row per step of a session, primary key ``(session_id, step)``: the
  request id that took the step and its body (the task text and the step's messages, as JSON),
  written in the same transaction as the step's decision. The primary key makes a step index
  a session's once: two servers scoring step k of one session at once cannot both log it; the
  second's transaction is rolled back (`StepTaken`) and it answers from the log.
- ``replica_metrics``: one row per server of a named deployment: its counters, histograms and
  gauges (`calimon.serve.metrics.Metrics.snapshot`) as JSON, and when they were written.

`Statements` holds the SQL of both, with the placeholder of each driver (``?`` for sqlite3,
``%s`` for psycopg); `write_decision` is the one write of a decision (and its step, and the
shadow policy's decision on the same request), run by both logs inside their transaction, and
`write_group` writes the decisions of one group commit (`calimon.serve.log_writer`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from typing import Any

from calimon.serve.policy_log import INSERT_SHADOW

STEPS_SQL = """
CREATE TABLE IF NOT EXISTS session_steps (
    session_id TEXT NOT NULL,
    step INTEGER NOT NULL,
    request_id TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, step)
)"""
METRICS_SQL = """
CREATE TABLE IF NOT EXISTS replica_metrics (
    deployment TEXT NOT NULL,
    replica TEXT NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    snapshot TEXT NOT NULL,
    PRIMARY KEY (deployment, replica)
)"""


def m002_session_steps(db) -> None:
    """The steps of sessions, so that any server sharing the log continues a session."""
    db.execute(STEPS_SQL)


def m003_replica_metrics(db) -> None:
    """Each server's metrics, so that any server of a deployment reports its totals."""
    db.execute(METRICS_SQL)


class StepTaken(Exception):  # noqa: N818 - a condition, as KeyError is
    """Step ``step`` of ``session_id`` is in the log already, taken by ``request_id``."""

    def __init__(self, session_id: str, step: int, request_id: str):
        super().__init__(f"step {step} of session {session_id!r} was taken by {request_id!r}")
        self.session_id, self.step, self.request_id = session_id, step, request_id


@dataclass(frozen=True)
class LoggedStep:
    """One logged step of a session: its index, the request id that took it, the task text
    (step 0 only; None: taken from the messages) and its messages (JSON objects)."""

    step: int
    request_id: str
    request: str | None
    messages: list[dict[str, Any]]

    @classmethod
    def from_row(cls, row: tuple) -> LoggedStep:
        """The step a ``(step, request_id, body)`` row holds."""
        body = json.loads(row[2])
        return cls(step=int(row[0]), request_id=row[1], request=body.get("request"),
                   messages=body["messages"])


def step_body(request: str | None, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The body a step's row keeps: what a server needs to append it to the trajectory."""
    return {"request": request, "messages": messages}


class Statements:
    """The SQL of the two tables with one driver's placeholder ``mark``. ``returning``: the
    decision columns an insert returns (``INSERT ... RETURNING``, PostgreSQL's log: a new
    decision is written and read in one round trip); None reads it back with a select."""

    def __init__(self, mark: str, returning: str | None = None):
        m = mark
        self.returning = returning
        self.insert_step = (f"INSERT INTO session_steps (session_id, step, request_id, body) "
                            f"VALUES ({m}, {m}, {m}, {m}) ON CONFLICT (session_id, step) DO "
                            "NOTHING")
        self.step_owner = (f"SELECT request_id FROM session_steps WHERE session_id = {m} AND "
                           f"step = {m}")
        self.steps = (f"SELECT step, request_id, body FROM session_steps WHERE session_id = {m} "
                      f"AND step >= {m} ORDER BY step")
        self.forget = f"DELETE FROM session_steps WHERE session_id = {m}"
        self.push = (f"INSERT INTO replica_metrics (deployment, replica, updated_at, snapshot) "
                     f"VALUES ({m}, {m}, {m}, {m}) ON CONFLICT (deployment, replica) DO UPDATE "
                     "SET updated_at = EXCLUDED.updated_at, snapshot = EXCLUDED.snapshot")
        self.pull = (f"SELECT replica, updated_at, snapshot FROM replica_metrics WHERE "
                     f"deployment = {m} ORDER BY replica")
        self.insert_shadow = INSERT_SHADOW.replace("?", m)


def write_decision(conn, sql: Statements, insert: str, select: str, entry) -> tuple:
    """Inside the caller's transaction: insert ``entry``'s decision row (``insert``: ``ON
    CONFLICT (request_id) DO NOTHING``) and, when it is new, a session step's row and the shadow
    policy's decision (``entry.shadow_row``); return the decision row the log holds under the
    id (``select``). Raises `StepTaken` (the caller rolls back) when another request id holds
    the step."""
    row = None
    if sql.returning:
        row = conn.execute(f"{insert} RETURNING {sql.returning}", entry.row()).fetchone()
        new = row is not None
    else:
        new = conn.execute(insert, entry.row()).rowcount == 1
    if new and entry.body is not None:
        values = (entry.session_id, entry.step, entry.request_id,
                  json.dumps(entry.body, sort_keys=True, ensure_ascii=False, allow_nan=False))
        if conn.execute(sql.insert_step, values).rowcount != 1:
            owner = conn.execute(sql.step_owner, (entry.session_id, entry.step)).fetchone()
            raise StepTaken(entry.session_id, entry.step, owner[0] if owner else "?")
    if new and getattr(entry, "shadow_row", None) is not None:
        conn.execute(sql.insert_shadow, entry.shadow_row)
    return row if row is not None else conn.execute(select, (entry.request_id,)).fetchone()


def write_group(conn, sql: Statements, insert: str, select: str, entries: list,
                savepoint: Callable[[], ContextManager]) -> list:
    """Inside the caller's transaction (one commit for all): `write_decision` for each of
    ``entries``, in order; a session step's in a savepoint (``savepoint()``), so that a step
    another request id holds (`StepTaken`, put in that entry's place) rolls back that entry
    alone. Any other error stops the group (the caller rolls the transaction back)."""
    out: list = []
    for entry in entries:
        if entry.body is None:
            out.append(write_decision(conn, sql, insert, select, entry))
            continue
        try:
            with savepoint():
                out.append(write_decision(conn, sql, insert, select, entry))
        except StepTaken as exc:
            out.append(exc)
    return out


def snapshot_rows(rows: list[tuple]) -> list[tuple[str, float, dict]]:
    """``(replica, updated_at, snapshot)`` of ``replica_metrics`` rows."""
    return [(r[0], float(r[1]), json.loads(r[2])) for r in rows]
