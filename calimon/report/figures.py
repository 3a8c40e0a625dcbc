"""The report's figures as numbers (computed once) and as PNG files next to the report.

The HTML draws them as inline SVG (``calimon.report.svg``); the PNGs carry the same content:
``report-curve.png`` (all samples: the calibrated curve over the raw one, band, binary and
operating points), ``report-groups.png`` (one panel per distinct group, all samples first,
with the binary-protocol points of that group when the run store holds the binary readings),
``report-reliability.png`` (raw vs the run's calibrated score) and ``report-scores.png``
(score histograms with thresholds and the review band).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from calimon.curve_result import BinaryPoint, CurveResult
from calimon.numerics.curves import Curve
from calimon.report.data import RunData

PNG_NAMES = ("report-curve.png", "report-groups.png", "report-reliability.png", "report-scores.png")


@dataclass(frozen=True, eq=False)
class Figures:
    """Arrays behind the figures: labelled rows with both scores."""

    curves: dict[str, Curve]
    raw_curve: Curve | None
    p_raw: np.ndarray
    p_cal: np.ndarray
    y: np.ndarray
    binary_by_group: dict[str, list[dict]]

    @classmethod
    def from_run(cls, data: RunData) -> Figures:
        """The figures' arrays from a run's summary and its labelled rows with both scores."""
        curves = {k: Curve.from_data(v) for k, v in data.result.curves.items()}
        raw = data.result.raw_curve
        kept = [r for r in data.rows if r.label is not None and r.p_raw is not None
                and r.p_cal is not None]
        return cls(curves=curves, raw_curve=Curve.from_data(raw) if raw else None,
                   p_raw=np.array([r.p_raw for r in kept], dtype=float),
                   p_cal=np.clip(np.array([r.p_cal for r in kept], dtype=float), 0.0, 1.0),
                   y=np.array([bool(r.label) for r in kept], dtype=bool),
                   binary_by_group=binary_by_group(data))


def binary_by_group(data: RunData) -> dict[str, list[dict]]:
    """``{"category=safety": [binary point dict per prompt], ...}`` from the stored binary
    readings (a parse failure stays a parse failure); empty without readings."""
    from calimon.numerics.curves import binary_point

    out: dict[str, list[dict]] = {}
    for name, table in data.binary.items():
        for key in ("category", "task"):
            for value in sorted({getattr(r, key) for r in data.rows}):
                rows = [r for r in data.rows if getattr(r, key) == value
                        and r.label is not None and r.id in table]
                if not rows:
                    continue
                decisions = [table[r.id].decision if table[r.id].scored else None
                             for r in rows]
                point = binary_point(decisions, [bool(r.label) for r in rows],
                                     name=f"binary/{name}")
                out.setdefault(f"{key}={value}", []).append(point.to_dict())
    return out


def _bp(d: dict) -> BinaryPoint:
    """A binary point of ``binary_by_group`` (a dict, as the SVG figures take it) as a point."""
    return BinaryPoint(**{k: (math.nan if v is None else v) for k, v in d.items()
                          if k in BinaryPoint.__dataclass_fields__})


def _title(result: CurveResult) -> str:
    p = result.provenance
    return f"{p.model} · {p.prompt}/{p.readout} · {p.benchmark}"


def write_pngs(data: RunData, figs: Figures, out_dir: Path, *, markers: list[tuple[str, float]],
               band: tuple[float, float] | None) -> list[Path]:
    """Write every figure of the report as PNG into ``out_dir``; return the paths."""
    from calimon.plotting.curve import plot_curves
    from calimon.plotting.reliability import plot_reliability

    out_dir.mkdir(parents=True, exist_ok=True)
    r, title = data.result, _title(data.result)
    written = []
    under = {}
    if figs.raw_curve is not None and figs.raw_curve.defined:
        under["all (raw score)"] = figs.raw_curve
    written.append(plot_curves(out_dir / "report-curve.png", {"all (calibrated)":
                                                              figs.curves["all"]},
                               binary_points=list(r.binary_points),
                               operating_points=list(r.operating_points),
                               title=title, under=under))
    written.append(plot_groups(out_dir / "report-groups.png", figs, title=title))
    if figs.y.size:
        written.append(plot_reliability(out_dir / "report-reliability.png", figs.p_raw,
                                        calibrated_series(r, figs), figs.y, title=title))
        written.append(plot_scores(out_dir / "report-scores.png", figs.p_cal, figs.y,
                                   markers=markers, band=band, title=title))
    return written


def calibrated_series(result: CurveResult | dict, figs: Figures) -> dict[str, np.ndarray]:
    """The calibrated scores drawn beside the raw ones in the reliability diagram, named by
    the run's map (``result``: the run's result, or curve.json's object); none for a run
    without a map (its p_cal is the raw score again)."""
    method = (result.get("calibration_method") if isinstance(result, dict)
              else result.calibration_method)
    return {str(method): figs.p_cal} if method else {}


def plot_groups(path: Path, figs: Figures, *, title: str = "", ncols: int = 3) -> Path:
    """PNG twin of the report's per-group panels: one panel per distinct group (all samples
    first), the overall curve in grey, the group's binary points with their exact
    intervals."""
    from calimon.plotting.curve import plot_curve_grid

    return plot_curve_grid(path, figs.curves, ncols=ncols, title=title, binary_by_group={
        k: [_bp(b) for b in v] for k, v in figs.binary_by_group.items()})


def plot_scores(path: Path, scores: np.ndarray, labels: np.ndarray, *,
                markers: list[tuple[str, float]], band: tuple[float, float] | None,
                title: str = "", n_bins: int = 20) -> Path:
    """PNG twin of ``svg.histogram_svg``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 4.6), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    if band is not None and band[1] > band[0]:
        ax.axvspan(max(band[0], 0.0), min(band[1], 1.0), color="#ffd54f", alpha=0.3,
                   label="human review band")
    ax.hist([scores[~labels], scores[labels]], bins=edges, color=["#1f77b4", "#d62728"],
            label=[f"benign (n={int((~labels).sum())})",
                   f"misbehaving (n={int(labels.sum())})"])
    shown = [(name, t) for name, t in markers if t is not None and 0.0 <= t <= 1.0]
    for _, t in shown:
        ax.axvline(t, color="black", linestyle="--", linewidth=0.8)
    ax.set_xlim(0, 1)
    ax.set_xlabel("calibrated score")
    ax.set_ylabel("samples")
    ax.set_title(title or "score distribution", fontsize=9)
    # under the axes: inside, it would cover the bars
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=3)
    fig.tight_layout()
    _label_thresholds(fig, ax, shown)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


def _label_thresholds(fig: Any, ax: Any, shown: list[tuple[str, float]]) -> None:
    """Each threshold's name, vertical, at the top of its line (right of it, else left of
    it), where it overlaps no other name, the legend or the title and stays inside the axes;
    a name with no room on the axes is listed in the figure's bottom-left corner."""
    from calimon.plotting.labels import annotate_free, list_left_out

    top = ax.get_ylim()[1]
    drawn = annotate_free(ax, [(name, (t, top)) for name, t in shown], rotation=90,
                          obstacles=[ax.get_legend()], gap_points=1.5,
                          around=((1, -1), (-1, -1)))
    list_left_out(fig, [name for (name, _), a in zip(shown, drawn, strict=True) if a is None])


__all__ = ["PNG_NAMES", "Figures", "binary_by_group", "plot_groups", "plot_scores",
           "write_pngs"]
