"""The review store of `calimon serve --review` in PostgreSQL (``--review-store
postgresql://...``): one store that several servers share, like the decision log in PostgreSQL
(`calimon.serve.pg_log`), whose connection handling and migrations it follows.

The tables are the SQLite store's (`calimon.review.labels`: the same ``CREATE TABLE`` statements,
run by the same numbered migrations through `calimon.serve.pg_log.migrate_postgres`, versions in
``calimon_schema_version``), and so is every statement (`calimon.review.labels.SqlReviewStore`),
with ``%s`` placeholders. Each write is one transaction with ``synchronous_commit = on``: a label
acknowledged is on PostgreSQL's disk. A label id inserted by two servers at once is stored once
(``ON CONFLICT (label_id) DO NOTHING`` under READ COMMITTED waits for the other insert), and the
``SELECT`` after it reads the row that won. A dropped connection is opened again and the call
retried once (every call is idempotent). PostgreSQL's text holds no NUL character: a kept
transcript's NUL is stored as U+FFFD (its hash, from the text as sent, is unchanged).
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from calimon.errors import InputError
from calimon.review.labels import SCHEMA, SqlReviewStore, TrafficRow
from calimon.serve.pg_log import (
    CONNECT_TIMEOUT_S,
    import_psycopg,
    is_postgres_url,
    migrate_postgres,
    redact,
)


class PostgresReviewStore(SqlReviewStore):
    """The review store in a PostgreSQL database (module docstring); ``url`` is libpq's."""

    mark = "%s"

    def __init__(self, url: str, connect_timeout: float = CONNECT_TIMEOUT_S):
        if not is_postgres_url(url):
            raise InputError(f"expected a postgresql:// URL, got {redact(url)!r}",
                             field="review_store")
        self._psycopg = import_psycopg()
        self.url, self.shown, self._timeout = url, redact(url), connect_timeout
        self._lock = threading.Lock()
        self._conn = self._connect()
        try:
            migrate_postgres(self._conn, SCHEMA, self.shown)
        except BaseException:
            self._conn.close()
            raise

    def _connect(self):
        psycopg = self._psycopg
        params: dict[str, Any] = {"autocommit": True, "application_name": "calimon review"}
        if "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(self.url):
            params["connect_timeout"] = max(1, round(self._timeout))
        try:
            conn = psycopg.connect(self.url, **params)
        except psycopg.Error as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise InputError(f"cannot open the PostgreSQL review store {self.shown}: {first}",
                             field="review_store") from None
        conn.execute("SET synchronous_commit = on")
        return conn

    def _call(self, work):
        """``work(connection)`` under the lock; a dropped connection is opened again and
        ``work`` retried once."""
        with self._lock:
            if self._conn.closed:
                self._conn = self._connect()
            try:
                return work(self._conn)
            except self._psycopg.OperationalError:
                if not self._conn.closed and not self._conn.broken:
                    raise
            self._conn.close()
            self._conn = self._connect()
            return work(self._conn)

    def record_traffic_many(self, rows: list[TrafficRow]) -> None:
        """Store each decision's row unless its item id is stored already (NUL as U+FFFD), in
        one transaction."""
        super().record_traffic_many([_no_nul(row) for row in rows])

    def _run_many(self, sql: str, seq: list[tuple]) -> None:
        def work(conn):
            with conn.transaction(), conn.cursor() as cur:
                cur.executemany(self._q(sql), seq)

        self._call(work)

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        return self._call(lambda c: c.execute(self._q(sql), args).fetchall())

    def _run(self, sql: str, args: tuple) -> None:
        self._call(lambda c: c.execute(self._q(sql), args))

    def _insert_get(self, insert: str, args: tuple, select: str, key: tuple) -> tuple:
        def work(conn):
            with conn.transaction():
                conn.execute(self._q(insert), args)
                return conn.execute(self._q(select), key).fetchone()

        return self._call(work)

    def close(self) -> None:
        """Close the connection; safe to call twice."""
        with self._lock:
            self._conn.close()


def _no_nul(row: TrafficRow) -> TrafficRow:
    """``row`` with NUL in its texts as U+FFFD (PostgreSQL's text holds no NUL)."""
    texts = {k: v.replace("\x00", "\ufffd") for k in ("request_text", "response_text")
             if isinstance(v := getattr(row, k), str) and "\x00" in v}
    return replace(row, **texts) if texts else row
