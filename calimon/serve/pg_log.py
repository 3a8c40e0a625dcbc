"""The decision log of `calimon serve` in PostgreSQL (``--log postgresql://...``): one log that
several servers, or the replicas of a Ray Serve deployment (`calimon.serve.ray_serve`), share.

`PostgresDecisionLog` implements `calimon.serve.decision_log.DecisionLog` on the same table as
the SQLite log: the same ``CREATE TABLE`` (`calimon.serve.decision_log.TABLE_SQL`: ``TEXT``,
``INTEGER``, ``DOUBLE PRECISION``), created by the same numbered migrations
(`calimon.serve.decision_log.SCHEMA`, run on a psycopg connection, whose ``execute`` takes the
same statements), and the same ``INSERT ... ON CONFLICT (request_id) DO NOTHING``, with ``%s``
placeholders. `calimon.serve.decision_log.open_log` hands it every ``postgresql://`` or
``postgres://`` URL together with that schema, its columns and its row type (passed in: this
module does not import decision_log, whose ``open_log`` imports it). A URL is libpq's
(``postgresql://USER@HOST:PORT/DB?sslmode=require``); a password is better kept in
``PGPASSWORD`` or ``~/.pgpass`` than in the URL, which the server prints, redacted, at start.

Schema versions: PostgreSQL has no ``PRAGMA user_version``, so a table
``calimon_schema_version`` holds one row per calimon schema (``name``, ``version``: the number of
migrations applied).
`migrate_postgres` applies the pending migrations and the new version in one transaction, under a
transaction-scoped advisory lock, so servers starting together on an empty database migrate it
once; a database whose version is higher than this calimon knows is refused
(`calimon.migrations.NewerStoreError`), as a newer SQLite file is.

Durability and idempotency: each `record` (and each group of `record_many`) is one transaction
(``synchronous_commit = on`` for the session, whatever the server's default), so a decision
answered is on PostgreSQL's disk. Under
READ COMMITTED, an insert racing another writer's uncommitted insert of the same id waits for it
and then does nothing; the ``SELECT`` after it reads the row that won, so two replicas scoring one
request id answer the client with the same logged decision. A group of plain decisions (no
session step, no shadow decision) is one ``INSERT ... RETURNING`` of one array per column, not a
statement each, and is its own transaction (one round trip, no ``BEGIN`` and ``COMMIT``). Two
connections per log, each used by one thread at a time: one writes (and reads what the writes
need), the other looks up request ids, so the lookups of the next requests never wait
for a commit on disk (they see committed decisions only, as before; one still being committed is
found by the insert's conflict). A connection PostgreSQL dropped (a restart, a failover) is
opened again and the call retried once, which is safe because every call is idempotent.
"""

from __future__ import annotations

import json
import re
import threading
import zlib
from collections.abc import Callable
from typing import Any, Protocol

from calimon.errors import InputError, MissingExtraError
from calimon.migrations import NewerStoreError, Schema
from calimon.serve import policy_log
from calimon.serve.policy_log import PolicyChange, pg_sql
from calimon.serve.session_log import (
    LoggedStep,
    Statements,
    StepTaken,
    snapshot_rows,
    write_group,
)

URL_SCHEMES = ("postgresql://", "postgres://")
VERSION_TABLE_SQL = ("CREATE TABLE IF NOT EXISTS calimon_schema_version (name TEXT PRIMARY "
                     "KEY, version INTEGER NOT NULL)")
CONNECT_TIMEOUT_S = 10


class Entry(Protocol):
    """What the log stores (`calimon.serve.decision_log.LoggedDecision`): a request id, a row
    of values in the log's column order, and a step's session, index and body."""

    request_id: str
    session_id: str | None
    step: int | None
    body: dict | None

    def row(self) -> tuple: ...


def is_postgres_url(target: str) -> bool:
    """Whether ``target`` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return target.startswith(URL_SCHEMES)


def redact(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (for output and errors)."""
    url = re.sub(r"^(postgres(?:ql)?://[^:@/?]*):[^@/?]*@", r"\1:***@", url)
    return re.sub(r"([?&]password=)[^&]*", r"\1***", url)


