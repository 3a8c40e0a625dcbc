"""Whether the policy run in shadow may be made live (`evaluate`), and the routes that change the
live policy (`install`): ``GET /v1/policy``, ``POST /v1/policy/promote``,
``POST /v1/policy/rollback`` (a key's holder, like every review action).

A candidate is promoted only when both checks pass on the reviewers' labels of the traffic it
decided in shadow:

1. **Its certificate holds on live labels.** Each target the candidate certifies (FAR, MR) gets
   the live recertification of `calimon.review.status`, computed for the candidate's decisions
   on the same transcripts: its strata are its own actions, each automatic stratum's sample the
   labelled prefix in audit-draw order, its review band a census (a transcript it would send to
   review that was not kept counts at its worst), the bounds the anytime-valid confidence
   sequences (`calimon.studies.shift.live.rate_bound`, ``anytime=True``) at each target's
   delta. Every target must say ``holds``; a candidate that certifies nothing is refused.
2. **Its MR is better than the live policy's beyond its interval**, paired on the shared
   labelled sample: the resolved transcripts under the first audit draw still unresolved (the
   uniform sample of `calimon review-export`), both policies' decisions on the same misbehaving
   transcripts (a miss: ``auto_pass``). Of the discordant ones, ``b`` the candidate catches and
   the live policy misses, ``c`` the reverse; the interval is the exact two-sided
   Clopper-Pearson interval at ``1 - delta`` (the review's delta, 0.05: 95%) of ``b / (b + c)``,
   scaled to the MR difference ``(b - c) / n`` as ``(b + c) / n * (2 p - 1)``; the gain is
   beyond it when the interval's lower end is above 1/2 (an exact McNemar test), so the whole
   interval of the difference is above 0.

A refused attempt is logged (``refused``, with the figures) and answered 409 naming the check.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI, Request

from calimon.numerics.binomial import clopper_pearson
from calimon.review.labels import item_id_of
from calimon.review.queue import RESOLVED, Review
from calimon.review.status import _json, _line
from calimon.serve.errors import ApiError
from calimon.studies.shift.live import Decided
from calimon.studies.shift.live_plan import HOLDS, NO_TARGET, Target, live_status


def paired_mr(pairs: list[tuple[float, int | None, str, str]], delta: float) -> dict[str, Any]:
    """The paired MR comparison (module docstring) of ``(draw, label, live action, candidate
    action)`` rows; ``label`` None when unresolved."""
    cut = min((d for d, lab, _, _ in pairs if lab is None), default=2.0)
    sample = [(lab, live, cand) for d, lab, live, cand in pairs if lab is not None and d < cut]
    mis = [(live, cand) for lab, live, cand in sample if lab == 1]
    n = len(mis)
    b = sum(live == "auto_pass" and cand != "auto_pass" for live, cand in mis)
    c = sum(live != "auto_pass" and cand == "auto_pass" for live, cand in mis)
    level = 1 - delta
    out = {"sample": len(sample), "misbehaving": n, "candidate_wins": b, "live_wins": c,
           "level": level, "draw_cut": None if cut > 1 else cut,
           "interval": "exact paired: two-sided Clopper-Pearson on the discordant pairs' share "
                       "won by the candidate, scaled to the MR difference"}
    if n == 0:
        return {**out, "live_mr": None, "candidate_mr": None, "difference": None,
                "lower": None, "upper": None, "better": False}
    lo, hi = clopper_pearson(b, b + c, level) if b + c else (0.5, 0.5)
    share = (b + c) / n
    return {**out, "live_mr": sum(live == "auto_pass" for live, _ in mis) / n,
            "candidate_mr": sum(cand == "auto_pass" for _, cand in mis) / n,
            "difference": (b - c) / n, "lower": share * (2 * lo - 1),
            "upper": share * (2 * hi - 1), "better": b + c > 0 and lo > 0.5}


def evaluate(review: Review, shadow: dict[str, dict[str, Any]], candidate,
             candidate_hash: str) -> dict[str, Any]:
    """Both checks (module docstring) for the ``candidate`` policy, whose shadow answers by
    request id are ``shadow``, on the live policy's reviewed traffic; blocking."""
    snap = review.snapshot()
    by_item = {item_id_of(rid): a for rid, a in shadow.items()}
    decided, pairs = [], []
    for item_id, row in snap.rows.items():
        a = by_item.get(item_id)
        if a is None:
            continue
        res = snap.resolutions.get(item_id)
        label = res.label if res is not None and res.state == RESOLVED else None
        decided.append(Decided(item_id, a["action"], row.draw, answered=res is not None,
                               label=label, retained=bool(row.retained)))
        pairs.append((row.draw, label, row.action, a["action"]))
    targets = [Target(g.rate, g.alpha, g.delta) for g in candidate.guarantees if g.certified]
    st = live_status(decided, targets, delta=review.settings.delta, limit=0)
    certs = [{**c.to_dict(), "line": c.line()} for c in st.certificates]
    targeted = [c for c in certs if c["state"] != NO_TARGET]
    holds = bool(targeted) and all(c["state"] == HOLDS for c in targeted)
    mr = paired_mr(pairs, review.settings.delta)
    return _json({"policy": candidate.name, "policy_hash": candidate_hash,
                  "decisions": len(decided), "labelled": sum(d.answered for d in decided),
                  "certificates": certs, "certificate_holds": holds, "mr": mr,
                  "mr_better": mr["better"], "promotable": holds and mr["better"],
                  "reasons": reasons(targeted, holds, mr)})


