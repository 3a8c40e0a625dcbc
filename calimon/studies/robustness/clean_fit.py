"""The clean side of a robustness study, one way for the fixed attacks and the adaptive search:
the calibration map fitted on the clean fit split (or none), checked for inversion as `calimon
curve` checks it, and the clean calibrated curve the operating thresholds are read from.

``calibration="none"`` reads thresholds on the raw score: flips do not depend on an increasing
map (a threshold on ``p_cal`` is one on ``p_raw``), so a study of a monitor whose fitted map
comes out inverted can still be run in the monitor's own orientation. A fitted map that is
inverted stops the study unless ``allow_inverted`` keeps it (then recorded in the summary).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from calimon.errors import InputError
from calimon.readings import scores as _scores

NO_MAP = "none"


class IdentityMap:
    """``calibration="none"``: the raw score, unchanged, in a calibrator's shape."""

    method = NO_MAP

    def predict(self, p: Any) -> np.ndarray:
        """The scores as floats."""
        return np.asarray(p, dtype=float)

    def to_dict(self) -> dict[str, Any]:
        """The map as saved: a method with no parameters."""
        return {"method": NO_MAP, "params": {}}


@dataclass(frozen=True)
class CleanFit:
    """The clean evaluated set's scores and the map the thresholds are read through."""

    cal: Any  # a fitted calibrator, or IdentityMap
    p_eval: np.ndarray  # raw scores of the evaluated samples (NaN: unscored)
    y_eval: np.ndarray
    ok: np.ndarray  # scored
    n_fit: int
    fit_on: str
    inverted: tuple[str, ...] | None  # findings kept with allow_inverted, else None
    p_cal: np.ndarray  # the map applied to p_eval (NaN: unscored)
    curve: Any  # the clean calibrated curve of the scored samples (calimon.numerics.curves.Curve)
    auroc_raw: float = float("nan")  # AUROC of the clean raw score

    def calibration_doc(self) -> dict[str, Any]:
        """The summary's ``calibration`` entry."""
        doc = {"method": self.cal.method, "fit_on": self.fit_on, "n_fit": self.n_fit,
               "map": self.cal.to_dict()}
        if self.inverted is not None:
            doc["inverted"] = {"findings": list(self.inverted), "allowed": True}
        return doc


def fit_clean(s, evaluate, fit, clean) -> CleanFit:
    """Fit ``s.calibration`` on the clean ``fit`` samples (the evaluated ones when ``fit`` is
    empty) and check it. The map and the clean curve come from `compute_curve`, as ``calimon
    curve`` makes them (`calimon.studies.curve.scores`), under its class-size rule: fewer than
    10 scored samples of a class in the evaluated set give no curve to read a threshold from
    (InputError naming the counts); fewer than 20 of a class in the fit set give no map (the
    thresholds are read on the raw score, and the summary says why). InvertedMapError: the map
    is inverted and ``s.allow_inverted`` is not set."""
    from calimon.calibration.maps import calibrator_from_dict
    from calimon.studies.curve.compute import check_inversion
    from calimon.studies.curve.scores import curve_of_scores

    p_eval = _scores(evaluate, clean)
    y_eval = np.array([bool(x.label) for x in evaluate])
    ok = np.isfinite(p_eval)
    groups = np.array([x.pair_id for x in evaluate])
    if s.calibration == NO_MAP:
        c = curve_of_scores(p_eval[ok], y_eval[ok], groups[ok], method=NO_MAP)
        return _with_curve(c, IdentityMap(), p_eval, y_eval, ok, 0,
                           "no map: thresholds on the raw score", None)
    fit_set = fit or evaluate
    p_fit = _scores(fit_set, clean)
    y_fit = np.array([bool(x.label) for x in fit_set])
    fok = np.isfinite(p_fit)
    fgroups = np.array([x.pair_id for x in fit_set])
    c = curve_of_scores(p_eval[ok], y_eval[ok], groups[ok], method=s.calibration,
                        fit=(p_fit[fok], y_fit[fok], fgroups[fok]))
    fit_on = f"split {s.fit_split!r}" if fit else "the evaluated set (in-sample)"
    d = c.map_dict()
    if d is None:
        return _with_curve(c, IdentityMap(), p_eval, y_eval, ok, int(fok.sum()),
                           f"no map ({c.result.calibration.reason}): thresholds on the raw "
                           "score", None)
    found = check_inversion(s, s.calibration, d, (p_fit[fok], y_fit[fok]))
    return _with_curve(c, calibrator_from_dict(d), p_eval, y_eval, ok, int(fok.sum()), fit_on,
                       found.findings if found else None)


def _with_curve(c, cal, p_eval, y_eval, ok, n_fit, fit_on, inverted) -> CleanFit:
    """The `CleanFit` with the calibrated scores and the clean curve ``c`` (a
    `calimon.studies.curve.scores.ScoreCurve`) gives; InputError when the rule leaves none."""
    if not c.defined:
        raise InputError(f"the clean curve is undefined: {c.reason}", field="limit")
    p_cal = np.full_like(p_eval, np.nan)
    p_cal[ok] = cal.predict(p_eval[ok])
    return CleanFit(cal, p_eval, y_eval, ok, n_fit, fit_on, inverted, p_cal, c.curve(),
                    c.auroc_raw)


def calibration_sentence(doc: dict[str, Any]) -> str:
    """The reports' words for a summary's ``calibration`` entry (older runs lack the
    inversion record and the "none" method)."""
    if doc.get("method") == NO_MAP:
        why = doc.get("fit_on", "")  # a map asked for, too few of a class to fit it
        return ("none " + why.removeprefix("no map ")) if why.startswith("no map (") else (
            "none: thresholds on the raw score")
    text = f"{doc['method']} fitted on {doc['fit_on']} ({doc['n_fit']} scored samples)"
    inv = doc.get("inverted")
    if inv:
        text += (" — INVERTED, kept with --allow-inverted: " + "; ".join(inv["findings"])
                 + ": read every threshold below as flagging the least suspicious transcripts")
    return text
