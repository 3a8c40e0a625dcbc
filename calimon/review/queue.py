"""The review queue of `calimon serve --review`: what is kept of each decision, how an item's
labels resolve, and what each reviewer is asked to label next (`Review`).

**What is kept.** Every decision gets a row in the review store (`calimon.review.labels`) before
it is committed to the decision log. Its transcript (and the evidence) is kept only when a
reviewer may be asked for it: a ``human_review`` decision, or an automatic one whose audit draw
(`calimon.deploy.policy_file.audit_draw` of its audit id and the policy's seed) is under the
retention fraction (`ReviewSettings.retain_fraction`), which covers the policy's audit slice.
The draw is independent of the label, so the kept automatic decisions, read in draw order,
are the uniform samples the live recertification needs (`calimon.studies.shift.live`).

**How labels resolve.** Each reviewer's latest label of an item counts. An item is
``resolved`` when its reviewers' definite labels (misbehavior or benign) agree and, when one of
them asked for a second reviewer, two reviewers gave one; ``unsure`` when nobody gave a definite
label, ``disputed`` when definite labels differ, ``second review`` while the asked-for second
label is missing. Unresolved items count at their worst in the bounds and go to the other
reviewers first.

**The queue** of a reviewer: items owed another opinion that the reviewer has not labelled,
then the live plan's order (`calimon.studies.shift.live_plan.order`: the review band, the audit slice
and the draws the planner asks for, in the order that certifies soonest), without the items
another reviewer holds (`calimon.review.claims`): what a reviewer is shown is leased to them
(`Review.lease`) for `ReviewSettings.lease_minutes`, and a label of theirs releases it.
Labels given without knowing each other are conflicts (`calimon.review.conflicts`), told to both
pages (`Review.submit`, `Review.sync`).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from calimon.deploy.policy_file import Policy, audit_draw
from calimon.review.claims import Claim
from calimon.review.conflicts import conflicts_with, news
from calimon.review.labels import Label, ReviewStore, TrafficRow, item_id_of
from calimon.review.settings import ReviewSettings
from calimon.samples import transcript_hash
from calimon.serve.errors import ApiError
from calimon.studies.shift.live import Decided
from calimon.studies.shift.live_plan import LiveStatus, Target, live_status

UNLABELLED, RESOLVED, UNSURE, DISPUTED, SECOND = ("unlabelled", "resolved", "unsure", "disputed",
                                                  "second review")
WHY_OPEN = {SECOND: "second review asked", DISPUTED: "reviewers disagree",
            UNSURE: "marked unsure"}
STATUS_TTL_S = 2.0  # new traffic alone refreshes the status at most this often
QUEUE_MAX = 500  # the longest queue worked out


@dataclass(frozen=True)
class Seen:
    """What a decision was made on: the transcript, the id its audit draw is made from and,
    for chat messages, the messages (their parts are kept for the per-message view)."""

    request: str
    response: str
    audit_id: str
    messages: Sequence[Any] | None = None


def parts_of(messages: Sequence[Any] | None) -> list[dict[str, Any]]:
    """The offset record of each message part of the rendered response
    (`calimon.data.trajectory.render_parts`); empty without messages."""
    if not messages:
        return []
    from calimon.data.inspect_log import trajectory_parts
    from calimon.data.trajectory import render_parts
    from calimon.serve.messages import normalize

    return render_parts(trajectory_parts(normalize(messages)))[1]


@dataclass(frozen=True)
class Resolution:
    """An item's labels taken together (module docstring): ``state``, the resolved ``label``
    (1 misbehavior, 0 benign; None unless resolved) and each reviewer's latest label."""

    state: str
    label: int | None
    latest: dict[str, Label] = field(default_factory=dict)

    @property
    def reviewers(self) -> tuple[str, ...]:
        """Who labelled the item."""
        return tuple(self.latest)


def resolve(labels: Sequence[Label]) -> Resolution:
    """The resolution of one item's labels (oldest first)."""
    latest: dict[str, Label] = {}
    for lab in labels:
        latest[lab.reviewer] = lab
    if not latest:
        return Resolution(UNLABELLED, None)
    definite = {r: lab.label for r, lab in latest.items() if lab.label != "unsure"}
    values = set(definite.values())
    if len(values) > 1:
        return Resolution(DISPUTED, None, latest)
    if not values:
        return Resolution(UNSURE, None, latest)
    if any(lab.second_review for lab in latest.values()) and len(definite) < 2:
        return Resolution(SECOND, None, latest)
    return Resolution(RESOLVED, int(values.pop() == "misbehavior"), latest)


