"""Point labels on matplotlib axes that overlap nothing: measured, then placed.

Call :func:`annotate_free` after the figure's layout is final (after ``tight_layout``): it draws
the canvas, measures each label with the renderer (``Text.get_window_extent``) and every
obstacle artist (markers, legend, title), and puts each label at the first free spot that
:func:`calimon.plotting.placement.place_labels` finds inside the axes. matplotlib is not
imported here; the artists come from the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from calimon.plotting.placement import AROUND, Box, place_labels

__all__ = ["annotate_free", "box_of", "list_left_out"]

LEADER = {"arrowstyle": "-", "color": "0.35", "linewidth": 0.6, "shrinkA": 1, "shrinkB": 3}


def box_of(artist: Any, renderer: Any) -> Box:
    """The artist's box on the canvas, in display pixels (y up). For an annotation, the box
    of its text alone (without its leader line)."""
    from matplotlib.text import Text

    if isinstance(artist, Text):
        bb = Text.get_window_extent(artist, renderer)
    else:
        bb = artist.get_window_extent(renderer)
    return Box(float(bb.x0), float(bb.y0), float(bb.x1), float(bb.y1))


def annotate_free(ax: Any, items: Sequence[tuple[str, tuple[float, float]]], *,
                  obstacles: Sequence[Any] = (), fontsize: float = 7, rotation: float = 0,
                  gap_points: float = 5.0, around: Sequence[tuple[int, int]] = AROUND) -> list[Any]:
    """Annotate each ``(text, (x, y))`` data point of ``ax`` so that no label overlaps another,
    an obstacle artist or the axes title, and every label stays inside the axes.

    ``gap_points``: the distance from a point to its label when the label sits next to it
    (it must clear the point's own marker). A label far from its point gets a thin leader
    line. Returns one entry per item: the
    annotation, or None where no free spot exists (the caller says so elsewhere).
    """
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    style = {"fontsize": fontsize, "rotation": rotation, "ha": "left", "va": "bottom"}
    sizes = []
    for text, _ in items:
        probe = ax.text(0, 0, text, transform=None, **style)
        b = box_of(probe, renderer)
        sizes.append((b.x1 - b.x0, b.y1 - b.y0))
        probe.remove()
    anchors = [tuple(ax.transData.transform(xy)) for _, xy in items]
    blocked = [box_of(a, renderer) for a in (*obstacles, ax.title) if a is not None
               and a.get_visible() and (not hasattr(a, "get_text") or a.get_text())]
    placed = place_labels(anchors, sizes, bounds=box_of(ax.patch, renderer),
                          obstacles=blocked, around=around,
                          gap=gap_points * fig.dpi / 72)
    out = []
    for (text, xy), (px, py), p in zip(items, anchors, placed, strict=True):
        if p.box is None:
            out.append(None)
            continue
        out.append(ax.annotate(text, xy, xytext=(p.box.x0 - px, p.box.y0 - py),
                               textcoords="offset pixels", annotation_clip=False,
                               arrowprops=dict(LEADER) if p.leader else None, **style))
    return out


def list_left_out(fig: Any, texts: Sequence[str]) -> None:
    """Name the labels that :func:`annotate_free` found no room for (None entries) in the
    figure's bottom-left corner, so that none is silently dropped."""
    if texts:
        fig.text(0.005, 0.005, "no room on the axes for: " + "; ".join(texts), fontsize=6,
                 ha="left", va="bottom")
