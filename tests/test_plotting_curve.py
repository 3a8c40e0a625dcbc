from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from calimon.errors import InputError
from calimon.numerics.curves import Curve, binary_point, curves_by
from calimon.plotting.curve import plot_curve_grid, plot_curves

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _data(n_pairs: int = 60, seed: int = 0):
    rng = np.random.default_rng(seed)
    y = np.r_[np.ones(n_pairs, bool), np.zeros(n_pairs, bool)]
    s = np.clip(rng.normal(0.5 + 0.25 * y, 0.2), 0, 1)
    pairs = np.r_[np.arange(n_pairs), np.arange(n_pairs)]
    cat = np.tile(rng.choice(["safety", "sycophancy", "spec_gaming"], n_pairs), 2)
    return s, y, pairs, cat


def _png_size(path) -> tuple[int, int]:
    from matplotlib.image import imread

    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    h, w = imread(path).shape[:2]
    return w, h


def test_plot_curves_writes_a_png(tmp_path):
    s, y, pairs, _ = _data()
    c = Curve.from_scores(s, y, pairs, n_boot=50)
    undefined = Curve.from_scores(s[y], y[y], n_boot=0)
    dec = [bool(v) if i % 7 else None for i, v in enumerate(s >= 0.6)]
    points = [binary_point(dec, y, "json direct"),
              binary_point([None] * int(y.sum()) + [False] * int((~y).sum()), y, "all failed")]
    out = plot_curves(tmp_path / "sub" / "curve.png", {"all": c, "only positives": undefined},
                      binary_points=points, operating_points=c.operating_points(),
                      title="test")
    assert out == tmp_path / "sub" / "curve.png"
    w, h = _png_size(out)
    assert w > 300 and h > 300 and out.stat().st_size > 10_000


def test_plot_curves_with_only_binary_points(tmp_path):
    p = binary_point([True, False, None, True], [1, 1, 0, 0], "evidence")
    assert _png_size(plot_curves(tmp_path / "b.png", {}, [p]))[0] > 0


def test_plot_curve_grid_writes_a_png(tmp_path):
    s, y, pairs, cat = _data()
    task = np.where(y, "code", "qa")           # both task panels are one-class
    curves = curves_by(s, y, pairs, {"category": cat, "task": task}, n_boot=20)
    out = plot_curve_grid(tmp_path / "grid.png", curves, ncols=3, title="by group")
    one_row = plot_curve_grid(tmp_path / "row.png", dict(list(curves.items())[:3]), ncols=3)
    assert len(curves) == 6 and out.stat().st_size > 10_000
    assert _png_size(out)[1] > 1.5 * _png_size(one_row)[1]   # two rows of three panels


def test_empty_input_is_refused(tmp_path):
    with pytest.raises(InputError, match="curves"):
        plot_curves(tmp_path / "x.png", {})
    with pytest.raises(InputError, match="curves_by_group"):
        plot_curve_grid(tmp_path / "x.png", {})
    with pytest.raises(InputError, match="ncols"):
        plot_curve_grid(tmp_path / "x.png", {"a": Curve.from_scores([0.1, 0.9], [0, 1])}, 0)
    assert not (tmp_path / "x.png").exists()


def test_importing_does_not_load_matplotlib():
    code = ("import sys, calimon.numerics.curves, calimon.numerics.bootstrap, calimon.plotting.curve; "
            "print('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
