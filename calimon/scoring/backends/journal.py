"""A journal of API answers: every successful response is written to SQLite the moment it
arrives, keyed by a hash of the endpoint and the exact request, so a run interrupted between two
run-store commits asks again for nothing it has already paid for.

The run store remains the record of readings; the journal only holds raw responses. It never
holds the API key (requests carry the key in a header, which is not part of the key hashed).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path

from calimon.migrations import Schema, migrate


def m001_responses(db: sqlite3.Connection) -> None:
    """The responses table as calimon 0.1.0 created it."""
    db.execute("""CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY, endpoint TEXT NOT NULL, response TEXT NOT NULL,
    created TEXT NOT NULL DEFAULT (datetime('now')))""")


SCHEMA = Schema("API journal", (m001_responses,))  # append only (calimon.migrations)


def request_key(endpoint: str, payload: dict) -> str:
    """The journal key of a request: sha256 of the endpoint URL and the canonical payload."""
    text = json.dumps([endpoint, payload], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class Journal:
    """Thread-safe response journal in one SQLite file (created on first use)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                migrate(conn, SCHEMA, self.path)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def get(self, key: str) -> dict | None:
        """The response stored under ``key``, or None."""
        with self._lock:
            row = self._db().execute("SELECT response FROM responses WHERE key=?",
                                     (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, endpoint: str, response: dict) -> None:
        """Store one response (committed at once)."""
        with self._lock:
            db = self._db()
            db.execute("INSERT OR REPLACE INTO responses (key, endpoint, response) "
                       "VALUES (?, ?, ?)", (key, endpoint, json.dumps(response)))
            db.commit()

    def close(self) -> None:
        """Close the connection (reopened on next use)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