def import_psycopg():
    """The ``psycopg`` module; `MissingExtraError` with the install line when it is absent."""
    try:
        import psycopg
    except ImportError:
        raise MissingExtraError("a PostgreSQL decision log needs psycopg 3: pip install "
                                "'calimon[postgres]'") from None
    return psycopg


def _lock_key(name: str) -> int:
    """The advisory lock of one schema's migrations (a stable signed 32-bit number)."""
    return zlib.crc32(f"calimon schema {name}".encode()) - (1 << 31)


def postgres_schema_version(conn, schema: Schema) -> int:
    """The version of ``schema`` recorded in the database of ``conn`` (0: none recorded)."""
    if conn.execute("SELECT to_regclass('calimon_schema_version')").fetchone()[0] is None:
        return 0
    row = conn.execute("SELECT version FROM calimon_schema_version WHERE name = %s",
                       (schema.name,)).fetchone()
    return 0 if row is None else int(row[0])


def _check_not_newer(found: int, schema: Schema, where: str) -> None:
    if found > schema.version:
        raise NewerStoreError(
            f"this {schema.name} has schema version {found}, but this calimon reads versions up "
            f"to {schema.version}: it was written by a newer calimon; upgrade calimon to open "
            "it", path=where)


def migrate_postgres(conn, schema: Schema, where: str) -> int:
    """Bring the database of ``conn`` (an autocommit psycopg connection; ``where`` names it in
    errors) to ``schema.version``; returns the number of migrations applied. A database already
    current is only read. Raises `NewerStoreError` for a database newer than the code."""
    found = postgres_schema_version(conn, schema)
    _check_not_newer(found, schema, where)
    if found == schema.version:
        return 0
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key(schema.name),))
        conn.execute(VERSION_TABLE_SQL)
        found = postgres_schema_version(conn, schema)  # another server may have migrated it
        _check_not_newer(found, schema, where)
        for number in range(found + 1, schema.version + 1):
            schema.migrations[number - 1](conn)
        conn.execute("INSERT INTO calimon_schema_version (name, version) VALUES (%s, %s) "
                     "ON CONFLICT (name) DO UPDATE SET version = EXCLUDED.version",
                     (schema.name, schema.version))
    return schema.version - found


