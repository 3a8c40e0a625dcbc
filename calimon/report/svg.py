"""Inline SVG figures for the report, drawn in Python: no JS chart library, no fonts to fetch.

Every figure is a plain string; every piece of text in it is escaped. Hovering a mark shows
its numbers (SVG ``<title>``). The same figures exist as PNG (see ``calimon.report.figures``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

import numpy as np

from calimon.curves import Curve
from calimon.report.svg_labels import place_svg_labels, text_box

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2",
           "#17becf", "#7f7f7f", "#bcbd22")
BINARY_COLORS = ("#111111", "#b8860b", "#6a0dad", "#006d5b")


def _n(x: float) -> str:
    return f"{x:.1f}"


def _num(x: Any, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}f}" if isinstance(x, float) else str(x)


@dataclass(frozen=True)
class Frame:
    """Maps data (x, y) in [x0, x1] x [y0, y1] to pixels inside margins."""

    width: int
    height: int
    left: int = 46
    right: int = 12
    top: int = 26
    bottom: int = 40
    x0: float = 0.0
    x1: float = 1.0
    y0: float = 0.0
    y1: float = 1.0

    def x(self, v: float) -> float:
        """Pixel x of data value ``v``."""
        return self.left + (v - self.x0) / (self.x1 - self.x0) * (self.width - self.left
                                                                   - self.right)

    def y(self, v: float) -> float:
        """Pixel y of data value ``v`` (up is larger)."""
        return self.height - self.bottom - (v - self.y0) / (self.y1 - self.y0) * (
            self.height - self.top - self.bottom)

    def pt(self, x: float, y: float) -> str:
        """``"x,y"`` pixel coordinates of a data point, for SVG points lists."""
        return f"{_n(self.x(x))},{_n(self.y(y))}"


def _open(f: Frame, cls: str, label: str) -> list[str]:
    return [f'<svg class="cm-fig {cls}" xmlns="http://www.w3.org/2000/svg" role="img" '
            f'viewBox="0 0 {f.width} {f.height}" width="{f.width}" height="{f.height}" '
            f'aria-label="{escape(label, quote=True)}">',
            f'<rect x="0" y="0" width="{f.width}" height="{f.height}" fill="#ffffff"/>']


def _axes(f: Frame, xlabel: str, ylabel: str, title: str, ticks: Sequence[float] = (
        0, .2, .4, .6, .8, 1), yticks: Sequence[float] | None = None,
          ytick_fmt: str = "{:.1f}") -> list[str]:
    out = []
    for t in ticks:
        out.append(f'<line x1="{_n(f.x(t))}" y1="{_n(f.y(f.y0))}" x2="{_n(f.x(t))}" '
                   f'y2="{_n(f.y(f.y1))}" stroke="#e4e4e4" stroke-width="1"/>')
        out.append(f'<text x="{_n(f.x(t))}" y="{_n(f.y(f.y0) + 14)}" font-size="10" '
                   f'text-anchor="middle" fill="#444">{t:.1f}</text>')
    for t in (ticks if yticks is None else yticks):
        out.append(f'<line x1="{_n(f.x(f.x0))}" y1="{_n(f.y(t))}" x2="{_n(f.x(f.x1))}" '
                   f'y2="{_n(f.y(t))}" stroke="#e4e4e4" stroke-width="1"/>')
        out.append(f'<text x="{_n(f.x(f.x0) - 5)}" y="{_n(f.y(t) + 3)}" font-size="10" '
                   f'text-anchor="end" fill="#444">{escape(ytick_fmt.format(t))}</text>')
    out.append(f'<rect x="{_n(f.x(f.x0))}" y="{_n(f.y(f.y1))}" '
               f'width="{_n(f.x(f.x1) - f.x(f.x0))}" height="{_n(f.y(f.y0) - f.y(f.y1))}" '
               'fill="none" stroke="#888" stroke-width="1"/>')
    cx = (f.x(f.x0) + f.x(f.x1)) / 2
    out.append(f'<text x="{_n(cx)}" y="{_n(f.y(f.y0) + 32)}" font-size="11" text-anchor="middle" '
               f'fill="#222">{escape(xlabel)}</text>')
    cy = (f.y(f.y0) + f.y(f.y1)) / 2
    out.append(f'<text x="12" y="{_n(cy)}" font-size="11" text-anchor="middle" fill="#222" '
               f'transform="rotate(-90 12 {_n(cy)})">{escape(ylabel)}</text>')
    out.append(f'<text x="{_n(cx)}" y="16" font-size="12" font-weight="600" '
               f'text-anchor="middle" fill="#111">{escape(title)}</text>')
    return out


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


def _curve_path(f: Frame, curve: Curve, color: str, width: float, dash: str = "",
                opacity: float = 1.0, tip: str = "") -> str:
    pts = _step_points(curve.far, curve.mr)
    d = "M" + " L".join(f.pt(x, y) for x, y in pts)
    extra = f' stroke-dasharray="{dash}"' if dash else ""
    title = f"<title>{escape(tip)}</title>" if tip else ""
    return (f'<path class="cm-curve-line" d="{d}" fill="none" stroke="{color}" '
            f'stroke-width="{width}" stroke-opacity="{opacity}"{extra}>{title}</path>')


def _series_marks(f: Frame, series: Sequence[tuple[str, Curve]]
                  ) -> tuple[list[str], list[tuple[str, str, str]]]:
    """Each curve with its band (or why it is undefined), and their legend rows."""
    out, rows = [], []
    for i, (name, c) in enumerate(series):
        color = PALETTE[i % len(PALETTE)]
        if not c.defined:
            out.append(f'<text class="cm-undefined" x="{_n(f.x(.5))}" y="{_n(f.y(.5))}" '
                       f'font-size="11" text-anchor="middle" fill="#a33">no curve: '
                       f'{escape(str(c.undefined_reason))}</text>')
            rows.append((color, f"{name}: no curve", "line"))
            continue
        out.append(_band(f, c, color))
        tip = f"{name}: AUROC {_num(c.auroc)}, n+={c.n_pos}, n-={c.n_neg}"
        out.append(_curve_path(f, c, color, 1.8 if i == 0 else 1.3,
                               dash="" if i == 0 else "5,3", tip=tip))
        rows.append((color, f"{name} (AUROC {_num(c.auroc)})", "line"))
    return out, rows


def _binary_marks(f: Frame, binary_points: Sequence[dict]
                  ) -> tuple[list[str], list[tuple[str, str, str]]]:
    """Each binary point as a diamond with its parse-failure bars, and their legend rows."""
    out, rows = [], []
    for i, b in enumerate(binary_points):
        color = BINARY_COLORS[i % len(BINARY_COLORS)]
        mr, far = b.get("mr"), b.get("far")
        name = str(b.get("name"))
        label = name if name.startswith("binary/") else f"{name} (binary)"
        if mr is None or far is None:
            failed = b.get("n_parse_failure")
            rows.append((color, label + ": undefined" + (f" ({failed} parse failures)"
                                                          if failed else ""), "diamond"))
            continue
        cx, cy = f.x(far), f.y(mr)
        for key_lo, key_hi, horiz in (("far_lo", "far_hi", True), ("mr_lo", "mr_hi", False)):
            lo, hi = b.get(key_lo), b.get(key_hi)
            if lo is None or hi is None or lo == hi:
                continue
            if horiz:
                out.append(f'<line x1="{_n(f.x(lo))}" y1="{_n(cy)}" x2="{_n(f.x(hi))}" '
                           f'y2="{_n(cy)}" stroke="{color}" stroke-width="1.2"/>')
            else:
                out.append(f'<line x1="{_n(cx)}" y1="{_n(f.y(lo))}" x2="{_n(cx)}" '
                           f'y2="{_n(f.y(hi))}" stroke="{color}" stroke-width="1.2"/>')
        tip = (f"{b.get('name')}: MR {_num(mr)}, FAR {_num(far)}, TP {b.get('tp')} FP "
               f"{b.get('fp')} TN {b.get('tn')} FN {b.get('fn')}, parse failures "
               f"{b.get('n_parse_failure')}")
        s = 6
        out.append(f'<polygon class="cm-binary" points="{_n(cx)},{_n(cy - s)} '
                   f'{_n(cx + s)},{_n(cy)} {_n(cx)},{_n(cy + s)} {_n(cx - s)},{_n(cy)}" '
                   f'fill="{color}" stroke="#fff" stroke-width="1"><title>{escape(tip)}'
                   '</title></polygon>')
        rows.append((color, label, "diamond"))
    return out, rows


def _operating_marks(f: Frame, operating_points: Sequence[dict], obstacles: Sequence[tuple[
        float, float, float, float]] = ()) -> tuple[list[str], list[tuple[str, str, str]]]:
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
            f"MR {_num(p['mr'])}, FAR {_num(p['far'])}, TP {p['tp']} FP {p['fp']} "
            f"TN {p['tn']} FN {p['fn']}" for p in pts)
        out.append(f'<circle class="cm-op" cx="{_n(f.x(far))}" cy="{_n(f.y(mr))}" r="3.5" '
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
            out.append(f'<line class="cm-op-leader" x1="{_n(x1)}" y1="{_n(y1)}" '
                       f'x2="{_n(x2)}" y2="{_n(y2)}" stroke="#555" stroke-width="0.8"/>')
        out.append(f'<text class="cm-op-label" x="{_n(lab.x)}" y="{_n(lab.baseline)}" '
                   f'font-size="9" fill="#000">{escape(text)}</text>')
    return out, rows


def _binary_boxes(f: Frame, binary_points: Sequence[dict]
                  ) -> list[tuple[float, float, float, float]]:
    """Boxes ``(left, top, right, bottom)`` of the binary points' diamonds and bars."""
    out = []
    for b in binary_points:
        if b.get("mr") is None or b.get("far") is None:
            continue
        cx, cy = f.x(b["far"]), f.y(b["mr"])
        out.append((cx - 7, cy - 7, cx + 7, cy + 7))
        if b.get("far_lo") is not None and b.get("far_hi") is not None:
            out.append((f.x(b["far_lo"]), cy - 1, f.x(b["far_hi"]), cy + 1))
        if b.get("mr_lo") is not None and b.get("mr_hi") is not None:
            out.append((cx - 1, f.y(b["mr_hi"]), cx + 1, f.y(b["mr_lo"])))
    return out


