"""PNG figures of MR / FAR curves: bands, binary-protocol points and operating points.

matplotlib is imported inside the functions and drawn through the Agg canvas directly (no
pyplot, no global backend switch), so importing calimon stays light and works headless.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from calimon.curves import BinaryPoint, Curve, OperatingPoint
from calimon.errors import InputError

_MARKERS = ("D", "s", "^", "v", "P", "X", "*", "<", ">")


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=120)
    FigureCanvasAgg(fig)
    return fig


def _axes_style(ax: Any, labels: bool = True) -> None:
    ax.set_xlim(-0.01, 1.01)
    ax.set_ylim(-0.01, 1.01)
    ax.set_aspect("equal")
    ax.grid(True, alpha=0.3, linewidth=0.5)
    if labels:
        ax.set_xlabel("false-alarm rate (FAR)")
        ax.set_ylabel("miss rate (MR)")


def _draw_curve(ax: Any, name: str, curve: Curve, color: Any, linewidth: float = 1.6,
                alpha: float = 1.0) -> None:
    """Step curve: at FAR x the best MR is the MR at the last sweep point with FAR <= x."""
    if not curve.defined:
        ax.plot([], [], color=color, label=f"{name}: not drawn ({curve.undefined_reason})")
        return
    label = f"{name} (AUROC {curve.auroc:.3f}, n+={curve.n_pos}, n-={curve.n_neg})"
    ax.step(curve.far, curve.mr, where="post", color=color, linewidth=linewidth, alpha=alpha,
            label=label)
    band = curve.band
    if band is not None and band.n_used:
        ax.fill_between(band.far_grid, band.mr_lo, band.mr_hi, step="post", color=color,
                        alpha=0.18 * alpha, linewidth=0)


def _draw_binary(ax: Any, i: int, p: BinaryPoint, color: Any = None,
                 name: str | None = None) -> list[Any]:
    """Marker ``i``; ``color`` default: a colour of its own; ``name`` default: the point's.
    Returns the artists drawn on the axes (marker, bars, caps; none for an undefined point,
    which is a legend entry only)."""
    base = name or p.name
    # a point named binary/<prompt> says it is binary already: no second "(binary" suffix
    notes = ([] if base.startswith("binary/") else ["binary"]) + \
        ([f"{p.n_parse_failure} parse failures"] if p.n_parse_failure else [])
    if math.isnan(p.mr) or math.isnan(p.far):
        notes.append("undefined on parsed samples")
        ax.plot([], [], linestyle="none", marker=_MARKERS[i % len(_MARKERS)],
                color=color or "black", label=f"{base} ({', '.join(notes)})")
        return []
    label = f"{base} ({', '.join(notes)})" if notes else base
    # Bars span failures-counted-as-passed to failures-counted-as-flagged.
    xerr = [[p.far - p.far_lo], [p.far_hi - p.far]]
    yerr = [[p.mr - p.mr_lo], [p.mr_hi - p.mr]]
    bars = ax.errorbar([p.far], [p.mr], xerr=xerr, yerr=yerr,
                       marker=_MARKERS[i % len(_MARKERS)], markersize=7,
                       color=color or f"C{(i + 5) % 10}", markeredgecolor="black", capsize=3,
                       linestyle="none", label=label, zorder=5)
    line, caps, cols = bars.lines
    return [line, *caps, *cols]


def _draw_operating(ax: Any, p: OperatingPoint) -> Any:
    """The point's dot; its label is placed later, once the layout is final."""
    return ax.plot([p.far], [p.mr], marker="o", markersize=5, color="black", zorder=6)[0]


def _label_operating(fig: Any, ax: Any, points: Sequence[OperatingPoint],
                     obstacles: Sequence[Any]) -> None:
    """Label each operating point where the label overlaps no other label, marker, the
    legend or the title and stays inside the axes; a label with no room anywhere on the axes
    is listed in the figure's bottom-left corner instead. A point with an undefined rate has
    no dot and no label (as before)."""
    from calimon.plotting.labels import annotate_free, list_left_out

    items = []
    for p in points:
        if not (math.isfinite(p.far) and math.isfinite(p.mr)):
            continue
        thr = "inf" if math.isinf(p.threshold) else f"{p.threshold:.3g}"
        items.append((f"{p.name}\nt={thr}", (p.far, p.mr)))
    drawn = annotate_free(ax, items, obstacles=[*obstacles, ax.get_legend()])
    list_left_out(fig, [text.replace("\n", " ") for (text, _), a in
                        zip(items, drawn, strict=True) if a is None])


