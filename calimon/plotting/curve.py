"""PNG figures of MR / FAR curves: bands, binary-protocol points and operating points.

matplotlib is imported inside the functions and drawn through the Agg canvas directly (no
pyplot, no global backend switch), so importing calimon stays light and works headless.
Every MR/FAR figure carries the chance diagonal, names its shaded band in the legend and
draws binary points with exact 95% intervals (``calimon.plotting.intervals``).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from calimon.errors import InputError
from calimon.numerics.curves import BinaryPoint, Curve, OperatingPoint
from calimon.plotting.marks import (
    axes_style,
    draw_binary,
    draw_chance,
    draw_curve,
    draw_operating,
    draw_under,
    figure,
    note_binary,
)
from calimon.plotting.style import distinct_groups, run_color

__all__ = ["plot_comparison", "plot_curve_grid", "plot_curves"]


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
                operating_points: Sequence[OperatingPoint] = (), title: str = "", *,
                under: Mapping[str, Curve] | None = None) -> Path:
    """Write a PNG of MR (y) vs FAR (x): the chance diagonal, each curve with its band,
    binary points with their exact intervals, operating points annotated. ``under``: curves
    drawn wide and pale beneath the others (e.g. the raw score under the calibrated one), so
    that neither hides the other. Returns the path written."""
    if not curves and not binary_points:
        raise InputError("expected at least one curve or binary point, got none", field="curves")
    rows = 2 + 2 * len(curves) + len(under or {}) + len(binary_points)
    fig = figure(7.0, 6.2 + 0.16 * rows)
    ax = fig.add_subplot()
    draw_chance(ax)
    for i, (name, curve) in enumerate(curves.items()):
        draw_curve(ax, name, curve, run_color(i),
                   band_name="{band}" if len(curves) == 1 else f"{name}: {{band}}")
    for j, (name, curve) in enumerate((under or {}).items()):
        draw_under(ax, name, curve, run_color(len(curves) + j))
    marks = [a for i, p in enumerate(binary_points) for a in draw_binary(ax, i, p)]
    note_binary(ax, binary_points)
    marks += [draw_operating(ax, p) for p in operating_points]
    axes_style(ax)
    ax.set_title(title or "miss rate vs false-alarm rate")
    # under the axes: inside, it would hide a curve or a band of a weak monitor
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    fig.tight_layout()
    _label_operating(fig, ax, operating_points, marks)
    return _save(fig, path, layout=False)


def plot_comparison(path: str | Path,
                    runs: Sequence[tuple[str, Curve | None, Sequence[BinaryPoint], str | None]],
                    title: str = "") -> Path:
    """Several runs on one MR (y) vs FAR (x) figure: each run ``(name, curve, binary points,
    why not drawn)`` in its colour (``run_color`` of its place in ``runs``, as on the HTML
    page), its curve with its band and its binary points with their exact intervals in the
    same colour (one marker per binary prompt). A run whose curve is None is not drawn: its
    legend line gives the reason. Returns the path written."""
    if not runs:
        raise InputError("expected at least one run, got none", field="runs")
    markers: dict[str, int] = {}
    fig = figure(8.0, 6.9 + 0.16 * sum(1 + len(r[2]) for r in runs))
    ax = fig.add_subplot()
    draw_chance(ax)
    band_named = False
    for i, (name, curve, points, reason) in enumerate(runs):
        color = run_color(i)
        if curve is None:
            ax.plot([], [], color=color, linestyle=":", label=f"{name}: not drawn ({reason})")
            continue
        named = not band_named and curve.band is not None and bool(curve.band.n_used)
        draw_curve(ax, name, curve, color, linewidth=1.4,
                   band_name="shaded: each run's {band}" if named else None)
        band_named = band_named or named
        for p in points:
            prompt = p.name.removeprefix("binary/")
            draw_binary(ax, markers.setdefault(prompt, len(markers)), p, color=color,
                        name=f"{name}: {prompt}")
    note_binary(ax, [p for _, curve, points, _ in runs if curve is not None for p in points])
    axes_style(ax)
    ax.set_title(title or "miss rate vs false-alarm rate")
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=1)
    return _save(fig, path)


def _panel_title(name: str, curve: Curve, also: Sequence[str]) -> str:
    lines = [name]
    if also:
        lines += textwrap.wrap("same curve: " + ", ".join(also), 46)
    lines.append(f"AUROC {curve.auroc:.3f}, n={curve.n_pos}+/{curve.n_neg}-" if curve.defined
                 else "no curve")
    return "\n".join(lines)


def _grid_legend(fig: Any, ref: bool, band: Any, prompts: Mapping[str, tuple[str, str]]
                 ) -> None:
    """One legend under the panels: what the grey, dotted, shaded and marked things are."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from calimon.plotting.marks import BINARY_NOTE
    from calimon.plotting.style import CHANCE_LABEL, band_label

    handles = [Line2D([], [], color="0.45", linewidth=0.9, linestyle=(0, (2, 3)),
                      label=CHANCE_LABEL)]
    if ref:
        handles.append(Line2D([], [], color="0.6", linewidth=1.0, label="all samples"))
    if band is not None:
        handles.append(Patch(color="0.5", alpha=0.25,
                             label=f"shaded: each panel's {band_label(band)}"))
    handles += [Line2D([], [], linestyle="none", marker=m, color=c, markeredgecolor="black",
                       label=name) for name, (m, c) in prompts.items()]
    if prompts:
        handles.append(Line2D([], [], linestyle="none", label=BINARY_NOTE))
    fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize=7,
               frameon=False)


