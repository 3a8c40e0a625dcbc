"""Point labels for the report's SVG figures, placed so that they overlap nothing.

The SVG is drawn in Python without a browser, so text boxes are ESTIMATED from the font size
and the characters (no font is measured): :func:`text_width` gives each character a width in
em chosen at or above its advance in the common sans-serif fonts (DejaVu Sans, Liberation Sans
/ Arial, Segoe UI), so the estimated box covers the drawn text; the report's browser test
measures the drawn boxes with ``getBBox`` and checks them. The placing itself is
:func:`calimon.plotting.placement.place_labels`, the same as for the PNG figures.

Coordinates here are SVG pixels (y grows downwards); they are flipped for the placer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from calimon.plotting.placement import Box, place_labels

__all__ = ["SvgLabel", "place_svg_labels", "text_box", "text_width"]

ASCENT, DESCENT = 0.95, 0.3  # em above and below the baseline covered by a text box
_NARROW, _WIDE = set("fijlrt.,:;|!'()[] "), set("%@MWmw<=>+~#&")


def text_width(text: str, font_size: float) -> float:
    """Estimated advance width in pixels of ``text`` at ``font_size`` (an upper estimate for
    sans-serif fonts, not a measurement)."""
    em = sum(0.42 if c in _NARROW else 0.95 if c in _WIDE else 0.78 if c.isupper()
             else 0.66 for c in text)
    return em * font_size


def text_box(text: str, font_size: float, x: float, baseline: float,
             anchor: str = "start") -> tuple[float, float, float, float]:
    """Estimated ``(left, top, right, bottom)`` of one line of SVG text at ``(x, baseline)``
    with ``text-anchor`` ``anchor`` (start, middle or end)."""
    w = text_width(text, font_size)
    left = x - {"start": 0.0, "middle": w / 2, "end": w}[anchor]
    return (left, baseline - ASCENT * font_size, left + w, baseline + DESCENT * font_size)


@dataclass(frozen=True)
class SvgLabel:
    """Where to draw one label: ``<text x= y=>`` with ``text-anchor="start"``, its estimated
    box ``(left, top, right, bottom)`` and, for a label away from its point, a leader line
    ``(x1, y1, x2, y2)`` from the point to the box's nearest edge."""

    x: float
    baseline: float
    box: tuple[float, float, float, float]
    leader: tuple[float, float, float, float] | None


def place_svg_labels(items: Sequence[tuple[str, float, tuple[float, float]]], *,
                     bounds: tuple[float, float, float, float],
                     obstacles: Sequence[tuple[float, float, float, float]] = (),
                     gap: float = 7.0) -> list[SvgLabel | None]:
    """Place each ``(text, font_size, (x, y))`` label next to its point so that no label
    overlaps another or an obstacle box (``(left, top, right, bottom)``) and every label
    lies inside ``bounds``; ``gap``: the distance from a point to a label next to it (it
    must clear the point's own marker). None for a label with no room anywhere in
    ``bounds``."""
    height = bounds[3] + bounds[1]  # any constant works for the flip; this keeps it > 0

    def up(b: tuple[float, float, float, float]) -> Box:
        return Box(b[0], height - b[3], b[2], height - b[1])

    sizes = [(text_width(t, fs), (ASCENT + DESCENT) * fs) for t, fs, _ in items]
    anchors = [(x, height - y) for _, _, (x, y) in items]
    placed = place_labels(anchors, sizes, bounds=up(bounds),
                          obstacles=[up(o) for o in obstacles], gap=gap)
    out: list[SvgLabel | None] = []
    for (_, fs, (px, py)), p in zip(items, placed, strict=True):
        if p.box is None:
            out.append(None)
            continue
        left, top, right, bottom = p.box.x0, height - p.box.y1, p.box.x1, height - p.box.y0
        leader = None
        if p.leader:
            qx, qy = min(max(px, left), right), min(max(py, top), bottom)
            leader = (px, py, qx, qy)
        out.append(SvgLabel(left, top + ASCENT * fs, (left, top, right, bottom), leader))
    return out
