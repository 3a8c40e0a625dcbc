"""Escalation policies for a run: design one on a run's calibration split and check it on its
test split (``escalate_run``), and apply a policy file to a scored CSV (``apply_policy_file``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from calimon.deploy.policies import (
    ACTIONS,
    PolicyDesign,
    PolicyStats,
    design_policy,
    evaluate_policy,
)
from calimon.deploy.policy_file import (
    Audit,
    Policy,
    apply_policy,
    load_policy,
    policy_from_design,
    save_policy,
)
from calimon.errors import InputError
from calimon.numerics.class_support import class_support, policy_rates


@dataclass(frozen=True)
class EscalationReport:
    """A policy designed on a run's calibration split and its figures on the test split."""

    policy: Policy
    path: str
    design: PolicyDesign
    test: PolicyStats
    split: str
    n_dropped: int

    def to_dict(self) -> dict[str, Any]:
        """The report as a JSON-ready dict: policy, design, test-split stats, split and dropped
        rows."""
        return {"path": self.path, "policy": self.policy.model_dump(),
                "design": self.design.to_dict(), "test": self.test.to_dict(),
                "split": self.split, "n_dropped": self.n_dropped, "pin_note": self.pin_note()}

    def pin_note(self) -> str | None:
        """The line that says what the run did not record for the policy's pin (it is then
        applied to scored CSVs only: `calimon serve` and the integrations refuse it)."""
        pol, pin = self.policy, self.policy.pin
        where = f" (calibration/{pol.calibration}.json)" if pol.calibration != "unknown" else ""
        missing = [what for what, gone in (
            ("monitor", pin is None or pin.monitor is None),
            (f"calibration map{where}", pol.score == "p_cal" and (pin is None or pin.map is None)))
            if gone]
        if not missing:
            return None
        return (f"note: the run records no {' and no '.join(missing)} to pin: apply-policy "
                "applies this policy to scored CSVs, calimon serve and the integrations "
                "refuse it")


def escalate_run(path: Any, out: str | Path, *, name: str | None = None,
                 budget: float | None = None, cost_miss: float = 1.0,
                 cost_false_block: float = 1.0, cost_review: float = 0.0,
                 far_alpha: float | None = None, mr_alpha: float | None = None,
                 delta: float = 0.05, score: str = "p_cal", seed: int = 0,
                 model: str | None = None, readout: str | None = None,
                 calibration: str | None = None, audit_fraction: float = 0.0,
                 audit_seed: int = 0) -> EscalationReport:
    """Design a policy on a run's calibration split, check it on its test split, save it.

    ``path``: run directory or scored CSV (split as in ``thresholds_run``). Needs ``budget``
    or a positive ``cost_review``: without either, reviewing everything is trivially optimal.
    ``model`` / ``readout`` / ``calibration`` default to the run's metadata
    (``run_metadata``), else ``"unknown"`` (``calibration`` is ``"none"`` for ``p_raw``).
    ``audit_fraction`` / ``audit_seed``: the policy's audit slice (``Audit``). The policy is
    written as version 2, pinning the run's monitor and calibration map
    (`calimon.deploy.pinned.pin_from_run`).
    """
    from calimon import __version__
    from calimon.deploy.design import run_provenance
    from calimon.deploy.io import (
        calib_test_split,
        file_sha256,
        read_scored_csv,
        resolve_run,
        run_metadata,
    )
    from calimon.deploy.pinned import pin_from_run

    if not 0 <= audit_fraction < 1:
        raise InputError(f"expected an audit fraction in [0, 1), got {audit_fraction}",
                         field="audit_fraction")
    if budget is None and not cost_review:
        raise InputError("give a review budget or a positive review cost; without either, "
                         "sending everything to review is trivially optimal", field="budget")
    csv_path = resolve_run(path)
    split = calib_test_split(read_scored_csv(csv_path, score=score), seed=seed)
    _require_support(split.calib, csv_path)
    design = design_policy(split.calib, budget=budget, cost_miss=cost_miss,
                           cost_false_block=cost_false_block, cost_review=cost_review,
                           far_alpha=far_alpha, mr_alpha=mr_alpha, delta=delta)
    test = evaluate_policy(split.test, design.t_low, design.t_high)
    meta = run_metadata(csv_path)
    if score == "p_raw":
        calibration = "none"
    calibration = calibration or meta.get("calibration", "unknown")
    provenance = {
        "source": str(csv_path), "source_sha256": file_sha256(csv_path), "split": split.method,
        "n_calib": len(split.calib), "n_test": len(split.test),
        "n_dropped_unscored": split.calib.n_dropped,
        "objective": {"budget": budget, "cost_miss": float(cost_miss),
                      "cost_false_block": float(cost_false_block),
                      "cost_review": float(cost_review), "far_alpha": far_alpha,
                      "mr_alpha": mr_alpha, "delta": delta},
        "calib": design.stats.to_dict(), "test": test.to_dict(),
        "reviewers_assumed_correct": True, "calimon_version": __version__,
    }
    policy = policy_from_design(
        design, name=name or Path(out).stem, readout=readout or meta.get("readout", "unknown"),
        model=model or meta.get("model", "unknown"),
        calibration=calibration, score=score, provenance=provenance,
        audit=Audit(fraction=audit_fraction, seed=audit_seed),
        pin=pin_from_run(csv_path, score=score, calibration=calibration,
                         run=run_provenance(csv_path.parent)))
    saved = save_policy(policy, out)
    return EscalationReport(policy=policy, path=str(saved), design=design, test=test,
                            split=split.method, n_dropped=split.calib.n_dropped)


