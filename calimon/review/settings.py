"""`ReviewSettings`: how `calimon serve --review` keeps transcripts for review, plans labels and
watches drift (`calimon.review.queue`, `calimon.review.drift`). A frozen record, like
`calimon.serve.settings.ServeSettings`, which holds one when review is on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from calimon.errors import InputError

DEFAULT_STORE = Path("runs/serve/review.sqlite")
DEFAULT_RETAIN = 0.2


@dataclass(frozen=True, kw_only=True)
class ReviewSettings:
    """``store``: the review store (a SQLite file). ``retain``: the share of automatic
    decisions whose transcript is kept so a reviewer can be asked to label it (by the audit
    draw; None: the policy's audit fraction, at least 0.2); review decisions are always kept,
    other text never. ``delta``: the bounds of a rate the policy states no target for.
    ``queue_size``: transcripts on one review page. Drift watch: the shift check runs on the
    latest ``drift_window`` kept transcripts (the uniform part: draws under ``retain``) every
    ``drift_every`` decisions, once at least ``drift_min`` are there, with
    ``drift_permutations`` permutations. ``session_hours``: how long a browser stays signed
    in. ``lease_minutes``: how long an item shown to a reviewer is theirs alone (the other
    reviewers' queues skip it; their page renews it while they work)."""

    store: str = str(DEFAULT_STORE)
    retain: float | None = None
    delta: float = 0.05
    queue_size: int = 20
    drift_window: int = 500
    drift_every: int = 100
    drift_min: int = 50
    drift_permutations: int = 200
    session_hours: float = 12.0
    lease_minutes: float = 10.0

    def __post_init__(self):
        if self.retain is not None and not 0 < self.retain <= 1:
            raise InputError(f"expected a fraction in (0, 1], got {self.retain!r}",
                             field="review_retain")
        if not 0 < self.delta < 1:
            raise InputError(f"expected delta in (0, 1), got {self.delta!r}", field="delta")
        for name in ("queue_size", "drift_window", "drift_every", "drift_min",
                     "drift_permutations"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InputError(f"expected a whole number >= 1, got {value!r}", field=name)
        if self.session_hours <= 0:
            raise InputError(f"expected hours > 0, got {self.session_hours!r}",
                             field="session_hours")
        if not 0 < self.lease_minutes <= 24 * 60:
            raise InputError(f"expected minutes in (0, 1440], got {self.lease_minutes!r}",
                             field="review_lease")

    def retain_fraction(self, audit_fraction: float) -> float:
        """The share of automatic decisions kept for labelling under a policy with this audit
        fraction."""
        return self.retain if self.retain is not None else max(audit_fraction, DEFAULT_RETAIN)