class PostgresDecisionLog:
    """The decision log in a PostgreSQL database (module docstring): the ``decisions`` table
    that ``schema``'s migrations create (migrated when opened), read as ``columns`` and turned
    into entries by ``from_row``. ``url``: a libpq connection URL. Open it through
    `calimon.serve.decision_log.open_log`, which passes the decision log's schema."""

    def __init__(self, url: str, *, schema: Schema, columns: tuple[str, ...],
                 from_row: Callable[[tuple], Any], connect_timeout: float = CONNECT_TIMEOUT_S):
        if not is_postgres_url(url):
            raise InputError(f"expected a postgresql:// URL, got {redact(url)!r}", field="log")
        self._psycopg = import_psycopg()
        self.url, self.shown = url, redact(url)
        self._from_row, self._timeout = from_row, connect_timeout
        self._select = f"SELECT {', '.join(columns)} FROM decisions WHERE request_id = %s"
        self._select_many = self._select.replace("= %s", "= ANY(%s)")
        self._insert = (f"INSERT INTO decisions ({', '.join(columns)}) VALUES "
                        f"({', '.join(['%s'] * len(columns))}) ON CONFLICT (request_id) DO "
                        "NOTHING")
        self._sql = Statements("%s", returning=", ".join(columns))
        self._lock, self._read_lock = threading.Lock(), threading.Lock()
        self._read_conn = None  # the lookups' connection, opened by the first lookup
        self._conn = self._connect()
        try:
            migrate_postgres(self._conn, schema, self.shown)
            self._insert_arrays = _arrays_insert(self._conn, columns, self._sql.returning)
        except BaseException:
            self._conn.close()
            raise

    def _connect(self):
        psycopg = self._psycopg
        params: dict[str, Any] = {"autocommit": True, "application_name": "calimon serve"}
        if "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(self.url):
            params["connect_timeout"] = max(1, round(self._timeout))
        try:
            conn = psycopg.connect(self.url, **params)
        except psycopg.Error as exc:
            raise InputError(f"cannot open the PostgreSQL decision log {self.shown}: "
                             f"{_first_line(exc)}", field="log") from None
        conn.execute("SET synchronous_commit = on")
        return conn

    def _call(self, work, *, read: bool = False):
        """``work(connection)`` under its lock (``read``: the lookups' connection); a dropped
        connection is opened again and ``work`` retried once."""
        psycopg = self._psycopg
        with self._read_lock if read else self._lock:
            attr = "_read_conn" if read else "_conn"
            conn = getattr(self, attr)
            if conn is None or conn.closed:
                conn = self._connect()
                setattr(self, attr, conn)
            try:
                return work(conn)
            except psycopg.OperationalError:
                if not conn.closed and not conn.broken:
                    raise
            conn.close()
            conn = self._connect()
            setattr(self, attr, conn)
            return work(conn)

    def lookup(self, request_id: str) -> Any:
        """The entry logged under ``request_id``; None when there is none."""
        row = self._call(lambda c: c.execute(self._select, (request_id,)).fetchone(),
                         read=True)
        return None if row is None else self._from_row(row)

    def lookup_many(self, request_ids: list[str]) -> dict[str, Any]:
        """The entries logged under any of ``request_ids``, by id (one query)."""
        rows = self._call(lambda c: c.execute(self._select_many, (list(request_ids),))
                          .fetchall(),
                          read=True)
        return {row[0]: self._from_row(row) for row in rows}

    def record(self, entry: Entry) -> Any:
        """Log ``entry`` (committed before this returns) unless its id is logged already;
        returns what the log holds under the id."""
        [got] = self.record_many([entry])
        if isinstance(got, StepTaken):
            raise got
        return got

    def record_many(self, entries: list[Entry]) -> list:
        """`record` for each of ``entries`` in one transaction, one commit (``synchronous_commit
        = on``: on PostgreSQL's disk before this returns); a session step another request id
        holds is `StepTaken` in its place (its savepoint rolled back), the others logged."""
        plain = all(e.body is None and getattr(e, "shadow_row", None) is None
                    for e in entries)

        def work(conn):
            if plain:  # one statement: its own transaction, committed when it returns
                return self._insert_plain(conn, entries)
            with conn.transaction():
                return write_group(conn, self._sql, self._insert, self._select, entries,
                                   conn.transaction)

        rows = self._call(work)
        return [r if isinstance(r, StepTaken) else self._from_row(r) for r in rows]

    def _insert_plain(self, conn, entries: list[Entry]) -> list[tuple]:
        """Plain decisions (no session step, no shadow row) in one ``INSERT ... ON CONFLICT DO
        NOTHING RETURNING`` of one array per column (`_arrays_insert`), committed when it
        returns (the connection autocommits); each entry's row is the one the log holds under
        its id, as `write_group` gives (an id logged before, or earlier in the group, keeps its
        first row; one another writer holds is read after the insert, committed)."""
        columns = [list(values) for values in zip(*(e.row() for e in entries), strict=True)]
        held = {r[0]: r for r in conn.execute(self._insert_arrays, columns)}
        missing = list(dict.fromkeys(e.request_id for e in entries
                                     if e.request_id not in held))
        if missing:
            held.update((r[0], r) for r in conn.execute(self._select_many, (missing,)))
        return [held[e.request_id] for e in entries]

    def steps(self, session_id: str, since: int = 0) -> list[LoggedStep]:
        """The logged steps of a session from index ``since`` on, in order."""
        rows = self._call(lambda c: c.execute(self._sql.steps, (session_id, since)).fetchall())
        return [LoggedStep.from_row(r) for r in rows]

    def forget(self, session_id: str) -> int:
        """Delete a session's logged steps (its decisions stay); returns how many."""
        return self._call(lambda c: c.execute(self._sql.forget, (session_id,)).rowcount)

    def push_metrics(self, deployment: str, replica: str, snapshot: dict, at: float) -> None:
        """Keep ``snapshot`` as the metrics of ``replica`` of ``deployment``."""
        values = (deployment, replica, at, json.dumps(snapshot, allow_nan=False))
        self._call(lambda c: c.execute(self._sql.push, values))

    def pull_metrics(self, deployment: str) -> list[tuple[str, float, dict]]:
        """``(replica, written at, snapshot)`` of every replica of ``deployment``."""
        return snapshot_rows(self._call(lambda c: c.execute(self._sql.pull, (deployment,))
                                        .fetchall()))

    def count(self) -> int:
        """Entries in the log."""
        return int(self._call(lambda c: c.execute("SELECT COUNT(*) FROM decisions")
                              .fetchone()[0]))

    def record_shadow(self, request_id: str, answer: dict[str, Any]) -> None:
        """Log a shadow policy's decision (`calimon.serve.policy_log`), committed."""
        values = policy_log.shadow_values(request_id, answer)
        self._call(lambda c: c.execute(pg_sql(policy_log.INSERT_SHADOW), values))

    def shadow_answers(self, policy_hash: str) -> dict[str, dict[str, Any]]:
        """The shadow decisions of the policy ``policy_hash``, by request id."""
        import json

        rows = self._call(lambda c: c.execute(pg_sql(policy_log.SELECT_SHADOW),
                                              (policy_hash,)).fetchall())
        return {rid: json.loads(text) for rid, text in rows}

    def record_change(self, change: PolicyChange) -> PolicyChange:
        """Log a change of the live policy, committed; returns it with its number."""
        values = change.values()
        last = policy_log.SELECT_CHANGES.replace("ORDER BY seq", "ORDER BY seq DESC LIMIT 1")

        def work(conn):
            with conn.transaction():
                # numbers are taken one writer at a time (an advisory lock needs no privilege)
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (_lock_key("policy changes"),))
                conn.execute(pg_sql(policy_log.INSERT_CHANGE), values)
                return conn.execute(last).fetchone()

        return PolicyChange.from_row(self._call(work))

    def changes(self) -> list[PolicyChange]:
        """Every change of the live policy, in order."""
        rows = self._call(lambda c: c.execute(policy_log.SELECT_CHANGES).fetchall())
        return [PolicyChange.from_row(r) for r in rows]

    def durability(self) -> str:
        """The server's settings a commit waits under: with ``synchronous_commit = on`` (set
        for this session) and ``fsync = on`` a commit returns once its WAL is on the server's
        disk (and on a synchronous standby's, where the server names one)."""
        rows = self._call(lambda c: c.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN ('fsync', "
            "'synchronous_commit', 'wal_sync_method', 'synchronous_standby_names')").fetchall())
        got = dict(rows)
        said = (f"PostgreSQL synchronous_commit={got.get('synchronous_commit')}, "
                f"fsync={got.get('fsync')}, wal_sync_method={got.get('wal_sync_method')}")
        if got.get("fsync") == "on" and got.get("synchronous_commit") in ("on", "remote_apply",
                                                                          "remote_write"):
            standby = " and a synchronous standby's" if got.get("synchronous_standby_names") \
                else ""
            return said + f": a commit is on the server's disk{standby} before it returns"
        return said + ": NOT durable, a commit may be lost when PostgreSQL's machine fails"

    def close(self) -> None:
        """Close the connections; safe to call twice."""
        with self._lock:
            self._conn.close()
        with self._read_lock:
            if self._read_conn is not None:
                self._read_conn.close()


def _arrays_insert(conn, columns: tuple[str, ...], returning: str) -> str:
    """The plain decisions' ``INSERT``: the rows of ``unnest`` over one array per column, each
    cast to its column's type in the table. One statement text whatever the group's size, so
    psycopg parses it once and PostgreSQL prepares it; a ``VALUES`` list of one placeholder per
    value is a new statement for each size, and past 50 values psycopg parses it every time
    (the better part of a millisecond for a group of 7 on this table)."""
    types = dict(conn.execute(
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = "
        "'decisions' AND table_schema = current_schema()").fetchall())
    arrays = ", ".join(f"%b::{types[c]}[]" for c in columns)  # binary: no escaping
    return (f"INSERT INTO decisions ({', '.join(columns)}) SELECT * FROM unnest({arrays}) "
            f"ON CONFLICT (request_id) DO NOTHING RETURNING {returning}")


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
