"""Operating-point labels never overlap each other, a marker, the legend or the title, and
stay inside the axes, on the PNG figures: boxes measured by matplotlib's renderer on each
figure as it was saved. (The placer itself: test_plotting_placement.py.)"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from calimon.numerics.curves import BinaryPoint, Curve, OperatingPoint

# Three FAR targets close together at the top-left corner, just under the title, with two
# binary points among them: the crowded case of a weak monitor.
CROWDED_OPS = (OperatingPoint("FAR<=1%", math.inf, 1.0, 0.0, 0, 0, 50, 40),
               OperatingPoint("FAR<=5%", 0.91, 0.975, 0.04, 1, 2, 48, 39),
               OperatingPoint("FAR<=10%", 0.88, 0.95, 0.08, 2, 4, 46, 38),
               OperatingPoint("EER", 0.6, 0.45, 0.45, 22, 22, 28, 18),
               OperatingPoint("min cost", 0.58, 0.42, 0.5, 23, 25, 25, 17))
CROWDED_BINARY = (BinaryPoint("binary/direct", 0.96, 0.06, 1, 3, 45, 38, 2, 0.94, 0.98,
                              0.05, 0.08),
                  BinaryPoint("binary/evidence", 0.99, 0.02, 0, 1, 48, 39, 1, 0.98, 1.0,
                              0.01, 0.03))


def _weak_curve() -> Curve:
    rng = np.random.default_rng(3)
    y = np.r_[np.ones(40, bool), np.zeros(50, bool)]
    s = np.clip(rng.normal(0.5 + 0.05 * y, 0.2), 0, 1)
    return Curve.from_scores(s, y, n_boot=0)


Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in display pixels


def _overlap(a: Box, b: Box, tol: float = 0.5) -> bool:
    """The boxes share more than ``tol`` pixels each way."""
    return (a[0] < b[2] - tol and b[0] < a[2] - tol and a[1] < b[3] - tol
            and b[1] < a[3] - tol)


def _within(a: Box, b: Box, tol: float = 0.5) -> bool:
    return b[0] - tol <= a[0] and a[2] <= b[2] + tol and b[1] - tol <= a[1] and a[3] <= b[3] + tol


def box_clashes(labels: dict[str, Box], others: dict[str, Box], axes: Box) -> list[str]:
    """Every label box that leaves ``axes`` or overlaps another label or one of ``others``,
    by name (shared by the PNG and the SVG tests)."""
    out = [f"{n} leaves the axes" for n, lab in labels.items() if not _within(lab, axes)]
    out += [f"{n} overlaps {o}" for n, lab in labels.items() for o, box in others.items()
            if _overlap(lab, box)]
    out += [f"{a} overlaps {b}" for (a, la), (b, lb) in
            itertools.combinations(labels.items(), 2) if _overlap(la, lb)]
    return out


# ------------------------------------------------------------------ PNG figures


@pytest.fixture
def saved(monkeypatch):
    """Every matplotlib figure saved during the test, as it was when saved."""
    from matplotlib.figure import Figure

    figs = []
    real = Figure.savefig

    def savefig(self, *args, **kwargs):
        figs.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return figs


def _box(artist, renderer) -> Box:
    from matplotlib.text import Text

    bb = (Text.get_window_extent(artist, renderer) if isinstance(artist, Text)
          else artist.get_window_extent(renderer))
    return (bb.x0, bb.y0, bb.x1, bb.y1)


def _marker_boxes(ax, points, renderer) -> list[Box]:
    """Boxes of the single-point markers drawn at ``points`` ((far, mr) pairs)."""
    out = []
    for line in ax.lines:
        xy = line.get_xydata()
        if len(xy) == 1 and any(np.allclose(xy[0], p) for p in points):
            out.append(_box(line, renderer))
    return out


def _clashes(fig, ops, binary) -> list[str]:
    """Every label that leaves the axes or overlaps another label, a marker, the legend or
    the title, by name; the labels and markers must all be found."""
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    names = {p.name for p in ops}
    labels = {t.get_text().split("\n")[0]: _box(t, renderer) for t in ax.texts
              if t.get_text().split("\n")[0] in names}
    assert len(labels) == len(ops)
    points = {f"marker {p.name}": (p.far, p.mr) for p in (*ops, *binary)}
    others = {name: box for name, xy in points.items()
              for box in _marker_boxes(ax, [xy], renderer)}
    assert len(others) == len(points)
    others |= {"title": _box(ax.title, renderer), "legend": _box(ax.get_legend(), renderer)}
    return box_clashes(labels, others, _box(ax.patch, renderer))


def test_curve_png_labels_clear_of_each_other_markers_and_title(tmp_path, saved):
    from calimon.plotting.curve import plot_curves

    plot_curves(tmp_path / "curve.png", {"all (calibrated)": _weak_curve()},
                binary_points=CROWDED_BINARY, operating_points=CROWDED_OPS,
                title="a long title over the crowded corner of the axes")
    clashes = _clashes(saved[-1], CROWDED_OPS, CROWDED_BINARY)
    assert not clashes, "; ".join(clashes)
    # the legend: the chance line, one row per series and binary point, what the bars are
    from calimon.plotting.marks import BINARY_NOTE
    from calimon.plotting.style import CHANCE_LABEL

    legend = [t.get_text() for t in saved[-1].axes[0].get_legend().texts]
    assert legend[1].startswith("all (calibrated) (AUROC") and sorted(
        legend[:1] + legend[2:]) == sorted([
            CHANCE_LABEL, BINARY_NOTE, "binary/direct (2 parse failures)",
            "binary/evidence (1 parse failures)"])


def test_curve_png_label_without_room_is_listed_under_the_axes(tmp_path, saved):
    from calimon.plotting.curve import plot_curves

    long = OperatingPoint("FAR<=1% " + "x" * 300, 0.9, 0.5, 0.5, 1, 1, 1, 1)
    plot_curves(tmp_path / "curve.png", {"all": _weak_curve()}, operating_points=[long])
    fig = saved[-1]
    assert not [t for t in fig.axes[0].texts if t.get_text().startswith("FAR<=1%")]
    [note] = [t.get_text() for t in fig.texts]
    assert note == f"no room on the axes for: {long.name} t=0.9"


def test_report_curve_png_labels_clear(tmp_path, saved):
    from calimon.report.data import RunData
    from calimon.report.figures import Figures, write_pngs

    curve = _weak_curve()
    summary = {"curves": {"all": curve.to_dict()}, "raw_curve": curve.to_dict(),
               "operating_points": [p.to_dict() for p in CROWDED_OPS],
               "binary_points": [b.to_dict() for b in CROWDED_BINARY],
               "provenance": {"model": "m", "prompt": "p", "readout": "verdict",
                              "benchmark": "b"}}
    data = RunData(run_dir=tmp_path, summary=summary, curve_sha256="", rows=())
    write_pngs(data, Figures.from_run(data), tmp_path, markers=[], band=None)
    [fig] = [f for f in saved if f.axes and f.axes[0].get_legend() is not None
             and "raw score" in " ".join(t.get_text() for t in f.axes[0].get_legend().texts)]
    clashes = _clashes(fig, CROWDED_OPS, CROWDED_BINARY)
    assert not clashes, "; ".join(clashes)


def test_report_scores_png_threshold_names_clear(tmp_path, saved):
    from calimon.report.figures import plot_scores

    rng = np.random.default_rng(0)
    y = np.r_[np.ones(60, bool), np.zeros(80, bool)]
    s = np.clip(rng.normal(0.45 + 0.1 * y, 0.15), 0, 1)
    # FAR<=5% and FAR<=10% one hundredth apart; EER and min cost under the legend
    markers = [("FAR<=1%", 0.86), ("FAR<=5%", 0.74), ("FAR<=10%", 0.73), ("EER", 0.52),
               ("min cost", 0.5)]
    plot_scores(tmp_path / "scores.png", s, y, markers=markers, band=(0.5, 0.74), title="t")
    fig = saved[-1]
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    names = {n for n, _ in markers}
    labels = {t.get_text(): _box(t, renderer) for t in ax.texts if t.get_text() in names}
    assert set(labels) == names
    others = {"title": _box(ax.title, renderer), "legend": _box(ax.get_legend(), renderer)}
    axes = _box(ax.patch, renderer)
    clashes = [f"{n} leaves the axes" for n, lab in labels.items() if not _within(lab, axes)]
    clashes += [f"{n} overlaps {o}" for n, lab in labels.items() for o, box in others.items()
                if _overlap(lab, box)]
    clashes += [f"{a} overlaps {b}" for (a, la), (b, lb) in
                itertools.combinations(labels.items(), 2) if _overlap(la, lb)]
    assert not clashes, "; ".join(clashes)
    # each name stays beside its own line: its box is within 20 px of the line
    for name, t in markers:
        x = ax.transData.transform((t, 0))[0]
        lab = labels[name]
        assert lab[0] - 20 <= x <= lab[2] + 20, (name, lab, x)
