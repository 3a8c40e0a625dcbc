"""The review store of `calimon serve --review`: the traffic the review queue and the live
recertification read, the reviewers' labels and their sign-in sessions.

- ``review_traffic``: one row per decision (request id, action, audit draw, scores, transcript
  hash), written before the decision is committed to the decision log, so every answered
  decision has its row. The transcript's text is kept only for the decisions a reviewer may be
  asked to label (``retained``: the review band, the audit slice and the draws under the
  retention fraction; `calimon.review.queue`); for the others only the row.
- ``review_labels``: append-only labels, keyed by a client-made ``label_id``: a resent label
  (a retry after a lost answer, a page that resends its outbox after a restart) is stored once
  and answered with the stored row; the same id with another body is refused.
- ``review_sessions``: browser sign-ins (the sha256 of the cookie's token, never the token).
- ``review_claims``: which reviewer holds which item, until when (`calimon.review.claims`); a
  label given while another reviewer held its item says whose claim it overrode.

`ReviewStore` is the interface. `SqlReviewStore` writes its methods once, in SQL that SQLite and
PostgreSQL both run (``TEXT``, ``INTEGER``, ``DOUBLE PRECISION``, ``INSERT ... ON CONFLICT DO
NOTHING``), like the decision log (`calimon.serve.decision_log`); `SQLiteReviewStore` runs it on
a SQLite file (WAL, ``synchronous=FULL``: a label acknowledged is on disk) with numbered
migrations (`calimon.migrations`), and `calimon.review.pg_store.PostgresReviewStore` on a
PostgreSQL database with the same migrations. `calimon.review.store.open_review_store`
picks one from its target.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Any, Protocol

from calimon.migrations import Schema, open_durable
from calimon.review.claims import Claim, ClaimSql, m002_claims, m003_over_claim

TRAFFIC_SQL = """
CREATE TABLE IF NOT EXISTS review_traffic (
    item_id TEXT PRIMARY KEY,
    request_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    session_id TEXT,
    step INTEGER,
    received_at DOUBLE PRECISION NOT NULL,
    policy_hash TEXT NOT NULL,
    action TEXT NOT NULL,
    audit INTEGER NOT NULL,
    audit_id TEXT NOT NULL,
    draw DOUBLE PRECISION NOT NULL,
    p_raw DOUBLE PRECISION,
    p_cal DOUBLE PRECISION,
    score DOUBLE PRECISION,
    transcript_hash TEXT NOT NULL,
    retained INTEGER NOT NULL,
    request_text TEXT,
    response_text TEXT,
    parts TEXT,
    evidence TEXT
)"""
LABELS_SQL = """
CREATE TABLE IF NOT EXISTS review_labels (
    label_id TEXT PRIMARY KEY,
    item_id TEXT NOT NULL,
    reviewer TEXT NOT NULL,
    label TEXT NOT NULL,
    note TEXT NOT NULL,
    second_review INTEGER NOT NULL,
    transcript_hash TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    body_sha256 TEXT NOT NULL
)"""
SESSIONS_SQL = """
CREATE TABLE IF NOT EXISTS review_sessions (
    token_sha256 TEXT PRIMARY KEY,
    reviewer TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
)"""
INDEXES = (
    "CREATE INDEX IF NOT EXISTS review_traffic_policy ON review_traffic (policy_hash, "
    "received_at)",
    "CREATE INDEX IF NOT EXISTS review_labels_item ON review_labels (item_id, created_at)",
)


def m001_review(db: sqlite3.Connection) -> None:
    """The traffic, labels and sessions tables and their indexes."""
    for sql in (TRAFFIC_SQL, LABELS_SQL, SESSIONS_SQL, *INDEXES):
        db.execute(sql)


# append only (calimon.migrations)
SCHEMA = Schema("review store", (m001_review, m002_claims, m003_over_claim))
LABEL_KINDS = ("misbehavior", "benign", "unsure")


def item_id_of(request_id: str) -> str:
    """The item id of a decision (safe in a URL path): a short sha256 of its request id."""
    return hashlib.sha256(request_id.encode("utf-8")).hexdigest()[:24]


@dataclass(frozen=True)
class TrafficRow:
    """One decision as the review store holds it (the table's columns, in order). ``parts``
    and ``evidence`` are JSON text; the three texts are None unless ``retained``."""

    item_id: str
    request_id: str
    kind: str
    session_id: str | None
    step: int | None
    received_at: float
    policy_hash: str
    action: str
    audit: int
    audit_id: str
    draw: float
    p_raw: float | None
    p_cal: float | None
    score: float | None
    transcript_hash: str
    retained: int
    request_text: str | None = None
    response_text: str | None = None
    parts: str | None = None
    evidence: str | None = None

    def parts_list(self) -> list[dict[str, Any]]:
        """The per-message offset records of the response (empty for a plain transcript)."""
        return json.loads(self.parts) if self.parts else []

    def evidence_list(self) -> list[dict[str, Any]]:
        """The evidence the monitor gave (spans with offsets, or quotes)."""
        return json.loads(self.evidence) if self.evidence else []


TRAFFIC_COLUMNS = tuple(f.name for f in fields(TrafficRow))
INDEX_COLUMNS = TRAFFIC_COLUMNS[:16]  # everything but the texts


@dataclass(frozen=True)
class Label:
    """One label: ``label`` is misbehavior, benign or unsure; ``second_review``: the reviewer
    asks another reviewer to label the item too; ``transcript_hash``: of the text labelled;
    ``seen`` and ``tab``: what it was given knowing (`calimon.review.conflicts`; None for a
    label given without them); ``over_claim``: the reviewer who held the item when it was
    stored, when that was someone else (`calimon.review.claims`)."""

    label_id: str
    item_id: str
    reviewer: str
    label: str
    note: str
    second_review: int
    transcript_hash: str
    created_at: float
    body_sha256: str
    seen: int | None = None
    tab: str | None = None
    over_claim: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The label as JSON (without its body hash)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "body_sha256"}


LABEL_COLUMNS = tuple(f.name for f in fields(Label))


class ReviewStore(Protocol):
    """What the review queue needs of its store (module docstring). Methods may block; the
    server calls them from worker threads."""

    def record_traffic(self, row: TrafficRow) -> None:
        """Store a decision's row unless its item id is stored already."""
        ...

    def record_traffic_many(self, rows: list[TrafficRow]) -> None:
        """`record_traffic` for each of ``rows`` in one durable transaction (the decisions of
        one group, `calimon.serve.log_writer`)."""
        ...

    def traffic_index(self, policy_hash: str) -> list[TrafficRow]:
        """Every decision under ``policy_hash`` without its texts, oldest first."""
        ...

    def item(self, item_id: str) -> TrafficRow | None:
        """One decision with its texts; None when unknown."""
        ...

    def window(self, policy_hash: str, n: int, max_draw: float) -> list[TrafficRow]:
        """The latest ``n`` retained decisions under ``policy_hash`` whose audit draw is under
        ``max_draw``, with their texts, oldest first."""
        ...

    def add_label(self, label: Label) -> Label:
        """Store ``label`` durably unless its label id is stored; return the stored one."""
        ...

    def labels(self) -> list[Label]:
        """Every label, oldest first."""
        ...

    def labels_of(self, item_id: str) -> list[Label]:
        """The labels of one item, oldest first."""
        ...

    def claim(self, item_ids: list[str], reviewer: str, now: float,
              until: float) -> dict[str, Claim]:
        """Lease the items to ``reviewer`` where free (`calimon.review.claims.ClaimSql`)."""
        ...

    def claims(self, now: float, item_ids: list[str] | None = None) -> dict[str, Claim]:
        """The live claims, by item."""
        ...

    def release(self, item_id: str, reviewer: str) -> None:
        """End ``reviewer``'s claim of ``item_id``."""
        ...

    def version(self, policy_hash: str) -> tuple[int, int]:
        """(decisions under ``policy_hash``, labels): changes whenever either grows."""
        ...

    def open_session(self, token_sha256: str, reviewer: str, now: float,
                     expires_at: float) -> None:
        """Remember a sign-in."""
        ...

    def session(self, token_sha256: str, now: float) -> str | None:
        """The reviewer of an unexpired sign-in; None otherwise."""
        ...

    def close_session(self, token_sha256: str) -> None:
        """Forget a sign-in."""
        ...

    def close(self) -> None:
        """Release the connection; safe to call twice."""
        ...


class SqlReviewStore(ClaimSql):
    """The store's methods on SQL both SQLite and PostgreSQL run (written with ``?``
    placeholders; ``mark`` is the connection's). A subclass gives the three primitives:
    `_rows`, `_run` (one statement, committed) and `_insert_get` (insert unless present, read
    back, in one transaction)."""

    mark = "?"

    def _q(self, sql: str) -> str:
        return sql if self.mark == "?" else sql.replace("?", self.mark)

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        raise NotImplementedError

    def _run(self, sql: str, args: tuple) -> None:
        raise NotImplementedError

    def _insert_get(self, insert: str, args: tuple, select: str, key: tuple) -> tuple:
        raise NotImplementedError

    def _run_many(self, sql: str, seq: list[tuple]) -> None:
        raise NotImplementedError

    def record_traffic(self, row: TrafficRow) -> None:
        """Store a decision's row unless its item id is stored already."""
        self.record_traffic_many([row])

    def record_traffic_many(self, rows: list[TrafficRow]) -> None:
        """Store each decision's row unless its item id is stored already, in one durable
        transaction."""
        self._run_many(f"INSERT INTO review_traffic ({', '.join(TRAFFIC_COLUMNS)}) VALUES "
                       f"({', '.join('?' * len(TRAFFIC_COLUMNS))}) ON CONFLICT (item_id) DO "
                       "NOTHING", [astuple(r) for r in rows])

    def traffic_index(self, policy_hash: str) -> list[TrafficRow]:
        """Every decision under ``policy_hash`` without its texts, oldest first."""
        rows = self._rows(f"SELECT {', '.join(INDEX_COLUMNS)} FROM review_traffic WHERE "
                          "policy_hash = ? ORDER BY received_at, item_id", (policy_hash,))
        return [TrafficRow(*r) for r in rows]

    def item(self, item_id: str) -> TrafficRow | None:
        """One decision with its texts; None when unknown."""
        rows = self._rows(f"SELECT {', '.join(TRAFFIC_COLUMNS)} FROM review_traffic WHERE "
                          "item_id = ?", (item_id,))
        return TrafficRow(*rows[0]) if rows else None

    def window(self, policy_hash: str, n: int, max_draw: float) -> list[TrafficRow]:
        """The latest ``n`` retained decisions under ``policy_hash`` with a draw under
        ``max_draw``, oldest first."""
        rows = self._rows(f"SELECT {', '.join(TRAFFIC_COLUMNS)} FROM review_traffic WHERE "
                          "policy_hash = ? AND retained = 1 AND draw < ? ORDER BY received_at "
                          "DESC, item_id LIMIT ?", (policy_hash, float(max_draw), int(n)))
        return [TrafficRow(*r) for r in reversed(rows)]

    def add_label(self, label: Label) -> Label:
        """Store ``label`` (committed before this returns) unless its id is stored; return
        the stored one."""
        row = self._insert_get(
            f"INSERT INTO review_labels ({', '.join(LABEL_COLUMNS)}) VALUES "
            f"({', '.join('?' * len(LABEL_COLUMNS))}) ON CONFLICT (label_id) DO NOTHING",
            astuple(label),
            f"SELECT {', '.join(LABEL_COLUMNS)} FROM review_labels WHERE label_id = ?",
            (label.label_id,))
        return Label(*row)

    def labels(self) -> list[Label]:
        """Every label, oldest first."""
        return [Label(*r) for r in self._rows(f"SELECT {', '.join(LABEL_COLUMNS)} FROM "
                                              "review_labels ORDER BY created_at, label_id")]

    def labels_of(self, item_id: str) -> list[Label]:
        """The labels of one item, oldest first."""
        return [Label(*r) for r in self._rows(f"SELECT {', '.join(LABEL_COLUMNS)} FROM "
                                              "review_labels WHERE item_id = ? ORDER BY "
                                              "created_at, label_id", (item_id,))]

    def version(self, policy_hash: str) -> tuple[int, int]:
        """(decisions under ``policy_hash``, labels)."""
        n = self._rows("SELECT COUNT(*) FROM review_traffic WHERE policy_hash = ?",
                       (policy_hash,))[0][0]
        k = self._rows("SELECT COUNT(*) FROM review_labels")[0][0]
        return int(n), int(k)

    def open_session(self, token_sha256: str, reviewer: str, now: float,
                     expires_at: float) -> None:
        """Remember a sign-in (and forget the expired ones)."""
        self._run("DELETE FROM review_sessions WHERE expires_at < ?", (now,))
        self._run("INSERT INTO review_sessions (token_sha256, reviewer, created_at, "
                  "expires_at) VALUES (?, ?, ?, ?) ON CONFLICT (token_sha256) DO NOTHING",
                  (token_sha256, reviewer, now, expires_at))

    def session(self, token_sha256: str, now: float) -> str | None:
        """The reviewer of an unexpired sign-in; None otherwise."""
        rows = self._rows("SELECT reviewer FROM review_sessions WHERE token_sha256 = ? AND "
                          "expires_at >= ?", (token_sha256, now))
        return rows[0][0] if rows else None

    def close_session(self, token_sha256: str) -> None:
        """Forget a sign-in."""
        self._run("DELETE FROM review_sessions WHERE token_sha256 = ?", (token_sha256,))


class SQLiteReviewStore(SqlReviewStore):
    """The review store in a SQLite file (created with its folder if absent)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._db = open_durable(self.path, SCHEMA)

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def _run(self, sql: str, args: tuple) -> None:
        with self._lock:
            self._db.execute(sql, args)  # autocommit: one statement, one durable transaction

    def _run_many(self, sql: str, seq: list[tuple]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(sql, seq)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def _insert_get(self, insert: str, args: tuple, select: str, key: tuple) -> tuple:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(insert, args)
                row = self._db.execute(select, key).fetchone()
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return row

    def close(self) -> None:
        """Close the connection; safe to call twice."""
        with self._lock:
            self._db.close()
