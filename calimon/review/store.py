"""`open_review_store`: the review store a ``--review-store`` target names (a module of its own,
so that neither store imports the other)."""

from __future__ import annotations

from calimon.errors import InputError
from calimon.review.labels import ReviewStore, SQLiteReviewStore


def open_review_store(target: str) -> ReviewStore:
    """The review store ``target`` names: a file path or ``sqlite:///PATH`` (SQLite, WAL), or a
    ``postgresql://`` URL (`calimon.review.pg_store`, the postgres extra)."""
    if target.startswith(("postgresql://", "postgres://")):
        from calimon.review.pg_store import PostgresReviewStore

        return PostgresReviewStore(target)
    if "://" in target and not target.startswith("sqlite:///"):
        raise InputError(f"expected a file path, sqlite:///PATH or postgresql://..., got "
                         f"{target!r}", field="review_store")
    return SQLiteReviewStore(target.removeprefix("sqlite:///"))
