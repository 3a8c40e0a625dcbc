"""The status of live recertification and drift (`live_status`): the certified FAR and MR of the
served policy on its traffic, with bounds, the labels each target still needs, whether the
policy's certificate holds, each assumption behind the bounds with its check, the reviewers'
agreement and the drift watch's last result. The status page, ``GET /v1/review/status``,
``calimon recertify --serve URL`` and ``/metrics`` (`ReviewGauges`) all read it.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from calimon.review.queue import RESOLVED, UNLABELLED, Review, agreement
from calimon.studies.shift.live_plan import BROKEN, HOLDS, NO_TARGET

HELP = {
    "calimon_review_decisions": ("gauge", "Decisions under the served policy, by action."),
    "calimon_review_sampled": ("gauge", "Decisions in the recertification sample, by action "
                                        "(the labelled prefix in draw order; all of review)."),
    "calimon_review_labels_total": ("counter", "Labels given to the served policy's traffic."),
    "calimon_review_unresolved": ("gauge", "Labelled items not resolved yet, by state."),
    "calimon_review_rate_upper": ("gauge", "Upper bound of the rate on live traffic at "
                                           "1 - delta, by rate."),
    "calimon_review_rate_lower": ("gauge", "Lower bound of the rate on live traffic at "
                                           "1 - delta, by rate."),
    "calimon_review_rate_estimate": ("gauge", "Point estimate of the rate from resolved labels "
                                              "(NaN without them), by rate."),
    "calimon_review_target": ("gauge", "The policy's certified target of the rate, by rate."),
    "calimon_review_certificate_holds": ("gauge", "1 when the rate's upper bound on live "
                                                  "traffic is within its target, by rate."),
    "calimon_review_certificate_broken": ("gauge", "1 when the rate's lower bound on live "
                                                   "traffic is above its target, by rate."),
    "calimon_review_labels_needed": ("gauge", "More labels the planner asks for to certify "
                                              "the rate (absent when no number would do)."),
    "calimon_review_agreement": ("gauge", "Share of agreeing pairs of definite labels "
                                          "from two reviewers of one item (NaN before any "
                                          "pair)."),
    "calimon_drift_checked_timestamp_seconds": ("gauge", "When the drift watch last ran."),
    "calimon_drift_window": ("gauge", "Live transcripts in the drift window at the last check."),
    "calimon_drift_shifted": ("gauge", "1 when the last drift check rejected exchangeability "
                                       "with the calibration data."),
    "calimon_drift_alpha_k": ("gauge", "The level the last drift check was judged at: alpha "
                                       "spending, check k at alpha * 6 / (pi^2 k^2), so that "
                                       "any false alarm over all checks has chance <= alpha."),
    "calimon_drift_domain_auroc": ("gauge", "Domain AUROC of the last drift check."),
    "calimon_drift_p_value": ("gauge", "Permutation p-value of the last drift check."),
    "calimon_drift_breaks": ("gauge", "1 when the shift verdict says the shift breaks the FAR "
                                      "certificate, by target alpha."),
    "calimon_drift_weighted_far": ("gauge", "Importance-weighted FAR estimate on the window, "
                                            "by target alpha."),
}


def _json(x: Any) -> Any:
    """NaN and infinities as None, recursively (JSON has neither)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _json(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_json(v) for v in x]
    return x


def _assumptions(snap, certs, agree: dict, retain: float) -> list[dict[str, Any]]:
    states = Counter(r.state for r in snap.resolutions.values())
    review = snap.live.counts.get("human_review")
    open_review = review.unresolved if review else 0
    beyond = max((c.beyond_retained for c in certs), default=0)
    unresolved = sum(c.unresolved for c in snap.live.counts.values())
    return [
        {"name": "the sample does not depend on the labels", "holds": True,
         "detail": "the sample is each automatic stratum's labelled prefix in audit-draw "
                   "order (a hash of the audit id and the policy's seed) and the whole review "
                   "band"},
        {"name": "every transcript of the sample resolved", "holds": unresolved == 0,
         "detail": f"{unresolved} unresolved in the sample ({open_review} in the review band) "
                   "count at their worst in the upper bounds and at their best in the lower "
                   "ones" if unresolved else "all resolved"},
        {"name": "reviewers right", "holds": None if agree["agreement"] is None else
         agree["agreement"] >= 0.9,
         "detail": agreement_line(agree, states.get("disputed", 0))},
        {"name": "transcripts kept for the plan", "holds": beyond == 0,
         "detail": f"the plan reaches {beyond} decision(s) past the {retain:.0%} kept; raise "
                   "--review-retain" if beyond else f"{retain:.0%} of automatic decisions "
                                                    "kept, enough for the plan"},
        {"name": "bounds valid however often they are read", "holds": True,
         "detail": "the bounds are confidence sequences for sampling without replacement: "
                   "they hold at every number of labels at once, so they may be read after "
                   "every label and acted on the first time they pass (docs/review.md)"},
    ]


def agreement_line(agree: dict[str, Any], disputed: int) -> str:
    """What `calimon.review.queue.agreement` measured, in words: what it counts, and the
    items disputed now."""
    if agree["agreement"] is None:
        return "not measured: no item has definite labels from two reviewers yet"
    n, items = agree["pairs"], agree["items"]
    pairs = "1 pair" if n == 1 else f"{n} pairs"
    of = "1 item" if items == 1 else f"{items} items"
    kappa = (f"kappa {agree['kappa']:.2f}" if agree["kappa"] is not None else
             "kappa needs 2 pairs" if n < 2 else "kappa undefined: every label the same")
    return (f"{agree['agreement']:.0%} agreement on {pairs} of definite labels from two "
            f"reviewers ({of}; {kappa}); {disputed} disputed")