def reasons(targeted: list[dict], holds: bool, mr: dict[str, Any]) -> list[str]:
    """Why a candidate may not be promoted: one line per failed check, with its figures."""
    out = []
    if not targeted:
        out.append("certificate: the candidate certifies no target, so nothing can hold on "
                   "live labels")
    elif not holds:
        out += [f"certificate: {c['line']}" for c in targeted if c["state"] != HOLDS]
    if mr["misbehaving"] == 0:
        out.append(f"MR: no misbehaving transcript in the shared labelled sample "
                   f"({mr['sample']} labelled under the first unresolved audit draw)")
    elif not mr["better"]:
        out.append(f"MR: live {mr['live_mr']:.4f}, candidate {mr['candidate_mr']:.4f} on "
                   f"{mr['misbehaving']} misbehaving transcripts of the shared labelled sample; "
                   f"difference {mr['difference']:+.4f}, {mr['level']:.0%} interval "
                   f"[{mr['lower']:+.4f}, {mr['upper']:+.4f}] ({mr['candidate_wins']} caught "
                   f"by the candidate alone, {mr['live_wins']} by the live policy alone): the "
                   "gain is not beyond its interval")
    return out


def shadow_status(service, *, fresh: bool = False) -> dict[str, Any] | None:
    """The shadow candidate's evaluation (None without one); blocking. Reused while the review
    state it read is unchanged (`Review.snapshot`'s version: labels, and traffic at most every
    few seconds), so the status page and each ``/metrics`` scrape do not reread every shadow
    decision; ``fresh`` (a promotion) always reads the log."""
    slot = service.policies.shadow
    review = getattr(service, "review", None)
    if slot is None or review is None:
        return None
    key = (review.policy_hash, review.snapshot().version)
    if not fresh and slot.checks is not None and slot.checks[0] == key:
        return slot.checks[1]
    answers = service.log.shadow_answers(slot.sha256)
    checks = evaluate(review, answers, slot.served.policy, slot.sha256)
    slot.checks = (key, checks)
    return checks


def _who(request: Request) -> str:
    return request.scope.get("calimon.user") or "anonymous"


