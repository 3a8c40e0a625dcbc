"""Safety against the audit budget, at ControlArena's percentile threshold and at the certified
one, each with its exact interval as a band (`calimon.deploy.control_safety`).

Drawing only: ``result`` is a `ControlSafety` (read by attribute: this layer imports nothing
above it). matplotlib is imported when a plot is drawn, on the Agg canvas, so no global pyplot
backend is touched.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from calimon.plotting.style import run_color

__all__ = ["plot_safety", "safety_series"]

TICKS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5)


def safety_series(rows: Any, which: str) -> tuple[list[float], list[float], list[float],
                                                  list[float]]:
    """``(budgets, safety, low, high)`` of one threshold (``percentile`` or ``certified``)
    over ``rows``; a budget whose threshold is absent (not certified) is left out."""
    out: tuple[list[float], list[float], list[float], list[float]] = ([], [], [], [])
    for row in rows:
        at = getattr(row, which)
        if at is None:
            continue
        for seq, v in zip(out, (row.budget, at.safety, at.low, at.high), strict=True):
            seq.append(float(v))
    return out


def plot_safety(path: str | os.PathLike[str], result: Any, *, title: str = "",
                dpi: int = 150) -> Path:
    """Write the PNG of safety against the audit budget (log axis, in percent) over
    ``result.sweep`` (``result.rows`` when it has none), the requested budgets marked; return
    the path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    rows = result.sweep or result.rows
    level = f"{100 * result.level:g}%"
    fig = Figure(figsize=(7.0, 5.0), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    series = (("percentile", 0, f"percentile threshold (ControlArena): safety, {level} "
                                "interval; audit rate not bounded"),
              ("certified", 2, f"certified threshold: audit rate <= budget at "
                               f"{100 * (1 - result.audit_delta):g}%; safety, {level} interval"))
    for which, color, label in series:
        x, y, lo, hi = safety_series(rows, which)
        if not x:
            ax.plot([], [], color=run_color(color), label=label + " (no budget certified)")
            continue
        ax.fill_between(x, lo, hi, color=run_color(color), alpha=0.2, linewidth=0)
        ax.plot(x, y, color=run_color(color), linewidth=1.6, label=label)
        mx, my, mlo, mhi = safety_series(result.rows, which)
        ax.errorbar(mx, my, yerr=[[a - b for a, b in zip(my, mlo, strict=True)],
                                  [b - a for a, b in zip(my, mhi, strict=True)]],
                    fmt="o", color=run_color(color), capsize=3, markersize=5)
    ax.set_xscale("log")
    budgets = [float(r.budget) for r in rows]
    ax.set_xticks([t for t in TICKS if min(budgets) <= t <= max(budgets)], minor=False)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{100 * v:g}%"))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
    ax.set(ylim=(-0.02, 1.02), xlabel="audit budget (share of honest runs audited)",
           ylabel="safety: caught / (caught + uncaught successful)",
           title=title or "safety against the audit budget")
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(loc="outside lower center", fontsize="small", ncols=1,
               title=f"{result.n_honest} honest, {result.n_attack} attack runs; bands: exact "
                     "pointwise intervals; dots: the requested budgets",
               title_fontsize="small")
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi, format="png")
    return out
