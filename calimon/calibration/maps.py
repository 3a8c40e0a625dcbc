"""Calibration maps: raw probability of misbehavior -> calibrated probability.

Each map follows the scikit-learn contract (constructor stores arguments, ``fit(p, y)``
returns self, fitted attributes end in ``_``) and serializes to a JSON-safe dict
``{"method": name, "params": {...}}`` with :meth:`Calibrator.to_dict` /
:meth:`Calibrator.from_dict`; predictions of a reloaded map are bit-identical.

The parametric maps (temperature, Platt, beta) are maximum-likelihood logistic fits solved
by Newton's method with a ridge of ``1e-8`` on the slopes only (never the intercept): it does
not move a well-posed fit measurably but keeps the parameters finite when the calibration set
is perfectly separable. Inputs are clipped to ``[eps, 1 - eps]`` before any logit or log.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from calimon.calibration.logistic import expit, fit_logistic, logit
from calimon.errors import InputError
from calimon.numerics.metrics import STRATEGIES, as_probabilities, assign_bins, bin_edges
from calimon.validation import as_labels

__all__ = [
    "CALIBRATORS",
    "BetaCalibration",
    "Calibrator",
    "HistogramBinning",
    "IsotonicCalibration",
    "PlattScaling",
    "TemperatureScaling",
    "calibrator_from_dict",
    "make_calibrator",
]

MIN_INVERSE_TEMPERATURE = 1e-6  # T <= 1e6: an uninformative or inverted score maps to ~0.5


class Calibrator:
    """Base class: ``fit(p, y) -> self``, ``predict(p) -> ndarray``, ``to_dict``/``from_dict``."""

    method: ClassVar[str] = ""
    init_params: ClassVar[tuple[str, ...]] = ()
    fitted_params: ClassVar[tuple[str, ...]] = ()  # JSON keys; attribute = key + "_"

    # --- subclass hooks ---
    def _fit(self, p: np.ndarray, y: np.ndarray) -> None:
        raise NotImplementedError

    def _predict(self, p: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _validate_init(self) -> None:
        pass

    def _inversion(self) -> str | None:
        return None

    # --- public API ---
    def fit(self, p: Any, y: Any) -> Calibrator:
        """Fit the map on raw probabilities ``p`` and 0/1 labels ``y`` (both classes needed)."""
        self._validate_init()
        pa = as_probabilities(p)
        ya = as_labels(y, n=pa.shape[0], name="y", dtype=np.int64)
        n_pos = int(ya.sum())
        if n_pos == 0 or n_pos == ya.shape[0]:
            got = f"all {int(ya[0])}" if ya.size else "none"
            raise InputError(f"{type(self).__name__}.fit needs both classes, got "
                             f"{ya.shape[0]} label(s), {got}", field="y")
        self._fit(pa, ya.astype(np.float64))
        return self

    def predict(self, p: Any) -> np.ndarray:
        """Calibrated probabilities for raw probabilities ``p``; always within [0, 1]."""
        if not self.is_fitted:
            raise InputError(f"{type(self).__name__} is not fitted: call fit(p, y) first",
                             field="calibrator")
        return np.clip(self._predict(as_probabilities(p)), 0.0, 1.0)

    def inversion(self) -> str | None:
        """How the fitted map fails to rise with the raw score, in words (a negative Platt
        slope; a temperature, beta or isotonic fit flattened to a constant because the data
        ranked the wrong way; histogram bins that fall from the lowest to the highest), or None
        when it rises. A map that does not rise turns the ranking upside down or erases it."""
        if not self.is_fitted:
            raise InputError(f"{type(self).__name__} is not fitted: call fit(p, y) first",
                             field="calibrator")
        return self._inversion()

    @property
    def is_fitted(self) -> bool:
        """True once every fitted parameter (``fitted_params``, with a trailing ``_``) is set."""
        return all(hasattr(self, k + "_") for k in self.fitted_params)

    def to_dict(self) -> dict[str, Any]:
        """``{"method": ..., "params": {...}}`` with plain floats/ints/lists only."""
        if not self.is_fitted:
            raise InputError(f"{type(self).__name__} is not fitted: nothing to serialize",
                             field="calibrator")
        params: dict[str, Any] = {k: _plain(getattr(self, k)) for k in self.init_params}
        params.update({k: _plain(getattr(self, k + "_")) for k in self.fitted_params})
        return {"method": self.method, "params": params}

    @classmethod
    def from_dict(cls, d: Any) -> Calibrator:
        """Rebuild a fitted map from :meth:`to_dict` output; bad content raises InputError."""
        if not isinstance(d, dict):
            raise InputError(f"expected a dict, got {type(d).__name__}", field="calibration map")
        if d.get("method") != cls.method:
            raise InputError(f"expected {cls.method!r}, got {d.get('method')!r}", field="method")
        params = d.get("params")
        if not isinstance(params, dict):
            raise InputError(f"expected an object, got {type(params).__name__}", field="params")
        expected = set(cls.init_params) | set(cls.fitted_params)
        if set(params) != expected:
            missing, extra = sorted(expected - set(params)), sorted(set(params) - expected)
            raise InputError(f"expected keys {sorted(expected)} for method {cls.method!r}; "
                             f"missing {missing}, unexpected {extra}", field="params")
        obj = cls(**{k: params[k] for k in cls.init_params})
        try:
            obj._validate_init()
            obj._load({k: params[k] for k in cls.fitted_params})
        except InputError as exc:
            message = str(exc).removeprefix(f"field '{exc.field}': ")
            raise InputError(message, field=f"params.{exc.field}") from None
        return obj

    def _load(self, fitted: dict[str, Any]) -> None:
        for k, v in fitted.items():
            setattr(self, k + "_", _number(v, k))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.init_params)
        return f"{type(self).__name__}({args})"


def _plain(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        kind = int if np.issubdtype(v.dtype, np.integer) else float
        return [kind(x) for x in v]
    if isinstance(v, np.integer):
        return int(v)
    if isinstance(v, np.floating):
        return float(v)
    return v


def _number(v: Any, name: str) -> float:
    try:
        ok = not isinstance(v, bool) and isinstance(v, int | float) and math.isfinite(float(v))
    except OverflowError:  # an int beyond the float range
        ok = False
    if not ok:
        raise InputError(f"expected a finite number, got {str(v)[:40]!r}", field=name)
    return float(v)


def _vector(v: Any, name: str, *, lo: float = -math.inf, hi: float = math.inf) -> np.ndarray:
    if not isinstance(v, list) or not v:
        raise InputError(f"expected a non-empty list of numbers, got {type(v).__name__}",
                         field=name)
    arr = np.array([_number(x, name) for x in v], dtype=np.float64)
    if (arr < lo).any() or (arr > hi).any():
        raise InputError(f"expected values in [{lo}, {hi}], got min {arr.min()} max {arr.max()}",
                         field=name)
    return arr


def _check_eps(eps: Any) -> None:
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not 0.0 < eps < 0.5:
        raise InputError(f"expected a number with 0 < eps < 0.5, got {eps!r}", field="eps")


class TemperatureScaling(Calibrator):
    """``sigmoid(logit(p) / T)`` with ``T > 0`` fitted by minimising the log-loss.

    ``T`` is capped at 1e6: a score that is uninformative or inverted fits to ~0.5
    everywhere (temperature scaling cannot flip a ranking; Platt scaling can).
    """

    method = "temperature"
    init_params = ("eps",)
    fitted_params = ("temperature",)

    def __init__(self, eps: float = 1e-12):
        self.eps = eps

    def _validate_init(self) -> None:
        _check_eps(self.eps)

    def _fit(self, p: np.ndarray, y: np.ndarray) -> None:
        (w,), _ = fit_logistic(logit(p, self.eps)[:, None], y, intercept=False)
        self.temperature_ = 1.0 / max(float(w), MIN_INVERSE_TEMPERATURE)

    def _load(self, fitted: dict[str, Any]) -> None:
        super()._load(fitted)
        if self.temperature_ <= 0:
            raise InputError(f"expected T > 0, got {self.temperature_}", field="temperature")

    def _predict(self, p: np.ndarray) -> np.ndarray:
        return expit(logit(p, self.eps) / self.temperature_)

    def _inversion(self) -> str | None:
        if self.temperature_ * MIN_INVERSE_TEMPERATURE >= 1.0 - 1e-9:
            return (f"temperature fit at its cap (T = {self.temperature_:.3g}): the best "
                    "positive temperature is none, the score is uninformative or inverted")
        return None


class PlattScaling(Calibrator):
    """``sigmoid(a * logit(p) + b)``, a logistic regression on ``logit(p)``.

    ``a`` may be negative: the map then un-inverts a score that ranks the wrong way round,
    which is what the data say; it is not clamped.
    """

    method = "platt"
    init_params = ("eps",)
    fitted_params = ("a", "b")

    def __init__(self, eps: float = 1e-12):
        self.eps = eps

    def _validate_init(self) -> None:
        _check_eps(self.eps)

    def _fit(self, p: np.ndarray, y: np.ndarray) -> None:
        (a,), b = fit_logistic(logit(p, self.eps)[:, None], y)
        self.a_, self.b_ = float(a), float(b)

    def _predict(self, p: np.ndarray) -> np.ndarray:
        return expit(self.a_ * logit(p, self.eps) + self.b_)

    def _inversion(self) -> str | None:
        if self.a_ < 0:
            return f"Platt slope a = {self.a_:.3g} < 0: the map turns the ranking upside down"
        return None  # a = 0 (a constant raw score) is flat, not decreasing


class BetaCalibration(Calibrator):
    """Beta calibration (Kull et al. 2017): ``sigmoid(a * ln p - b * ln(1 - p) + c)``.

    Fitted as a logistic regression on ``[ln p, -ln(1 - p)]``. As in ``betacal`` (and netcal's
    mask step), ``a, b >= 0`` keeps the map monotone: if ``a < 0`` the fit is redone without
    ``ln p`` (a = 0), else if ``b < 0`` without ``-ln(1 - p)`` (b = 0); if the remaining slope
    is still negative it is dropped as well, leaving the constant base-rate map.
    """

    method = "beta"
    init_params = ("eps",)
    fitted_params = ("a", "b", "c")

    def __init__(self, eps: float = 1e-12):
        self.eps = eps

    def _validate_init(self) -> None:
        _check_eps(self.eps)

    def _features(self, p: np.ndarray) -> np.ndarray:
        pc = np.clip(p, self.eps, 1.0 - self.eps)
        return np.column_stack([np.log(pc), -np.log1p(-pc)])

    def _fit(self, p: np.ndarray, y: np.ndarray) -> None:
        X = self._features(p)
        keep = [0, 1]
        w, c = fit_logistic(X, y)
        while keep and (w < 0).any():
            keep.pop(int(np.flatnonzero(w < 0)[0]))  # betacal order: drop a first
            w, c = fit_logistic(X[:, keep], y)
        coef = np.zeros(2)
        coef[keep] = w
        self.a_, self.b_, self.c_ = float(coef[0]), float(coef[1]), float(c)

    def _load(self, fitted: dict[str, Any]) -> None:
        super()._load(fitted)
        for k in ("a", "b"):
            if getattr(self, k + "_") < 0:
                raise InputError(f"expected a value >= 0, got {getattr(self, k + '_')}", field=k)

    def _predict(self, p: np.ndarray) -> np.ndarray:
        X = self._features(p)
        return expit(self.a_ * X[:, 0] + self.b_ * X[:, 1] + self.c_)

    def _inversion(self) -> str | None:
        if self.a_ == 0 and self.b_ == 0:
            return ("beta fit decreasing: both slopes were negative and dropped, leaving a "
                    "constant map")
        return None


class IsotonicCalibration(Calibrator):
    """Increasing isotonic regression (scikit-learn's fit, computed by
    `calimon.calibration.isotonic`), values outside the fit range clipped.

    The breakpoints are stored; ``predict`` is linear interpolation between them
    (``np.interp``), which is what scikit-learn's ``IsotonicRegression.predict`` computes.
    """

    method = "isotonic"
    fitted_params = ("x_thresholds", "y_thresholds")

    def _fit(self, p: np.ndarray, y: np.ndarray) -> None:
        from calimon.calibration.isotonic import isotonic_breakpoints  # scikit-learn's

        self.x_thresholds_, self.y_thresholds_ = isotonic_breakpoints(p, y)

    def _load(self, fitted: dict[str, Any]) -> None:
        x = _vector(fitted["x_thresholds"], "x_thresholds", lo=0.0, hi=1.0)
        yv = _vector(fitted["y_thresholds"], "y_thresholds", lo=0.0, hi=1.0)
        if x.shape != yv.shape:
            raise InputError(f"expected as many values as x_thresholds ({x.size}), got "
                             f"{yv.size}", field="y_thresholds")
        if (np.diff(x) < 0).any() or (np.diff(yv) < 0).any():
            raise InputError("expected non-decreasing breakpoints", field="x_thresholds")
        self.x_thresholds_, self.y_thresholds_ = x, yv

    def _predict(self, p: np.ndarray) -> np.ndarray:
        return np.interp(p, self.x_thresholds_, self.y_thresholds_)

    def _inversion(self) -> str | None:
        if self.y_thresholds_.size == 0 or self.y_thresholds_[-1] <= self.y_thresholds_[0]:
            return ("isotonic fit flat: the data fall as the score rises, so the increasing "
                    "fit is one constant")
        return None


class HistogramBinning(Calibrator):
    """Histogram binning (Zadrozny & Elkan 2001): each bin predicts its fraction of positives.

    ``strategy="uniform"``: ``n_bins`` equal-width bins over [0, 1]; ``"quantile"``:
    equal-mass bins from the quantiles of the fit set (first/last edge 0 and 1). Bins are
    ``[e_i, e_{i+1})`` with the last one closed, for fit and predict alike. A bin that got no
    fit sample predicts the global positive rate of the fit set (netcal uses the bin centre).
    """

    method = "histogram"
    init_params = ("n_bins", "strategy")
    fitted_params = ("edges", "values", "counts", "base_rate")

    def __init__(self, n_bins: int = 10, strategy: str = "uniform"):
        self.n_bins = n_bins
        self.strategy = strategy

    def _validate_init(self) -> None:
        if (isinstance(self.n_bins, bool) or not isinstance(self.n_bins, int | np.integer)
                or self.n_bins < 1):
            raise InputError(f"expected a positive integer, got {self.n_bins!r}", field="n_bins")
        if self.strategy not in STRATEGIES:
            raise InputError(f"expected one of {', '.join(STRATEGIES)}, got {self.strategy!r}",
                             field="strategy")

    def _fit(self, p: np.ndarray, y: np.ndarray) -> None:
        edges = bin_edges(p, self.n_bins, self.strategy)
        idx = assign_bins(p, edges)
        counts = np.bincount(idx, minlength=self.n_bins)
        pos = np.bincount(idx, weights=y, minlength=self.n_bins)
        self.base_rate_ = float(y.mean())
        with np.errstate(invalid="ignore", divide="ignore"):
            self.values_ = np.where(counts > 0, pos / counts, self.base_rate_)
        self.edges_, self.counts_ = edges, counts

    def _load(self, fitted: dict[str, Any]) -> None:
        edges = _vector(fitted["edges"], "edges", lo=0.0, hi=1.0)
        values = _vector(fitted["values"], "values", lo=0.0, hi=1.0)
        counts = _vector(fitted["counts"], "counts", lo=0.0)
        if edges.size != self.n_bins + 1 or (np.diff(edges) < 0).any():
            raise InputError(f"expected {self.n_bins + 1} non-decreasing edges, got {edges.size}",
                             field="edges")
        for name, arr in (("values", values), ("counts", counts)):
            if arr.size != self.n_bins:
                raise InputError(f"expected {self.n_bins} entries, got {arr.size}", field=name)
        self.edges_, self.values_, self.counts_ = edges, values, counts.astype(np.int64)
        self.base_rate_ = _number(fitted["base_rate"], "base_rate")

    def _predict(self, p: np.ndarray) -> np.ndarray:
        return self.values_[assign_bins(p, self.edges_)]

    def _inversion(self) -> str | None:
        occupied = np.flatnonzero(self.counts_ > 0)
        if occupied.size and self.values_[occupied[-1]] < self.values_[occupied[0]]:
            return (f"histogram bins fall: the highest occupied bin reads "
                    f"{self.values_[occupied[-1]]:.3g}, the lowest {self.values_[occupied[0]]:.3g}")
        return None


CALIBRATORS: dict[str, type[Calibrator]] = {
    cls.method: cls
    for cls in (TemperatureScaling, PlattScaling, IsotonicCalibration, HistogramBinning,
                BetaCalibration)
}


def make_calibrator(name: str, **kwargs: Any) -> Calibrator:
    """A new, unfitted calibrator by registry name (``CALIBRATORS``)."""
    cls = CALIBRATORS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise InputError(f"unknown calibration method {name!r}; choose one of "
                         f"{', '.join(sorted(CALIBRATORS))}", field="method")
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise InputError(f"bad arguments for {name!r}: {exc}", field="method") from None


def calibrator_from_dict(d: Any) -> Calibrator:
    """Rebuild any registered calibrator from its ``to_dict()`` output."""
    method = d.get("method") if isinstance(d, dict) else None
    if not isinstance(method, str) or method not in CALIBRATORS:
        raise InputError(f"unknown calibration method {method!r}; choose one of "
                         f"{', '.join(sorted(CALIBRATORS))}", field="method")
    return CALIBRATORS[method].from_dict(d)
