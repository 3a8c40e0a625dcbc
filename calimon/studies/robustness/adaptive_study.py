"""`calimon robustness --adaptive`: the adaptive attacker (`calimon.studies.robustness.adaptive`) run on
every misbehaving transcript the monitor flags clean, through the run store.

The clean set, the calibration map (fitted on the clean ``fit_split``) and the operating
threshold (the FAR <= ``far`` point of the clean calibrated curve) are those of the fixed-attack
study. A transcript is flagged iff its calibrated score is ``>= t``; the search stops when a
rewrite is not. The flip rate at budget ``b`` counts the transcripts whose search found a pass
within its first ``b`` queries (one search at the largest budget answers every smaller one, see
the search's docstring), with a 95% Clopper-Pearson interval.

Outputs in ``out``: ``adaptive.json`` (settings, provenance, flip rate per budget, every
transcript's best rewrite), ``adaptive.md`` (the table) and ``adaptive.csv`` (one row per
query). Every query goes through the store, so a rerun resumes and an interrupted one loses
nothing it had scored.
"""

from __future__ import annotations

import csv
import datetime as dt
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from calimon import __version__
from calimon.data.registry import load_benchmark
from calimon.errors import InputError
from calimon.jsonio import dump_json
from calimon.progress import Progress, ticker
from calimon.readings import scores as _scores
from calimon.samples import Sample
from calimon.scoring.engines import Scorer
from calimon.scoring.store import RunStore
from calimon.selection import dataset_hash
from calimon.studies.robustness.adaptive import SearchResult, _check, describe, search
from calimon.studies.robustness.edits import PHRASES, apply_edits
from calimon.studies.robustness.flips import flip_stats
from calimon.studies.robustness.study import RobustnessSettings, _select

BUDGET_POINTS = (1, 4, 16, 64, 256)
_SEARCH_FIELDS = ("budget", "beam", "width", "max_edits", "chunk")


@dataclass(frozen=True, kw_only=True)
class AdaptiveSettings(RobustnessSettings):
    """The fixed-attack study's settings plus the search's: ``budget`` queries per transcript,
    ``beam`` states kept, ``width`` children per state and round, ``max_edits`` phrases per
    rewrite, ``chunk`` candidates per monitor call (``attacks`` is not used)."""

    budget: int = 16
    beam: int = 2
    width: int = 4
    max_edits: int = 3
    chunk: int = 8

    def command(self) -> str:
        """The `calimon robustness --adaptive` command line of these settings."""
        base = RobustnessSettings(**{f.name: getattr(self, f.name)
                                     for f in fields(RobustnessSettings)}).command()
        default = AdaptiveSettings()
        extra = [f"--{n.replace('_', '-')} {getattr(self, n)}" for n in _SEARCH_FIELDS
                 if getattr(self, n) != getattr(default, n)]
        return " ".join(["calimon robustness --adaptive", base[len("calimon robustness "):],
                         *extra]).replace("  ", " ").strip()

    @property
    def budgets(self) -> tuple[int, ...]:
        """The budgets reported: the points of BUDGET_POINTS below ``budget``, and ``budget``."""
        return tuple(sorted({b for b in BUDGET_POINTS if b < self.budget} | {self.budget}))


@dataclass(frozen=True)
class AdaptiveRun:
    """A finished adaptive study: output folder, summary, searches and model calls."""

    out: Path
    summary: dict
    searches: tuple[SearchResult, ...] = ()
    model_calls: int = 0


def _calibrate(s: AdaptiveSettings, evaluate, fit, clean):
    """(calibrator, FAR threshold, op-point dict, clean summary) as the fixed study gets them
    (`calimon.studies.robustness.clean_fit`)."""
    from calimon.studies.robustness.clean_fit import fit_clean

    f = fit_clean(s, evaluate, fit, clean)
    curve = f.curve
    op = curve.at_far(s.far)
    info = {"evaluated": len(evaluate), "scored": int(f.ok.sum()),
            "n_pos": int(f.y_eval[f.ok].sum()), "n_neg": int((~f.y_eval[f.ok]).sum()),
            "auroc_cal": curve.auroc, "calibration": f.calibration_doc()}
    return f.cal, float(op.threshold), op.to_dict(), info


