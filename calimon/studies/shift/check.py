"""Entry points: the shift check of a calibration run against new transcripts, and thresholds
certified for the new data (naive and shift-aware side by side)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from calimon.studies.shift.certify import ShiftCertificate, kish_ess, shift_certificate
from calimon.studies.shift.detect import DEFAULT_PERMUTATIONS, ShiftReport, two_sample_test
from calimon.studies.shift.features import build_view
from calimon.studies.shift.label_plan import LabelPlan, plan_labels
from calimon.studies.shift.sides import Side, calib_side, new_side
from calimon.studies.shift.verdict import ShiftVerdict, shift_verdict
from calimon.studies.shift.verdict_mr import MrVerdict, check_weights, mr_verdict, weights_read


def check_sides(calib: Side, new: Side, *, permutations: int = DEFAULT_PERMUTATIONS,
                seed: int = 0, text_dims: int = 32, calib_state: Any = None,
                new_state: Any = None, alpha_test: float = 0.05,
                stop_hits: int | None = None, progress: Any = None) -> ShiftReport:
    """Two-sample test between two sides (the score group only when both carry scores; pairs
    kept together when both sides carry groups), at level ``alpha_test``; ``stop_hits`` and
    ``progress``: see :func:`~calimon.studies.shift.detect.two_sample_test`."""
    with_score = calib.scores is not None and new.scores is not None
    a, b = calib.as_features(with_score), new.as_features(with_score)
    a["state"], b["state"] = calib_state, new_state
    view = build_view(a, b, text_dims=text_dims, seed=seed)
    groups = None
    if calib.groups is not None and new.groups is not None:
        groups = [f"calib:{k}" for k in calib.groups] + [f"new:{k}" for k in new.groups]
    return two_sample_test(view, permutations=permutations, seed=seed, groups=groups,
                           alpha_test=alpha_test, stop_hits=stop_hits, progress=progress)


def shift_check(calib_run: str | Path, new: str | Path, *, calib_samples: str | Path | None = None,
                new_samples: str | Path | None = None, score: str = "p_cal", seed: int = 0,
                permutations: int = DEFAULT_PERMUTATIONS, text_dims: int = 32) -> ShiftReport:
    """Domain-classifier two-sample test between a run's calibration transcripts and ``new``
    (a samples JSONL, or a run folder / scored CSV whose transcripts can be found)."""
    cal, _ = calib_side(calib_run, samples=calib_samples, score=score, seed=seed)
    return check_sides(cal, new_side(new, samples=new_samples, score=score),
                       permutations=permutations, seed=seed, text_dims=text_dims)


def check_line(calib_run: str | Path, new: str | Path, **kwargs: Any) -> str:
    """The one line the commands that apply thresholds print: the check's summary, or why it
    could not run (it never stops the command)."""
    from calimon.errors import CalimonError

    try:
        return shift_check(calib_run, new, **kwargs).line()
    except CalimonError as exc:
        return f"shift check: not run ({exc})"


@dataclass(frozen=True)
class ShiftThresholds:
    """Per target: the naive certificate (calibration data as if exchangeable with the new),
    the shift-aware one, the verdict (:mod:`~calimon.studies.shift.verdict` for FAR,
    :mod:`~calimon.studies.shift.verdict_mr` for MR) and the label plan
    (:mod:`~calimon.studies.shift.label_plan`), with the shift report behind the weights."""

    report: ShiftReport
    naive: tuple[Any, ...]
    aware: tuple[ShiftCertificate, ...]
    verdicts: tuple[ShiftVerdict | MrVerdict | None, ...] = ()
    plans: tuple[LabelPlan | None, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The shift report and, per target, both certificates, the verdict and the plan as a
        JSON-ready dict."""
        none = (None,) * len(self.naive)
        return {"shift": self.report.to_dict(), "targets": [
            {"naive": n.to_dict(), "shift_aware": a.to_dict(),
             "verdict": v.to_dict() if v is not None else None,
             "plan": p.to_dict() if p is not None else None}
            for n, a, v, p in zip(self.naive, self.aware, self.verdicts or none,
                                  self.plans or none, strict=True)]}