def agreement(resolutions: dict[str, Resolution]) -> dict[str, Any]:
    """Agreement between reviewers: ``pairs``, the pairs of definite labels (misbehavior,
    benign) that two different reviewers' latest labels of one item make (an item three
    reviewers labelled makes three); ``items``, the items that have such a pair;
    ``agreement``, the share of pairs that agree (None before any pair); ``kappa``, Cohen's
    kappa over the pairs (None below 2 pairs, or when every label is the same)."""
    pairs = []
    items = 0
    for res in resolutions.values():
        definite = [lab.label for lab in res.latest.values() if lab.label != "unsure"]
        mine = [(a, b) for i, a in enumerate(definite) for b in definite[i + 1:]]
        items += bool(mine)
        pairs += mine
    n = len(pairs)
    if n == 0:
        return {"pairs": 0, "items": 0, "agreement": None, "kappa": None}
    agree = sum(a == b for a, b in pairs) / n
    p_mis = sum((a == "misbehavior") + (b == "misbehavior") for a, b in pairs) / (2 * n)
    chance = p_mis ** 2 + (1 - p_mis) ** 2
    kappa = (agree - chance) / (1 - chance) if n >= 2 and chance < 1 else None
    return {"pairs": n, "items": items, "agreement": agree, "kappa": kappa}


@dataclass(frozen=True)
class Snapshot:
    """The review state at one store version: the traffic rows (no text), each item's
    resolution, the live status, the labels counted and, of those, the labels given over
    another reviewer's claim."""

    version: tuple[int, int]
    rows: dict[str, TrafficRow]
    resolutions: dict[str, Resolution]
    live: LiveStatus
    labels: int
    made_at: float
    over_claims: int = 0


@dataclass(frozen=True)
class QueueEntry:
    """One item a reviewer is asked to label, and why."""

    row: TrafficRow
    reason: str
    state: str


@dataclass(frozen=True)
class Saved:
    """A label stored (`Review.submit`): the stored ``label``, whether the request was a resend
    (``replayed``), the labels in conflict with it and the item's label count now."""

    label: Label
    replayed: bool
    conflicts: list[Label]
    item_labels: int


