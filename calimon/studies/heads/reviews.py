"""Reviewed labels for head training (``calimon heads train --from-review``).

The labels come as a review export (``calimon review-export``, ``GET /v1/review/export``): a
samples JSONL whose ``meta`` holds what the server knew, ``reviewers`` and ``received_at``
among it. Read strictly: a line that is not a JSON object, or lacks a field, or has one of the
wrong type, stops training with an error naming the file, the line and the field.

**Split by pair and by time.** The reviewed pairs (a pair: ``pair_id``, a session's steps share
one) are ordered by their first ``received_at`` (ties by pair id); the latest
``eval_share`` of them are held out for evaluation and the rest train. A pair never straddles
the two sides, every held-out transcript came in after every training transcript, and a
held-out transcript whose text is also a training transcript (of the reviews or of the
original data) is dropped from the evaluation and counted.

**Weighting.** The original training rows keep the class-balanced weights of a head trained on
them alone; the reviewed training rows of each class together weigh ``weight`` times the
original rows of that class together (``weight`` = 1: the reviews count as much as all the
original data, however few they are). Recorded on the card with every label that trained the
head: its id (the reviewed transcript's request id), its reviewers, its time and its label.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from calimon.errors import InputError
from calimon.samples import Sample

REQUIRED = {"id": str, "request": str, "response": str, "label": bool, "pair_id": str}
SPLIT_RULE = ("pairs ordered by first received_at (ties by pair id); the latest eval_share "
              "held out; no pair straddles; held-out transcripts equal to a training one dropped")


@dataclass(frozen=True)
class ReviewedLabel:
    """One reviewed transcript: the sample, its reviewers and its time (``received_at``)."""

    sample: Sample
    reviewers: tuple[str, ...]
    time: str

    def record(self, side: str) -> dict:
        """The card's entry of this label."""
        return {"id": self.sample.id, "reviewers": list(self.reviewers), "time": self.time,
                "label": bool(self.sample.label), "split": side}


def _field(path: Path, line: int, row: dict, name: str, kind: type):
    if name not in row:
        raise InputError(f"missing field {name!r}", path=str(path), line=line, field=name)
    v = row[name]
    if not isinstance(v, kind) or (kind is not bool and isinstance(v, bool)):
        raise InputError(f"expected {kind.__name__}, got {type(v).__name__} {v!r:.40}",
                         path=str(path), line=line, field=name)
    return v


def _label(path: Path, line: int, row: dict) -> ReviewedLabel:
    values = {k: _field(path, line, row, k, t) for k, t in REQUIRED.items()}
    meta = row.get("meta", {})
    if not isinstance(meta, dict):
        raise InputError(f"expected an object, got {type(meta).__name__}", path=str(path),
                         line=line, field="meta")
    reviewers = _field(path, line, meta, "reviewers", list)
    if not reviewers or not all(isinstance(r, str) and r for r in reviewers):
        raise InputError(f"expected a non-empty list of reviewer names, got {reviewers!r:.60}",
                         path=str(path), line=line, field="meta.reviewers")
    t = meta.get("received_at")
    if not isinstance(t, str | int | float) or isinstance(t, bool):
        raise InputError(f"expected the transcript's time, got {t!r:.40}", path=str(path),
                         line=line, field="meta.received_at")
    sample = Sample(id=values["id"], request=values["request"], response=values["response"],
                    label=values["label"], category=str(row.get("category", "safety")),
                    task=str(row.get("task", "reasoning")), pair_id=values["pair_id"],
                    source=str(row.get("source") or "review"), split=row.get("split"),
                    meta=meta)
    return ReviewedLabel(sample, tuple(reviewers), str(t))