def plot_curves(path: str | Path, curves: Mapping[str, Curve],
                binary_points: Sequence[BinaryPoint] = (),
                operating_points: Sequence[OperatingPoint] = (), title: str = "") -> Path:
    """Write a PNG of MR (y) vs FAR (x): each curve with its band, binary points with their
    parse-failure ranges, operating points annotated. Returns the path written."""
    if not curves and not binary_points:
        raise InputError("expected at least one curve or binary point, got none", field="curves")
    fig = _figure(7.0, 6.2)
    ax = fig.add_subplot()
    for i, (name, curve) in enumerate(curves.items()):
        _draw_curve(ax, name, curve, f"C{i % 10}")
    marks = [a for i, p in enumerate(binary_points) for a in _draw_binary(ax, i, p)]
    marks += [_draw_operating(ax, p) for p in operating_points]
    _axes_style(ax)
    ax.set_title(title or "miss rate vs false-alarm rate")
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    _label_operating(fig, ax, operating_points, marks)
    return _save(fig, path, layout=False)


def plot_comparison(path: str | Path,
                    runs: Sequence[tuple[str, Curve | None, Sequence[BinaryPoint], str | None]],
                    title: str = "") -> Path:
    """Several runs on one MR (y) vs FAR (x) figure: each run ``(name, curve, binary points,
    why not drawn)`` in a colour of its own, its curve with its band and its binary points
    in the same colour (one marker per binary prompt). A run whose curve is None is not
    drawn: its legend line gives the reason. Returns the path written."""
    if not runs:
        raise InputError("expected at least one run, got none", field="runs")
    markers: dict[str, int] = {}
    fig = _figure(8.0, 6.6 + 0.16 * sum(1 + len(r[2]) for r in runs))
    ax = fig.add_subplot()
    for i, (name, curve, points, reason) in enumerate(runs):
        color = f"C{i % 10}"
        if curve is None:
            ax.plot([], [], color=color, linestyle=":", label=f"{name}: not drawn ({reason})")
            continue
        _draw_curve(ax, name, curve, color, linewidth=1.4)
        for p in points:
            prompt = p.name.removeprefix("binary/")
            _draw_binary(ax, markers.setdefault(prompt, len(markers)), p, color=color,
                         name=f"{name}: {prompt}")
    _axes_style(ax)
    ax.set_title(title or "miss rate vs false-alarm rate")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=1)
    return _save(fig, path)


def plot_curve_grid(path: str | Path, curves_by_group: Mapping[str, Curve], ncols: int = 3,
                    title: str = "") -> Path:
    """Small multiples, one panel per group (e.g. the output of ``curves_by``). If an ``"all"``
    curve is present it is drawn faintly in every other panel as a reference."""
    if not curves_by_group:
        raise InputError("expected at least one curve, got none", field="curves_by_group")
    if not (isinstance(ncols, int) and ncols >= 1):
        raise InputError(f"expected an integer >= 1, got {ncols!r}", field="ncols")
    names = list(curves_by_group)
    ncols = min(ncols, len(names))
    nrows = math.ceil(len(names) / ncols)
    fig = _figure(3.2 * ncols, 3.3 * nrows + (0.4 if title else 0))
    ref = curves_by_group.get("all")
    for k, name in enumerate(names):
        ax = fig.add_subplot(nrows, ncols, k + 1)
        curve = curves_by_group[name]
        if ref is not None and name != "all" and ref.defined:
            ax.step(ref.far, ref.mr, where="post", color="0.6", linewidth=1.0)
        _draw_curve(ax, name, curve, f"C{k % 10}")
        _axes_style(ax, labels=False)
        if curve.defined:
            sub = f"AUROC {curve.auroc:.3f}, n={curve.n_pos}+/{curve.n_neg}-"
        else:
            sub = "no curve"
            ax.text(0.5, 0.5, str(curve.undefined_reason).replace(": ", "\n"), fontsize=7,
                    ha="center", va="center", transform=ax.transAxes,
                    bbox={"facecolor": "white", "edgecolor": "0.7"})
        ax.set_title(f"{name}\n{sub}", fontsize=8)
        ax.tick_params(labelsize=7)
        if k % ncols == 0:
            ax.set_ylabel("MR", fontsize=8)
        if k // ncols == nrows - 1:
            ax.set_xlabel("FAR", fontsize=8)
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def _save(fig: Any, path: str | Path, layout: bool = True) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if layout:
        fig.tight_layout()
    fig.savefig(path, format="png")
    return path
