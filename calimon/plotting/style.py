"""What the PNG and the SVG figures share: run colours, marker shapes, the axes' padding,
the legend's names for the chance line and the band, and which group panels are distinct."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["AXIS_PAD", "CHANCE_LABEL", "MARKERS", "PALETTE", "band_label", "distinct_groups",
           "run_color", "same_curve", "under_label"]

# matplotlib's tab10, written out so that the SVG pages use the very same colours.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf")
# Binary-point markers by prompt, in order (matplotlib names; the SVG draws the same shapes).
MARKERS = ("D", "s", "^", "v", "P", "X", "*", "<", ">")
# MR/FAR axes run from -AXIS_PAD to 1 + AXIS_PAD, so a marker on a corner is drawn whole.
AXIS_PAD = 0.035
CHANCE_LABEL = "chance (MR = 1 - FAR)"


def run_color(i: int) -> str:
    """The colour of run (or series) ``i``, the same in every figure and page."""
    return PALETTE[i % len(PALETTE)]


def under_label(name: str, auroc: float | None) -> str:
    """The legend entry of a curve drawn wide and pale under the main one (the raw score under
    the calibrated curve): what it is, its AUROC and how to tell it on the plot."""
    shown = "n/a" if auroc is None or auroc != auroc else f"{auroc:.3f}"
    return f"{name}: AUROC {shown}, the wide pale line beneath"


def band_label(band: Any) -> str:
    """Legend name of a curve's shaded band."""
    return f"{100 * band.level:.0f}% bootstrap band ({band.n_used} resamples)"


def same_curve(a: Any, b: Any) -> bool:
    """True if the two curves hold the same counts and the same sweep (so their panels
    would be the same picture)."""
    return (a.n_pos == b.n_pos and a.n_neg == b.n_neg
            and all(np.array_equal(np.asarray(x, float), np.asarray(y, float), equal_nan=True)
                    for x, y in ((a.thresholds, b.thresholds), (a.mr, b.mr),
                                 (a.far, b.far))))


def distinct_groups(curves: Mapping[str, Any]) -> list[tuple[str, Any, list[str]]]:
    """``(name, curve, names of the later groups with the same curve)`` for each group whose
    curve no earlier group already has, in the mapping's order (``"all"`` first if present):
    a group that covers every sample (e.g. ``task=code`` on a code-only benchmark) or that
    repeats another group is named with it, not drawn again."""
    out: list[tuple[str, Any, list[str]]] = []
    for name, curve in curves.items():
        twin = next((entry for entry in out if same_curve(entry[1], curve)), None)
        if twin is None:
            out.append((name, curve, []))
        else:
            twin[2].append(name)
    return out