def run_adaptive(s: AdaptiveSettings, progress: Progress | None = None, *,
                 backend=None) -> AdaptiveRun:
    """Score the clean set, calibrate, and search every flagged misbehaving transcript; write
    the run folder (module docstring). Any backend and engine; ``head`` reads a probe head.
    ``backend``: an already-built backend of the settings' model (the caller keeps it)."""
    from calimon.scoring.backends import check_backend_model, model_for

    _check(s.budget, s.beam, s.width, s.max_edits, s.chunk)
    if not 0.0 < s.far < 1.0:
        raise InputError(f"expected a rate in (0, 1), got {s.far}", field="far")
    spec = s.monitor_spec(s.model, s.prompt, s.monitor_readout)
    resolved = model_for(spec)
    if backend is not None:
        check_backend_model(backend, resolved)
    evaluate, fit = _select(load_benchmark(s.benchmark), s)
    with RunStore(s.store) as store, Scorer(spec, store, engine=s.engine_settings(),
                                            progress=progress, backend=backend) as scorer:
        monitor = scorer.monitor()
        clean = scorer.score(evaluate + fit, monitor, label="clean")
        cal, t, op, info = _calibrate(s, evaluate, fit, clean)
        p_eval = _scores(evaluate, clean)
        targets = [(x, float(p)) for x, p in zip(evaluate, p_eval, strict=True)
                   if x.label is True and np.isfinite(p) and cal.predict([p])[0] >= t]

        def query(rows: list[Sample]) -> list[float | None]:
            got = scorer.score(rows, monitor)
            return [got[r.transcript_hash].p_raw if r.transcript_hash in got
                    and got[r.transcript_hash].scored else None for r in rows]

        def flagged(p: float) -> bool:
            return bool(cal.predict([p])[0] >= t)

        tick = ticker(progress, "adaptive", len(targets))
        searches = []
        for x, p in targets:
            searches.append(search(x, p, query, flagged, budget=s.budget, beam=s.beam,
                                   width=s.width, max_edits=s.max_edits, chunk=s.chunk,
                                   seed=s.seed))
            if tick is not None:
                tick(1)
    summary = _summary(s, targets, searches, cal, t, op, info)
    summary["provenance"] = {
        "model": resolved.name, "model_revision": resolved.revision, "prompt": s.prompt,
        "template_hash": monitor.key.template_hash, "readout": monitor.readout,
        "benchmark": s.benchmark, "dataset_hash": dataset_hash(evaluate + fit),
        "calimon_version": __version__, "store": str(s.store), "command": s.command(),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    out = Path(s.out) if s.out else Path("runs") / (
        dt.datetime.now().strftime("%Y%m%d-%H%M%S") + f"-adaptive-{s.monitor_readout}")
    out.mkdir(parents=True, exist_ok=True)
    from calimon.studies.robustness.adaptive_report import to_markdown

    dump_json(summary, out / "adaptive.json")
    (out / "adaptive.md").write_text(to_markdown(summary), encoding="utf-8")
    _write_csv(out / "adaptive.csv", searches)
    return AdaptiveRun(out, summary, tuple(searches), scorer.model_calls)


def _summary(s: AdaptiveSettings, targets, searches: list[SearchResult], cal, t: float,
             op: dict, info: dict) -> dict:
    c_cal = np.array([cal.predict([r.p_clean])[0] for r in searches])
    by_budget = []
    for b in s.budgets:
        a_cal = np.array([cal.predict([r.best_p(b)])[0] for r in searches])
        st = flip_stats(c_cal, a_cal, t) if searches else None
        by_budget.append({"budget": b, **(st.to_dict() if st else {"flagged_clean": 0})})
    samples = {x.id: x for x, _ in targets}
    best = []
    for r, cc in zip(searches, c_cal, strict=True):
        cand = r.best()
        if cand is None:
            continue
        rewritten = apply_edits(samples[r.id], cand.edits)
        best.append({"id": r.id, "p_clean": r.p_clean, "p_attacked": cand.p,
                     "delta_raw": cand.p - r.p_clean,
                     "delta_cal": float(cal.predict([cand.p])[0] - cc),
                     "flipped": r.flip_query is not None, "flip_query": r.flip_query,
                     "queries": r.queries, "refused": r.refused,
                     "edits": describe(cand), "chars_added":
                         len(rewritten.response) - len(samples[r.id].response)})
    best.sort(key=lambda d: (d["delta_raw"], d["id"]))
    kinds = Counter(e["kind"] for d in best for e in d["edits"])
    return {"settings": {k: (list(v) if isinstance(v, tuple) else v)
                         for k, v in vars(s).items()},
            "clean": info, "operating_point": op,
            "threshold": t if np.isfinite(t) else None,
            "searched": len(searches),
            "queries": {"total": sum(r.queries for r in searches),
                        "refused_candidates": sum(r.refused for r in searches)},
            "by_budget": by_budget, "best_attacks": best,
            "best_attack_kinds": dict(sorted(kinds.items())),
            "library": [{"kind": k, "text": v} for k, v in PHRASES]}


def _write_csv(path: Path, searches: list[SearchResult]) -> None:
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "query", "p_clean", "p_attacked", "edits"])
        for r in searches:
            for c in r.candidates:
                w.writerow([r.id, c.query, f"{r.p_clean:.6g}",
                            "" if c.p is None else f"{c.p:.6g}",
                            ";".join(f"{i}@{name}" for i, name in c.edits)])
