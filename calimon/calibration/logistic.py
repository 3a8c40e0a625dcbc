"""The maximum-likelihood logistic fit behind the parametric calibration maps (temperature,
Platt, beta): Newton's method with an Armijo line search and a ridge of ``1e-8`` on the slopes
only (never the intercept), which keeps the parameters finite on a perfectly separable set."""

from __future__ import annotations

import numpy as np

RIDGE = 1e-8


def expit(x):
    """The logistic sigmoid ``1 / (1 + exp(-x))``, as ``scipy.special.expit`` computes it,
    in numpy: importing scipy.special cost half a second of every `calimon curve`."""
    with np.errstate(over="ignore"):  # exp(-x) = inf for x < -709: the sigmoid is then 0
        return 1.0 / (1.0 + np.exp(-np.asarray(x, dtype=float)))


def fit_logistic(X: np.ndarray, y: np.ndarray, *, intercept: bool = True,
                 ridge: float = RIDGE) -> tuple[np.ndarray, float]:
    """Minimise mean log-loss of ``sigmoid(X @ w + c)`` + ``ridge/2 * |w|^2`` (Newton + Armijo)."""
    n, k = X.shape
    A = np.hstack([X, np.ones((n, 1))]) if intercept else X
    pen = np.r_[np.full(k, ridge), np.zeros(A.shape[1] - k)]
    theta = np.zeros(A.shape[1])

    def objective(t: np.ndarray) -> float:
        z = A @ t
        return float(np.mean(np.logaddexp(0.0, z) - y * z) + 0.5 * np.sum(pen * t * t))

    for _ in range(200):
        s = expit(A @ theta)
        grad = A.T @ (s - y) / n + pen * theta
        hess = (A * (s * (1.0 - s))[:, None]).T @ A / n + np.diag(pen + 1e-14)
        try:
            step = np.linalg.solve(hess, grad)
        except np.linalg.LinAlgError:
            step = np.linalg.lstsq(hess, grad, rcond=None)[0]
        decrement = float(grad @ step)  # squared Newton decrement: twice the predicted gain
        if not decrement > 1e-24:
            break
        if decrement < 1e-8:
            # quadratic-convergence region: full steps, no line search (whose objective
            # differences would drown in rounding here)
            theta = theta - step
            if np.max(np.abs(step)) <= 1e-14 * (1.0 + np.max(np.abs(theta))):
                break
            continue
        f = objective(theta)
        t, f_new = 1.0, objective(theta - step)
        while f_new > f - 1e-4 * t * decrement and t > 1e-10:
            t *= 0.5
            f_new = objective(theta - t * step)
        theta = theta - t * step
    return theta[:k], (float(theta[k]) if intercept else 0.0)


def logit(p: np.ndarray, eps: float) -> np.ndarray:
    """log(p / (1 - p)) of ``p`` clipped to [eps, 1 - eps]."""
    pc = np.clip(p, eps, 1.0 - eps)
    return np.log(pc) - np.log1p(-pc)