def _require_support(calib: Any, csv_path: Any) -> None:
    """A policy trades misses against false blocks: designing one needs the class-size rule
    of a curve (calimon.numerics.class_support) on the design split."""
    labels = calib.labels
    sup = class_support(int(np.sum(labels == 1)), int(np.sum(labels == 0)),
                        what="rows in the calibration split")
    if not sup.curve:
        raise InputError(f"cannot design a policy: {sup.n_pos} misbehaving and {sup.n_neg} "
                         f"benign rows in the calibration split, fewer than "
                         f"{sup.min_per_class_curve} of a class; for a benign-only set use "
                         "`calimon thresholds` (FAR) or `calimon apply-policy` with a saved "
                         "policy", path=str(csv_path), field="label")


@dataclass(frozen=True)
class ApplySummary:
    """What ``apply_policy_file`` decided: rows per action, how many had no score, how many go
    to a human (``n_review``: review action plus the audit slice), and the rates it realized on
    the scored rows of each label present, with exact intervals."""

    policy: str
    source: str
    out: str
    counts: dict[str, int]
    n_unscored: int
    rates: tuple[dict[str, Any], ...] = ()  # realized FAR / MR / block rate (class_support)
    n_review: int = 0
    audit_fraction: float = 0.0
    design_run: bool = False  # the scored file is the one the policy was designed on
    forced: tuple[str, ...] = ()  # provenance mismatches applied anyway (--force)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict."""
        return asdict(self)

    def design_note(self) -> str | None:
        """The line that says the rows are the policy's own design run, not new traffic."""
        if not self.design_run:
            return None
        return (f"note: {self.source} is this policy's own design run (the file it was designed "
                "on, by its sha256): its calib rows chose the thresholds, so these figures are "
                "not new traffic; apply the policy to transcripts it was not designed on")


def apply_policy_file(policy_path: str | Path, scored_path: str | Path,
                      out: str | Path, *, force: bool = False) -> ApplySummary:
    """Decide an action for every row of a scored CSV, reading only it and the policy file.

    Writes ``out`` (CSV: ``id,status,score,action,review,inclusion``): scored rows first, in
    file order, then the rows without a score (status not ok/truncated), which get
    ``actions.unscored``. ``review`` is 1 when a human sees the transcript (its action is
    ``human_review``, or it falls in the policy's audit slice); ``inclusion`` is the probability
    that a transcript with its action is reviewed (1 for ``human_review``, the audit fraction
    otherwise). Labels are not needed; where present (a benign-only set included) the realized
    FAR and MR come with exact Clopper-Pearson intervals
    (``calimon.numerics.class_support.policy_rates``). A policy designed for another model or readout
    than the run next to the CSV names is refused unless ``force`` (`calimon.provenance`).
    """
    import csv

    from calimon.deploy.io import file_sha256, read_scored_csv, run_metadata
    from calimon.provenance import meet

    policy = load_policy(policy_path)
    known = {k: v for k, v in (("model", policy.model), ("readout", policy.readout))
             if v != "unknown"}
    forced = meet("escalation policy", known, run_metadata(scored_path), force=force,
                  path=str(policy_path))
    scored = read_scored_csv(scored_path, score=policy.score, require_labels=False)
    actions = apply_policy(policy, scored.scores)
    unscored = policy.actions.unscored
    target = Path(out)
    target.parent.mkdir(parents=True, exist_ok=True)
    rows = [*zip(scored.ids, scored.statuses, [repr(float(s)) for s in scored.scores], actions,
                 strict=True),
            *((rid, st, "", unscored) for rid, st in zip(scored.dropped_ids,
                                                          scored.dropped_statuses, strict=True))]
    n_review = 0
    with target.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "status", "score", "action", "review", "inclusion"])
        for rid, status, s, a in rows:
            review, inclusion = _reviewed(policy, rid, a)
            n_review += review
            w.writerow([rid, status, s, a, review, repr(inclusion)])
    counts = {a: int(np.sum(actions == a)) for a in ACTIONS}
    counts[unscored] += scored.n_dropped
    rates = policy_rates(actions, scored.labels, policy.t_low, policy.t_high)
    design = policy.provenance.get("source_sha256")
    return ApplySummary(policy=str(policy_path), source=str(scored_path), out=str(target),
                        counts=counts, n_unscored=scored.n_dropped,
                        rates=tuple(r.to_dict() for r in rates), n_review=n_review,
                        audit_fraction=policy.audit.fraction,
                        design_run=bool(design) and design == file_sha256(scored_path),
                        forced=tuple(forced))


def _reviewed(policy: Policy, rid: str, action: str) -> tuple[int, float]:
    """(goes to a human, probability that a transcript with this action does)."""
    if action == "human_review":
        return 1, 1.0
    return int(policy.audit.includes(rid)), policy.audit.fraction
