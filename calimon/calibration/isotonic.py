"""Scikit-learn's ``IsotonicRegression(y_min=0, y_max=1, increasing=True).fit`` breakpoints,
computed as it computes them (sort by score then label, average the labels of equal scores,
pool adjacent violators as scipy's ``isotonic_regression`` does, clip, drop the redundant
breakpoints) without importing scikit-learn or scipy.optimize (three seconds of a `calimon curve`
on recorded scores). tests/test_isotonic.py checks the breakpoints are scikit-learn's own."""

from __future__ import annotations

import numpy as np

EPS = float(np.finfo(np.float64).resolution)  # scikit-learn's tolerance for equal scores


def isotonic_breakpoints(p: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fitted ``X_thresholds_`` and ``y_thresholds_`` of scores ``p`` and labels ``y``."""
    x = np.asarray(p, dtype=np.float64).reshape(-1)
    t = np.asarray(y, dtype=np.float64).reshape(-1)
    order = np.lexsort((t, x))
    ux, uy, uw = _unique(x[order].tolist(), t[order].tolist())
    fitted = np.clip(np.array(_pava(uy, uw), dtype=np.float64), 0.0, 1.0)
    keep = np.ones(fitted.size, dtype=bool)
    keep[1:-1] = (fitted[1:-1] != fitted[:-2]) | (fitted[1:-1] != fitted[2:])
    return np.array(ux, dtype=np.float64)[keep], fitted[keep]


def _unique(xs: list[float], ys: list[float]) -> tuple[list[float], list[float], list[float]]:
    """Scores closer than `EPS` to the first of a run merged, their labels averaged (weight 1
    each): scikit-learn's ``_make_unique``."""
    out_x, out_y, out_w = [], [], []
    cur_x, cur_y, cur_w = xs[0], 0.0, 0.0
    for x, y in zip(xs, ys, strict=True):
        if x - cur_x >= EPS:
            out_x.append(cur_x), out_w.append(cur_w), out_y.append(cur_y / cur_w)
            cur_x, cur_w, cur_y = x, 1.0, y * 1.0
        else:
            cur_w += 1.0
            cur_y += y * 1.0
    out_x.append(cur_x), out_w.append(cur_w), out_y.append(cur_y / cur_w)
    return out_x, out_y, out_w


def _pava(x: list[float], w: list[float]) -> list[float]:
    """Pool adjacent violators, line by line as scipy's ``pava`` (Busing 2022, Algorithm 1)."""
    x, w = list(x), list(w)
    n = len(x)
    r = [0] * (n + 1)
    r[1] = 1
    b = 0
    xb_prev, wb_prev = x[0], w[0]
    i = 1
    while i < n:
        b += 1
        xb, wb = x[i], w[i]
        if xb_prev >= xb:
            b -= 1
            sb = wb_prev * xb_prev + wb * xb
            wb += wb_prev
            xb = sb / wb
            while i < n - 1 and xb >= x[i + 1]:
                i += 1
                sb += w[i] * x[i]
                wb += w[i]
                xb = sb / wb
            while b > 0 and x[b - 1] >= xb:
                b -= 1
                sb += w[b] * x[b]
                wb += w[b]
                xb = sb / wb
        x[b] = xb_prev = xb
        w[b] = wb_prev = wb
        r[b + 1] = i + 1
        i += 1
    out = [0.0] * n
    for k in range(b + 1):
        out[r[k]:r[k + 1]] = [x[k]] * (r[k + 1] - r[k])
    return out


__all__ = ["isotonic_breakpoints"]
