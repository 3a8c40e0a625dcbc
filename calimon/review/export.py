"""Labelled live traffic as a calimon samples JSONL (`export_samples`), so `calimon curve` and
`calimon escalate` on it make the next policy (``GET /v1/review/export``,
``calimon review-export``).

Two samples can be exported:

- ``uniform`` (the default): the resolved transcripts whose audit draw is under the first draw
  of any transcript not resolved yet (whatever its action). The draw is a hash independent of
  the label, so these are a uniform random sample of the traffic, and curves and certificates
  made on them speak for it.
- ``all``: every resolved transcript. The review band is in it whole and the automatic
  decisions only in part, so it leans towards the band's hard cases: good for training and for
  reading errors, not for certifying a rate.

Each sample carries ``source`` (default ``serve:POLICY``), a ``split`` (``calib`` or ``test``,
by a hash of its pair: a session's steps share one pair, so they never straddle the splits),
the cell given (served traffic has none of its own) and, in ``meta``, what the server knew:
decision, scores, audit draw, reviewers, and ``over_claims``: the reviewers whose counted label
was given while another reviewer held the item, with the holder's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from calimon.deploy.policy_file import audit_draw
from calimon.review.queue import RESOLVED, Review
from calimon.samples import CATEGORIES, TASKS, Sample
from calimon.serve.errors import ApiError

SPLIT_SEED = 104729  # the split's hash seed, apart from any audit seed
SAMPLES = ("uniform", "all")


@dataclass(frozen=True)
class ExportOptions:
    """What to export and how to label it (module docstring)."""

    sample: str = "uniform"
    calib_share: float = 0.5
    category: str = "safety"
    task: str = "reasoning"
    source: str | None = None

    def check(self) -> None:
        """Refuse a bad option (422 naming it)."""
        for name, value, allowed in (("sample", self.sample, SAMPLES),
                                     ("category", self.category, CATEGORIES),
                                     ("task", self.task, TASKS)):
            if value not in allowed:
                raise ApiError(422, "invalid_request", f"expected one of {list(allowed)}, got "
                               f"{value!r}", name)
        if not 0 < self.calib_share < 1:
            raise ApiError(422, "invalid_request", f"expected a share in (0, 1), got "
                           f"{self.calib_share!r}", "calib_share")


def over_claims(res) -> dict[str, str]:
    """Of the labels that count (each reviewer's latest), those given while another reviewer
    held the item: reviewer -> the holder (`calimon.review.claims`)."""
    return {r: lab.over_claim for r, lab in res.latest.items() if lab.over_claim is not None}


def export_samples(review: Review, options: ExportOptions) -> tuple[list[Sample], dict[str, Any]]:
    """The samples (module docstring) and a summary of what was left out; blocking."""
    options.check()
    snap = review.snapshot()
    open_draws = [r.draw for i, r in snap.rows.items()
                  if i not in snap.resolutions or snap.resolutions[i].state != RESOLVED]
    cut = min(open_draws, default=2.0) if options.sample == "uniform" else 2.0
    rows = review.store.window(review.policy_hash, max(len(snap.rows), 1), 2.0)
    source = options.source or f"serve:{review.policy.name}"
    out = []
    for row in rows:
        res = snap.resolutions.get(row.item_id)
        if res is None or res.state != RESOLVED or row.draw >= cut:
            continue
        pair = row.session_id if row.kind == "step" and row.session_id else row.request_id
        split = "calib" if audit_draw(pair, SPLIT_SEED) < options.calib_share else "test"
        meta = {"decision_action": row.action, "p_raw": row.p_raw, "p_cal": row.p_cal,
                "audit": bool(row.audit), "audit_draw": row.draw,
                "policy_hash": row.policy_hash, "received_at": row.received_at,
                "reviewers": list(res.reviewers), "over_claims": over_claims(res),
                "export_sample": options.sample}
        out.append(Sample(id=row.request_id, request=row.request_text or "",
                          response=row.response_text or "", label=bool(res.label),
                          category=options.category, task=options.task, pair_id=pair,
                          source=source, split=split, meta=meta))
    out.sort(key=lambda s: s.id)
    summary = {"exported": len(out), "sample": options.sample,
               "draw_cut": None if cut > 1 else cut,
               "misbehavior": sum(bool(s.label) for s in out),
               "benign": sum(not s.label for s in out),
               "calib": sum(s.split == "calib" for s in out),
               "test": sum(s.split == "test" for s in out)}
    return out, summary
