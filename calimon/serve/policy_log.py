"""What the decision log keeps besides the answers: the shadow policy's decisions and every
change of the live policy (migration 4 of `calimon.serve.decision_log.SCHEMA`).

- ``shadow_decisions``: one row per request and candidate policy: the decision a policy run in
  shadow (``calimon serve --shadow``) made on a request the live policy answered. It is never
  answered; its JSON carries ``"shadow": true`` and the live policy's sha256.
- ``policy_changes``: one row per change of the live policy, numbered in order (``seq``):
  ``deploy`` (a server started on a policy the log had not served), ``promote``, ``rollback``
  and ``refused`` (a promotion whose checks failed: the live policy stayed). The last row that
  is not ``refused`` names the live policy, so a restarted server serves it.

The SQL is SQLite's and PostgreSQL's alike (``?`` placeholders here, turned into ``%s`` for
psycopg by `pg_sql`); the next ``seq`` is taken in the insert itself, in one transaction.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from typing import Any

SHADOW_SQL = """
CREATE TABLE IF NOT EXISTS shadow_decisions (
    request_id TEXT NOT NULL,
    policy_hash TEXT NOT NULL,
    live_policy_hash TEXT NOT NULL,
    received_at DOUBLE PRECISION NOT NULL,
    decision TEXT NOT NULL,
    action TEXT NOT NULL,
    p_raw DOUBLE PRECISION,
    p_cal DOUBLE PRECISION,
    response TEXT NOT NULL,
    PRIMARY KEY (request_id, policy_hash)
)"""
CHANGES_SQL = """
CREATE TABLE IF NOT EXISTS policy_changes (
    seq INTEGER PRIMARY KEY,
    at DOUBLE PRECISION NOT NULL,
    kind TEXT NOT NULL,
    policy_name TEXT NOT NULL,
    policy_hash TEXT NOT NULL,
    policy_path TEXT NOT NULL,
    previous_hash TEXT,
    by_whom TEXT NOT NULL,
    detail TEXT NOT NULL
)"""
KINDS = ("deploy", "promote", "rollback", "refused")
CHANGE_COLUMNS = ("seq", "at", "kind", "policy_name", "policy_hash", "policy_path",
                  "previous_hash", "by_whom", "detail")
INSERT_SHADOW = ("INSERT INTO shadow_decisions (request_id, policy_hash, live_policy_hash, "
                 "received_at, decision, action, p_raw, p_cal, response) VALUES "
                 "(?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (request_id, policy_hash) DO NOTHING")
SELECT_SHADOW = "SELECT request_id, response FROM shadow_decisions WHERE policy_hash = ?"
INSERT_CHANGE = ("INSERT INTO policy_changes (seq, at, kind, policy_name, policy_hash, "
                 "policy_path, previous_hash, by_whom, detail) SELECT COALESCE(MAX(seq), 0) + 1, "
                 "?, ?, ?, ?, ?, ?, ?, ? FROM policy_changes")
SELECT_CHANGES = f"SELECT {', '.join(CHANGE_COLUMNS)} FROM policy_changes ORDER BY seq"


def m004_shadow_and_changes(db: sqlite3.Connection) -> None:
    """The shadow policy's decisions and the changes of the live policy."""
    db.execute(SHADOW_SQL)
    db.execute(CHANGES_SQL)


def pg_sql(sql: str) -> str:
    """A statement of this module with psycopg's placeholders."""
    return sql.replace("?", "%s")


@dataclass(frozen=True)
class PolicyChange:
    """One change of the live policy (module docstring): its number, when, what kind, the
    policy made live (or, for ``refused``, the candidate refused), the one live before, who
    asked, and what was checked (``detail``)."""

    kind: str
    policy_name: str
    policy_hash: str
    policy_path: str
    previous_hash: str | None = None
    by_whom: str = "server"
    detail: dict[str, Any] = field(default_factory=dict)
    at: float = 0.0
    seq: int = 0

    def values(self) -> tuple:
        """The insert's values (``seq`` is taken by the insert); ``detail`` gains the version
        of the calimon that logs the change (the installed package's metadata), unless it has
        one."""
        from calimon import __version__

        detail = {"calimon_version": __version__, **self.detail}
        return (self.at or time.time(), self.kind, self.policy_name, self.policy_hash,
                self.policy_path, self.previous_hash, self.by_whom,
                json.dumps(detail, sort_keys=True, allow_nan=False))

    @classmethod
    def from_row(cls, row: tuple) -> PolicyChange:
        """The change a row in `CHANGE_COLUMNS` order holds."""
        d = dict(zip(CHANGE_COLUMNS, row, strict=True))
        return cls(kind=d["kind"], policy_name=d["policy_name"], policy_hash=d["policy_hash"],
                   policy_path=d["policy_path"], previous_hash=d["previous_hash"],
                   by_whom=d["by_whom"], detail=json.loads(d["detail"]), at=d["at"],
                   seq=d["seq"])

    def to_dict(self) -> dict[str, Any]:
        """The change as JSON-ready fields."""
        return {k: getattr(self, k) for k in CHANGE_COLUMNS}


def shadow_values(request_id: str, answer: dict[str, Any]) -> tuple:
    """The insert's values of a shadow decision (``answer``: the shadow's answer JSON)."""
    return (request_id, answer["policy_hash"], answer["live_policy_hash"], time.time(),
            answer["decision"], answer["action"], answer.get("p_raw"), answer.get("p_cal"),
            json.dumps(answer, sort_keys=True, allow_nan=False))


@dataclass(frozen=True)
class Served:
    """A policy file as the log names it: its path and its sha256."""

    path: str
    sha256: str
    name: str = ""


def history(changes: list[PolicyChange]) -> list[Served]:
    """The stack of live policies the changes leave, the live one last: a deploy starts it
    again, a promote pushes, a rollback pops (refused attempts change nothing)."""
    stack: list[Served] = []
    for c in changes:
        served = Served(c.policy_path, c.policy_hash, c.policy_name)
        if c.kind == "deploy":
            stack = [served]
        elif c.kind == "promote":
            stack.append(served)
        elif c.kind == "rollback" and len(stack) > 1:
            stack.pop()
    return stack