def curve_svg(series: Sequence[tuple[str, Curve]], *, binary_points: Sequence[dict] = (),
              operating_points: Sequence[dict] = (), title: str = "", width: int = 460,
              height: int = 440, reference: Curve | None = None, legend: bool = True) -> str:
    """MR (y) against FAR (x): each curve with its band, binary points (bars span parse
    failures counted as passed .. as flagged), operating points annotated (labels placed
    where they overlap nothing)."""
    # The axes' pixels do not depend on the legend under them, so the labels are placed
    # first and a label with no room on the axes becomes a legend row.
    base = Frame(width, height)
    title_box = text_box(title, 12 * 1.1, (base.x(base.x0) + base.x(base.x1)) / 2, 16,
                         "middle")  # font-weight 600: about a tenth wider
    marks, op_rows = _operating_marks(base, operating_points,
                                      [title_box, *_binary_boxes(base, binary_points)])
    n_legend = len(series) + len(binary_points) if legend else 0
    n_legend += len(op_rows)
    extra = 14 * n_legend + 10 if n_legend else 0
    # the legend goes under the axes: inside, it would hide curves and point labels
    f = Frame(width, height + extra, bottom=40 + extra)
    out = _open(f, "cm-curve", title or "miss rate vs false-alarm rate")
    out += _axes(f, "false-alarm rate (FAR)", "miss rate (MR)", title)
    if reference is not None and reference.defined:
        out.append(_curve_path(f, reference, "#9a9a9a", 1.0, tip="all samples (reference)"))
    curves, rows = _series_marks(f, series)
    binary, binary_rows = _binary_marks(f, binary_points)
    rows = (rows + binary_rows if legend else []) + op_rows
    out += curves + binary + marks
    if rows:
        out += _legend(f, rows, below=True)
    out.append("</svg>")
    return "\n".join(x for x in out if x)