def certify_sides(report: ShiftReport, scores: Any, labels: Any, *, far: Sequence[float] = (),
                  mr: Sequence[float] = (), delta: float = 0.05, seed: int = 0,
                  new_scores: Any = None, max_prevalence: float | None = None,
                  max_detection: float | None = None,
                  min_prevalence: float | None = None) -> ShiftThresholds:
    """Naive and shift-aware certificates, the verdict and the label plan of each target from
    calibration ``scores`` / ``labels`` (the rows of the report's calibration side, same
    order) and the new side's ``new_scores``, both on the scale the thresholds are certified
    on. ``report`` needs ``shifted``, ``weights``, ``outside_share`` (and ``n_new`` when
    ``new_scores`` is None): a :class:`ShiftReport` or any object with them."""
    s, y = np.asarray(scores, float), np.asarray(labels, int)
    out: list[tuple[Any, ...]] = []
    for rate, alphas in (("far", far), ("mr", mr)):
        for alpha in alphas:
            out.append(_target(report, s, y, rate, alpha, delta, seed, new_scores,
                               dict(max_prevalence=max_prevalence, max_detection=max_detection)
                               if rate == "far" else dict(min_prevalence=min_prevalence)))
    naive, aware, verdicts, plans = (tuple(x) for x in zip(*out, strict=True)) if out else (
        (), (), (), ())
    return ShiftThresholds(report, naive, aware, verdicts, plans)


def _target(report: Any, s: np.ndarray, y: np.ndarray, rate: str, alpha: float, delta: float,
            seed: int, new_scores: Any, assume: dict[str, Any]) -> tuple[Any, ...]:
    """``(naive, aware, verdict, plan)`` of one target (:func:`certify_sides`)."""
    from calimon.deploy.guarantees import certify_far, certify_mr

    cls = 0 if rate == "far" else 1
    n = (certify_far if rate == "far" else certify_mr)(s[y == cls], alpha, delta)
    t = n.threshold
    w = np.asarray(report.weights, float)
    check = (check_weights(s, w, new_scores, t, delta)
             if rate == "mr" and math.isfinite(t) else None)
    read = weights_read(rate, kish_ess(w[y == cls]), alpha, delta, check)
    n_new = getattr(report, "n_new", None)
    p = (plan_labels(rate, alpha, delta, threshold=t, calib_scores=s, calib_labels=y,
                     weights=w if read else None, new_scores=new_scores, n_new=n_new)
         if new_scores is not None or n_new else None)
    a = shift_certificate(s, y, w, rate=rate, alpha=alpha, delta=delta,
                          reference=t if math.isfinite(t) else math.nan,
                          outside_share=report.outside_share, seed=seed, plan=p)
    v = (shift_verdict(report, n, a, s, y, new_scores, **assume) if rate == "far" else
         mr_verdict(report, n, a, s, y, new_scores, **assume))
    return n, a, v, p


def shift_thresholds(calib_run: str | Path, new: str | Path, *, far: Sequence[float] = (0.05,),
                     mr: Sequence[float] = (), delta: float = 0.05, score: str = "p_cal",
                     seed: int = 0, permutations: int = DEFAULT_PERMUTATIONS,
                     calib_samples: str | Path | None = None,
                     new_samples: str | Path | None = None,
                     max_prevalence: float | None = None,
                     max_detection: float | None = None,
                     min_prevalence: float | None = None) -> ShiftThresholds:
    """Shift check, then naive and shift-aware certificates, the harmful-or-harmless verdict
    and the label plan for each target on ``new`` (``max_prevalence`` / ``max_detection``: the
    FAR floor's assumptions, :mod:`calimon.studies.shift.verdict`, default from the
    calibration rows; ``min_prevalence``: the MR miss floor's,
    :mod:`calimon.studies.shift.verdict_mr`, default none)."""
    cal, scored = calib_side(calib_run, samples=calib_samples, score=score, seed=seed)
    new_s = new_side(new, samples=new_samples, score=score)
    rep = check_sides(cal, new_s, permutations=permutations, seed=seed)
    return certify_sides(rep, scored.scores, scored.labels, far=far, mr=mr, delta=delta,
                         seed=seed, new_scores=new_s.cert_scores, max_prevalence=max_prevalence,
                         max_detection=max_detection, min_prevalence=min_prevalence)


