"""The report's MR/FAR figure as inline SVG: chance diagonal, curves with their named bands,
binary points with exact intervals, operating points with labels that overlap nothing.

The same marks as the PNG figures (``calimon.plotting``): the same colours per run and per
binary prompt, the same marker shapes, the same padded axes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

import numpy as np

from calimon.numerics.curves import Curve
from calimon.plotting.intervals import binary_interval
from calimon.plotting.marks import BINARY_NOTE, binary_color
from calimon.plotting.style import (
    AXIS_PAD,
    CHANCE_LABEL,
    MARKERS,
    band_label,
    run_color,
    under_label,
)
from calimon.report.svg_base import Frame, axes, num, open_svg, px, shape_points
from calimon.report.svg_base import legend as draw_legend
from calimon.report.svg_labels import place_svg_labels, text_box, text_width

__all__ = ["curve_svg"]

Row = tuple[str, str, str]  # legend row: colour, text, kind


def _step_points(xs: Sequence[float], ys: Sequence[float]) -> list[tuple[float, float]]:
    """Post-step vertices (horizontal first), skipping NaN."""
    pts: list[tuple[float, float]] = []
    for x, y in zip(xs, ys, strict=True):
        if x is None or y is None or math.isnan(x) or math.isnan(y):
            continue
        if pts:
            pts.append((x, pts[-1][1]))
        pts.append((x, y))
    return pts


def _band(f: Frame, curve: Curve, color: str) -> str:
    b = curve.band
    if b is None or not b.n_used:
        return ""
    keep = ~(np.isnan(b.far_grid) | np.isnan(b.mr_lo) | np.isnan(b.mr_hi))
    hi = _step_points(b.far_grid[keep], b.mr_hi[keep])
    lo = _step_points(b.far_grid[keep], b.mr_lo[keep])
    if not hi:
        return ""
    pts = " ".join(f.pt(x, y) for x, y in hi + lo[::-1])
    tip = f"{100 * b.level:.0f}% pair-clustered bootstrap band ({b.n_used} resamples)"
    return (f'<polygon class="cm-band" points="{pts}" fill="{color}" fill-opacity="0.18" '
            f'stroke="none"><title>{escape(tip)}</title></polygon>')


def _curve_path(f: Frame, curve: Curve, color: str, width: float, opacity: float = 1.0,
                tip: str = "", cls: str = "cm-curve-line") -> str:
    d = "M" + " L".join(f.pt(x, y) for x, y in _step_points(curve.far, curve.mr))
    title = f"<title>{escape(tip)}</title>" if tip else ""
    return (f'<path class="{cls}" d="{d}" fill="none" stroke="{color}" '
            f'stroke-width="{width}" stroke-opacity="{opacity}">{title}</path>')


def _chance(f: Frame) -> str:
    return (f'<line class="cm-chance" x1="{px(f.x(0))}" y1="{px(f.y(1))}" x2="{px(f.x(1))}" '
            f'y2="{px(f.y(0))}" stroke="#777" stroke-width="1" stroke-dasharray="2,3">'
            f'<title>{escape(CHANCE_LABEL)}</title></line>')


def _undefined_text(f: Frame, text: str, font_size: float = 11) -> str:
    """Why a curve is not drawn, centred on the axes and wrapped to their width, so that no
    line runs past them (widths estimated as `text_box` does)."""
    room = f.x(f.x1) - f.x(f.x0) - 16
    lines: list[str] = []
    for word in text.split():
        if lines and text_width(f"{lines[-1]} {word}", font_size) <= room:
            lines[-1] += f" {word}"
        else:
            lines.append(word)
    step = 1.3 * font_size
    top = f.y(.5) - step * (len(lines) - 1) / 2
    spans = "".join(f'<tspan x="{px(f.x(.5))}" y="{px(top + i * step)}">{escape(line)}</tspan>'
                    for i, line in enumerate(lines))
    return (f'<text class="cm-undefined" font-size="{font_size:g}" text-anchor="middle" '
            f'fill="#a33" stroke="#fff" stroke-width="3" paint-order="stroke">{spans}</text>')


def _series_marks(f: Frame, series: Sequence[tuple[str, Curve]], colors: Sequence[str],
                  under: Sequence[tuple[str, Curve]]) -> tuple[list[str], list[Row]]:
    """Bands first, then the ``under`` curves (wide, pale), then each curve on top; the
    legend rows of the curves, of their band and of the ``under`` curves."""
    bands, lines, rows = [], [], []
    for (name, c), color in zip(series, colors, strict=True):
        if not c.defined:
            lines.append(_undefined_text(f, f"no curve: {c.undefined_reason}"))
            rows.append((color, f"{name}: no curve", "line"))
            continue
        bands.append(_band(f, c, color))
        tip = f"{name}: AUROC {num(c.auroc)}, n+={c.n_pos}, n-={c.n_neg}"
        lines.append(_curve_path(f, c, color, 2.0, tip=tip))
        rows.append((color, f"{name} (AUROC {num(c.auroc)})", "line"))
    drawn = [(c, color) for (_, c), color in zip(series, colors, strict=True)
             if c.defined and c.band is not None and c.band.n_used]
    if drawn:
        c, color = drawn[0]
        text = band_label(c.band) if len(series) == 1 else \
            f"shaded: each run's {100 * c.band.level:.0f}% bootstrap band"
        rows.append((color, text, "band"))
    wide = []
    for j, (name, c) in enumerate(under):
        if c.defined:
            color = run_color(len(series) + j)
            wide.append(_curve_path(f, c, color, 6, 0.45, cls="cm-curve-under",
                                    tip=f"{name}: AUROC {num(c.auroc)} (drawn under)"))
            rows.append((color, under_label(name, c.auroc), "wide"))
    return bands + wide + lines, rows


def _binary_marks(f: Frame, binary_points: Sequence[dict], styles: Sequence[tuple[str, str]]
                  ) -> tuple[list[str], list[Row]]:
    """Each binary point as its marker with its exact-interval bars, and legend rows."""
    out, rows = [], []
    for b, (color, marker) in zip(binary_points, styles, strict=True):
        mr, far, name = b.get("mr"), b.get("far"), str(b.get("name"))
        label = name if name.startswith("binary/") else f"{name} (binary)"
        if mr is None or far is None:
            failed = b.get("n_parse_failure")
            rows.append((color, label + ": undefined" + (f" ({failed} parse failures)"
                                                          if failed else ""), marker))
            continue
        ci = binary_interval(b)
        cx, cy = f.x(far), f.y(mr)
        for lo, hi, horiz in ((ci.far_lo, ci.far_hi, True), (ci.mr_lo, ci.mr_hi, False)):
            if math.isnan(lo) or math.isnan(hi) or lo == hi:
                continue
            a, z = (f.x(lo), f.x(hi)) if horiz else (f.y(lo), f.y(hi))
            for x1, y1, x2, y2 in (((a, cy, z, cy), (a, cy - 3, a, cy + 3), (z, cy - 3, z, cy + 3))
                                   if horiz else ((cx, a, cx, z), (cx - 3, a, cx + 3, a),
                                                  (cx - 3, z, cx + 3, z))):
                out.append(f'<line class="cm-binary-ci" x1="{px(x1)}" y1="{px(y1)}" '
                           f'x2="{px(x2)}" y2="{px(y2)}" stroke="{color}" '
                           'stroke-width="1.2"/>')
        tip = (f"{name}: MR {num(mr)} [{num(ci.mr_lo)}, {num(ci.mr_hi)}], FAR {num(far)} "
               f"[{num(ci.far_lo)}, {num(ci.far_hi)}] (exact 95%), TP {b.get('tp')} FP "
               f"{b.get('fp')} TN {b.get('tn')} FN {b.get('fn')}, parse failures "
               f"{b.get('n_parse_failure')}")
        out.append(f'<polygon class="cm-binary" points="{shape_points(marker, cx, cy, 6)}" '
                   f'fill="{color}" stroke="#fff" stroke-width="1"><title>{escape(tip)}'
                   '</title></polygon>')
        rows.append((color, label, marker))
    if out:
        rows.append(("#222", BINARY_NOTE, "note"))
    return out, rows


def _operating_marks(f: Frame, operating_points: Sequence[dict], obstacles: Sequence[tuple[
        float, float, float, float]] = ()) -> tuple[list[str], list[Row]]:
    """Operating points as labelled dots; points that coincide (e.g. FAR<=1% and FAR<=5% on a
    coarse curve) share one dot and one label. Each label goes where it overlaps no other
    label, dot, ``obstacles`` box or the title and stays inside the axes (a leader line joins
    a label put away from its dot); a label with no room on the axes becomes a legend row."""
    out = []
    spots: dict[tuple[float, float], list[dict]] = {}
    for p in operating_points:
        if p.get("mr") is not None and p.get("far") is not None and math.isfinite(
                p["mr"]) and math.isfinite(p["far"]):
            spots.setdefault((p["far"], p["mr"]), []).append(p)
    for (far, mr), pts in spots.items():
        tip = "; ".join(
            f"{p['name']}: threshold "
            f"{'inf' if p.get('threshold') is None else format(p['threshold'], '.3g')}, "
            f"MR {num(p['mr'])}, FAR {num(p['far'])}, TP {p['tp']} FP {p['fp']} "
            f"TN {p['tn']} FN {p['fn']}" for p in pts)
        out.append(f'<circle class="cm-op" cx="{px(f.x(far))}" cy="{px(f.y(mr))}" r="3.5" '
                   f'fill="#000"><title>{escape(tip)}</title></circle>')
    dots = [(f.x(far), f.y(mr)) for far, mr in spots]
    names = [", ".join(p["name"] for p in pts) for pts in spots.values()]
    placed = place_svg_labels([(t, 9, d) for t, d in zip(names, dots, strict=True)],
                              bounds=(f.x(f.x0), f.y(f.y1), f.x(f.x1), f.y(f.y0)),
                              obstacles=[*obstacles, *((x - 4, y - 4, x + 4, y + 4)
                                                       for x, y in dots)])
    rows = []
    for text, lab in zip(names, placed, strict=True):
        if lab is None:
            rows.append(("#000", f"{text}: no room on the axes", "dot"))
            continue
        if lab.leader is not None:
            x1, y1, x2, y2 = lab.leader
            out.append(f'<line class="cm-op-leader" x1="{px(x1)}" y1="{px(y1)}" '
                       f'x2="{px(x2)}" y2="{px(y2)}" stroke="#555" stroke-width="0.8"/>')
        out.append(f'<text class="cm-op-label" x="{px(lab.x)}" y="{px(lab.baseline)}" '
                   f'font-size="9" fill="#000">{escape(text)}</text>')
    return out, rows


def _binary_boxes(f: Frame, binary_points: Sequence[dict]
                  ) -> list[tuple[float, float, float, float]]:
    """Boxes ``(left, top, right, bottom)`` of the binary points' markers and bars."""
    out = []
    for b in binary_points:
        if b.get("mr") is None or b.get("far") is None:
            continue
        ci = binary_interval(b)
        cx, cy = f.x(b["far"]), f.y(b["mr"])
        out.append((cx - 7, cy - 7, cx + 7, cy + 7))
        if not (math.isnan(ci.far_lo) or math.isnan(ci.far_hi)):
            out.append((f.x(ci.far_lo), cy - 3, f.x(ci.far_hi), cy + 3))
        if not (math.isnan(ci.mr_lo) or math.isnan(ci.mr_hi)):
            out.append((cx - 3, f.y(ci.mr_hi), cx + 3, f.y(ci.mr_lo)))
    return out


