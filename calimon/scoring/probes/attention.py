"""Attention-pooled probe (McKenzie et al. 2025, "Detecting high-stakes interactions with
activation probes"): per-token states ``h_t`` of one layer, standardized, are pooled with
softmax attention weights ``a_t = softmax_t(q . h_t)`` and scored as
``sigmoid(sum_t a_t (v . h_t) + b)``. Unlike mean pooling, a few tokens can carry the score, so a
short misbehaving span in a long transcript is not averaged away.

Fitting (:func:`fit_attention_probe`) uses torch (Adam, class-balanced logistic loss, L2 on
``q`` and ``v``, seeded); the fitted parameters are plain arrays (safetensors-ready) and
:func:`attention_scores` predicts with numpy only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from calimon.errors import InputError

ATTENTION_PARAMS = ("mean", "scale", "query", "value", "intercept")


def _standardizer(states: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension mean and scale over every token of every sample (float64 sums, so no
    concatenated copy); a scale below 1e-6 becomes 1."""
    d = states[0].shape[1]
    s, ss, n = np.zeros(d), np.zeros(d), 0
    for H in states:
        H = H.astype(np.float64)
        s += H.sum(0)
        ss += (H * H).sum(0)
        n += H.shape[0]
    mean = s / n
    scale = np.sqrt(np.maximum(ss / n - mean * mean, 0.0))
    return mean, np.where(scale > 1e-6, scale, 1.0)


def attention_scores(params: dict[str, np.ndarray], states: Sequence[np.ndarray]) -> np.ndarray:
    """P(misbehavior) per sample from its (tokens, hidden) states; NaN for a sample without
    tokens."""
    out = np.full(len(states), np.nan)
    mean, scale = params["mean"], params["scale"]
    q, v, b = params["query"], params["value"], float(params["intercept"][0])
    for i, H in enumerate(states):
        if len(H) == 0:
            continue
        Z = (H.astype(np.float64) - mean) / scale
        a = Z @ q
        w = np.exp(a - a.max())
        z = float((w / w.sum()) @ (Z @ v)) + b
        out[i] = 0.5 * (1.0 + np.tanh(0.5 * z))
    return out


def _check(states: Sequence[np.ndarray], y: np.ndarray) -> None:
    if not y.any() or y.all():
        raise InputError("training needs both classes", field="y")
    dims = {H.shape[1] for H in states if H.ndim == 2}
    if len(dims) != 1 or any(H.ndim != 2 for H in states):
        raise InputError(f"expected (tokens, hidden) arrays of one hidden size, got {dims}",
                         field="states")


def _batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Index batches of similar length (less padding), in a seeded random order."""
    order = np.argsort(lengths, kind="stable")
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    return [batches[j] for j in rng.permutation(len(batches))]


def fit_attention_probe(states: Sequence[np.ndarray], y, *, weight_decay: float = 1e-2,
                        epochs: int = 20, lr: float = 1e-2, batch_size: int = 32,
                        seed: int = 0) -> dict[str, np.ndarray]:
    """Fit ``q``, ``v`` and ``b`` on samples' (tokens, hidden) states with labels ``y``.
    Samples without tokens are left out of the fit. Deterministic for a given seed."""
    import torch

    y = np.asarray(y, dtype=bool)
    if len(states) != len(y):
        raise InputError(f"expected one label per sample, got {len(states)} samples and "
                         f"{len(y)} labels", field="y")
    keep = [i for i, H in enumerate(states) if len(H)]
    states, y = [states[i] for i in keep], y[keep]
    _check(states, y)
    mean, scale = _standardizer(states)
    d = mean.size
    gen = torch.Generator().manual_seed(seed)
    q = (torch.randn(d, generator=gen, dtype=torch.float32) * 0.01).requires_grad_()
    v = torch.zeros(d, dtype=torch.float32, requires_grad=True)
    b = torch.zeros(1, dtype=torch.float32, requires_grad=True)
    opt = torch.optim.Adam([q, v, b], lr=lr)
    w_pos, w_neg = len(y) / (2.0 * y.sum()), len(y) / (2.0 * (~y).sum())
    mu = torch.from_numpy(mean.astype(np.float32))
    sd = torch.from_numpy(scale.astype(np.float32))
    Zs = [(torch.from_numpy(H.astype(np.float32)) - mu) / sd for H in states]  # once per fit
    lengths = np.array([len(H) for H in states])
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        for idx in _batches(lengths, batch_size, rng):
            X = torch.nn.utils.rnn.pad_sequence([Zs[i] for i in idx], batch_first=True)
            lens = torch.from_numpy(lengths[idx])
            mask = torch.arange(X.shape[1])[None, :] < lens[:, None]
            att = torch.softmax((X @ q).masked_fill(~mask, float("-inf")), dim=1)
            z = (att * (X @ v)).sum(1) + b
            t = torch.from_numpy(y[idx].astype(np.float32))
            wt = torch.from_numpy(np.where(y[idx], w_pos, w_neg).astype(np.float32))
            loss = (wt * torch.nn.functional.binary_cross_entropy_with_logits(
                z, t, reduction="none")).mean()
            loss = loss + weight_decay * 0.5 * ((q * q).sum() + (v * v).sum()) / len(y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return {"mean": mean, "scale": scale, "query": q.detach().double().numpy(),
            "value": v.detach().double().numpy(),
            "intercept": b.detach().double().numpy()}


__all__ = ["ATTENTION_PARAMS", "attention_scores", "fit_attention_probe"]
