"""The segment precision map: a segment's score to the probability that the segment overlaps the
gold evidence of a misbehaving transcript.

It is an ordinary calibration map file (`calimon.calibration.io`: JSON, never pickle) whose
``extra`` says what it maps: ``{"kind": "segment-precision", "token_head": ..., "weights_sha256":
..., "top": K, "benchmark": ..., "split": ..., "dataset_hash": ...}``. It is fitted on the top
``K`` segments of each misbehaving sample of a split the token head was not trained on (the
segments a reader is shown), by the method with the lowest out-of-fold ECE there
(`choose_method`). It lives next to the token head's card:
``heads/<model>/<token head>.segments.json`` (`precision_map_path`), where `ProbeMonitor`
finds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from calimon.calibration.io import StoredMap, fit_set_hash, load_map, save_map
from calimon.calibration.maps import make_calibrator
from calimon.errors import InputError
from calimon.numerics.metrics import ece, reliability_bins

KIND = "segment-precision"
METHODS = ("isotonic", "platt", "beta", "histogram")  # the candidates of choose_method
SUFFIX = ".segments.json"
TOP = 5  # segments shown per transcript, strongest first


def precision_map_path(card_path: str | Path) -> Path:
    """``<head>.segments.json`` beside a head card ``<head>.card.yaml``."""
    p = Path(card_path)
    return p.with_name(p.name.removesuffix(".card.yaml") + SUFFIX)


def fit_precision_map(scores: Sequence[float], hits: Sequence[bool], ids: Sequence[str],
                      path: str | Path, *, extra: dict[str, Any],
                      method: str = "isotonic") -> StoredMap:
    """Fit the map (``method``: a `calimon.calibration.maps` method, isotonic by default) of
    ``hits`` (segment overlaps gold) on ``scores``, write it to ``path`` with ``extra`` (module
    docstring) and the fit set's ECE, and read it back."""
    p = np.asarray(scores, dtype=np.float64)
    y = np.asarray(hits, dtype=np.int64)
    cal = make_calibrator(method).fit(p, y)
    fitted = np.clip(cal.predict(p), 0.0, 1.0)
    metrics = {"n_segments": int(p.size), "base_rate": float(y.mean()) if y.size else None,
               "ece_fit": ece(fitted, y)}
    save_map(cal, path, fit_hash=fit_set_hash(p, y, ids), metrics=metrics,
             extra={"kind": KIND, **extra})
    return load_precision_map(path)


def choose_method(scores: Sequence[float], hits: Sequence[bool], groups: Sequence[str],
                  methods: Sequence[str] = METHODS) -> tuple[str, dict[str, float]]:
    """The method whose out-of-fold map (5 folds, a sample's segments in one fold,
    `calimon.calibration.crossfit`) has the lowest ECE on the fit set, and every method's."""
    from calimon.calibration.crossfit import crossfit_predict

    p = np.asarray(scores, dtype=np.float64)
    y = np.asarray(hits, dtype=np.int64)
    got = {m: ece(crossfit_predict(m, p, y, list(groups), n_splits=5, seed=0), y)
           for m in methods}
    return min(got, key=got.get), got


def load_precision_map(path: str | Path) -> StoredMap:
    """A segment precision map; InputError naming the file when it is another kind of map."""
    stored = load_map(path)
    if stored.extra.get("kind") != KIND:
        raise InputError(f"expected a segment precision map (extra.kind {KIND!r}), got "
                         f"{stored.extra.get('kind')!r}", path=str(path), field="extra")
    return stored


def reliability(precision: Sequence[float], hits: Sequence[bool], n_bins: int = 10
                ) -> dict[str, Any]:
    """ECE (15 uniform bins, the project's default) and the reliability diagram's bins
    (``n_bins`` equal-mass bins: mean predicted, observed rate, count) of a precision map's
    output against the hits."""
    p = np.asarray(precision, dtype=np.float64)
    y = np.asarray(hits, dtype=np.int64)
    bins = reliability_bins(p, y, n_bins=n_bins, strategy="quantile")
    rows = [{"mean_precision": float(c), "observed": float(f), "n": int(n)}
            for c, f, n in zip(bins.mean_confidence, bins.accuracy, bins.counts, strict=True)
            if n]
    return {"ece": ece(p, y), "ece_quantile10": ece(p, y, n_bins=10, strategy="quantile"),
            "n": int(p.size), "bins": rows}


__all__ = ["KIND", "METHODS", "SUFFIX", "TOP", "choose_method", "fit_precision_map", "load_precision_map",
           "precision_map_path", "reliability"]
