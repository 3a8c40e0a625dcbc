"""Inline SVG figures for the report, drawn in Python: no JS chart library, no fonts to fetch.

Every figure is a plain string; every piece of text in it is escaped. Hovering a mark shows
its numbers (SVG ``<title>``). The same figures exist as PNG (see ``calimon.report.figures``).
Legends sit under the axes (``calimon.report.svg_base``), so none covers a bar or a point;
the MR/FAR figure is ``calimon.report.svg_curve``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Any

import numpy as np

from calimon.plotting.style import PALETTE
from calimon.report.svg_base import Frame, axes, legend, num, open_svg, px
from calimon.report.svg_curve import curve_svg

__all__ = ["curve_svg", "histogram_svg", "reliability_svg"]


def reliability_svg(series: Sequence[tuple[str, Any, float]], *, title: str = "",
                    width: int = 640, height: int = 580) -> str:
    """Fraction misbehaving against mean score per bin, for each ``(name, bins, ece)``;
    marker area follows the bin count; the legend under the axes."""
    f = Frame(width, height).with_legend(len(series) + 1)
    out = open_svg(f, "cm-reliability", title or "reliability")
    out += axes(f, "predicted probability of misbehavior", "fraction misbehaving", title)
    out.append(f'<line x1="{px(f.x(0))}" y1="{px(f.y(0))}" x2="{px(f.x(1))}" y2="{px(f.y(1))}" '
               'stroke="#888" stroke-dasharray="4,3"/>')
    rows = []
    total = max(1, max(int(np.sum(b.counts)) for _, b, _ in series)) if series else 1
    for i, (name, bins, ece) in enumerate(series):
        color = "#555555" if i == 0 else PALETTE[(i - 1) % len(PALETTE)]
        filled = bins.counts > 0
        xs, ys = bins.mean_confidence[filled], bins.accuracy[filled]
        if xs.size:
            d = "M" + " L".join(f.pt(x, y) for x, y in zip(xs, ys, strict=True))
            dash = ' stroke-dasharray="3,3"' if i == 0 else ""
            out.append(f'<path d="{d}" fill="none" stroke="{color}" stroke-width="1.6"{dash}/>')
        for x, y, c in zip(xs, ys, bins.counts[filled], strict=True):
            r = 2.5 + 5.5 * math.sqrt(c / total)
            tip = f"{name}: mean score {x:.3f}, fraction misbehaving {y:.3f}, n={int(c)}"
            out.append(f'<circle class="cm-bin" cx="{px(f.x(x))}" cy="{px(f.y(y))}" '
                       f'r="{px(r)}" fill="{color}" fill-opacity="0.75">'
                       f'<title>{escape(tip)}</title></circle>')
        rows.append((color, f"{name} (ECE {num(ece)})", "dash" if i == 0 else "line"))
    rows.append(("#888", "perfect calibration; marker area: samples in the bin", "dash"))
    out += legend(f, rows)
    out.append("</svg>")
    return "\n".join(out)


def histogram_svg(scores: np.ndarray, labels: np.ndarray, *, markers: Sequence[tuple[str,
                  float]] = (), band: tuple[float, float] | None = None, title: str = "",
                  n_bins: int = 20, width: int = 760, height: int = 360) -> str:
    """Score histograms of misbehaving and benign samples, thresholds as vertical lines and
    an escalation band (human review) shaded; the legend under the axes."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    pos = np.histogram(scores[labels], bins=edges)[0]
    neg = np.histogram(scores[~labels], bins=edges)[0]
    top = max(1, int(max(pos.max(initial=0), neg.max(initial=0))))
    rows = [("#d62728", f"misbehaving (n={int(labels.sum())})", "bar"),
            ("#1f77b4", f"benign (n={int((~labels).sum())})", "bar")]
    if any(t is not None and 0.0 <= t <= 1.0 for _, t in markers):
        rows.append(("#000", "operating-point thresholds", "dash"))
    if band is not None and min(band[1], 1.0) > max(band[0], 0.0):
        rows.append(("#ffd54f", "human review band", "band"))
    f = Frame(width, height, y1=float(top)).with_legend(len(rows))
    out = open_svg(f, "cm-hist", title or "score distribution")
    yt = sorted({0, top // 2, top}) if top > 1 else [0, 1]
    out += axes(f, "calibrated score", "samples", title, yticks=yt, ytick_fmt="{:.0f}")
    if band is not None:
        lo, hi = (min(max(v, 0.0), 1.0) for v in band)
        if hi > lo:
            out.append(f'<rect class="cm-review-band" x="{px(f.x(lo))}" y="{px(f.y(top))}" '
                       f'width="{px(f.x(hi) - f.x(lo))}" height="{px(f.y(0) - f.y(top))}" '
                       'fill="#ffd54f" fill-opacity="0.3"><title>human review band</title>'
                       '</rect>')
    bw = f.x(edges[1]) - f.x(edges[0])
    for k, (counts, color, name) in enumerate(((neg, "#1f77b4", "benign"),
                                                (pos, "#d62728", "misbehaving"))):
        for i, c in enumerate(counts):
            if not c:
                continue
            x = f.x(edges[i]) + k * bw / 2
            tip = f"{name}: {int(c)} with score in [{edges[i]:.2f}, {edges[i + 1]:.2f})"
            out.append(f'<rect x="{px(x + .5)}" y="{px(f.y(c))}" width="{px(bw / 2 - 1)}" '
                       f'height="{px(f.y(0) - f.y(c))}" fill="{color}" fill-opacity="0.8">'
                       f'<title>{escape(tip)}</title></rect>')
    for name, t in markers:
        if t is None or not (0.0 <= t <= 1.0):
            continue
        out.append(f'<line x1="{px(f.x(t))}" y1="{px(f.y(0))}" x2="{px(f.x(t))}" '
                   f'y2="{px(f.y(top))}" stroke="#000" stroke-dasharray="3,2">'
                   f'<title>{escape(f"{name}: threshold {t:.4g}")}</title></line>')
    out += legend(f, rows)
    out.append("</svg>")
    return "\n".join(out)