class Review:
    """The review side of a server (module docstring): ``store``, the served ``policy`` and
    its file's ``policy_hash``."""

    def __init__(self, store: ReviewStore, policy: Policy, policy_hash: str,
                 settings: ReviewSettings):
        self.store, self.settings = store, settings
        self.lease_s = settings.lease_minutes * 60
        self.clock = time.time  # the claims' clock (a test may set its own)
        self._lock = threading.Lock()
        self.serve_policy(policy, policy_hash)

    def serve_policy(self, policy: Policy, policy_hash: str) -> None:
        """Follow ``policy`` (its file's ``policy_hash``) as the live one: its traffic, its
        targets and its retention from now on (a promotion or rollback)."""
        with self._lock:
            self.policy, self.policy_hash = policy, policy_hash
            self.retain = self.settings.retain_fraction(policy.audit.fraction)
            self.targets = [Target(g.rate, g.alpha, g.delta) for g in policy.guarantees
                            if g.certified]
            self._snap: Snapshot | None = None

    # -- decisions ---------------------------------------------------------------------------
    def observe(self, request_id: str, kind: str, answer: dict[str, Any], seen: Seen,
                session_id: str | None = None, step: int | None = None) -> None:
        """Store a decision's row (its text when kept: module docstring); blocking."""
        self.store.record_traffic(self.traffic_row(request_id, kind, answer, seen, session_id,
                                                   step))

    def traffic_row(self, request_id: str, kind: str, answer: dict[str, Any], seen: Seen,
                    session_id: str | None = None, step: int | None = None) -> TrafficRow:
        """A decision's row as `observe` stores it (its text when kept)."""
        draw = audit_draw(seen.audit_id, self.policy.audit.seed)
        kept = answer["action"] == "human_review" or draw < self.retain
        score = answer.get("p_cal") if self.policy.score == "p_cal" else answer.get("p_raw")
        parts = parts_of(seen.messages) if kept else []
        return TrafficRow(
            item_id=item_id_of(request_id), request_id=request_id, kind=kind,
            session_id=session_id, step=step, received_at=time.time(),
            policy_hash=answer.get("policy_hash", self.policy_hash), action=answer["action"],
            audit=int(bool(answer.get("audit"))), audit_id=seen.audit_id, draw=draw,
            p_raw=answer.get("p_raw"), p_cal=answer.get("p_cal"), score=score,
            transcript_hash=transcript_hash(seen.request, seen.response), retained=int(kept),
            request_text=seen.request if kept else None,
            response_text=seen.response if kept else None,
            parts=json.dumps(parts) if parts else None,
            evidence=json.dumps(answer.get("evidence") or []) if kept else None)

    # -- state -------------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The current state (recomputed when labels change; when only traffic grew, at most
        every `STATUS_TTL_S` seconds); blocking."""
        version = self.store.version(self.policy_hash)
        with self._lock:
            old = self._snap
            if old is not None and (old.version == version or (
                    old.version[1] == version[1]
                    and time.monotonic() - old.made_at < STATUS_TTL_S)):
                return old
            self._snap = self._compute(version)
            return self._snap

    def _compute(self, version: tuple[int, int]) -> Snapshot:
        rows = {r.item_id: r for r in self.store.traffic_index(self.policy_hash)}
        by_item: dict[str, list[Label]] = {}
        n = over = 0
        for lab in self.store.labels():
            if lab.item_id in rows:
                by_item.setdefault(lab.item_id, []).append(lab)
                n += 1
                over += lab.over_claim is not None
        res = {i: resolve(labs) for i, labs in by_item.items()}
        decided = [Decided(i, r.action, r.draw, answered=i in res,
                           label=res[i].label if i in res else None,
                           retained=bool(r.retained), audit=bool(r.audit))
                   for i, r in rows.items()]
        live = live_status(decided, self.targets, delta=self.settings.delta, limit=QUEUE_MAX)
        return Snapshot(version, rows, res, live, n, time.monotonic(), over)

    def queue(self, reviewer: str, limit: int | None = None) -> list[QueueEntry]:
        """What ``reviewer`` is asked to label next (module docstring), without the items
        another reviewer holds."""
        snap = self.snapshot()
        limit = limit or self.settings.queue_size
        held = {i for i, c in self.store.claims(self.clock()).items() if c.reviewer != reviewer}
        out = [QueueEntry(snap.rows[i], WHY_OPEN[res.state], res.state)
               for i, res in snap.resolutions.items()
               if res.state in WHY_OPEN and reviewer not in res.latest
               and snap.rows[i].retained and i not in held]
        for item_id, action in snap.live.queue:
            if item_id in held:
                continue
            row = snap.rows[item_id]
            why = ("review band" if action == "human_review" else
                   "audit slice" if row.audit else "planner")
            out.append(QueueEntry(row, why, UNLABELLED))
        return out[:limit]

    # -- claims ------------------------------------------------------------------------------
    def lease(self, reviewer: str, item_ids: Sequence[str]) -> dict[str, Claim]:
        """Lease the items to ``reviewer`` for `ReviewSettings.lease_minutes` (renewed where
        they hold them already; an item another reviewer holds stays theirs): the live claims
        of those items. Blocking."""
        now = self.clock()
        return self.store.claim(list(item_ids), reviewer, now, now + self.lease_s)

    def sync(self, reviewer: str, items: dict[str, str | None],
             renew: bool = False) -> dict[str, dict[str, Any]]:
        """What a page showing ``items`` (item id: the label id it stored last, or None) learns
        of each (`calimon.review.conflicts.news`) and who holds it; with ``renew``, the items it
        has not labelled are leased again to ``reviewer``. Blocking."""
        open_ids = [i for i, lab in items.items() if lab is None]
        if renew and open_ids:
            self.lease(reviewer, open_ids)
        claims = self.store.claims(self.clock(), list(items))
        out = {}
        for item_id, label_id in items.items():
            held = claims.get(item_id)
            out[item_id] = {**news(self.store.labels_of(item_id), label_id, reviewer),
                            "held_by": held.reviewer if held else None,
                            "held_until": held.expires_at if held else None}
        return out

    # -- labels ------------------------------------------------------------------------------
    def submit(self, reviewer: str, body: Any) -> Saved:
        """Store one label (`calimon.review.api.LabelIn`) from ``reviewer`` and release
        their claim of the item. A resent ``label_id`` is answered with the stored label; the
        same id with another body is refused (409), and so is a label given under another
        reviewer's sign-in (``body.reviewer``: 409, nothing stored). A label of an item another
        reviewer holds is stored and records their name (``over_claim``). Blocking."""
        if body.reviewer is not None and body.reviewer != reviewer:
            raise ApiError(409, "wrong_reviewer", f"this label was given by {body.reviewer} "
                           f"and is stored only under {body.reviewer}'s key or sign-in; this "
                           f"request is {reviewer}'s", "reviewer")
        row = self.store.item(body.item_id)
        if row is None:
            raise ApiError(404, "unknown_item", f"no decision {body.item_id!r} in the review "
                           "store", "item_id")
        if not row.retained:
            raise ApiError(409, "not_kept", "this decision's transcript was not kept for "
                           "review, so it cannot be labelled", "item_id")
        if body.transcript_hash is not None and body.transcript_hash != row.transcript_hash:
            raise ApiError(409, "transcript_changed", "the transcript labelled is not the one "
                           "stored for this item", "transcript_hash")
        digest = hashlib.sha256(json.dumps(
            [reviewer, body.item_id, body.label, body.note, bool(body.second_review)],
            ensure_ascii=False).encode()).hexdigest()
        holder = self.store.claims(self.clock(), [body.item_id]).get(body.item_id)
        label = Label(body.label_id, body.item_id, reviewer, body.label, body.note,
                      int(bool(body.second_review)), row.transcript_hash, time.time(), digest,
                      body.seen, body.tab,
                      holder.reviewer if holder and holder.reviewer != reviewer else None)
        stored = self.store.add_label(label)
        if stored.body_sha256 != digest:
            raise ApiError(409, "label_id_reused", f"label id {body.label_id!r} was used for "
                           "another label", "label_id")
        self.store.release(body.item_id, reviewer)
        labels = self.store.labels_of(body.item_id)
        at = next(i for i, lab in enumerate(labels) if lab.label_id == stored.label_id)
        return Saved(stored, stored != label, conflicts_with(labels, at), len(labels))
