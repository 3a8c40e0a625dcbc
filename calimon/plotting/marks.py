"""The pieces every PNG MR/FAR figure draws: axes, chance line, curve with its band, binary
points with their exact intervals, operating points.

matplotlib is not imported here at module level: the artists go onto the caller's axes.
"""

from __future__ import annotations

import math
from typing import Any

from calimon.numerics.curves import BinaryPoint, Curve, OperatingPoint
from calimon.plotting.intervals import binary_interval
from calimon.plotting.style import (
    AXIS_PAD,
    CHANCE_LABEL,
    MARKERS,
    band_label,
    run_color,
    under_label,
)

__all__ = ["BINARY_NOTE", "axes_style", "binary_color", "draw_binary", "draw_chance",
           "draw_curve", "draw_under", "figure", "note_binary"]

BINARY_NOTE = "binary bars: exact 95% interval (Clopper-Pearson), parse failures either way"
NO_LEGEND = "_nolegend_"


def figure(width: float, height: float, layout: str | None = None) -> Any:
    """A matplotlib Figure on the Agg canvas (no pyplot, no global backend switch)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=120, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def axes_style(ax: Any, labels: bool = True) -> None:
    """Square MR/FAR axes padded so that a marker on a corner is drawn whole."""
    ax.set_xlim(-AXIS_PAD, 1 + AXIS_PAD)
    ax.set_ylim(-AXIS_PAD, 1 + AXIS_PAD)
    ax.set_aspect("equal")
    ax.grid(True, alpha=0.3, linewidth=0.5)
    if labels:
        ax.set_xlabel("false-alarm rate (FAR)")
        ax.set_ylabel("miss rate (MR)")


def draw_chance(ax: Any, label: bool = True) -> Any:
    """The diagonal a monitor that flags at random sits on (MR = 1 - FAR)."""
    return ax.plot([0, 1], [1, 0], linestyle=(0, (2, 3)), color="0.45", linewidth=0.9,
                   zorder=1, label=CHANCE_LABEL if label else NO_LEGEND)[0]


def draw_curve(ax: Any, name: str, curve: Curve, color: Any, linewidth: float = 1.6,
               band_name: str | None = "{band}", zorder: float = 3) -> None:
    """Step curve: at FAR x the best MR is the MR at the last sweep point with FAR <= x.
    ``band_name``: the band's legend entry, ``{band}`` standing for its level and resamples
    (None: no entry)."""
    if not curve.defined:
        ax.plot([], [], color=color, label=f"{name}: not drawn ({curve.undefined_reason})")
        return
    label = f"{name} (AUROC {curve.auroc:.3f}, n+={curve.n_pos}, n-={curve.n_neg})"
    ax.step(curve.far, curve.mr, where="post", color=color, linewidth=linewidth,
            label=label, zorder=zorder)
    band = curve.band
    if band is not None and band.n_used:
        ax.fill_between(band.far_grid, band.mr_lo, band.mr_hi, step="post", color=color,
                        alpha=0.18, linewidth=0, zorder=zorder - 1,
                        label=NO_LEGEND if band_name is None else
                        band_name.format(band=band_label(band)))


def draw_under(ax: Any, name: str, curve: Curve, color: Any) -> None:
    """A second curve under the main one (e.g. the raw score under the calibrated one): wide
    and pale, so that where the two coincide the main line shows on top of it."""
    if curve.defined:
        ax.step(curve.far, curve.mr, where="post", color=color, linewidth=4.5, alpha=0.4,
                zorder=1.5, solid_capstyle="butt",
                label=under_label(name, curve.auroc))


def binary_color(i: int) -> str:
    """Colour of the ``i``-th binary prompt on a one-run figure."""
    return run_color(i + 5)


def draw_binary(ax: Any, i: int, p: BinaryPoint, color: Any = None, name: str | None = None,
                markersize: float = 7, legend: bool = True) -> list[Any]:
    """Marker ``i`` with its exact-interval bars; ``color`` default: a colour of its own;
    ``name`` default: the point's. Returns the artists drawn on the axes (marker, bars,
    caps; none for an undefined point, which is a legend entry only)."""
    base = name or p.name
    # a point named binary/<prompt> says it is binary already: no second "(binary" suffix
    notes = ([] if base.startswith("binary/") else ["binary"]) + \
        ([f"{p.n_parse_failure} parse failures"] if p.n_parse_failure else [])
    marker, color = MARKERS[i % len(MARKERS)], color or binary_color(i)
    if math.isnan(p.mr) or math.isnan(p.far):
        notes.append("undefined on parsed samples")
        ax.plot([], [], linestyle="none", marker=marker, color=color,
                label=f"{base} ({', '.join(notes)})" if legend else NO_LEGEND)
        return []
    label = f"{base} ({', '.join(notes)})" if notes else base
    ci = binary_interval(p)
    xerr = [[max(0.0, p.far - ci.far_lo)], [max(0.0, ci.far_hi - p.far)]]
    yerr = [[max(0.0, p.mr - ci.mr_lo)], [max(0.0, ci.mr_hi - p.mr)]]
    bars = ax.errorbar([p.far], [p.mr], xerr=xerr, yerr=yerr, marker=marker,
                       markersize=markersize, color=color, markeredgecolor="black",
                       capsize=3, elinewidth=1.1, linestyle="none", zorder=5,
                       label=label if legend else NO_LEGEND)
    line, caps, cols = bars.lines
    return [line, *caps, *cols]


def note_binary(ax: Any, points: Any) -> None:
    """One legend row saying what the binary points' bars are, if any point has bars."""
    if any(not (math.isnan(p.mr) or math.isnan(p.far)) for p in points):
        ax.plot([], [], linestyle="none", label=BINARY_NOTE)


def draw_operating(ax: Any, p: OperatingPoint) -> Any:
    """The point's dot; its label is placed later, once the layout is final."""
    return ax.plot([p.far], [p.mr], marker="o", markersize=5, color="black", zorder=6)[0]
