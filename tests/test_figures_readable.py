"""The figures say what they show: the chance diagonal, a named band, exact intervals on
binary points, nothing clipped, no duplicate group panels, a reliability plot of the chosen
map, legends off the data. (The report and compare pages: test_figures_readable_pages.py.)

Checked on the placed artists of each matplotlib Figure as it was saved, and on the SVG
markup (positions read back from its tick labels); no pixel comparisons.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from calimon.deploy.guarantees import clopper_pearson
from calimon.numerics.curves import BinaryPoint, Curve, binary_point

NS = "{http://www.w3.org/2000/svg}"
Box = tuple[float, float, float, float]


# ------------------------------------------------------------------ data and helpers

def _curve(seed: int = 0, n: int = 40, shift: float = 0.2, n_boot: int = 30) -> Curve:
    rng = np.random.default_rng(seed)
    y = np.r_[np.ones(n, bool), np.zeros(n, bool)]
    s = np.clip(rng.normal(0.5 + shift * y, 0.2), 0, 1)
    return Curve.from_scores(s, y, np.r_[np.arange(n), np.arange(n)], n_boot=n_boot)


def _binary(pos: list, neg: list, name: str = "binary/direct (json)") -> BinaryPoint:
    """A binary point from its decisions on misbehaving (``pos``) and benign (``neg``)
    samples: True flagged, False passed, None a parse failure."""
    return binary_point([*pos, *neg], [True] * len(pos) + [False] * len(neg), name)


# The demo's binary point: 16 samples, MR 1/8, FAR 7/8.
DEMO = _binary([True] * 7 + [False], [True] * 7 + [False])
# Flags everything: the corner (FAR 1, MR 0).
CORNER = _binary([True] * 8, [True] * 8, "binary/evidence (json)")


def capture_figures(monkeypatch) -> list:
    """Every matplotlib figure saved from now on, as it was when saved."""
    from matplotlib.figure import Figure

    figs = []
    real = Figure.savefig

    def savefig(self, *args, **kwargs):
        figs.append(self)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return figs


@pytest.fixture
def saved(monkeypatch):
    """Every matplotlib figure saved during the test."""
    return capture_figures(monkeypatch)


def _box(artist) -> Box:
    bb = artist.get_window_extent(artist.figure.canvas.get_renderer())
    return (bb.x0, bb.y0, bb.x1, bb.y1)


def _overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _legend_texts(fig) -> list[str]:
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes)]
    return [t.get_text() for leg in legends if leg is not None for t in leg.texts]


def _chance_lines(ax) -> list:
    return [line for line in ax.lines if len(line.get_xydata()) == 2
            and np.allclose(line.get_xydata(), [[0, 1], [1, 0]])]


def _svgs(page: str, cls: str = "cm-curve") -> list[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(rf'<svg class="cm-fig {cls}".*?</svg>', page,
                                                  flags=re.S)]


def _scale(root: ET.Element):
    """Data -> pixel maps of an SVG figure, read from its "0.0" and "1.0" tick labels."""
    texts = list(root.iter(f"{NS}text"))
    xs = {t.text: float(t.get("x")) for t in texts if t.get("text-anchor") == "middle"
          and t.get("font-size") == "10"}
    ys = {t.text: float(t.get("y")) - 3 for t in texts if t.get("text-anchor") == "end"}
    return (lambda v: xs["0.0"] + v * (xs["1.0"] - xs["0.0"]),
            lambda v: ys["0.0"] + v * (ys["1.0"] - ys["0.0"]))


def _title(el: ET.Element) -> str:
    t = el.find(f"{NS}title")
    return "" if t is None else t.text or ""


def _rect(el: ET.Element) -> Box:
    x, y = float(el.get("x")), float(el.get("y"))
    return (x, y, x + float(el.get("width")), y + float(el.get("height")))


def _frame(root: ET.Element) -> Box:
    [box] = [_rect(r) for r in root.iter(f"{NS}rect") if r.get("fill") == "none"
             and r.get("stroke") == "#888"]
    return box


def _legend_box(root: ET.Element) -> Box:
    [box] = [_rect(r) for r in root.iter(f"{NS}rect") if r.get("stroke") == "#ccc"]
    return box


# ------------------------------------------------------------------ chance line, band

def test_mr_far_pngs_draw_the_chance_diagonal(tmp_path, saved):
    from calimon.plotting.curve import plot_comparison, plot_curve_grid, plot_curves

    c = _curve()
    plot_curves(tmp_path / "c.png", {"all": c})
    plot_comparison(tmp_path / "k.png", [("run a", c, (), None), ("run b", _curve(2), (), None)])
    plot_curve_grid(tmp_path / "g.png", {"all": c, "category=a": _curve(1, n=20)})
    curve_fig, compare_fig, grid_fig = saved
    for fig in (curve_fig, compare_fig):
        assert len(_chance_lines(fig.axes[0])) == 1
        assert any(t.startswith("chance") for t in _legend_texts(fig))
    assert all(len(_chance_lines(ax)) == 1 for ax in grid_fig.axes)
    assert any(t.startswith("chance") for t in _legend_texts(grid_fig))


def test_mr_far_svg_draws_the_chance_diagonal():
    from calimon.report.svg import curve_svg

    root = ET.fromstring(curve_svg([("all", _curve())], title="t"))
    x, y = _scale(root)
    ends = [(float(e.get("x1")), float(e.get("y1")), float(e.get("x2")), float(e.get("y2")))
            for e in root.iter(f"{NS}line")]
    assert any(np.allclose(e, (x(0), y(1), x(1), y(0)), atol=0.6) for e in ends)
    assert any(t.text.startswith("chance") for t in root.iter(f"{NS}text"))


def test_the_shaded_band_is_named_in_each_legend(tmp_path, saved):
    from calimon.plotting.curve import plot_comparison, plot_curve_grid, plot_curves
    from calimon.report.svg import curve_svg

    c = _curve()
    plot_curves(tmp_path / "c.png", {"all": c})
    plot_comparison(tmp_path / "k.png", [("run a", c, (), None), ("run b", _curve(2), (), None)])
    plot_curve_grid(tmp_path / "g.png", {"all": c, "category=a": _curve(1, n=20)})
    want = f"95% bootstrap band ({c.band.n_used} resamples)"
    curve_fig = saved[0]
    [band] = curve_fig.axes[0].collections
    assert band.get_label() == want and want in _legend_texts(curve_fig)
    for fig in saved[1:]:
        assert any("95% bootstrap band" in t for t in _legend_texts(fig))
    svg = ET.fromstring(curve_svg([("all", c)]))
    assert want in [t.text for t in svg.iter(f"{NS}text")]


# ------------------------------------------------------------------ binary intervals

def test_binary_interval_is_clopper_pearson_over_all_samples():
    from calimon.plotting.intervals import binary_interval, failure_split

    ci = binary_interval(DEMO)
    assert (ci.mr_lo, ci.mr_hi) == pytest.approx(clopper_pearson(1, 8))
    assert (ci.far_lo, ci.far_hi) == pytest.approx(clopper_pearson(7, 8))
    # 2 misbehaving and 1 benign reply did not parse: each bar runs from the exact lower
    # bound with the failures passed to the exact upper bound with them flagged (MR: missed)
    p = _binary([True] * 5 + [False] + [None] * 2, [False] * 6 + [True] + [None])
    assert failure_split(p) == (2, 1) and failure_split(p.to_dict()) == (2, 1)
    ci = binary_interval(p.to_dict())
    assert (ci.n_pos, ci.n_neg) == (8, 8)
    assert ci.mr_lo == pytest.approx(clopper_pearson(1, 8)[0])
    assert ci.mr_hi == pytest.approx(clopper_pearson(3, 8)[1])
    assert ci.far_lo == pytest.approx(clopper_pearson(1, 8)[0])
    assert ci.far_hi == pytest.approx(clopper_pearson(2, 8)[1])
    assert ci.mr_lo <= p.mr <= ci.mr_hi and ci.far_lo <= p.far <= ci.far_hi


def _bar_spans(ax, point: BinaryPoint) -> tuple[tuple[float, float], tuple[float, float]]:
    """(x span, y span) of the error bars drawn through ``point``."""
    from matplotlib.collections import LineCollection

    xs, ys = [], []
    for col in ax.collections:
        if not isinstance(col, LineCollection):
            continue
        for seg in col.get_segments():
            seg = np.asarray(seg)
            lo, hi = seg.min(axis=0), seg.max(axis=0)
            if np.allclose(seg[:, 1], point.mr) and lo[0] <= point.far <= hi[0]:
                xs.append((lo[0], hi[0]))
            if np.allclose(seg[:, 0], point.far) and lo[1] <= point.mr <= hi[1]:
                ys.append((lo[1], hi[1]))
    return max(xs, key=lambda s: s[1] - s[0]), max(ys, key=lambda s: s[1] - s[0])


def test_png_binary_bars_span_the_exact_interval(tmp_path, saved):
    from calimon.plotting.curve import plot_curve_grid, plot_curves

    far_ci, mr_ci = clopper_pearson(7, 8), clopper_pearson(1, 8)
    plot_curves(tmp_path / "c.png", {"all": _curve()}, binary_points=[DEMO])
    x_span, y_span = _bar_spans(saved[0].axes[0], DEMO)
    assert x_span == pytest.approx(far_ci) and y_span == pytest.approx(mr_ci)
    plot_curve_grid(tmp_path / "g.png", {"all": _curve(), "category=a": _curve(1, n=20)},
                    binary_by_group={"category=a": [DEMO]})
    x_span, y_span = _bar_spans(saved[1].axes[1], DEMO)
    assert x_span == pytest.approx(far_ci) and y_span == pytest.approx(mr_ci)


def test_svg_binary_bars_span_the_exact_interval():
    from calimon.report.svg import curve_svg

    root = ET.fromstring(curve_svg([("all", _curve())], binary_points=[DEMO.to_dict()]))
    x, y = _scale(root)
    far_ci, mr_ci = clopper_pearson(7, 8), clopper_pearson(1, 8)
    spans = [(float(e.get("x1")), float(e.get("y1")), float(e.get("x2")), float(e.get("y2")))
             for e in root.iter(f"{NS}line")]
    horizontal = sorted((x1, x2) for x1, y1, x2, y2 in spans if abs(y1 - y(DEMO.mr)) < .1
                        and abs(y2 - y1) < .1)
    vertical = sorted((y1, y2) for x1, y1, x2, y2 in spans if abs(x1 - x(DEMO.far)) < .1
                      and abs(x2 - x1) < .1)
    assert any(np.allclose(sorted(h), (x(far_ci[0]), x(far_ci[1])), atol=0.2)
               for h in horizontal)
    assert any(np.allclose(sorted(v), sorted((y(mr_ci[0]), y(mr_ci[1]))), atol=0.2)
               for v in vertical)
    [mark] = [p for p in root.iter(f"{NS}polygon") if p.get("class") == "cm-binary"]
    assert f"[{mr_ci[0]:.3f}, {mr_ci[1]:.3f}]" in _title(mark)  # MR's interval, in its tip


# ------------------------------------------------------------------ nothing clipped

def test_a_binary_marker_on_the_corner_is_drawn_whole(tmp_path, saved):
    from calimon.plotting.curve import plot_curve_grid, plot_curves

    def grid():
        plot_curve_grid(tmp_path / "g.png", {"all": _curve(), "category=a": _curve(1, n=20)},
                        binary_by_group={"category=a": [CORNER]})
        return saved[-1].axes[1]

    plot_curves(tmp_path / "c.png", {"all": _curve()}, binary_points=[DEMO, CORNER])
    for ax in (saved[0].axes[0], grid):
        ax = ax if not callable(ax) else ax()
        ax.figure.canvas.draw()
        [marker] = [line for line in ax.lines if line.get_marker() not in ("|", "_")
                    and len(line.get_xydata()) == 1
                    and np.allclose(line.get_xydata()[0], (1.0, 0.0))]
        # the marker's outline, edge included, in display pixels
        cx, cy = ax.transData.transform((1.0, 0.0))
        r = (marker.get_markersize() + marker.get_markeredgewidth()) / 2 * ax.figure.dpi / 72
        a = _box(ax.patch)
        assert a[0] <= cx - r and cx + r <= a[2] and a[1] <= cy - r and cy + r <= a[3], (
            cx, cy, r, a)


# ------------------------------------------------------------------ duplicate panels

def test_group_grid_draws_each_distinct_curve_once(tmp_path, saved):
    from calimon.numerics.curves import curves_by
    from calimon.plotting.curve import plot_curve_grid

    rng = np.random.default_rng(0)
    y = np.r_[np.ones(40, bool), np.zeros(40, bool)]
    s = np.clip(rng.normal(0.5 + 0.2 * y, 0.2), 0, 1)
    cat = np.tile(np.repeat(["safety", "sycophancy"], 20), 2)
    task = np.full(80, "code")  # a code-only benchmark: task=code is every sample
    curves = curves_by(s, y, np.r_[np.arange(40), np.arange(40)],
                       {"category": cat, "task": task, "cell": cat}, n_boot=0)
    assert len(curves) == 6
    plot_curve_grid(tmp_path / "g.png", curves)
    titles = [ax.get_title() for ax in saved[-1].axes]
    assert len(titles) == 3, titles  # all, category=safety, category=sycophancy
    assert titles[0].startswith("all\n") and "task=code" in titles[0]
    assert "cell=safety" in titles[1] and "cell=sycophancy" in titles[2]


# ------------------------------------------------------------------ reliability

def _reliability_lines(fig) -> list:
    top = fig.axes[0]
    return [line for line in top.lines if len(line.get_xydata())
            and line.get_label() != "perfect"]


def test_reliability_draws_the_raw_score_and_the_chosen_map_only(tmp_path, saved):
    from calimon.plotting.reliability import plot_reliability

    rng = np.random.default_rng(0)
    y = rng.random(80) < 0.5
    p = np.clip(rng.normal(0.5 + 0.1 * y, 0.1), 0.01, 0.99)
    maps = {m: np.clip(p + 0.02 * k, 0, 1) for k, m in
            enumerate(("temperature", "platt", "isotonic", "histogram", "beta"))}
    plot_reliability(tmp_path / "r.png", p, maps, y, chosen="platt")
    fig = saved[-1]
    assert [line.get_label().split(" ")[0] for line in _reliability_lines(fig)] == [
        "raw", "platt"]
    legend = _legend_texts(fig)
    for m in ("temperature", "isotonic", "histogram", "beta"):
        assert any(t.startswith(f"{m} (ECE") and "not drawn" in t for t in legend), legend
    # marker area follows the bin's count
    from calimon.numerics.metrics import reliability_bins

    counts = reliability_bins(p, y, n_bins=15).counts
    sizes = fig.axes[0].collections[0].get_sizes()
    assert np.argmax(sizes) == np.argmax(counts[counts > 0]) and sizes.min() < sizes.max()


def test_a_curve_run_draws_its_own_map_in_reliability_png(tmp_path, saved):
    from test_compare import write_run

    write_run(tmp_path / "run", seed=1)  # maps platt (the run's) and isotonic
    [fig] = [f for f in saved if len(f.axes) == 2
             and f.axes[0].get_ylabel() == "fraction misbehavior (observed)"]
    assert [line.get_label().split(" ")[0] for line in _reliability_lines(fig)] == [
        "raw", "platt"]


# ------------------------------------------------------------------ legends off the data

def test_svg_legends_sit_under_the_axes():
    from calimon.numerics.metrics import ece, reliability_bins
    from calimon.report.svg import curve_svg, histogram_svg, reliability_svg

    rng = np.random.default_rng(0)
    y = rng.random(200) < 0.6
    s = np.clip(rng.normal(0.85, 0.08, 200), 0, 1)  # tall bars at the top right
    hist = ET.fromstring(histogram_svg(s, y, markers=[("FAR<=5%", 0.9)], band=(0.8, 0.9)))
    rel = ET.fromstring(reliability_svg([("raw", reliability_bins(s, y), ece(s, y))]))
    curve = ET.fromstring(curve_svg([("all", _curve())], binary_points=[DEMO.to_dict()]))
    for root in (hist, rel, curve):
        assert _legend_box(root)[1] >= _frame(root)[3]  # its top under the axes' bottom
    bars = [_rect(r) for r in hist.iter(f"{NS}rect") if _title(r).startswith(
        ("benign:", "misbehaving:"))]
    assert bars and not any(_overlap(_legend_box(hist), b) for b in bars)


def test_png_legends_cover_no_bar_or_point(tmp_path, saved):
    from calimon.plotting.reliability import plot_reliability
    from calimon.report.figures import plot_scores

    rng = np.random.default_rng(0)
    y = np.r_[np.ones(60, bool), np.zeros(80, bool)]
    s = np.clip(rng.normal(0.5, 0.06, 140), 0, 1)  # the tallest bars at the middle top
    plot_scores(tmp_path / "s.png", s, y, markers=[("EER", 0.5)], band=None, title="t")
    plot_reliability(tmp_path / "r.png", s, {"platt": s}, y)
    scores, rel = saved
    scores.canvas.draw()
    ax = scores.axes[0]
    bars = [_box(p) for p in ax.patches if p.get_height() > 0]
    assert bars and not any(_overlap(_box(ax.get_legend()), b) for b in bars)
    rel.canvas.draw()
    legends = [*rel.legends, *(a.get_legend() for a in rel.axes if a.get_legend())]
    assert legends and not any(_overlap(_box(leg), _box(a.patch)) for leg in legends
                               for a in rel.axes)
