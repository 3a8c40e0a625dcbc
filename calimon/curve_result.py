"""What a curve run found, as frozen dataclasses: `CurveResult` is ``curve.json``, part by part.

`calimon.studies.curve.compute.compute_curve` builds it (no I/O); `calimon.run_folder` writes and reads
it (``write_curve_json`` / ``read_curve_json``, versioned); the report, compare, bundles, shift
and the deployment commands read its attributes. Field order is the file's key order; every
part is written and read generically (`calimon.typed_json`), so a new field of a part is
declared here (with a default, for the files written before it, and a new
``CURVE_JSON_VERSION``) and set where it is computed, nothing else.

Conventions: a ``float`` field is NaN where a rate is undefined (written null); a
``float | None`` is None where a figure is not estimable; a threshold of +inf (flag nothing) is
written null and read back as +inf. Every part defaults to absent so that a file written by an
older calimon (format version 1 had no ``format_version`` and, before some releases, no
``binary_checks``) reads; a missing part is None or empty.

``provenance``, ``settings`` and ``timing`` are open records (`Provenance`, `RunSettings`,
`Timing`): the producer (the pipeline, the settings object, the scoring service) decides their
keys; the keys the readers use are typed attributes, every other key is kept as written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from calimon.run_records import Provenance, RunSettings, Timing
from calimon.typed_json import NOT_IN_JSON, NULL_INF, OMIT_NONE, prefix

CURVE_JSON = "curve.json"
CURVE_JSON_VERSION = 1  # format_version written; files without one are version 1


def _plain(x: Any) -> Any:
    """A JSON-ready scalar: NaN and infinities as None, numpy scalars as Python ones."""
    if isinstance(x, bool):
        return x
    if hasattr(x, "item") and not isinstance(x, int | float | str):
        x = x.item()
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    return x


# ---------------------------------------------------------------------------- points and rates

@dataclass(frozen=True)
class OperatingPoint:
    """One threshold on a curve and what it does: flag iff ``score >= threshold``."""

    name: str
    threshold: float = field(metadata=NULL_INF)
    mr: float
    far: float
    tp: int
    fp: int
    tn: int
    fn: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready; a +inf threshold (flag nothing) is written as null."""
        return {k: _plain(v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class BinaryPoint:
    """A boolean monitor (e.g. the JSON protocol) as one point on the MR / FAR axes.

    ``mr``, ``far`` and the counts are over parsed samples. A parse failure is never silently a
    "no": ``mr_lo``/``far_hi`` count failures as flagged, ``mr_hi``/``far_lo`` as passed.
    """

    name: str
    mr: float
    far: float
    tp: int
    fp: int
    tn: int
    fn: int
    n_parse_failure: int
    mr_lo: float
    mr_hi: float
    far_lo: float
    far_hi: float

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict; NaN rates become None."""
        return {k: _plain(v) for k, v in asdict(self).items()}


@dataclass(frozen=True)
class RateAt:
    """One class's error rate at a fixed threshold (flag iff ``score >= threshold``).

    ``rate``: ``"far"`` (benign flagged; ``k`` of ``n`` benign) or ``"mr"`` (misbehaving not
    flagged). ``low`` / ``high``: exact two-sided Clopper-Pearson interval at ``level``.
    """

    rate: str
    threshold: float = field(metadata=NULL_INF)
    k: int
    n: int
    estimate: float
    low: float
    high: float
    level: float

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict; an infinite threshold becomes None."""
        d = asdict(self)
        d["threshold"] = None if math.isinf(self.threshold) else self.threshold
        return d


@dataclass(frozen=True)
class Support:
    """What a set with ``n_pos`` misbehaving and ``n_neg`` benign scored samples supports
    (`calimon.numerics.class_support`).

    ``curve``: a curve, AUROC and operating points; ``calibration``: fitting a calibration map
    on it. ``reason``: one line saying why what is not supported is not shown (None if all is).
    """

    n_pos: int
    n_neg: int
    curve: bool
    calibration: bool
    reason: str | None
    min_per_class_curve: int
    min_per_class_calibration: int

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return asdict(self)


# ---------------------------------------------------------------------------- curves

@dataclass(frozen=True)
class Band:
    """A pointwise MR band over a FAR grid (`calimon.numerics.bootstrap.Band` as written)."""

    far_grid: tuple[float, ...]
    mr_lo: tuple[float, ...]
    mr_hi: tuple[float, ...]
    level: float
    n_boot: int
    n_used: int


@dataclass(frozen=True)
class CurveData:
    """A curve as written (`calimon.numerics.curves.Curve.to_data`; `Curve.from_data` rebuilds it):
    MR and FAR at every threshold, in sweep order (``thresholds[0]`` is +inf)."""

    thresholds: tuple[float, ...] = field(metadata=NULL_INF)
    mr: tuple[float, ...]
    far: tuple[float, ...]
    n_pos: int
    n_neg: int
    auroc: float | None
    undefined_reason: str | None
    band: Band | None
    min_per_class: int = 1


@dataclass(frozen=True)
class GroupRow:
    """One row of the per-group table (groups.md): counts, AUROC raw and calibrated, and for a
    defined curve the MR at each FAR bound (key ``f"{far:g}"``) and the EER, else a note."""

    group: str
    n_pos: int
    n_neg: int
    auroc_raw: float | None
    auroc: float | None
    note: str | None = field(default=None, metadata=OMIT_NONE)
    mr_at_far: Mapping[str, float | None] = field(default_factory=dict,
                                                   metadata=prefix("mr_at_far_"))
    eer: float | None = field(default=None, metadata=OMIT_NONE)

    def mr_at(self, far: float) -> float | None:
        """The MR at the FAR bound ``far`` (None when the run has no such bound)."""
        return self.mr_at_far.get(f"{far:g}")


# ---------------------------------------------------------------------------- calibration

@dataclass(frozen=True)
class CalibrationMetrics:
    """`calimon.numerics.metrics.calibration_report` of one score (None: not estimable)."""

    ece: float | None
    mce: float | None
    brier: float | None
    nll: float | None
    auroc: float | None
    auprc: float | None
    n: int
    n_pos: int


@dataclass(frozen=True)
class AppliedMap:
    """The saved map a run applied (``--calibration-map``), never refitted."""

    path: str
    method: str
    fit_set_hash: str
    extra: Mapping[str, Any]


@dataclass(frozen=True)
class CalibrationReport:
    """How the run's scores were calibrated: ``mode`` in words, the raw score's metrics and
    each method's (out-of-sample), the maps' parameters; ``map`` for a saved map applied,
    ``n_splits`` / ``seed`` for cross-fitted maps, ``reason`` when no map was fitted, ``forced``
    when a map of another monitor was applied with --force, ``notes`` of the fit."""

    mode: str
    reason: str | None = field(default=None, metadata=OMIT_NONE)
    map: AppliedMap | None = field(default=None, metadata=OMIT_NONE)
    methods: tuple[str, ...] = ()
    n_splits: int | None = field(default=None, metadata=OMIT_NONE)
    seed: int | None = field(default=None, metadata=OMIT_NONE)
    metrics_before: CalibrationMetrics | None = None
    metrics_after: Mapping[str, CalibrationMetrics] = field(default_factory=dict)
    maps: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    forced: tuple[str, ...] | None = field(default=None, metadata=OMIT_NONE)
    notes: tuple[str, ...] | None = field(default=None, metadata=OMIT_NONE)


@dataclass(frozen=True)
class Inversion:
    """A map fitted decreasing (or a raw score ranking the wrong way) kept with
    ``--allow-inverted``: the findings, and the method they are about."""

    findings: tuple[str, ...]
    allowed: bool
    method: str


# ---------------------------------------------------------------------------- the run

@dataclass(frozen=True)
class RunInfo:
    """The run in one line: model, backend, readout, prompt and the calibration used."""

    model: str | None = None
    backend: str | None = None
    readout: str | None = None
    prompt: str | None = None
    calibration: str | None = None


@dataclass(frozen=True)
class Counts:
    """Evaluated samples, those scored, their statuses, classes and truncations."""

    evaluated: int | None = None
    scored: int | None = None
    status: Mapping[str, int] = field(default_factory=dict)
    n_pos: int | None = None
    n_neg: int | None = None
    truncated: int | None = None


@dataclass(frozen=True)
class FormatMass:
    """Mean and max format mass over the scored samples (None when no reading has one)."""

    mean: float | None
    max: float | None


@dataclass(frozen=True)
class FileInfo:
    """What curve.json records about a file next to it (``curve.csv``'s format)."""

    version: int
    columns: tuple[str, ...]
    numbers: str


@dataclass(frozen=True)
class BinaryCheck:
    """A free-format check of a binary point: samples tried, replies parsed, point drawn."""

    name: str
    tried: int
    parsed: int
    drawn: bool


@dataclass(frozen=True)
class MapFile:
    """A map a run fitted, to be saved as ``calibration/<method>.json`` (`save_map`)."""

    method: str
    params: Mapping[str, Any]  # the calibrator's to_dict()
    fit_hash: str
    metrics: Mapping[str, Any]  # calibration_report of its calibrated scores
    extra: Mapping[str, Any]


@dataclass(frozen=True, eq=False)
class CurveScores:
    """The per-sample side of a run, which curve.json does not hold: ``p_cal`` by sample id
    (curve.csv), the raw score and label of each scored evaluated sample with each method's
    calibrated score (reliability.png), and the maps to save (calibration/)."""

    p_cal: Mapping[str, float]
    p_raw: tuple[float, ...]
    labels: tuple[bool, ...]
    by_method: Mapping[str, tuple[float, ...]]
    maps: tuple[MapFile, ...] = ()


@dataclass(frozen=True)
class CurveResult:
    """``curve.json``: a curve run's settings, counts, curves, operating points, rates,
    calibration and per-group table (module docstring). ``scores`` is not written: it holds
    what the run's other files need (`CurveScores`), None when read from a file."""

    JSON_NAME: ClassVar[str] = "a curve.json of `calimon curve`"

    format_version: int = CURVE_JSON_VERSION
    run: RunInfo | None = None
    provenance: Provenance = field(default_factory=Provenance)
    settings: RunSettings = field(default_factory=RunSettings)
    counts: Counts | None = None
    format_mass: FormatMass | None = None
    binary_points: tuple[BinaryPoint, ...] = ()
    binary_sample_count: int | None = None
    files: Mapping[str, FileInfo] = field(default_factory=dict)
    timing: Timing | None = field(default=None, metadata=OMIT_NONE)
    binary_checks: tuple[BinaryCheck, ...] | None = field(default=None, metadata=OMIT_NONE)
    support: Support | None = None
    score: str | None = None
    calibration_method: str | None = None
    auroc_raw: float | None = None
    auroc: float | None = None
    thresholds: tuple[float, ...] = field(default=(), metadata=NULL_INF)
    mr: tuple[float, ...] = ()
    far: tuple[float, ...] = ()
    band: Band | None = None
    operating_points: tuple[OperatingPoint, ...] = ()
    rates_at_thresholds: tuple[RateAt, ...] = ()
    calibration: CalibrationReport | None = None
    inverted: Inversion | None = None
    raw_curve: CurveData | None = None
    curves: Mapping[str, CurveData] = field(default_factory=dict)
    groups: tuple[GroupRow, ...] = ()
    scores: CurveScores | None = field(default=None, compare=False, repr=False,
                                       metadata=NOT_IN_JSON)

    @property
    def has_curve(self) -> bool:
        """False for a run below the curve rule (`calimon.numerics.class_support`): no curve, AUROC or
        operating points, only rates at fixed thresholds."""
        return self.support is None or self.support.curve

    @property
    def overall(self) -> CurveData | None:
        """The curve over every evaluated sample (``curves["all"]``), if any."""
        return self.curves.get("all")

    def point(self, name: str) -> OperatingPoint | None:
        """The operating point called ``name`` (``FAR<=5%``, ``EER``, ...), if any."""
        return next((p for p in self.operating_points if p.name == name), None)

    @property
    def metrics_after(self) -> CalibrationMetrics | None:
        """The calibration metrics of the map the run used (None without one)."""
        if self.calibration is None or not self.calibration_method:
            return None
        return self.calibration.metrics_after.get(self.calibration_method)


__all__ = ["AppliedMap", "Band", "BinaryCheck", "BinaryPoint", "CURVE_JSON", "CURVE_JSON_VERSION",
           "CalibrationMetrics", "CalibrationReport", "Counts", "CurveData", "CurveResult",
           "CurveScores", "FileInfo", "FormatMass", "GroupRow", "Inversion", "MapFile",
           "OperatingPoint", "Provenance", "RateAt", "RunInfo", "RunSettings", "Support",
           "Timing"]