def live_status(review: Review, drift=None) -> dict[str, Any]:
    """The status as a JSON-ready dict (module docstring)."""
    snap = review.snapshot()
    certs = snap.live.certificates
    targeted = [c for c in certs if c.state != NO_TARGET]
    states = Counter(r.state for r in snap.resolutions.values())
    agree = agreement(snap.resolutions)
    out = {
        "policy": review.policy.name, "policy_hash": review.policy_hash,
        "decisions": sum(c.size for c in snap.live.counts.values()),
        "labels": snap.labels, "labels_over_claims": snap.over_claims,
        "retain": review.retain,
        "holds": all(c.state == HOLDS for c in targeted) if targeted else None,
        "broken": any(c.state == BROKEN for c in targeted),
        "certificates": [{**c.to_dict(), "line": c.line()} for c in certs],
        "strata": {a: {"decided": c.size, "sampled": c.sampled, "benign": c.benign,
                       "misbehaving": c.misbehaving, "unresolved": c.unresolved,
                       "waiting": c.waiting} for a, c in snap.live.counts.items()},
        "items": {"resolved": states.get(RESOLVED, 0),
                  **{s: n for s, n in states.items() if s not in (RESOLVED, UNLABELLED)}},
        "agreement": agree, "queue": len(snap.live.queue),
        "assumptions": _assumptions(snap, certs, agree, review.retain),
        "drift": drift.state() if drift is not None else {"state": "off"},
    }
    return _json(out)


def _line(name: str, value: Any, **labels: Any) -> str:
    lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
    v = "NaN" if value is None else (str(int(value)) if isinstance(value, bool) else
                                     repr(float(value)))
    return f"{name}{{{lab}}} {v}" if lab else f"{name} {v}"


class ReviewGauges:
    """The review and drift lines of ``/metrics`` (Prometheus text), read from `live_status`
    at each scrape; it fits `calimon.serve.metrics.Metrics`' list of metrics."""

    def __init__(self, review: Review, drift=None):
        self.review, self.drift = review, drift

    def header(self) -> list[str]:
        """Nothing: `lines` writes each metric's HELP and TYPE."""
        return []

    def lines(self) -> list[str]:
        """Every review and drift metric."""
        st = live_status(self.review, self.drift)
        rows: dict[str, list[str]] = {name: [] for name in HELP}
        for a, c in st["strata"].items():
            rows["calimon_review_decisions"].append(_line("calimon_review_decisions",
                                                          c["decided"], action=a))
            rows["calimon_review_sampled"].append(_line("calimon_review_sampled", c["sampled"],
                                                        action=a))
        rows["calimon_review_labels_total"].append(_line("calimon_review_labels_total",
                                                         st["labels"]))
        for s, n in st["items"].items():
            if s != RESOLVED:
                rows["calimon_review_unresolved"].append(_line("calimon_review_unresolved", n,
                                                               state=s))
        for c in st["certificates"]:
            self._certificate(rows, c)
        rows["calimon_review_agreement"].append(_line("calimon_review_agreement",
                                                      st["agreement"]["agreement"]))
        self._drift(rows, st["drift"])
        out = []
        for name, lines in rows.items():
            if lines:
                kind, text = HELP[name]
                out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", *lines]
        return out

    @staticmethod
    def _certificate(rows: dict[str, list[str]], c: dict[str, Any]) -> None:
        r = c["rate"]
        for name, key in (("calimon_review_rate_upper", "upper"),
                          ("calimon_review_rate_lower", "lower"),
                          ("calimon_review_rate_estimate", "estimate")):
            rows[name].append(_line(name, c[key], rate=r))
        if c["alpha"] is not None:
            rows["calimon_review_target"].append(_line("calimon_review_target", c["alpha"],
                                                       rate=r))
            rows["calimon_review_certificate_holds"].append(_line(
                "calimon_review_certificate_holds", c["state"] == HOLDS, rate=r))
            rows["calimon_review_certificate_broken"].append(_line(
                "calimon_review_certificate_broken", c["state"] == BROKEN, rate=r))
            if c["labels_needed"] is not None:
                rows["calimon_review_labels_needed"].append(_line(
                    "calimon_review_labels_needed", c["labels_needed"], rate=r))

    @staticmethod
    def _drift(rows: dict[str, list[str]], d: dict[str, Any]) -> None:
        if d.get("checked_at") is not None:
            rows["calimon_drift_checked_timestamp_seconds"].append(_line(
                "calimon_drift_checked_timestamp_seconds", d["checked_at"]))
        if d.get("state") != "checked":
            return
        rows["calimon_drift_window"].append(_line("calimon_drift_window", d["window"]))
        rows["calimon_drift_shifted"].append(_line("calimon_drift_shifted", d["shifted"]))
        rows["calimon_drift_alpha_k"].append(_line("calimon_drift_alpha_k", d["alpha_k"],
                                                   check=d["check"], alpha=f"{d['alpha']:g}"))
        rows["calimon_drift_domain_auroc"].append(_line("calimon_drift_domain_auroc",
                                                        d["auroc"]))
        rows["calimon_drift_p_value"].append(_line("calimon_drift_p_value", d["p_value"]))
        for v in d["verdicts"]:
            rows["calimon_drift_breaks"].append(_line("calimon_drift_breaks", v["breaks"],
                                                      alpha=f"{v['alpha']:g}"))
            rows["calimon_drift_weighted_far"].append(_line(
                "calimon_drift_weighted_far", v["weighted_far"], alpha=f"{v['alpha']:g}"))
