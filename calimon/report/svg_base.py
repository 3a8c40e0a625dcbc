"""The frame, axes, marker shapes and legend that the report's SVG figures share.

Every figure is a plain string; every piece of text in it is escaped. A legend always goes
under the axes (the frame's bottom margin grows by one row per entry), so that it covers no
curve, point or bar.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

__all__ = ["LEGEND_ROW", "Frame", "axes", "legend", "legend_height", "num", "open_svg", "px",
           "shape_points"]

LEGEND_ROW = 14  # pixels per legend row


def px(x: float) -> str:
    """A pixel coordinate as SVG writes it."""
    return f"{x:.1f}"


def num(x: Any, digits: int = 3) -> str:
    """A figure for a tooltip or legend: n/a for None or NaN, inf for infinity."""
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
        return f"{px(self.x(x))},{px(self.y(y))}"

    def with_legend(self, n_rows: int) -> Frame:
        """The same axes (same pixels) on a taller canvas, with room under them for a
        legend of ``n_rows`` rows."""
        extra = legend_height(n_rows)
        return Frame(self.width, self.height + extra, self.left, self.right, self.top,
                     self.bottom + extra, self.x0, self.x1, self.y0, self.y1)


def legend_height(n_rows: int) -> int:
    """Pixels a legend of ``n_rows`` rows adds under the axes."""
    return LEGEND_ROW * n_rows + 10 if n_rows else 0


def open_svg(f: Frame, cls: str, label: str) -> list[str]:
    """The ``<svg>`` element (its natural size; the page's style sheet lets it shrink to a
    narrow window) and its white background."""
    return [f'<svg class="cm-fig {cls}" xmlns="http://www.w3.org/2000/svg" role="img" '
            f'viewBox="0 0 {f.width} {f.height}" width="{f.width}" height="{f.height}" '
            f'aria-label="{escape(label, quote=True)}">',
            f'<rect x="0" y="0" width="{f.width}" height="{f.height}" fill="#ffffff"/>']


def axes(f: Frame, xlabel: str, ylabel: str, title: str, ticks: Sequence[float] = (
        0, .2, .4, .6, .8, 1), yticks: Sequence[float] | None = None,
         ytick_fmt: str = "{:.1f}") -> list[str]:
    """Grid, tick labels, the axes' frame, the axis labels and the title."""
    out = []
    for t in ticks:
        out.append(f'<line x1="{px(f.x(t))}" y1="{px(f.y(f.y0))}" x2="{px(f.x(t))}" '
                   f'y2="{px(f.y(f.y1))}" stroke="#e4e4e4" stroke-width="1"/>')
        out.append(f'<text x="{px(f.x(t))}" y="{px(f.y(f.y0) + 14)}" font-size="10" '
                   f'text-anchor="middle" fill="#444">{t:.1f}</text>')
    for t in (ticks if yticks is None else yticks):
        out.append(f'<line x1="{px(f.x(f.x0))}" y1="{px(f.y(t))}" x2="{px(f.x(f.x1))}" '
                   f'y2="{px(f.y(t))}" stroke="#e4e4e4" stroke-width="1"/>')
        out.append(f'<text x="{px(f.x(f.x0) - 5)}" y="{px(f.y(t) + 3)}" font-size="10" '
                   f'text-anchor="end" fill="#444">{escape(ytick_fmt.format(t))}</text>')
    out.append(f'<rect x="{px(f.x(f.x0))}" y="{px(f.y(f.y1))}" '
               f'width="{px(f.x(f.x1) - f.x(f.x0))}" height="{px(f.y(f.y0) - f.y(f.y1))}" '
               'fill="none" stroke="#888" stroke-width="1"/>')
    cx = (f.x(f.x0) + f.x(f.x1)) / 2
    out.append(f'<text x="{px(cx)}" y="{px(f.y(f.y0) + 32)}" font-size="11" '
               f'text-anchor="middle" fill="#222">{escape(xlabel)}</text>')
    cy = (f.y(f.y0) + f.y(f.y1)) / 2
    out.append(f'<text x="12" y="{px(cy)}" font-size="11" text-anchor="middle" fill="#222" '
               f'transform="rotate(-90 12 {px(cy)})">{escape(ylabel)}</text>')
    out.append(f'<text x="{px(cx)}" y="16" font-size="12" font-weight="600" '
               f'text-anchor="middle" fill="#111">{escape(title)}</text>')
    return out


