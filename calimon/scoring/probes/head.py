"""A probe head: standardization plus a logistic (or small MLP) scorer, as plain arrays; or an
attention-pooled probe (`calimon.scoring.probes.attention`) that reads a layer's per-token states.

Fitting happens in :func:`fit_logistic` / :func:`fit_mlp` (pure functions) and
`calimon.scoring.probes.attention.fit_attention_probe`; a fitted
:class:`ProbeHead` predicts with numpy only, so a head loaded from safetensors gives exactly the
scores of the head that was saved.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import numpy as np

from calimon.errors import InputError
from calimon.scoring.probes.attention import ATTENTION_PARAMS, attention_scores

KINDS = ("sequence", "token")
ESTIMATORS = ("logistic", "mlp", "attention")
AGGREGATES = ("max", "mean", "top10pct")
ATTENTION_POOLING = "attention"  # the pooling an attention head records (it pools itself)
_PARAMS = {"logistic": ("mean", "scale", "coef", "intercept"),
           "mlp": ("mean", "scale", "w1", "b1", "w2", "b2"),
           "attention": ATTENTION_PARAMS}
_FIRST = {"logistic": "coef", "mlp": "w1", "attention": "query"}


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))  # stable for large |z|


def balanced_weights(y: np.ndarray) -> np.ndarray:
    """scikit-learn's ``class_weight="balanced"``: n / (2 * n_class) per sample."""
    y = np.asarray(y, dtype=bool)
    n_pos = int(y.sum())
    n_neg = y.size - n_pos
    if not n_pos or not n_neg:
        raise InputError(f"training needs both classes, got {n_pos} positive and {n_neg} "
                         "negative", field="y")
    return np.where(y, y.size / (2.0 * n_pos), y.size / (2.0 * n_neg))


