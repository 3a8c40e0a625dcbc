"""Test-split figures of a readout and the category transfer matrix.

Protocol (the same for every readout): a calibration map is fitted on the ``calib`` split and
applied to ``test``; AUROC of the raw test score (so an inverted score shows), ECE before and
after the map, and the miss rate at the lowest threshold whose false-alarm rate on the test
split is <= ``far`` (read off the calibrated test curve). The curve, the map and both figures
come from `calimon.studies.curve.compute.compute_curve`, as ``calimon curve --split test``
computes them (`calimon.studies.curve.scores.curve_of_scores`), under its class-size rule:
below 10 scored samples of a class in the test split AUROC and MR are undefined (NaN, None
on a card); below 20 of a class in ``calib`` no map is fitted (``method`` "none", no ECE
after it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from calimon.errors import InputError
from calimon.numerics.metrics import ece
from calimon.studies.curve.scores import curve_of_scores


@dataclass(frozen=True)
class ReadoutScores:
    """A readout's test-split figures (module docstring); NaN where a figure is undefined."""

    name: str
    n_test: int
    n_test_pos: int
    n_unscored: int
    auroc_raw: float
    auroc_cal: float
    ece_raw: float
    ece_cal: float
    mr_at_far: float
    far_target: float
    method: str

    def to_dict(self) -> dict:
        """The fields as a JSON-ready dict; NaN becomes None."""
        return {k: (None if isinstance(v, float) and math.isnan(v) else v)
                for k, v in asdict(self).items()}


def _finite(p, y):
    p = np.asarray(p, dtype=float)
    y = np.asarray(y, dtype=bool)
    if p.shape != y.shape:
        raise InputError(f"expected one score per label, got {p.shape} and {y.shape}",
                         field="p")
    ok = np.isfinite(p)
    return np.clip(p[ok], 0.0, 1.0), y[ok], int((~ok).sum())


def evaluate_readout(name: str, p_calib, y_calib, p_test, y_test, *, far: float = 0.05,
                     method: str = "platt") -> ReadoutScores:
    """Figures of one readout on the test split, calibrated on the calib split. Unscored
    samples (NaN) are left out and counted, never scored as 0."""
    pc, yc, _ = _finite(p_calib, y_calib)
    pt, yt, missing = _finite(p_test, y_test)
    if not (yt.any() and (~yt).any()):
        raise InputError("the test split needs scored misbehaving and benign samples",
                         field="y_test")
    c = curve_of_scores(pt, yt, fit=(pc, yc), method=method, fars=(far,))
    by_id = c.result.scores.p_cal
    cal = np.array([by_id[f"e{i}"] for i in range(yt.size)]) if by_id else None
    return ReadoutScores(name, int(yt.size), int(yt.sum()), missing, c.auroc_raw,
                         c.auroc, ece(pt, yt), ece(cal, yt) if cal is not None else math.nan,
                         c.mr_at_far(far), far, c.method)


def curve_figures(p, y, far: float = 0.05) -> tuple[float, float]:
    """(AUROC, MR at FAR <= far) of raw scores on one set, by `compute_curve`; NaN below the
    class-size rule (module docstring)."""
    p, y, _ = _finite(p, y)
    if not y.size:
        return float("nan"), float("nan")
    c = curve_of_scores(p, y, method="none", fars=(far,))
    return c.auroc, c.mr_at_far(far)


@dataclass(frozen=True)
class TransferCell:
    """One cell of the transfer matrix: trained on ``train``, tested on ``test``."""

    train: str
    test: str
    n_train: int
    n_test: int
    auroc: float
    mr_at_far: float


def transfer_matrix(fit_and_score, train_sets: dict[str, Sequence[int]],
                    test_sets: dict[str, Sequence[int]], y: np.ndarray,
                    far: float = 0.05) -> list[TransferCell]:
    """Train on each named train set, test on each named test set.

    ``fit_and_score(train_rows, test_rows) -> scores of test_rows`` trains one head and scores
    the test rows; ``y`` holds the labels of all rows."""
    cells = []
    y = np.asarray(y, dtype=bool)
    for tr_name, tr in train_sets.items():
        tr = np.asarray(tr, dtype=np.int64)
        everything = np.unique(np.concatenate([np.asarray(v, np.int64)
                                               for v in test_sets.values()]))
        scores = dict(zip(everything.tolist(), fit_and_score(tr, everything), strict=True))
        for te_name, te in test_sets.items():
            te = np.asarray(te, dtype=np.int64)
            a, mr = curve_figures(np.array([scores[i] for i in te.tolist()]), y[te], far)
            cells.append(TransferCell(tr_name, te_name, int(tr.size), int(te.size), a, mr))
    return cells
