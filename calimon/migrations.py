"""Numbered schema migrations for calimon's SQLite files (run store, API journal, sandbox cache).

A file's schema version is SQLite's ``PRAGMA user_version``: the number of migrations applied to
it. A `Schema` is a file kind's ordered tuple of migrations; migration *n* (1-based) takes a
file from version *n - 1* to *n*. `migrate` applies the pending ones once, in order, in one
``BEGIN IMMEDIATE`` transaction together with the new version number, so a crash leaves the file
as it was and two processes opening the same old file migrate it once. A file whose version is
higher than the code knows was written by a newer calimon and is refused.

Files written before versions existed read 0; their migration 1 is the original
``CREATE TABLE IF NOT EXISTS``, a no-op on them. To change a schema, append a function
(never edit or reorder a released one) and add a test on the committed stores in tests/data/.
A migration runs single statements through ``db.execute``: ``executescript`` would commit the
transaction half-way.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from calimon.errors import InputError

Migration = Callable[[sqlite3.Connection], None]


class NewerStoreError(InputError):
    """A SQLite file written by a newer calimon, with a schema this code does not know."""


@dataclass(frozen=True)
class Schema:
    """The migrations of one kind of file, in order; ``name`` appears in errors."""

    name: str
    migrations: tuple[Migration, ...]

    @property
    def version(self) -> int:
        """The version a file has once every migration is applied."""
        return len(self.migrations)


def schema_version(db: sqlite3.Connection) -> int:
    """The schema version stored in ``db`` (0 for a file written before versions)."""
    return db.execute("PRAGMA user_version").fetchone()[0]


def _check_not_newer(found: int, schema: Schema, path: str | Path) -> None:
    if found > schema.version:
        raise NewerStoreError(
            f"this {schema.name} has schema version {found}, but this calimon reads versions up "
            f"to {schema.version}: it was written by a newer calimon; upgrade calimon to open "
            "it", path=str(path))


def migrate(db: sqlite3.Connection, schema: Schema, path: str | Path) -> int:
    """Bring ``db`` (the file at ``path``) to ``schema.version``; returns the number of
    migrations applied. Raises `NewerStoreError` for a file newer than the code. A file already
    current is only read, so it needs no write lock."""
    found = schema_version(db)
    _check_not_newer(found, schema, path)
    if found == schema.version:
        return 0
    if db.in_transaction:
        raise RuntimeError(f"{path}: migrate() needs a connection outside a transaction")
    db.execute("BEGIN IMMEDIATE")
    try:
        found = schema_version(db)  # another process may have migrated while we waited
        _check_not_newer(found, schema, path)
        for number in range(found + 1, schema.version + 1):
            step = schema.migrations[number - 1]
            step(db)
            if not db.in_transaction:
                raise RuntimeError(f"{schema.name} migration {number} ({step.__name__}) ended "
                                   "the transaction; use db.execute, not executescript")
        db.execute(f"PRAGMA user_version = {int(schema.version)}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return schema.version - found


def open_durable(path: str | Path, schema: Schema) -> sqlite3.Connection:
    """A SQLite file for a service's durable store (created with its folder): autocommit, WAL,
    ``synchronous=FULL`` (a commit survives a killed process), usable from several threads
    under the caller's lock, migrated to ``schema``."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(p, timeout=60.0, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        migrate(db, schema, p)
    except BaseException:
        db.close()
        raise
    return db
