"""Reliability diagram: raw and calibrated scores against the diagonal, with bin counts.

Drawing only; the numbers come from :func:`calimon.numerics.metrics.reliability_bins` and
:func:`calimon.numerics.metrics.ece`. matplotlib is imported when a plot is drawn, and the figure is
rendered with the Agg canvas directly, so no global pyplot backend is touched.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from calimon.errors import InputError
from calimon.numerics.metrics import as_probabilities, ece, reliability_bins
from calimon.validation import as_labels

__all__ = ["plot_reliability"]


def _series(p_before: Any, p_after_by_method: Any, y: Any) -> tuple[dict, np.ndarray]:
    """``{"raw": scores, method: scores, ...}`` and the labels, checked."""
    raw = as_probabilities(p_before, name="p_before")
    labels = as_labels(y, n=raw.shape[0], name="y", dtype=np.int64)
    if not isinstance(p_after_by_method, Mapping):
        raise InputError(f"expected a dict of method name -> scores, got "
                         f"{type(p_after_by_method).__name__}", field="p_after_by_method")
    series = {"raw": raw}
    for name, scores in p_after_by_method.items():
        field = f"p_after_by_method[{name!r}]"
        arr = as_probabilities(scores, name=field)
        if arr.shape != raw.shape:
            raise InputError(f"expected {raw.shape[0]} scores (as many as p_before), got "
                             f"{arr.shape[0]}", field=field)
        series[str(name)] = arr
    return series, labels


def plot_reliability(path: str | os.PathLike[str], p_before: Any,
                     p_after_by_method: Mapping[str, Any], y: Any, n_bins: int = 15,
                     title: str = "", *, strategy: str = "uniform", dpi: int = 150,
                     chosen: str | None = None) -> Path:
    """Write a PNG reliability diagram of ``p_before`` and the calibrated scores; return the
    path.

    Top panel: fraction of positives against mean score per bin (non-empty bins only, marker
    area following the bin's count, so that a bin of one sample does not read as a finding),
    the diagonal, ECE in the legend under the figure. Bottom panel: samples per bin.
    ``chosen``: the run's map; when given, only the raw score and that map are drawn and the
    other maps' ECEs are listed in the legend (six lines on a small set are noise). Without
    it every map is drawn.
    """
    series, labels = _series(p_before, p_after_by_method, y)
    others = {}
    if chosen is not None:
        others = {k: v for k, v in series.items() if k not in ("raw", chosen)}
        series = {k: v for k, v in series.items() if k in ("raw", chosen)}

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0, 7.0), layout="constrained")
    FigureCanvasAgg(fig)
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    top.plot([0, 1], [0, 1], linestyle="--", color="0.5", linewidth=1, label="perfect")
    n = labels.shape[0]
    for i, (name, scores) in enumerate(series.items()):
        rb = reliability_bins(scores, labels, n_bins=n_bins, strategy=strategy)
        filled = rb.counts > 0
        style = {"color": "0.2", "linestyle": ":"} if i == 0 else {"color": f"C{i - 1}"}
        top.plot(rb.mean_confidence[filled], rb.accuracy[filled], linewidth=1.2,
                 label=f"{name} (ECE {ece(scores, labels, n_bins, strategy):.3f})", **style)
        top.scatter(rb.mean_confidence[filled], rb.accuracy[filled], color=style["color"],
                    s=8 + 150 * rb.counts[filled] / max(1, n), alpha=0.8, zorder=3)
        bottom.stairs(rb.counts, rb.edges, **style)
    for name, scores in others.items():
        top.plot([], [], linestyle="none",
                 label=f"{name} (ECE {ece(scores, labels, n_bins, strategy):.3f}, not drawn)")
    top.set(xlim=(0, 1), ylim=(0, 1), ylabel="fraction misbehavior (observed)",
            title=title or f"Reliability ({n_bins} {strategy} bins, n = {n})")
    bottom.set(xlabel="predicted probability of misbehavior", ylabel="count")
    bottom.set_yscale("symlog", linthresh=1)
    fig.legend(loc="outside lower center", fontsize="small", ncols=2,
               title=f"{n_bins} {strategy} bins, n = {n}; marker area: samples in the bin",
               title_fontsize="small")

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi, format="png")
    return out
