"""Label placement that cannot overlap: each label goes to the first free spot near its anchor.

Pure geometry on axis-aligned boxes, shared by the PNG figures (boxes measured by
matplotlib's renderer) and the report's SVG figures (boxes estimated from the font size).
Coordinates are pixels with y growing upwards; a caller whose y grows downwards (SVG) flips
its y values before and after.

The algorithm is small and deterministic. For each label, in the order given:

1. the spots around the anchor at ``gap`` pixels, tried in a fixed order (by default eight:
   above-right first, then below-left, the two sides of a falling MR/FAR curve away from
   its line);
2. otherwise every spot of a grid over ``bounds`` (``step`` pixels apart), nearest to the
   anchor first, keeping some clearance from everything else first, then none; a label put
   there is drawn with a leader line to its anchor.

A spot is taken only if the label's box lies inside ``bounds`` and meets no obstacle and no
label placed before it. A label with no free spot at all is returned unplaced (``box`` None)
for the caller to show elsewhere; it is never drawn on top of something.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["AROUND", "Box", "Placement", "place_labels"]

# Directions (sign of x, sign of y) of the first eight spots, in the order they are tried.
AROUND = ((1, 1), (-1, -1), (1, -1), (-1, 1), (1, 0), (-1, 0), (0, 1), (0, -1))


@dataclass(frozen=True)
class Box:
    """An axis-aligned box ``[x0, x1] x [y0, y1]`` in pixels (``x0 <= x1``, ``y0 <= y1``)."""

    x0: float
    y0: float
    x1: float
    y1: float

    def overlaps(self, other: Box) -> bool:
        """True if the two boxes share interior area (touching edges do not count)."""
        return (self.x0 < other.x1 and other.x0 < self.x1
                and self.y0 < other.y1 and other.y0 < self.y1)

    def within(self, other: Box) -> bool:
        """True if this box lies inside ``other`` (edges may touch)."""
        return (other.x0 <= self.x0 and self.x1 <= other.x1
                and other.y0 <= self.y0 and self.y1 <= other.y1)

    def grown(self, pad: float) -> Box:
        """The box with ``pad`` pixels added on every side."""
        return Box(self.x0 - pad, self.y0 - pad, self.x1 + pad, self.y1 + pad)


@dataclass(frozen=True)
class Placement:
    """Where one label went: its box, or None when no free spot was found; ``leader``: the
    label sits away from its anchor and should be joined to it by a line."""

    box: Box | None
    leader: bool = False


def _around(x: float, y: float, w: float, h: float, gap: float,
            around: Sequence[tuple[int, int]]) -> np.ndarray:
    """Lower-left corners of the spots around ``(x, y)``, in the order tried."""
    out = []
    for sx, sy in around:
        x0 = x + gap if sx > 0 else x - gap - w if sx < 0 else x - w / 2
        y0 = y + gap if sy > 0 else y - gap - h if sy < 0 else y - h / 2
        out.append((x0, y0))
    return np.array(out, dtype=float)


def _grid(x: float, y: float, w: float, h: float, bounds: Box, step: float) -> np.ndarray:
    """Lower-left corners of a grid over ``bounds``, the box nearest ``(x, y)`` first."""
    xs = np.arange(bounds.x0, bounds.x1 - w + 1e-9, step)
    ys = np.arange(bounds.y0, bounds.y1 - h + 1e-9, step)
    if not (xs.size and ys.size):
        return np.empty((0, 2))
    gx, gy = (a.ravel() for a in np.meshgrid(xs, ys))
    dx = np.maximum(0.0, np.maximum(gx - x, x - (gx + w)))
    dy = np.maximum(0.0, np.maximum(gy - y, y - (gy + h)))
    order = np.lexsort((gx, gy, np.hypot(dx, dy)))
    return np.column_stack([gx[order], gy[order]])


def _first_free(corners: np.ndarray, w: float, h: float, bounds: Box,
                taken: Sequence[Box]) -> int | None:
    """Index of the first corner whose ``w`` x ``h`` box is inside ``bounds`` and meets no
    box of ``taken``; None if there is none."""
    if not corners.size:
        return None
    x0, y0 = corners[:, 0], corners[:, 1]
    x1, y1 = x0 + w, y0 + h
    ok = (x0 >= bounds.x0) & (x1 <= bounds.x1) & (y0 >= bounds.y0) & (y1 <= bounds.y1)
    for b in taken:
        ok &= ~((x0 < b.x1) & (b.x0 < x1) & (y0 < b.y1) & (b.y0 < y1))
    hits = np.flatnonzero(ok)
    return int(hits[0]) if hits.size else None


def place_labels(anchors: Sequence[tuple[float, float]], sizes: Sequence[tuple[float, float]],
                 *, bounds: Box, obstacles: Sequence[Box] = (), gap: float = 4.0,
                 step: float = 4.0, pad: float = 1.0, clear: float = 8.0,
                 around: Sequence[tuple[int, int]] = AROUND) -> list[Placement]:
    """Place one ``(width, height)`` label per anchor point so that no two labels, and no
    label and obstacle, overlap and every label lies inside ``bounds``.

    ``pad`` pixels of clearance are kept around every label; a label moved away from its
    anchor first looks for a spot ``clear`` pixels clear of everything (so that it does not
    sit beside another point it could be taken for), then for any free spot. Labels are
    placed in the order
    given (put the most important first). ``around``: the spots next to the anchor as
    (sign of x, sign of y) offsets, in the order tried (e.g. ``((1, -1), (-1, -1))``: right
    of and below the anchor, then left of and below it). Returns one :class:`Placement` per
    label.
    """
    if len(anchors) != len(sizes):
        raise ValueError(f"expected one size per anchor, got {len(sizes)} sizes for "
                         f"{len(anchors)} anchors")
    if not all(math.isfinite(v) for xy in (*anchors, *sizes) for v in xy):
        raise ValueError("expected finite anchors and sizes, got NaN or infinity")
    taken = [b.grown(pad) for b in obstacles]
    out = []
    for (x, y), (w, h) in zip(anchors, sizes, strict=True):
        w2, h2 = w + 2 * pad, h + 2 * pad
        placement = Placement(None)
        grid = _grid(x, y, w2, h2, bounds, step)
        for leader, corners, margin in ((False, _around(x, y, w2, h2, gap - pad, around), 0),
                                        (True, grid, clear), (True, grid, 0)):
            k = _first_free(corners, w2, h2, bounds,
                            [b.grown(margin) for b in taken] if margin else taken)
            if k is not None:
                cx, cy = corners[k]
                box = Box(float(cx), float(cy), float(cx + w2), float(cy + h2))
                taken.append(box)
                placement = Placement(box.grown(-pad), leader)
                break
        out.append(placement)
    return out
