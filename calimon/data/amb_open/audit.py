"""Shortcut audit: can a label be read off surface features a monitor should not rely on?

Per cell, two baselines are fitted on the ``train`` split and scored by AUROC on ``test``:

- length-only: a logistic regression on one feature, log(1 + number of characters of the
  response). A single monotone feature, so its test AUROC is that of response length itself or of
  its reverse, whichever direction the training split taught; 0.5 means length says nothing.
- TF-IDF: word 1-2-grams of request + response (sublinear tf, min_df 2), logistic regression.
  Request and response are joined, so it sees everything a text monitor sees.

Targets for templated cells: length-only <= 0.60 and TF-IDF <= 0.80. Unpaired hard negatives
are included (they are benign samples a shortcut must also get right).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

from calimon.errors import InputError
from calimon.samples import CATEGORIES, TASKS, Sample

LENGTH_TARGET = 0.60
TFIDF_TARGET = 0.80


@dataclass(frozen=True)
class CellAudit:
    """The shortcut audit of one cell (or ``"all"``): both baselines' test AUROC (NaN when a
    split lacks one of the labels) and the labelled sample counts."""

    cell: str  # "category/task", or "all"
    n_train: int  # samples with a label in train
    n_test: int
    length_auroc: float  # nan when train or test lacks one of the labels
    tfidf_auroc: float

    @property
    def length_ok(self) -> bool:
        """True unless the length-only AUROC exceeds its target (NaN passes)."""
        return not self.length_auroc > LENGTH_TARGET

    @property
    def tfidf_ok(self) -> bool:
        """True unless the TF-IDF AUROC exceeds its target (NaN passes)."""
        return not self.tfidf_auroc > TFIDF_TARGET

    def to_dict(self) -> dict:
        """The fields plus ``length_ok`` and ``tfidf_ok``, as a JSON-ready dict."""
        return {**asdict(self), "length_ok": self.length_ok, "tfidf_ok": self.tfidf_ok}


def _auroc(y_true: np.ndarray, score: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y_true, score)) if len(set(y_true.tolist())) == 2 else math.nan


def length_auroc(train: Sequence[Sample], test: Sequence[Sample]) -> float:
    """Test AUROC of the length-only baseline fitted on ``train``; NaN when either split lacks a
    label."""
    from sklearn.linear_model import LogisticRegression

    def feats(rows):
        return np.log1p(np.array([[len(s.response)] for s in rows], dtype=float))

    y_tr = np.array([bool(s.label) for s in train])
    y_te = np.array([bool(s.label) for s in test])
    if len(set(y_tr.tolist())) < 2 or len(set(y_te.tolist())) < 2:
        return math.nan
    model = LogisticRegression().fit(feats(train), y_tr)
    return _auroc(y_te, model.predict_proba(feats(test))[:, 1])


def tfidf_auroc(train: Sequence[Sample], test: Sequence[Sample]) -> float:
    """Test AUROC of the TF-IDF baseline (request + response) fitted on ``train``; NaN when
    either split lacks a label."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    y_tr = np.array([bool(s.label) for s in train])
    y_te = np.array([bool(s.label) for s in test])
    if len(set(y_tr.tolist())) < 2 or len(set(y_te.tolist())) < 2:
        return math.nan
    vec = TfidfVectorizer(ngram_range=(1, 2), min_df=2, sublinear_tf=True, max_features=200_000)
    x_tr = vec.fit_transform([s.request + "\n" + s.response for s in train])
    x_te = vec.transform([s.request + "\n" + s.response for s in test])
    model = LogisticRegression(C=1.0, max_iter=2000).fit(x_tr, y_tr)
    return _auroc(y_te, model.predict_proba(x_te)[:, 1])


def shortcut_audit(samples: Sequence[Sample], *, include_all: bool = True,
                   by_source: bool = False) -> list[CellAudit]:
    """One row per non-empty cell (fixed category x task order), then an "all" row. With
    ``by_source``, each cell with several sources is followed by one row per source, named
    "category/task [source]" (each fitted on its own train samples only)."""
    labelled = [s for s in samples if s.label is not None]
    if any(s.split is None for s in labelled):
        raise InputError("every sample needs a split (train/calib/test); build the benchmark "
                         "with its splits first", field="samples")
    groups: list[tuple[str, list[Sample]]] = []
    for cat in CATEGORIES:
        for task in TASKS:
            cell = [s for s in labelled if (s.category, s.task) == (cat, task)]
            if cell:
                groups.append((f"{cat}/{task}", cell))
                sources = sorted({s.source for s in cell})
                if by_source and len(sources) > 1:
                    groups += [(f"{cat}/{task} [{src}]", [s for s in cell if s.source == src])
                               for src in sources]
    if include_all and groups:
        groups.append(("all", labelled))
    rows = []
    for name, cell in groups:
        train = [s for s in cell if s.split == "train"]
        test = [s for s in cell if s.split == "test"]
        rows.append(CellAudit(name, len(train), len(test), length_auroc(train, test),
                              tfidf_auroc(train, test)))
    return rows


def audit_markdown(rows: Sequence[CellAudit]) -> str:
    """The audit as a markdown table; a value above its target is marked with '!'."""
    def fmt(x: float, ok: bool) -> str:
        return "n/a" if math.isnan(x) else f"{x:.3f}" + ("" if ok else " !")

    lines = ["| cell | train samples | test samples | length-only AUROC | TF-IDF AUROC |",
             "|---|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r.cell} | {r.n_train} | {r.n_test} | {fmt(r.length_auroc, r.length_ok)}"
                     f" | {fmt(r.tfidf_auroc, r.tfidf_ok)} |")
    return "\n".join(lines) + "\n"
