"""Claims of the review queue: an item shown to a reviewer is leased to them for a while
(`calimon.review.settings.ReviewSettings.lease_minutes`), so the other reviewers' queues
skip it and they get the next items.

- ``review_claims``: one row per item, the reviewer holding it and when the lease ends. A claim
  is taken when the item is free, its lease has ended, or the reviewer holds it already (then
  it is renewed); a label by the holder releases it.
- migration 2 of the review store (`m002_claims`) adds that table, and two columns to
  ``review_labels`` that say what a label was given knowing (`calimon.review.conflicts`):
  ``seen``, the number of labels the item had when the page showed it, and ``tab``, the page
  that gave it.

- migration 3 (`m003_over_claim`) adds ``review_labels.over_claim``: the reviewer who held the
  item when a label of someone else's was stored. A claim keeps the others' queues off an item;
  it does not lock it (a reviewer may open it by its link, a label given while the server was
  down arrives after the lease ended and another reviewer took it): such a label is stored, as
  every label is, and says whose claim it was given over.

`ClaimSql` holds the statements, in SQL that SQLite and PostgreSQL both run; the review stores
(`calimon.review.labels.SqlReviewStore`) inherit it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass

CLAIMS_SQL = """
CREATE TABLE IF NOT EXISTS review_claims (
    item_id TEXT PRIMARY KEY,
    reviewer TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
)"""


def m002_claims(db: sqlite3.Connection) -> None:
    """The claims table; what each label was given knowing (``seen``, ``tab``)."""
    db.execute("ALTER TABLE review_labels ADD COLUMN seen INTEGER")
    db.execute("ALTER TABLE review_labels ADD COLUMN tab TEXT")
    db.execute(CLAIMS_SQL)


def m003_over_claim(db: sqlite3.Connection) -> None:
    """Whose claim a label was given over (``over_claim``; null: nobody else held the item)."""
    db.execute("ALTER TABLE review_labels ADD COLUMN over_claim TEXT")


@dataclass(frozen=True)
class Claim:
    """An item leased to ``reviewer`` until ``expires_at`` (epoch seconds)."""

    item_id: str
    reviewer: str
    expires_at: float


class ClaimSql:
    """The claim statements of a review store (`calimon.review.labels.SqlReviewStore` gives
    ``_rows`` and ``_run``)."""

    def _rows(self, sql: str, args: tuple = ()) -> list[tuple]:
        raise NotImplementedError

    def _run(self, sql: str, args: tuple) -> None:
        raise NotImplementedError

    def claim(self, item_ids: Iterable[str], reviewer: str, now: float,
              until: float) -> dict[str, Claim]:
        """Lease each item to ``reviewer`` until ``until`` where it is free, its lease ended
        before ``now`` or ``reviewer`` holds it; the live claims of those items after."""
        ids = list(dict.fromkeys(item_ids))
        if not ids:
            return {}
        values = ", ".join(["(?, ?, ?)"] * len(ids))
        args = tuple(x for i in ids for x in (i, reviewer, until))
        self._run(f"INSERT INTO review_claims (item_id, reviewer, expires_at) VALUES {values} "
                  "ON CONFLICT (item_id) DO UPDATE SET reviewer = excluded.reviewer, "
                  "expires_at = excluded.expires_at WHERE review_claims.reviewer = "
                  "excluded.reviewer OR review_claims.expires_at < ?", (*args, now))
        return self.claims(now, ids)

    def claims(self, now: float, item_ids: Iterable[str] | None = None) -> dict[str, Claim]:
        """The live claims (of ``item_ids`` only, when given), by item."""
        sql = "SELECT item_id, reviewer, expires_at FROM review_claims WHERE expires_at >= ?"
        args: tuple = (now,)
        if item_ids is not None:
            ids = list(item_ids)
            if not ids:
                return {}
            sql += f" AND item_id IN ({', '.join('?' * len(ids))})"
            args += tuple(ids)
        return {r[0]: Claim(r[0], r[1], float(r[2])) for r in self._rows(sql, args)}

    def release(self, item_id: str, reviewer: str) -> None:
        """End ``reviewer``'s claim of ``item_id``, if they hold it."""
        self._run("DELETE FROM review_claims WHERE item_id = ? AND reviewer = ?",
                  (item_id, reviewer))