def standardizer(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-column ``(mean, scale)`` of ``X``; a scale below 1e-6 becomes 1."""
    mean = X.mean(0, dtype=np.float64)
    scale = X.std(0, dtype=np.float64)
    return mean, np.where(scale > 1e-6, scale, 1.0)


def fit_logistic(X: np.ndarray, y: np.ndarray, *, C: float = 1.0,
                 sample_weight: np.ndarray | None = None, max_iter: int = 500
                 ) -> dict[str, np.ndarray]:
    """L2-regularized logistic regression on standardized ``X`` (the objective of scikit-learn's
    ``LogisticRegression(C=C)``: ``sum_i w_i logloss_i + ||coef||^2 / (2 C)``), class-balanced
    unless ``sample_weight`` is given. L-BFGS from zero, so the result is deterministic."""
    from scipy.optimize import minimize

    X = np.asarray(X)
    y = np.asarray(y, dtype=bool)
    if X.ndim != 2 or X.shape[0] != y.shape[0]:
        raise InputError(f"expected X (n, d) and y (n,), got {X.shape} and {y.shape}", field="X")
    if not (isinstance(C, int | float) and C > 0 and math.isfinite(C)):
        raise InputError(f"expected C > 0, got {C!r}", field="C")
    w = balanced_weights(y) if sample_weight is None else np.asarray(sample_weight, np.float64)
    mean, scale = standardizer(X)
    Z = ((X - mean) / scale).astype(np.float32)
    t = y.astype(np.float64)

    def objective(theta: np.ndarray):
        coef, b = theta[:-1], theta[-1]
        z = Z @ coef.astype(np.float32) + b
        z = z.astype(np.float64)
        loss = np.sum(w * (np.logaddexp(0.0, z) - t * z)) + coef @ coef / (2 * C)
        g = w * (_sigmoid(z) - t)
        grad = np.empty_like(theta)
        grad[:-1] = (Z.T @ g.astype(np.float32)).astype(np.float64) + coef / C
        grad[-1] = g.sum()
        return loss, grad

    res = minimize(objective, np.zeros(Z.shape[1] + 1), jac=True, method="L-BFGS-B",
                   options={"maxiter": max_iter, "gtol": 1e-6})
    return {"mean": mean, "scale": scale, "coef": res.x[:-1].copy(),
            "intercept": np.array([res.x[-1]])}


def fit_mlp(X: np.ndarray, y: np.ndarray, *, hidden: int = 64, weight_decay: float = 1e-2,
            epochs: int = 300, lr: float = 1e-3, seed: int = 0,
            sample_weight: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """A one-hidden-layer ReLU MLP on standardized ``X``, BCE weighted class-balanced (or by
    ``sample_weight``), full-batch AdamW from a seeded start: the same seed and data give the
    same weights."""
    import torch

    y = np.asarray(y, dtype=bool)
    w = torch.tensor(balanced_weights(y) if sample_weight is None else
                     np.asarray(sample_weight, np.float64), dtype=torch.float32)
    mean, scale = standardizer(np.asarray(X))
    Z = torch.tensor(((X - mean) / scale), dtype=torch.float32)
    t = torch.tensor(y, dtype=torch.float32)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a small full-batch fit: threads only contend
    try:
        return _train_mlp(Z, t, w, mean, scale, hidden, weight_decay, epochs, lr, seed)
    finally:
        torch.set_num_threads(threads)


def _train_mlp(Z, t, w, mean, scale, hidden, weight_decay, epochs, lr, seed):
    import torch

    gen = torch.Generator().manual_seed(seed)
    d = Z.shape[1]
    w1 = (torch.randn(d, hidden, generator=gen) / math.sqrt(d)).requires_grad_()
    b1 = torch.zeros(hidden, requires_grad=True)
    w2 = (torch.randn(hidden, generator=gen) / math.sqrt(hidden)).requires_grad_()
    b2 = torch.zeros(1, requires_grad=True)
    opt = torch.optim.AdamW([w1, b1, w2, b2], lr=lr, weight_decay=weight_decay)
    for _ in range(epochs):
        opt.zero_grad()
        z = torch.relu(Z @ w1 + b1) @ w2 + b2
        loss = (w * torch.nn.functional.binary_cross_entropy_with_logits(
            z, t, reduction="none")).mean()
        loss.backward()
        opt.step()
    as_np = {k: v.detach().double().numpy().copy() for k, v in
             {"w1": w1, "b1": b1, "w2": w2, "b2": b2}.items()}
    return {"mean": mean, "scale": scale, **as_np}


@dataclass(frozen=True, eq=False)
class ProbeHead:
    """``kind`` sequence: one score per transcript from pooled states at ``layer`` (estimator
    ``attention``: from the response's per-token states at ``layer``, pooled by the head's own
    attention weights; see `score_states`);
    ``kind`` token: one score per response token at ``layer``, aggregated by ``aggregate``, and
    runs above ``span_threshold`` become evidence spans."""

    kind: str
    estimator: str
    layer: int
    params: dict[str, np.ndarray] = field(repr=False)
    pooling: str | None = None
    aggregate: str = "max"
    span_threshold: float = 0.5
    layers: tuple[int, ...] = ()  # a sequence head on several layers: their pooled states, concatenated

    def __post_init__(self):
        if self.kind not in KINDS:
            raise InputError(f"expected one of {list(KINDS)}, got {self.kind!r}", field="kind")
        if self.estimator not in ESTIMATORS:
            raise InputError(f"expected one of {list(ESTIMATORS)}, got {self.estimator!r}",
                             field="estimator")
        if self.aggregate not in AGGREGATES:
            raise InputError(f"expected one of {list(AGGREGATES)}, got {self.aggregate!r}",
                             field="aggregate")
        if self.estimator == "attention" and self.kind != "sequence":
            raise InputError("an attention head is a sequence head (it pools per-token states "
                             "itself)", field="estimator")
        object.__setattr__(self, "layers", tuple(int(k) for k in self.layers))
        if self.layers and (self.kind != "sequence" or self.estimator == "attention"
                            or self.layers[0] != self.layer or len(set(self.layers)) < 2):
            raise InputError(f"layers {list(self.layers)}: several layers are for a pooled "
                             f"sequence head, the first being its layer {self.layer}",
                             field="layers")
        need = _PARAMS[self.estimator]
        if sorted(self.params) != sorted(need):
            raise InputError(f"a {self.estimator} head needs tensors {list(need)}, got "
                             f"{sorted(self.params)}", field="params")
        bad = sorted(k for k, v in self.params.items() if not np.all(np.isfinite(v)))
        if bad:
            raise InputError(f"tensors {bad} hold NaN or infinite values", field="params")
        d = self.params["mean"].shape
        if self.params["scale"].shape != d or len(d) != 1 or d[0] % len(self.feature_layers):
            raise InputError(f"mean and scale must be (hidden x layers,), got {d} and "
                             f"{self.params['scale'].shape}", field="params")
        first = _FIRST[self.estimator]
        if self.params[first].shape[0] != d[0]:
            raise InputError(f"{first} expects {self.params[first].shape[0]} inputs but mean "
                             f"has {d[0]}", field="params")

    @property
    def feature_layers(self) -> tuple[int, ...]:
        """The layers whose states the head reads (concatenated in this order when several)."""
        return self.layers or (self.layer,)

    @property
    def input_size(self) -> int:
        """Width of the features the head reads (every layer's states together)."""
        return int(self.params["mean"].shape[0])

    @property
    def hidden_size(self) -> int:
        """Width of one layer's hidden state."""
        return self.input_size // len(self.feature_layers)

    def pooled_features(self, states) -> np.ndarray:
        """(n, input_size) features of a pooled head from ``states(layer, pooling)`` -> (n,
        hidden): its pooling of each of its layers, concatenated. Training
        (`calimon.studies.heads.train.head_scores`) and every scoring pass read them here."""
        parts = [np.asarray(states(k, self.pooling)) for k in self.feature_layers]
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)

    @property
    def reads_tokens(self) -> bool:
        """Whether the head reads per-token states (token heads, attention heads) rather than
        a pooled state."""
        return self.kind == "token" or self.estimator == "attention"

    def weights_hash(self) -> str:
        """sha256 of the head's tensors (`params_hash`)."""
        return params_hash(self.params)

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """The logit per row of ``X`` (n, hidden); raises InputError for another shape."""
        if self.estimator == "attention":
            raise InputError("an attention head reads per-token states: use score_states",
                             field="X")
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.input_size:
            raise InputError(f"expected features of shape (n, {self.input_size}), got "
                             f"{X.shape}", field="X")
        p = self.params
        Z = (X - p["mean"]) / p["scale"]
        if self.estimator == "logistic":
            return Z @ p["coef"] + p["intercept"][0]
        return np.maximum(Z @ p["w1"] + p["b1"], 0.0) @ p["w2"] + p["b2"][0]

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """P(misbehavior) per row (per transcript, or per token for a token head)."""
        return _sigmoid(self.decision_function(X))

    def score_states(self, states) -> np.ndarray:
        """An attention head's P(misbehavior) per transcript from each one's (response tokens,
        hidden) states at ``layer``; NaN for a transcript without tokens."""
        if self.estimator != "attention":
            raise InputError(f"score_states is for attention heads; this is a {self.estimator} "
                             "head", field="estimator")
        bad = [np.shape(H) for H in states
               if np.ndim(H) != 2 or np.shape(H)[1] != self.hidden_size]
        if bad:
            raise InputError(f"expected (tokens, {self.hidden_size}) states per transcript, got "
                             f"{bad[0]}", field="states")
        return attention_scores(self.params, states)

    def sequence_score(self, token_probs: np.ndarray) -> float:
        """A token head's transcript score from its token probabilities (NaN without tokens)."""
        return aggregate(token_probs, self.aggregate)


def aggregate(token_probs: np.ndarray, how: str) -> float:
    """One transcript score from token probabilities: ``max``, ``mean`` or ``top10pct`` (mean of
    the top tenth); NaN without tokens, InputError for another name."""
    p = np.asarray(token_probs, dtype=np.float64)
    if p.size == 0:
        return float("nan")
    if how == "max":
        return float(p.max())
    if how == "mean":
        return float(p.mean())
    if how == "top10pct":
        k = max(1, math.ceil(0.1 * p.size))
        return float(np.sort(p)[-k:].mean())
    raise InputError(f"expected one of {list(AGGREGATES)}, got {how!r}", field="aggregate")


def params_hash(params: dict[str, np.ndarray]) -> str:
    """The sha256 a head card carries for its weights (float64 bytes, name and shape of each)."""
    h = hashlib.sha256()
    for k in sorted(params):
        a = np.ascontiguousarray(params[k], dtype=np.float64)
        h.update(f"{k}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()