def shape_points(marker: str, cx: float, cy: float, s: float) -> str:
    """SVG polygon points of a matplotlib marker (``D``, ``s``, ``^``, ``v``, ``<``, ``>``;
    any other: a diamond) of half-size ``s`` centred on ``(cx, cy)``."""
    k = 0.8 * s  # a square looks as large as a diamond of a larger half-diagonal
    corners = {"s": ((-k, -k), (k, -k), (k, k), (-k, k)),
               "^": ((0, -s), (s, 0.75 * s), (-s, 0.75 * s)),
               "v": ((0, s), (s, -0.75 * s), (-s, -0.75 * s)),
               "<": ((-s, 0), (0.75 * s, -s), (0.75 * s, s)),
               ">": ((s, 0), (-0.75 * s, -s), (-0.75 * s, s))}.get(
        marker, ((0, -s), (s, 0), (0, s), (-s, 0)))
    return " ".join(f"{px(cx + dx)},{px(cy + dy)}" for dx, dy in corners)


def _swatch(kind: str, color: str, x: float, y: float) -> str:
    """The legend key of one row, ``x`` its left edge, ``y`` its vertical middle."""
    if kind in ("line", "dash", "wide"):
        style = {"line": 'stroke-width="2"', "dash": 'stroke-width="1.2" '
                 'stroke-dasharray="2,3"', "wide": 'stroke-width="6" stroke-opacity="0.45"'}
        return (f'<line x1="{px(x)}" y1="{px(y)}" x2="{px(x + 14)}" y2="{px(y)}" '
                f'stroke="{color}" {style[kind]}/>')
    if kind in ("band", "bar"):
        return (f'<rect x="{px(x)}" y="{px(y - 5)}" width="14" height="10" fill="{color}" '
                f'fill-opacity="{0.25 if kind == "band" else 0.8}"/>')
    if kind == "dot":
        return f'<circle cx="{px(x + 7)}" cy="{px(y)}" r="3.5" fill="{color}"/>'
    if kind == "note":
        return ""
    return (f'<polygon points="{shape_points(kind, x + 7, y, 5)}" fill="{color}" '
            'stroke="#fff" stroke-width="0.8"/>')


def legend(f: Frame, rows: Sequence[tuple[str, str, str]]) -> list[str]:
    """Legend under the x label (the frame's bottom margin must leave ``legend_height``):
    one row per ``(colour, text, kind)``; kind ``line``, ``dash``, ``wide``, ``band``,
    ``bar``, ``dot``, ``note`` (text only) or a marker of ``shape_points``."""
    w = max(len(t) for _, t, _ in rows) * 5.6 + 26
    x, y = f.left, f.y(f.y0) + 48
    out = [f'<rect class="cm-legend" x="{px(x)}" y="{px(y - 11)}" width="{px(w)}" '
           f'height="{LEGEND_ROW * len(rows) + 6}" fill="#ffffff" fill-opacity="0.85" '
           'stroke="#ccc"/>']
    for i, (color, text, kind) in enumerate(rows):
        yy = y + LEGEND_ROW * i
        out.append(_swatch(kind, color, x + 5, yy - 3))
        out.append(f'<text class="cm-legend-text" x="{px(x + 23)}" y="{px(yy)}" '
                   f'font-size="10" fill="#222">{escape(text)}</text>')
    return [s for s in out if s]