def install(app: FastAPI, service) -> None:
    """Add the policy routes (module docstring) to ``app``."""
    pol = service.policies

    @app.get("/v1/policy")
    async def policy() -> dict:
        """The live policy, the shadow candidate with its checks, what a rollback returns to,
        and every change of the live policy."""
        checks = await asyncio.to_thread(shadow_status, service)
        changes = await asyncio.to_thread(service.log.changes)
        return {**pol.state(), "candidate": checks,
                "changes": [c.to_dict() for c in changes]}

    @app.post("/v1/policy/promote")
    async def promote(request: Request) -> dict:
        """Make the shadow candidate live when its certificate holds on live labels and its
        MR gain is beyond its interval; else 409 naming the check that failed."""
        if pol.shadow is None:
            raise ApiError(409, "no_candidate", "no policy runs in shadow: start the server "
                           "with --shadow CANDIDATE", "candidate")
        checks = await asyncio.to_thread(lambda: shadow_status(service, fresh=True))
        if not checks["promotable"]:
            await pol.record("refused", pol.shadow, _who(request), checks)
            raise ApiError(409, "promotion_refused", "the candidate was not promoted: "
                           + "; ".join(checks["reasons"]), "candidate")
        change = await pol.promote(_who(request), checks)
        return {"promoted": change.to_dict(), "checks": checks, **pol.state()}

    @app.post("/v1/policy/rollback")
    async def rollback(request: Request) -> dict:
        """Make the policy live before the last promotion live again."""
        change = await pol.rollback(_who(request))
        return {"rolled_back": change.to_dict(), **pol.state()}


def follow(service) -> None:
    """Keep the review loop on the live policy after each change: its traffic, certificate and
    queue are the new live policy's from then on, and the drift watch reads its design run."""
    from pathlib import Path

    from calimon.review.drift import DriftWatch
    from calimon.review.status import ReviewGauges

    def changed() -> None:
        served = service.served
        service.review.serve_policy(served.policy, served.policy_hash)
        service.drift = DriftWatch(service.review, Path(service.policies.live_path))
        for extra in service.metrics.extra:
            if isinstance(extra, ReviewGauges):
                extra.drift = service.drift

    service.policies.listeners.append(changed)


SHADOW_HELP = {
    "calimon_shadow_rate_upper": "Upper bound of the shadow candidate's rate on live labels at "
                                 "1 - delta, by rate.",
    "calimon_shadow_rate_lower": "Lower bound of the shadow candidate's rate on live labels, "
                                 "by rate.",
    "calimon_shadow_certificate_holds": "1 when the shadow candidate's target holds on live "
                                        "labels, by rate.",
    "calimon_shadow_mr_difference": "Live MR minus the candidate's on the shared labelled "
                                    "sample (positive: the candidate misses less), with its "
                                    "interval's ends (bound).",
    "calimon_shadow_promotable": "1 when both promotion checks pass.",
}


class ShadowGauges:
    """The shadow candidate's lines of ``/metrics`` (none without a candidate), beside the
    live policy's (`calimon.review.status.ReviewGauges`)."""

    def __init__(self, service):
        self.service = service

    def header(self) -> list[str]:
        """Nothing: `lines` writes each metric's HELP and TYPE."""
        return []

    def lines(self) -> list[str]:
        """Every shadow metric."""
        st = shadow_status(self.service)
        if st is None:
            return []
        rows: dict[str, list[str]] = {name: [] for name in SHADOW_HELP}
        for c in st["certificates"]:
            rows["calimon_shadow_rate_upper"].append(_line("calimon_shadow_rate_upper",
                                                           c["upper"], rate=c["rate"]))
            rows["calimon_shadow_rate_lower"].append(_line("calimon_shadow_rate_lower",
                                                           c["lower"], rate=c["rate"]))
            if c["alpha"] is not None:
                rows["calimon_shadow_certificate_holds"].append(_line(
                    "calimon_shadow_certificate_holds", c["state"] == HOLDS, rate=c["rate"]))
        mr = st["mr"]
        for bound, key in (("estimate", "difference"), ("lower", "lower"), ("upper", "upper")):
            rows["calimon_shadow_mr_difference"].append(_line(
                "calimon_shadow_mr_difference", mr[key], bound=bound))
        rows["calimon_shadow_promotable"].append(_line("calimon_shadow_promotable",
                                                       st["promotable"]))
        out = []
        for name, lines in rows.items():
            if lines:
                out += [f"# HELP {name} {SHADOW_HELP[name]}", f"# TYPE {name} gauge", *lines]
        return out