def plot_curve_grid(path: str | Path, curves_by_group: Mapping[str, Curve], ncols: int = 3,
                    title: str = "", *,
                    binary_by_group: Mapping[str, Sequence[BinaryPoint]] | None = None) -> Path:
    """Small multiples, one panel per distinct group (e.g. the output of ``curves_by``): a
    group whose curve an earlier panel already shows (``task=code`` on a code-only
    benchmark is ``all`` again) is named in that panel's title, not drawn twice. If an
    ``"all"`` curve is present it is drawn in grey in every other panel as a reference;
    ``binary_by_group``: each group's binary points with their exact intervals."""
    from calimon.plotting.marks import MARKERS, binary_color

    if not curves_by_group:
        raise InputError("expected at least one curve, got none", field="curves_by_group")
    if not (isinstance(ncols, int) and ncols >= 1):
        raise InputError(f"expected an integer >= 1, got {ncols!r}", field="ncols")
    panels = distinct_groups(curves_by_group)
    ncols = min(ncols, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = figure(3.3 * ncols, 3.6 * nrows + 0.8 + (0.3 if title else 0), layout="constrained")
    ref = curves_by_group.get("all")
    prompts: dict[str, tuple[str, str]] = {}
    band = None
    for k, (name, curve, also) in enumerate(panels):
        ax = fig.add_subplot(nrows, ncols, k + 1)
        draw_chance(ax, label=False)
        if ref is not None and name != "all" and ref.defined:
            ax.step(ref.far, ref.mr, where="post", color="0.6", linewidth=1.0, zorder=2)
        draw_curve(ax, name, curve, run_color(k), band_name=None)
        band = band or (curve.band if curve.defined and curve.band is not None
                        and curve.band.n_used else None)
        for i, p in enumerate((binary_by_group or {}).get(name, ())):
            if draw_binary(ax, i, p, markersize=5, legend=False):
                prompts.setdefault(p.name, (MARKERS[i % len(MARKERS)], binary_color(i)))
        axes_style(ax, labels=False)
        if not curve.defined:
            ax.text(0.5, 0.5, str(curve.undefined_reason).replace(": ", "\n"), fontsize=7,
                    ha="center", va="center", transform=ax.transAxes,
                    bbox={"facecolor": "white", "edgecolor": "0.7"})
        ax.set_title(_panel_title(name, curve, also), fontsize=8)
        ax.tick_params(labelsize=7)
        if k % ncols == 0:
            ax.set_ylabel("MR", fontsize=8)
        if k // ncols == nrows - 1 or k + ncols >= len(panels):
            ax.set_xlabel("FAR", fontsize=8)
    _grid_legend(fig, ref is not None and len(panels) > 1, band, prompts)
    if title:
        fig.suptitle(title)
    return _save(fig, path, layout=False)


def _save(fig: Any, path: str | Path, layout: bool = True) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if layout:
        fig.tight_layout()
    fig.savefig(path, format="png")
    return path
