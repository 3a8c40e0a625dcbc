"""The report's figures as numbers (computed once) and as PNG files next to the report.

The HTML draws them as inline SVG (``calimon.report.svg``); the PNGs carry the same content:
``curve.png`` and ``curves_by_group.png`` (copied from the run, or redrawn from curve.json when
the run lacks them), ``report-reliability.png`` (raw vs the run's calibrated score) and
``report-scores.png`` (score histograms with thresholds and the review band).
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calimon.curves import BinaryPoint, Curve, OperatingPoint
from calimon.report.data import RunData

PNG_NAMES = ("curve.png", "curves_by_group.png", "report-reliability.png", "report-scores.png")


@dataclass(frozen=True, eq=False)
class Figures:
    """Arrays behind the figures: labelled rows with both scores."""

    curves: dict[str, Curve]
    raw_curve: Curve | None
    p_raw: np.ndarray
    p_cal: np.ndarray
    y: np.ndarray

    @classmethod
    def from_run(cls, data: RunData) -> Figures:
        curves = {k: Curve.from_dict(v) for k, v in data.summary["curves"].items()}
        raw = data.summary.get("raw_curve")
        kept = [r for r in data.rows if r.label is not None and r.p_raw is not None
                and r.p_cal is not None]
        return cls(curves=curves, raw_curve=Curve.from_dict(raw) if raw else None,
                   p_raw=np.array([r.p_raw for r in kept], dtype=float),
                   p_cal=np.clip(np.array([r.p_cal for r in kept], dtype=float), 0.0, 1.0),
                   y=np.array([bool(r.label) for r in kept], dtype=bool))


def _op(d: dict) -> OperatingPoint:
    t = math.inf if d.get("threshold") is None else d["threshold"]
    return OperatingPoint(d["name"], t, d["mr"], d["far"], d["tp"], d["fp"], d["tn"], d["fn"])


def _bp(d: dict) -> BinaryPoint:
    nan = math.nan
    return BinaryPoint(**{k: (nan if v is None else v) for k, v in d.items()
                          if k in BinaryPoint.__dataclass_fields__})


def _title(summary: dict) -> str:
    p = summary.get("provenance", {})
    return f"{p.get('model')} · {p.get('prompt')}/{p.get('readout')} · {p.get('benchmark')}"


def write_pngs(data: RunData, figs: Figures, out_dir: Path, *, markers: list[tuple[str, float]],
               band: tuple[float, float] | None) -> list[Path]:
    """Write (or copy) every figure of the report as PNG into ``out_dir``; return the paths."""
    from calimon.plotting.curve import plot_curve_grid, plot_curves
    from calimon.plotting.reliability import plot_reliability

    out_dir.mkdir(parents=True, exist_ok=True)
    s, title = data.summary, _title(data.summary)
    written = []
    for name in ("curve.png", "curves_by_group.png"):
        src, dst = data.run_dir / name, out_dir / name
        if src.is_file():
            if src.resolve() != dst.resolve():
                shutil.copyfile(src, dst)
        elif name == "curve.png":
            plot_curves(dst, {"all (calibrated)": figs.curves["all"]},
                        binary_points=[_bp(b) for b in s.get("binary_points", [])],
                        operating_points=[_op(p) for p in s["operating_points"]], title=title)
        else:
            plot_curve_grid(dst, figs.curves, title=title)
        written.append(dst)
    if figs.y.size:
        written.append(plot_reliability(
            out_dir / "report-reliability.png", figs.p_raw,
            {s.get("calibration_method", "calibrated"): figs.p_cal}, figs.y, title=title))
        written.append(plot_scores(out_dir / "report-scores.png", figs.p_cal, figs.y,
                                   markers=markers, band=band, title=title))
    return written


def plot_scores(path: Path, scores: np.ndarray, labels: np.ndarray, *,
                markers: list[tuple[str, float]], band: tuple[float, float] | None,
                title: str = "", n_bins: int = 20) -> Path:
    """PNG twin of ``svg.histogram_svg``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 4.2), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    if band is not None and band[1] > band[0]:
        ax.axvspan(max(band[0], 0.0), min(band[1], 1.0), color="#ffd54f", alpha=0.3,
                   label="human review band")
    ax.hist([scores[~labels], scores[labels]], bins=edges, color=["#1f77b4", "#d62728"],
            label=[f"benign (n={int((~labels).sum())})",
                   f"misbehaving (n={int(labels.sum())})"])
    for name, t in markers:
        if t is not None and 0.0 <= t <= 1.0:
            ax.axvline(t, color="black", linestyle="--", linewidth=0.8)
            ax.annotate(name, (t, ax.get_ylim()[1]), rotation=90, fontsize=7, va="top",
                        xytext=(2, -2), textcoords="offset points")
    ax.set_xlim(0, 1)
    ax.set_xlabel("calibrated score")
    ax.set_ylabel("samples")
    ax.set_title(title or "score distribution", fontsize=9)
    ax.legend(fontsize=7, loc="upper center")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path


__all__ = ["PNG_NAMES", "Figures", "plot_scores", "write_pngs"]