def _legend(f: Frame, rows: Sequence[tuple[str, str, str]], below: bool = False
            ) -> list[str]:
    """Legend box in the top-right corner of the axes, or under the x label (``below``;
    the frame's bottom margin must leave 14 px per row)."""
    w = max(len(t) for _, t, _ in rows) * 5.6 + 26
    if below:
        x, y = f.left + w, f.y(f.y0) + 48
    else:
        x, y = f.x(f.x1) - 8, f.y(f.y1) + 14
    out = [f'<rect x="{_n(x - w)}" y="{_n(y - 11)}" width="{_n(w)}" height="{14 * len(rows) + 6}"'
           ' fill="#ffffff" fill-opacity="0.85" stroke="#ccc"/>']
    for i, (color, text, kind) in enumerate(rows):
        yy = y + 14 * i
        if kind == "line":
            out.append(f'<line x1="{_n(x - w + 5)}" y1="{_n(yy - 3)}" x2="{_n(x - w + 19)}" '
                       f'y2="{_n(yy - 3)}" stroke="{color}" stroke-width="2"/>')
        elif kind == "dot":
            out.append(f'<circle cx="{_n(x - w + 12)}" cy="{_n(yy - 3)}" r="3.5" '
                       f'fill="{color}"/>')
        else:
            cx = x - w + 12
            out.append(f'<polygon points="{_n(cx)},{_n(yy - 8)} {_n(cx + 5)},{_n(yy - 3)} '
                       f'{_n(cx)},{_n(yy + 2)} {_n(cx - 5)},{_n(yy - 3)}" fill="{color}"/>')
        out.append(f'<text x="{_n(x - w + 23)}" y="{_n(yy)}" font-size="10" fill="#222">'
                   f'{escape(text)}</text>')
    return out


