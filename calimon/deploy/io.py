"""Scored transcripts for the deployment tools: the ``curve.csv`` reader, a splitter, a writer.

A finished run directory (``calimon curve --out DIR``) holds ``curve.csv`` with one row per
sample; its columns, writer and reader live in ``calimon.run_folder`` (scores round-trip
exactly). The columns the deployment tools use:

- ``label``: 1 = misbehavior, 0 = benign, empty = unknown (allowed only where labels are not
  needed, e.g. ``apply-policy`` on new traffic);
- ``status``: ``ok`` and ``truncated`` rows carry scores; any other status (``parse_failure``,
  ``error``, ...) has no score. Such a row is **dropped, never read as 0**, and counted in
  ``ScoredSet.dropped_ids``;
- ``p_raw`` / ``p_cal``: the model's confidence of misbehavior and its calibrated (out-of-fold)
  version, probabilities in [0, 1]. One of them is the *active* score (``ScoredSet.score``).

Only ``id``, ``status`` and the active score column are required in the header; the others get
neutral defaults (``pair_id`` = ``id``, unknown label, empty category/task/split). Extra columns
are ignored. Errors name the file, the line and the column. The certifying tools need labelled
``calib`` and ``test`` rows (``calib_test_split``): ``calimon curve --split test`` writes both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from calimon.errors import InputError
from calimon.run_folder import CurveRow, read_curve_csv, write_curve_csv

SCORE_COLUMNS = ("p_cal", "p_raw")


def _ro(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False)
class ScoredSet:
    """Scored samples as parallel read-only numpy arrays (one entry per kept row).

    ``labels``: 1 misbehavior, 0 benign, -1 unknown. ``p_raw`` / ``p_cal``: NaN where the
    inactive column is empty; the active column (``score``) is always finite. ``dropped_ids``
    (and their ``dropped_statuses``): rows without a score (status not ok/truncated), left out
    and reported, never scored as 0.
    """

    ids: np.ndarray
    pair_ids: np.ndarray
    labels: np.ndarray
    categories: np.ndarray
    tasks: np.ndarray
    splits: np.ndarray
    statuses: np.ndarray
    p_raw: np.ndarray
    p_cal: np.ndarray
    score: str = "p_cal"
    path: str = "<memory>"
    dropped_ids: tuple[str, ...] = field(default=())
    dropped_statuses: tuple[str, ...] = field(default=())

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    @property
    def scores(self) -> np.ndarray:
        """The active score column."""
        return self.p_cal if self.score == "p_cal" else self.p_raw

    @property
    def n_dropped(self) -> int:
        """Rows left out for want of a score."""
        return len(self.dropped_ids)

    @property
    def has_labels(self) -> bool:
        """True when the set is non-empty and every row has a 0/1 label."""
        return bool(len(self) and np.all(self.labels >= 0))

    @property
    def benign_scores(self) -> np.ndarray:
        """The active scores of the benign (label 0) rows."""
        return self.scores[self.labels == 0]

    @property
    def misbehaving_scores(self) -> np.ndarray:
        """The active scores of the misbehaving (label 1) rows."""
        return self.scores[self.labels == 1]

    def subset(self, mask: Any) -> ScoredSet:
        """Rows where ``mask`` (bool array or index array) selects; ``dropped_ids`` is kept."""
        idx = np.asarray(mask)
        kw = {name: _ro(np.asarray(getattr(self, name))[idx].copy()) for name in _ARRAYS}
        return replace(self, **kw)

    def with_score(self, score: str) -> ScoredSet:
        """The same rows with another active column; rows where it is empty raise InputError."""
        if score not in SCORE_COLUMNS:
            raise InputError(f"expected one of {list(SCORE_COLUMNS)}, got {score!r}",
                             field="score")
        values = self.p_cal if score == "p_cal" else self.p_raw
        missing = np.flatnonzero(np.isnan(values))
        if missing.size:
            raise InputError(f"{missing.size} scored row(s) have no {score} (first id "
                             f"{self.ids[missing[0]]!r})", path=self.path, field=score)
        return replace(self, score=score)

    def require_labels(self, what: str = "this computation") -> None:
        """Raise InputError unless every row has a 0/1 label."""
        unknown = np.flatnonzero(self.labels < 0)
        if unknown.size:
            raise InputError(f"{what} needs a 0/1 label on every row; {unknown.size} row(s) "
                             f"have none (first id {self.ids[unknown[0]]!r})",
                             path=self.path, field="label")
        if not len(self):
            raise InputError(f"{what} needs at least one scored row, got none",
                             path=self.path)

    def rates(self, threshold: float) -> tuple[float, float]:
        """(MR, FAR) when flagging iff score >= threshold; NaN where a class is absent."""
        self.require_labels("rates")
        flag = self.scores >= threshold
        pos, neg = self.labels == 1, self.labels == 0
        mr = float(np.mean(~flag[pos])) if pos.any() else math.nan
        far = float(np.mean(flag[neg])) if neg.any() else math.nan
        return mr, far

    @classmethod
    def from_arrays(cls, scores: Any, labels: Any = None, *, pair_ids: Any = None,
                    ids: Any = None, categories: Any = None, tasks: Any = None,
                    splits: Any = None, score: str = "p_cal") -> ScoredSet:
        """Build a set in memory; ``scores`` fills the ``score`` column (the other is NaN)."""
        s = np.asarray(scores, dtype=float)
        if s.ndim != 1 or not np.all(np.isfinite(s)):
            raise InputError("expected a 1-D array of finite scores", field="scores")
        n = s.shape[0]
        if score not in SCORE_COLUMNS:
            raise InputError(f"expected one of {list(SCORE_COLUMNS)}, got {score!r}",
                             field="score")

        def col(values: Any, default: np.ndarray, name: str) -> np.ndarray:
            if values is None:
                return default
            arr = np.array(values, dtype=object)
            if arr.shape != (n,):
                raise InputError(f"expected {n} values (one per score), got shape {arr.shape}",
                                 field=name)
            return arr

        idv = col(ids, np.array([f"s{i}" for i in range(n)], dtype=object), "ids")
        lab = np.asarray(col(labels, np.full(n, -1), "labels"), dtype=float)
        if np.any(~np.isin(lab, (-1.0, 0.0, 1.0))):
            raise InputError("expected labels 1, 0 (or True/False) or -1 (unknown)",
                             field="labels")
        blank = np.full(n, "", dtype=object)
        return cls(ids=_ro(idv.astype(str).astype(object)),
                   pair_ids=_ro(col(pair_ids, idv, "pair_ids").astype(str).astype(object)),
                   labels=_ro(lab.astype(np.int8)),
                   categories=_ro(col(categories, blank, "categories")),
                   tasks=_ro(col(tasks, blank.copy(), "tasks")),
                   splits=_ro(col(splits, blank.copy(), "splits")),
                   statuses=_ro(np.full(n, "ok", dtype=object)),
                   p_cal=_ro(s.copy() if score == "p_cal" else np.full(n, np.nan)),
                   p_raw=_ro(s.copy() if score == "p_raw" else np.full(n, np.nan)), score=score)


_ARRAYS = ("ids", "pair_ids", "labels", "categories", "tasks", "splits", "statuses", "p_raw",
           "p_cal")


def read_scored_csv(path: str | Path, *, score: str = "p_cal",
                    require_labels: bool = True) -> ScoredSet:
    """Read a ``curve.csv`` (or any CSV with the same columns) into a ScoredSet.

    Rows whose status is not ok/truncated are dropped and listed in ``dropped_ids``. A kept row
    must have a probability in the ``score`` column; with ``require_labels`` it must also have a
    0/1 label. Parsing is :func:`calimon.run_folder.read_curve_csv`'s (scores read back exactly
    as written); errors name the file, the line and the column.
    """
    p = str(path)
    if score not in SCORE_COLUMNS:
        raise InputError(f"expected one of {list(SCORE_COLUMNS)}, got {score!r}", field="score")
    rows = read_curve_csv(path, required=("id", "status", score))
    kept = [r for r in rows if r.scored]
    for r in kept:
        if r.label is None and require_labels:
            raise InputError("expected 1 or 0, got ''", path=p, line=r.line, field="label")
        if getattr(r, score) is None:
            raise InputError(f"status is {r.status!r} but the score is empty", path=p,
                             line=r.line, field=score)

    def arr(values: list) -> np.ndarray:
        return _ro(np.array(values, dtype=object))

    def prob(values: list) -> np.ndarray:
        return _ro(np.array([math.nan if v is None else v for v in values], dtype=float))

    dropped = [r for r in rows if not r.scored]
    return ScoredSet(ids=arr([r.id for r in kept]), pair_ids=arr([r.pair_id for r in kept]),
                     labels=_ro(np.array([-1 if r.label is None else int(r.label)
                                          for r in kept], dtype=np.int8)),
                     categories=arr([r.category for r in kept]),
                     tasks=arr([r.task for r in kept]), splits=arr([r.split for r in kept]),
                     statuses=arr([r.status for r in kept]),
                     p_raw=prob([r.p_raw for r in kept]), p_cal=prob([r.p_cal for r in kept]),
                     score=score, path=p, dropped_ids=tuple(r.id for r in dropped),
                     dropped_statuses=tuple(r.status for r in dropped))


def write_scored_csv(scored: ScoredSet, path: str | Path, *,
                     unscored: Sequence[bool] | None = None) -> Path:
    """Write ``scored`` in the ``curve.csv`` layout (``calimon.run_folder``'s writer);
    ``unscored[i]`` writes row ``i`` as a ``parse_failure`` with empty scores (to exercise
    readers on failed rows)."""
    bad = np.zeros(len(scored), bool) if unscored is None else np.asarray(unscored, bool)

    def num(v: float, i: int) -> float | None:
        return None if bad[i] or math.isnan(v) else float(v)

    rows = (CurveRow(id=str(scored.ids[i]), pair_id=str(scored.pair_ids[i]),
                     label=None if scored.labels[i] < 0 else bool(scored.labels[i]),
                     category=str(scored.categories[i]), task=str(scored.tasks[i]),
                     split=str(scored.splits[i]),
                     status="parse_failure" if bad[i] else str(scored.statuses[i]),
                     p_raw=num(scored.p_raw[i], i), p_cal=num(scored.p_cal[i], i))
            for i in range(len(scored)))
    return write_curve_csv(path, rows)


@dataclass(frozen=True, eq=False)
class Split:
    """A calibration / test partition; ``method`` says how it was made (for reports)."""

    calib: ScoredSet
    test: ScoredSet
    method: str


def calib_test_split(scored: ScoredSet, seed: int = 0) -> Split:
    """Calibration and test rows: the ``split`` column if any row has one, else a pair split.

    With split values: calib = rows with ``split == "calib"``, test = ``split == "test"`` (rows
    of other splits, e.g. ``train``, are left out); both must be non-empty.
    Without: pairs (``pair_id``) are shuffled with ``seed`` within each category (the category
    of a pair's first row) and the first half (rounded up) of each category goes to calib; a
    pair never straddles the two halves.
    """
    if np.any(scored.splits != ""):
        calib, test = scored.splits == "calib", scored.splits == "test"
        for name, mask in (("calib", calib), ("test", test)):
            if not mask.any():
                held = sorted(set(scored.splits.astype(str).tolist()) - {""})
                raise InputError(f"no scored row has split == {name!r} (the rows' splits: "
                                 f"{', '.join(held)}); run `calimon curve --split test --out "
                                 "DIR` (maps fitted on 'calib', judged on 'test'; it writes "
                                 "both) and pass DIR", path=scored.path, field="split")
        return Split(scored.subset(calib), scored.subset(test), "split column (calib / test)")
    rng = np.random.default_rng(seed)
    pairs, first = np.unique(scored.pair_ids.astype(str), return_index=True)
    cats = scored.categories[first].astype(str)
    to_calib: set[str] = set()
    for cat in np.unique(cats):
        members = pairs[cats == cat]
        members = members[rng.permutation(members.size)]
        to_calib.update(members[: (members.size + 1) // 2].tolist())
    mask = np.array([pid in to_calib for pid in scored.pair_ids.astype(str)], dtype=bool)
    if mask.all() or not mask.any():
        raise InputError("need at least two pairs to split calibration / test", path=scored.path,
                         field="pair_id")
    return Split(scored.subset(mask), scored.subset(~mask),
                 f"pair-grouped 50/50 split stratified by category, seed {seed}")


def synthetic_scored(n_pairs: int = 1000, seed: int = 0, separation: float = 2.5,
                     with_split: bool = True) -> ScoredSet:
    """A synthetic paired benchmark for examples and tests (not a model's output).

    Each pair draws a category and task uniformly and a shared difficulty ``u ~ N(0, 0.7^2)``;
    the benign member has latent ``z = -separation/2 + u + e``, the misbehaving one
    ``z = +separation/2 + u + e`` with ``e ~ N(0, 1)`` (sycophancy pairs use 60% of the
    separation). ``p_cal = sigmoid(z)`` and ``p_raw = sigmoid(2 z)`` (overconfident). With
    ``with_split`` pairs go to calib / test 50/50 at random.
    """
    if n_pairs < 1:
        raise InputError(f"expected n_pairs >= 1, got {n_pairs}", field="n_pairs")
    rng = np.random.default_rng(seed)
    cats = np.array(["safety", "sycophancy", "spec_gaming"], dtype=object)
    tasks = np.array(["qa", "code", "reasoning"], dtype=object)
    cat = cats[rng.integers(0, 3, n_pairs)]
    task = tasks[rng.integers(0, 3, n_pairs)]
    sep = np.where(cat == "sycophancy", 0.6 * separation, separation)
    u = rng.normal(0.0, 0.7, n_pairs)
    z = np.stack([-sep / 2 + u, sep / 2 + u], axis=1) + rng.normal(0.0, 1.0, (n_pairs, 2))
    split = np.where(rng.random(n_pairs) < 0.5, "calib", "test") if with_split else \
        np.full(n_pairs, "")
    pair = np.array([f"syn-{i:05d}" for i in range(n_pairs)], dtype=object)
    ids = np.array([f"{p}-{s}" for p in pair for s in ("b", "m")], dtype=object)
    zz = z.ravel()
    out = ScoredSet.from_arrays(
        1.0 / (1.0 + np.exp(-zz)), np.tile([0, 1], n_pairs), pair_ids=np.repeat(pair, 2),
        ids=ids, categories=np.repeat(cat, 2), tasks=np.repeat(task, 2),
        splits=np.repeat(split.astype(object), 2))
    return replace(out, p_raw=_ro(1.0 / (1.0 + np.exp(-2.0 * zz))))


def write_synthetic_run(out_dir: str | Path, n_pairs: int = 1000, seed: int = 0,
                        n_failed: int = 10, with_split: bool = True) -> Path:
    """Write ``out_dir/curve.csv`` from :func:`synthetic_scored`, with ``n_failed`` random
    rows marked ``parse_failure`` (empty scores). Returns the CSV path."""
    scored = synthetic_scored(n_pairs, seed, with_split=with_split)
    rng = np.random.default_rng(seed + 1)
    bad = np.zeros(len(scored), bool)
    bad[rng.choice(len(scored), size=min(n_failed, len(scored)), replace=False)] = True
    return write_scored_csv(scored, Path(out_dir) / "curve.csv", unscored=bad)


def resolve_run(path: str | Path) -> Path:
    """The scored CSV of a run: ``DIR/curve.csv`` for a directory, else the file itself."""
    p = Path(path)
    if p.is_dir():
        p = p / "curve.csv"
        if not p.is_file():
            raise InputError("the run directory has no curve.csv (write one with "
                             "`calimon curve --out DIR`)", path=str(path))
    elif not p.is_file():
        raise InputError("no such run directory or scored CSV", path=str(path))
    return p


def run_metadata(csv_path: str | Path) -> dict[str, str]:
    """Best-effort ``model`` / ``readout`` / ``calibration`` of the run next to a CSV.

    Looks at ``run.json`` (at its top level or under ``"run"`` / ``"meta"``), then at the
    ``run`` part of ``curve.json`` (`calimon.run_folder.read_curve_json`), in the same folder;
    keys not found are left out. Never raises on a missing or odd file.
    """
    import json

    from calimon.run_folder import read_curve_json

    keys = ("model", "readout", "calibration")
    found: dict[str, str] = {}
    folder = Path(csv_path).parent
    try:
        data = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = None
    if isinstance(data, dict):
        for scope in (data, data.get("run"), data.get("meta")):
            if isinstance(scope, dict):
                found.update({k: scope[k] for k in keys
                              if isinstance(scope.get(k), str) and k not in found})
    try:
        run = read_curve_json(folder / "curve.json").run
    except InputError:
        run = None
    for key in keys:
        value = getattr(run, key, None)
        if isinstance(value, str) and key not in found:
            found[key] = value
    return found


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file's bytes."""
    import hashlib

    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
