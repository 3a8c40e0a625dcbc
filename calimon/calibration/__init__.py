"""Calibration layer: maps from raw to calibrated probabilities, cross-fitting, JSON storage.

Fit maps on a calibration split and apply them to a disjoint test split
(:func:`fit_on_split`), or cross-fit them by pair (:func:`calibrate`,
:func:`crossfit_predict`) so every sample gets an out-of-fold score.
"""

from __future__ import annotations

from calimon.calibration.crossfit import (
    DEFAULT_METHODS,
    CalibrationResult,
    calibrate,
    crossfit_predict,
    fit_on_split,
    make_folds,
)
from calimon.calibration.io import StoredMap, fit_set_hash, load_map, save_map
from calimon.calibration.maps import (
    CALIBRATORS,
    BetaCalibration,
    Calibrator,
    HistogramBinning,
    IsotonicCalibration,
    PlattScaling,
    TemperatureScaling,
    calibrator_from_dict,
    make_calibrator,
)

__all__ = [
    "CALIBRATORS",
    "DEFAULT_METHODS",
    "BetaCalibration",
    "CalibrationResult",
    "Calibrator",
    "HistogramBinning",
    "IsotonicCalibration",
    "PlattScaling",
    "StoredMap",
    "TemperatureScaling",
    "calibrate",
    "calibrator_from_dict",
    "crossfit_predict",
    "fit_on_split",
    "fit_set_hash",
    "load_map",
    "make_calibrator",
    "make_folds",
    "save_map",
]