def reliability_svg(series: Sequence[tuple[str, Any, float]], *, title: str = "",
                    width: int = 460, height: int = 440) -> str:
    """Fraction misbehaving against mean score per bin, for each ``(name, bins, ece)``;
    marker area follows the bin count."""
    f = Frame(width, height)
    out = _open(f, "cm-reliability", title or "reliability")
    out += _axes(f, "predicted probability of misbehavior", "fraction misbehaving", title)
    out.append(f'<line x1="{_n(f.x(0))}" y1="{_n(f.y(0))}" x2="{_n(f.x(1))}" y2="{_n(f.y(1))}" '
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
            out.append(f'<circle class="cm-bin" cx="{_n(f.x(x))}" cy="{_n(f.y(y))}" '
                       f'r="{_n(r)}" fill="{color}" fill-opacity="0.75">'
                       f'<title>{escape(tip)}</title></circle>')
        rows.append((color, f"{name} (ECE {_num(ece)})", "line"))
    out += _legend(f, rows) if rows else []
    out.append("</svg>")
    return "\n".join(out)


def histogram_svg(scores: np.ndarray, labels: np.ndarray, *, markers: Sequence[tuple[str,
                  float]] = (), band: tuple[float, float] | None = None, title: str = "",
                  n_bins: int = 20, width: int = 460, height: int = 300) -> str:
    """Score histograms of misbehaving and benign samples, thresholds as vertical lines and
    an escalation band (human review) shaded."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    pos = np.histogram(scores[labels], bins=edges)[0]
    neg = np.histogram(scores[~labels], bins=edges)[0]
    top = max(1, int(max(pos.max(initial=0), neg.max(initial=0))))
    f = Frame(width, height, y1=float(top))
    out = _open(f, "cm-hist", title or "score distribution")
    yt = sorted({0, top // 2, top}) if top > 1 else [0, 1]
    out += _axes(f, "calibrated score", "samples", title, yticks=yt, ytick_fmt="{:.0f}")
    if band is not None:
        lo, hi = (min(max(v, 0.0), 1.0) for v in band)
        if hi > lo:
            out.append(f'<rect class="cm-review-band" x="{_n(f.x(lo))}" y="{_n(f.y(top))}" '
                       f'width="{_n(f.x(hi) - f.x(lo))}" height="{_n(f.y(0) - f.y(top))}" '
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
            out.append(f'<rect x="{_n(x + .5)}" y="{_n(f.y(c))}" width="{_n(bw / 2 - 1)}" '
                       f'height="{_n(f.y(0) - f.y(c))}" fill="{color}" fill-opacity="0.8">'
                       f'<title>{escape(tip)}</title></rect>')
    for name, t in markers:
        if t is None or not (0.0 <= t <= 1.0):
            continue
        out.append(f'<line x1="{_n(f.x(t))}" y1="{_n(f.y(0))}" x2="{_n(f.x(t))}" '
                   f'y2="{_n(f.y(top))}" stroke="#000" stroke-dasharray="3,2">'
                   f'<title>{escape(f"{name}: threshold {t:.4g}")}</title></line>')
    out += _legend(f, [("#d62728", f"misbehaving (n={int(labels.sum())})", "line"),
                       ("#1f77b4", f"benign (n={int((~labels).sum())})", "line")])
    out.append("</svg>")
    return "\n".join(out)


__all__ = ["curve_svg", "histogram_svg", "reliability_svg"]