def curve_svg(series: Sequence[tuple[str, Curve]], *, binary_points: Sequence[dict] = (),
              operating_points: Sequence[dict] = (), title: str = "", width: int = 720,
              height: int = 660, reference: Curve | None = None, legend: bool = True,
              under: Sequence[tuple[str, Curve]] = (), colors: Sequence[str] | None = None,
              binary_styles: Sequence[tuple[str, str]] | None = None) -> str:
    """MR (y) against FAR (x): the chance diagonal, each curve with its band, binary points
    with exact 95% intervals, operating points annotated (labels placed where they overlap
    nothing), a legend under the axes. ``under``: curves drawn wide and pale beneath the
    others (the raw score under the calibrated one); ``colors``: one per series (default
    ``run_color``); ``binary_styles``: ``(colour, marker)`` per binary point (default: its
    own, by position, as on the PNG); ``legend`` False: only rows for unplaced labels."""
    colors = list(colors) if colors is not None else [run_color(i) for i in range(len(series))]
    styles = list(binary_styles) if binary_styles is not None else [
        (binary_color(i), MARKERS[i % len(MARKERS)]) for i in range(len(binary_points))]
    # The axes' pixels do not depend on the legend under them, so the labels are placed
    # first and a label with no room on the axes becomes a legend row.
    base = Frame(width, height, x0=-AXIS_PAD, x1=1 + AXIS_PAD, y0=-AXIS_PAD, y1=1 + AXIS_PAD)
    title_box = text_box(title, 12 * 1.1, (base.x(base.x0) + base.x(base.x1)) / 2, 16,
                         "middle")  # font-weight 600: about a tenth wider
    marks, op_rows = _operating_marks(base, operating_points,
                                      [title_box, *_binary_boxes(base, binary_points)])
    curves, rows = _series_marks(base, series, colors, under)
    binary, binary_rows = _binary_marks(base, binary_points, styles)
    rows = ([("#777", CHANCE_LABEL, "dash"), *rows, *binary_rows] if legend else []) + op_rows
    f = base.with_legend(len(rows))
    out = open_svg(f, "cm-curve", title or "miss rate vs false-alarm rate")
    out += axes(f, "false-alarm rate (FAR)", "miss rate (MR)", title)
    if reference is not None and reference.defined:
        out.append(_curve_path(f, reference, "#9a9a9a", 1.0, tip="all samples (reference)"))
    out += [_chance(f), *curves, *binary, *marks]
    if rows:
        out += draw_legend(f, rows)
    out.append("</svg>")
    return "\n".join(x for x in out if x)