def load_reviewed(path: str | Path) -> list[ReviewedLabel]:
    """The labels of a review export (module docstring); InputError naming the file, line and
    field of the first bad line, or of a file with no label or a repeated id."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path=str(path), field="from_review")
    out, seen = [], set()
    with path.open(encoding="utf-8") as fh:
        for i, text in enumerate(fh, 1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as e:
                raise InputError(f"not JSON: {e.msg} (column {e.colno})", path=str(path),
                                 line=i) from None
            if not isinstance(row, dict):
                raise InputError(f"expected a JSON object, got {type(row).__name__}",
                                 path=str(path), line=i)
            lab = _label(path, i, row)
            if lab.sample.id in seen:
                raise InputError(f"id {lab.sample.id!r} appears twice", path=str(path), line=i,
                                 field="id")
            seen.add(lab.sample.id)
            out.append(lab)
    if not out:
        raise InputError("the export holds no reviewed label", path=str(path),
                         field="from_review")
    return out


def _time_key(t: str) -> tuple:
    try:
        return (0, float(t), "")
    except ValueError:
        return (1, 0.0, t)  # ISO times order as text


def split_by_time(labels: list[ReviewedLabel], eval_share: float, original: list[Sample]
                  ) -> tuple[list[ReviewedLabel], list[ReviewedLabel], int]:
    """(training labels, held-out labels, held-out transcripts dropped as equal to a training
    one): the split of the module docstring."""
    if not 0.0 <= eval_share < 1.0:
        raise InputError(f"expected a share in [0, 1), got {eval_share!r}",
                         field="review_eval_share")
    first: dict[str, tuple] = {}
    for lab in labels:
        k = _time_key(lab.time)
        first[lab.sample.pair_id] = min(first.get(lab.sample.pair_id, k), k)
    pairs = sorted(first, key=lambda p: (first[p], p))
    n_eval = int(round(eval_share * len(pairs)))
    held = set(pairs[len(pairs) - n_eval:]) if n_eval else set()
    train = [x for x in labels if x.sample.pair_id not in held]
    seen = {x.sample.transcript_hash for x in train} | {s.transcript_hash for s in original}
    ev = [x for x in labels if x.sample.pair_id in held]
    kept = [x for x in ev if x.sample.transcript_hash not in seen]
    return train, kept, len(ev) - len(kept)


@dataclass(frozen=True)
class ReviewSet:
    """The reviewed labels of one export, split for training (module docstring): the training
    labels (less those whose transcript is already an original training one, counted), the
    held-out ones and the held-out ones dropped."""

    path: Path
    train: tuple[ReviewedLabel, ...]
    held_out: tuple[ReviewedLabel, ...]
    eval_dropped: int
    train_dropped: int

    def train_samples(self) -> list[Sample]:
        """The training labels as samples (split ``train``)."""
        return [replace(x.sample, split="train") for x in self.train]

    def held_out_samples(self) -> list[Sample]:
        """The held-out labels as samples (split ``test``)."""
        return [replace(x.sample, split="test") for x in self.held_out]

    def ref(self, *, weight: float, eval_share: float, source: str | None):
        """The card's record (`calimon.scoring.probes.artifacts.ReviewsRef`)."""
        from calimon.scoring.probes.artifacts import ReviewsRef

        return ReviewsRef(
            file=str(self.path), sha256=file_sha256(self.path), source=source,
            weight=float(weight), eval_share=float(eval_share), split_rule=SPLIT_RULE,
            n_train=len(self.train), n_eval=len(self.held_out),
            n_eval_dropped=self.eval_dropped, n_train_dropped=self.train_dropped,
            labels=[x.record("train") for x in self.train]
            + [x.record("eval") for x in self.held_out])


def review_set(path: str | Path, eval_share: float, original: list[Sample]) -> ReviewSet:
    """Read and split an export against the ``original`` training samples."""
    train, held, dropped = split_by_time(load_reviewed(path), eval_share, original)
    known = {s.transcript_hash for s in original}
    kept = [x for x in train if x.sample.transcript_hash not in known]
    if not kept:
        raise InputError("no reviewed label is left to train on after the split (every one is "
                         "held out or already an original training transcript)", path=str(path),
                         field="review_eval_share")
    return ReviewSet(Path(path), tuple(kept), tuple(held), dropped, len(train) - len(kept))


def review_weights(y_original: np.ndarray, y_reviewed: np.ndarray, weight: float) -> np.ndarray:
    """Sample weights of the original rows then the reviewed rows (module docstring)."""
    from calimon.scoring.probes.head import balanced_weights

    if not (isinstance(weight, int | float) and not isinstance(weight, bool) and weight > 0):
        raise InputError(f"expected a weight > 0, got {weight!r}", field="review_weight")
    y0, y1 = np.asarray(y_original, bool), np.asarray(y_reviewed, bool)
    w0 = balanced_weights(y0)
    w1 = np.zeros(y1.size)
    for cls in (True, False):
        n1 = int((y1 == cls).sum())
        if n1:
            w1[y1 == cls] = weight * float(w0[y0 == cls].sum()) / n1
    return np.r_[w0, w1]


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


__all__ = ["ReviewSet", "ReviewedLabel", "load_reviewed", "review_set", "review_weights",
           "split_by_time"]
