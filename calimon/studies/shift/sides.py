"""The two sides of a shift check: the calibration rows of a run, and a new set of transcripts.

A run folder written by ``calimon curve`` records the benchmark it read (``curve.json``,
``provenance.benchmark``), a hash of the exact samples (``provenance.dataset_hash``) and one
``curve.csv`` row per sample id; :func:`run_transcripts` finds the transcripts again from those
three and checks the hash, so a benchmark rebuilt with different content is an error, never a
silent mismatch. A samples JSONL given explicitly (``samples=``) takes the place of the
benchmark lookup.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from calimon.curve_result import Provenance
from calimon.errors import InputError
from calimon.run_folder import read_curve_json
from calimon.samples import Sample


@dataclass(frozen=True, eq=False)
class Side:
    """Transcripts of one side, aligned by row: ``ids``, ``requests``, ``responses``; ``scores``
    (the monitor's ``p_raw``, a feature of the two-sample test; None when the side has none),
    ``labels`` (-1 = unknown), ``groups`` (pair ids: rows of one group are not exchangeable on
    their own; None = each row its own group) and ``cert_scores``: the scores on the scale the
    thresholds are certified on (the ``score`` column read, e.g. ``p_cal``; None when the side
    has none). Every comparison with a threshold reads ``cert_scores``, never ``scores``."""

    name: str
    ids: tuple[str, ...]
    requests: tuple[str, ...] = field(repr=False)
    responses: tuple[str, ...] = field(repr=False)
    scores: np.ndarray | None = field(default=None, repr=False)
    labels: np.ndarray | None = field(default=None, repr=False)
    groups: tuple[str, ...] | None = field(default=None, repr=False)
    cert_scores: np.ndarray | None = field(default=None, repr=False)

    def as_features(self, with_score: bool = True) -> dict[str, Any]:
        """The side's texts (and, with ``with_score``, its scores) as the feature builder's
        input."""
        return {"request": list(self.requests), "response": list(self.responses),
                "score": self.scores if with_score else None}


def _run_provenance(csv_path: Path) -> Provenance:
    """The provenance of the run whose curve.json sits next to ``csv_path`` (empty when there
    is none, or it does not read)."""
    try:
        return read_curve_json(csv_path.parent / "curve.json").provenance
    except InputError:
        return Provenance()


def run_transcripts(csv_path: str | Path, samples: str | Path | None = None) -> dict[str, Sample]:
    """Samples by id for every row of a run's ``curve.csv`` (see module doc)."""
    import csv

    from calimon.data.registry import load_benchmark
    from calimon.samples import load_samples
    from calimon.selection import dataset_hash

    csv_path = Path(csv_path)
    with open(csv_path, newline="", encoding="utf-8") as fh:
        ids = [row.get("id", "") for row in csv.DictReader(fh)]
    prov = _run_provenance(csv_path)
    if samples is not None:
        pool, where = load_samples(samples), str(samples)
    else:
        bench = prov.benchmark
        if not bench:
            raise InputError("cannot find the transcripts of this scored CSV: no curve.json "
                             "next to it names a benchmark; give its samples JSONL "
                             "explicitly", path=str(csv_path))
        try:
            pool = load_benchmark(bench, build_if_missing=False)
        except InputError as exc:
            raise InputError(f"cannot find the transcripts of this run: benchmark {bench!r} "
                             f"does not load ({exc}); build it or pass --samples",
                             path=str(csv_path)) from None
        where = f"benchmark {bench!r}"
    by_id = {s.id: s for s in pool}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise InputError(f"{len(missing)} row id(s) are not in {where} (first {missing[0]!r}); "
                         f"the transcripts of this run cannot be found", path=str(csv_path),
                         field="id")
    found = {i: by_id[i] for i in ids}
    want = prov.dataset_hash if samples is None else None
    if want is not None and dataset_hash(list(found.values())) != want:
        raise InputError(f"{where} has changed since the run (dataset hash differs from "
                         f"{want!r}); rebuild the same data or pass --samples",
                         path=str(csv_path))
    return found


def side_of(name: str, scored, found: dict[str, Sample]) -> Side:
    """The Side of a ScoredSet's rows, with transcripts from ``found`` (by id)."""
    rows = [found[i] for i in scored.ids]
    p_raw = np.asarray(scored.p_raw, float)
    cert = np.asarray(scored.scores, float)
    return Side(name, tuple(scored.ids), tuple(s.request for s in rows),
                tuple(s.response for s in rows),
                p_raw if p_raw.size and np.all(np.isfinite(p_raw)) else None,
                np.asarray(scored.labels, int), tuple(str(p) for p in scored.pair_ids),
                cert if cert.size else None)


def calib_side(run: str | Path, *, samples: str | Path | None = None, score: str = "p_cal",
               seed: int = 0):
    """``(Side, ScoredSet)`` of the scored calibration rows of a run: the rows with
    ``split == calib`` when there are any, else the calibration half of ``calib_test_split``
    (the rows ``calimon thresholds`` certifies on)."""
    from calimon.deploy.io import calib_test_split, read_scored_csv, resolve_run

    csv_path = resolve_run(run)
    scored = read_scored_csv(csv_path, score=score)
    in_calib = scored.splits == "calib"
    cal = (scored.subset(in_calib) if in_calib.any()
           else calib_test_split(scored, seed=seed).calib)
    return side_of("calibration", cal, run_transcripts(csv_path, samples)), cal


def new_side(path: str | Path, *, samples: str | Path | None = None,
             score: str = "p_cal") -> Side:
    """The new transcripts: a samples JSONL (no scores needed), or a run folder / scored CSV
    whose scored rows are looked up like a calibration run's (labels not needed)."""
    from calimon.deploy.io import read_scored_csv, resolve_run
    from calimon.samples import load_samples

    p = Path(path)
    if p.is_file() and p.suffix == ".jsonl":
        rows = load_samples(p)
        return Side("new", tuple(s.id for s in rows), tuple(s.request for s in rows),
                    tuple(s.response for s in rows), None,
                    np.array([-1 if s.label is None else int(s.label) for s in rows]),
                    tuple(s.pair_id for s in rows))
    csv_path = resolve_run(p)
    scored = read_scored_csv(csv_path, score=score, require_labels=False)
    return side_of("new", scored, run_transcripts(csv_path, samples))
