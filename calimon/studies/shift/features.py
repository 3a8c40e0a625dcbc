"""The cheap feature view of transcripts that the shift check compares.

Groups (each a block of columns; ``FeatureView.groups`` names them):

- ``score``: the monitor's score of the transcript (when both sides have one);
- ``length``: ``log(1 + characters)`` of the request and of the response;
- ``text``: TF-IDF of ``request + response`` (word unigrams and bigrams, sublinear tf), reduced
  to ``text_dims`` dimensions by TruncatedSVD (both fitted on the pooled transcripts of the two
  sides, without labels or domain);
  ``length`` and ``text`` are left out when no row of either side holds a transcript (a CSV of
  scores only, `calimon.data.score_table`): such sides compare by their scores;
- ``state``: a head's pooled hidden state, standardized and reduced by PCA to ``text_dims``
  dimensions when wider (optional, when given for both sides).

Every block is standardized on the pooled rows, so a logistic regression sees comparable scales.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from calimon.errors import InputError

GROUPS = ("score", "length", "text", "state")


@dataclass(frozen=True, eq=False)
class FeatureView:
    """``X`` (n, d) with ``groups[name] = column indices``; rows: calibration first, then new."""

    X: np.ndarray = field(repr=False)
    groups: dict[str, np.ndarray]
    n_calib: int
    n_new: int

    @property
    def domain(self) -> np.ndarray:
        """1 for rows of the new set, 0 for calibration rows."""
        return np.r_[np.zeros(self.n_calib, np.int8), np.ones(self.n_new, np.int8)]

    def columns(self, names: Sequence[str]) -> np.ndarray:
        """The columns of the named feature groups, in the given order."""
        idx = np.concatenate([self.groups[g] for g in names])
        return self.X[:, idx]


def _standardize(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a, dtype=float)
    sd = a.std(axis=0)
    return (a - a.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def _texts(requests: Sequence[str], responses: Sequence[str]) -> list[str]:
    return [f"{q}\n{r}" for q, r in zip(requests, responses, strict=True)]


def text_block(texts: Sequence[str], dims: int, seed: int) -> np.ndarray:
    """TF-IDF (1-2 grams, sublinear tf, at most 20,000 terms) reduced by TruncatedSVD."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer

    tfidf = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, max_features=20000,
                            min_df=2 if len(texts) >= 20 else 1)
    try:
        M = tfidf.fit_transform(texts)
    except ValueError:  # no term at all (e.g. every text empty)
        return np.zeros((len(texts), 1))
    k = max(1, min(dims, M.shape[1] - 1, len(texts) - 1))
    if M.shape[1] <= 1:
        return M.toarray()
    return TruncatedSVD(n_components=k, random_state=seed).fit_transform(M)


def build_view(calib: dict, new: dict, *, text_dims: int = 32, seed: int = 0) -> FeatureView:
    """The feature view of two sides. Each side is a dict with ``request`` and ``response``
    (lists of strings) and optionally ``score`` (1-D floats) and ``state`` (2-D floats). A group
    is used only when both sides carry it; a score must be finite (a missing score is never 0:
    drop the row before)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return _build_view(calib, new, text_dims, seed)


def _build_view(calib: dict, new: dict, text_dims: int, seed: int) -> FeatureView:
    n0, n1 = len(calib["response"]), len(new["response"])
    if n0 < 2 or n1 < 2:
        raise InputError(f"the shift check needs at least 2 transcripts per side, got {n0} "
                         f"calibration and {n1} new", field="transcripts")
    blocks: dict[str, np.ndarray] = {}
    if calib.get("score") is not None and new.get("score") is not None:
        s = np.r_[np.asarray(calib["score"], float), np.asarray(new["score"], float)]
        if not np.all(np.isfinite(s)):
            raise InputError("expected finite scores for the shift check (drop rows without "
                             "a score first)", field="score")
        blocks["score"] = s[:, None]
    lengths = [[len(q), len(r)] for side in (calib, new)
               for q, r in zip(side["request"], side["response"], strict=True)]
    if any(q or r for q, r in lengths) or not blocks:  # rows of scores only compare by score
        blocks["length"] = np.log1p(np.asarray(lengths, dtype=float))
        texts = (_texts(calib["request"], calib["response"])
                 + _texts(new["request"], new["response"]))
        blocks["text"] = text_block(texts, text_dims, seed)
    if calib.get("state") is not None and new.get("state") is not None:
        a, b = np.asarray(calib["state"], float), np.asarray(new["state"], float)
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
            raise InputError(f"hidden states of both sides must be 2-D with the same width, "
                             f"got {a.shape} and {b.shape}", field="state")
        st = _standardize(np.r_[a, b])
        if st.shape[1] > text_dims:
            from sklearn.decomposition import PCA

            k = max(1, min(text_dims, st.shape[0] - 1))
            st = PCA(n_components=k, random_state=seed).fit_transform(st)
        blocks["state"] = st
    cols, groups, start = [], {}, 0
    for name in GROUPS:
        if name in blocks:
            z = _standardize(blocks[name])
            cols.append(z)
            groups[name] = np.arange(start, start + z.shape[1])
            start += z.shape[1]
    return FeatureView(np.hstack(cols), groups, n0, n1)
