"""The run store: an embedded SQLite database (WAL) of monitor readings.

A reading is keyed by (model, model revision, template hash, readout, transcript hash), so scoring
is resumable and idempotent: only missing keys reach the model, and curves, calibration and
policies re-run from the store without touching it. Rows with status "error" are retried.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from calimon import __version__
from calimon.migrations import Schema, migrate
from calimon.verdict import Verdict

_VERDICTS_TABLE = """
CREATE TABLE IF NOT EXISTS verdicts (
    model TEXT NOT NULL,
    model_revision TEXT NOT NULL,
    prompt TEXT NOT NULL,
    template_hash TEXT NOT NULL,
    readout TEXT NOT NULL,
    transcript_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    p_raw REAL,
    format_mass REAL,
    p_yes REAL,
    p_no REAL,
    decision INTEGER,
    text TEXT,
    evidence TEXT,
    tokens INTEGER,
    seconds REAL,
    truncation TEXT,
    error TEXT,
    extra TEXT,
    calimon_version TEXT NOT NULL,
    created REAL NOT NULL,
    PRIMARY KEY (model, model_revision, template_hash, readout, transcript_hash)
);
"""


def m001_verdicts(db: sqlite3.Connection) -> None:
    """The readings table as calimon 0.1.0 created it (stores of that time already have it)."""
    db.execute(_VERDICTS_TABLE)


# Append new migrations; never edit or reorder one that has shipped (docs/reliability.md).
SCHEMA = Schema("run store", (m001_verdicts,))
_VERDICT_COLUMNS = ("transcript_hash", "readout", "status", "p_raw", "format_mass", "p_yes",
                    "p_no", "decision", "text", "evidence", "tokens", "seconds", "truncation",
                    "error", "extra")


@dataclass(frozen=True)
class MonitorKey:
    """Everything that decides a reading besides the transcript."""

    model: str
    model_revision: str
    prompt: str
    template_hash: str
    readout: str


LOCK_TIMEOUT_S = 60.0


def _use_wal(db: sqlite3.Connection) -> None:
    """Switch ``db`` to write-ahead logging. While another process is creating the same new
    store, SQLite can answer "database is locked" at once, without waiting in its busy handler;
    retry until the lock timeout rather than fail the second writer."""
    deadline = time.monotonic() + LOCK_TIMEOUT_S
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class RunStore:
    """The run store at ``path`` (created if absent); a context manager that closes it."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT_S, isolation_level=None)
        _use_wal(self._db)
        self._db.execute("PRAGMA synchronous=NORMAL")
        try:
            migrate(self._db, SCHEMA, self.path)
        except BaseException:
            self._db.close()
            raise
        self._db.row_factory = sqlite3.Row

    def close(self) -> None:
        """Close the database connection."""
        self._db.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _where(self, key: MonitorKey) -> tuple[str, list]:
        return ("model=? AND model_revision=? AND template_hash=? AND readout=?",
                [key.model, key.model_revision, key.template_hash, key.readout])

    def get(self, key: MonitorKey, hashes: Sequence[str]) -> dict[str, Verdict]:
        """Stored readings for these transcripts (errors included)."""
        where, args = self._where(key)
        found: dict[str, Verdict] = {}
        unique = list(dict.fromkeys(hashes))
        for i in range(0, len(unique), 500):
            chunk = unique[i:i + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(
                f"SELECT {','.join(_VERDICT_COLUMNS)} FROM verdicts WHERE {where} "
                f"AND transcript_hash IN ({marks})", args + chunk).fetchall()
            for row in rows:
                found[row["transcript_hash"]] = Verdict.from_row(dict(row))
        return found

    def missing(self, key: MonitorKey, hashes: Sequence[str]) -> list[str]:
        """Transcript hashes with no reading yet, or whose last attempt was an error."""
        have = self.get(key, hashes)
        return [h for h in dict.fromkeys(hashes)
                if h not in have or have[h].status == "error"]

    def put(self, key: MonitorKey, verdicts: Iterable[Verdict]) -> int:
        """Insert or replace readings in one transaction; returns the number written."""
        rows = []
        now = time.time()
        for v in verdicts:
            r = v.to_row()
            rows.append([key.model, key.model_revision, key.prompt, key.template_hash,
                         key.readout] + [r[c] for c in _VERDICT_COLUMNS if c != "readout"]
                        + [__version__, now])
        if not rows:
            return 0
        cols = ["model", "model_revision", "prompt", "template_hash", "readout"] + \
            [c for c in _VERDICT_COLUMNS if c != "readout"] + ["calimon_version", "created"]
        sql = (f"INSERT OR REPLACE INTO verdicts ({','.join(cols)}) "
               f"VALUES ({','.join('?' * len(cols))})")
        self._db.execute("BEGIN IMMEDIATE")
        try:
            self._db.executemany(sql, rows)
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        return len(rows)

    def count(self, key: MonitorKey | None = None) -> int:
        """Stored readings of ``key``, or of all keys when None."""
        if key is None:
            return self._db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0]
        where, args = self._where(key)
        return self._db.execute(f"SELECT COUNT(*) FROM verdicts WHERE {where}", args).fetchone()[0]

    def keys(self) -> list[MonitorKey]:
        """Every monitor key with readings in the store."""
        rows = self._db.execute(
            "SELECT DISTINCT model, model_revision, prompt, template_hash, readout FROM verdicts")
        return [MonitorKey(*r) for r in rows.fetchall()]