def policy_shift(policy_path: str | Path, scored: str | Path,
                 samples: str | Path | None = None, progress: Any = None
                 ) -> tuple[str, list[dict[str, Any]]]:
    """The shift lines of ``apply-policy`` and their JSON: the policy's calibration source (its
    provenance) against the scored transcripts on the policy's score, and for each certified
    guarantee of the policy (FAR and MR) the verdict and the label plan
    (:func:`certify_sides`). The JSON lists one dict per guarantee (empty when not run).
    ``progress``: a bar over the test's classifier fits (`calimon.progress`)."""
    from calimon.deploy.policy_file import load_policy
    from calimon.errors import CalimonError

    policy = load_policy(policy_path)
    source = policy.provenance.get("source")
    if not isinstance(source, str) or not Path(source).is_file():
        return ("shift check: not run (the policy's provenance names no calibration CSV that "
                "exists here)"), []
    certified = [g for g in policy.guarantees if g.certified]
    try:
        cal, calib = calib_side(source, score=policy.score)
        new_s = new_side(scored, samples=samples, score=policy.score)
        rep = check_sides(cal, new_s, progress=progress)
        lines, targets = [rep.line()], []
        for delta in sorted({g.delta for g in certified}):
            res = certify_sides(rep, calib.scores, calib.labels, delta=delta,
                                new_scores=new_s.cert_scores,
                                far=[g.alpha for g in certified
                                     if g.rate == "far" and g.delta == delta],
                                mr=[g.alpha for g in certified
                                    if g.rate == "mr" and g.delta == delta])
            lines += [f"shift verdict: {v.line()}" for v in res.verdicts]
            targets += res.to_dict()["targets"]
    except CalimonError as exc:
        return f"shift check: not run ({exc})", []
    return "\n".join(lines), targets


def _run_score(run_dir: Path) -> str:
    """The score a run's curve.json names (``p_raw`` when it fitted no calibration map), else
    ``p_cal``."""
    from calimon.errors import InputError
    from calimon.run_folder import read_curve_json

    try:
        named = read_curve_json(run_dir).score
    except InputError:
        return "p_cal"
    return named if named in ("p_cal", "p_raw") else "p_cal"


def run_check_line(run: str | Path, *, permutations: int = DEFAULT_PERMUTATIONS,
                   seed: int = 0) -> str:
    """The report's line: within one run, its calibration rows (``split == calib``) against
    the rows its thresholds were read on (every other scored row)."""
    from calimon.deploy.io import read_scored_csv, resolve_run
    from calimon.errors import CalimonError
    from calimon.studies.shift.sides import run_transcripts, side_of

    try:
        csv_path = resolve_run(run)
        scored = read_scored_csv(csv_path, score=_run_score(csv_path.parent),
                                 require_labels=False)
        in_cal = scored.splits == "calib"
        if not in_cal.any() or in_cal.all():
            return ("shift check: not run (the run has no separate calibration rows: its maps "
                    "were cross-fitted on the rows they score)")
        found = run_transcripts(csv_path)
        return check_sides(side_of("calibration", scored.subset(in_cal), found),
                           side_of("new", scored.subset(~in_cal), found),
                           permutations=permutations, seed=seed).line()
    except (CalimonError, OSError, ValueError) as exc:
        return f"shift check: not run ({exc})"
