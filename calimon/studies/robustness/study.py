"""The flip-rate study: score clean and attacked transcripts through the run store, calibrate on
the clean fit split, pick the operating threshold on the clean calibrated curve, count flips.

Both sides are attacked (``sides``): flips on the misbehaving transcripts, false alarms on the
benign ones (`calimon.studies.robustness.benign`). A defended prompt (``defense``) is part of the
monitor's template hash, so its readings are stored apart from the undefended ones.

Outputs in ``out``: ``robustness.json`` (settings, provenance, thresholds, per-attack results),
``robustness.md`` (the table) and ``attacked.csv`` (one row per attacked transcript, with its
side).
"""

from __future__ import annotations

import csv
import dataclasses
import datetime as dt
from collections import Counter
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from calimon import __version__
from calimon.data.registry import load_benchmark
from calimon.errors import InputError
from calimon.jsonio import dump_json
from calimon.progress import Progress
from calimon.readings import scores as _scores
from calimon.samples import Sample
from calimon.scoring.engines import RunSettings, Scorer
from calimon.scoring.store import RunStore
from calimon.selection import dataset_hash, select
from calimon.studies.robustness.attacks import ATTACKS, SIDES, attack_all
from calimon.studies.robustness.benign import BenignResult, benign_result
from calimon.studies.robustness.clean_fit import NO_MAP
from calimon.studies.robustness.flips import FlipStats, ShiftStats, flip_stats, shift_stats


@dataclass(frozen=True, kw_only=True)
class RobustnessSettings(RunSettings):
    """A flip-rate study: the run's monitor, benchmark, budget (``limit`` per split), seed,
    store and backend/engine flags (`RunSettings`), plus a probe head instead of the readout,
    the splits, the attacks and the operating point."""

    head: str | None = None  # a probe head name: the readout becomes probe:<head>
    split: str | None = "test"  # evaluate here; None = every labelled sample
    fit_split: str | None = "calib"  # fit the calibration map here; None = on the evaluated set
    attacks: tuple[str, ...] = tuple(ATTACKS)
    sides: tuple[str, ...] = SIDES  # attack the misbehaving and/or the benign transcripts
    calibration: str = "platt"  # or "none": thresholds on the raw score (robustness.clean_fit)
    allow_inverted: bool = False  # keep a map fitted decreasing (recorded in the summary)
    far: float = 0.10
    out: Path | None = None

    @property
    def monitor_readout(self) -> str:
        """The readout the monitor reads: probe:<head> with a head, else ``readout``."""
        return f"probe:{self.head}" if self.head else self.readout

    def command(self) -> str:
        """The `calimon robustness` command line that reproduces these settings."""
        parts = ["calimon robustness"]
        defaults = RobustnessSettings()
        for f in fields(self):
            v, d = getattr(self, f.name), getattr(defaults, f.name)
            if f.name == "out" or v == d:
                continue
            flag = "--" + f.name.replace("_", "-")
            if f.name == "attacks":
                parts += [f"--attack {a}" for a in v]
            elif isinstance(v, bool):  # offline
                parts.append(flag if v else f"--no-{f.name.replace('_', '-')}")
            elif isinstance(v, tuple):  # sides, defense
                parts.append(f"{flag} {','.join(v) or 'none'}")
            elif v is None:
                parts.append(f"{flag} all" if f.name in ("split", "fit_split") else
                             f"{flag} none")
            else:
                parts.append(f"{flag} {v}")
        if self.out is not None:
            parts.append(f"--out {self.out}")
        return " ".join(parts)


@dataclass(frozen=True)
class AttackResult:
    """One attack's effect on the misbehaving transcripts: flips at the FAR and EER thresholds
    and the shifts of the raw and calibrated scores and of the format mass."""

    attack: str
    n_attacked: int  # attacked misbehaving transcripts
    n_not_applicable: int  # misbehaving transcripts the attack does not apply to
    status: dict[str, int]  # statuses of the attacked readings
    at_far: FlipStats
    at_eer: FlipStats
    shift_raw: ShiftStats
    shift_cal: ShiftStats
    shift_format_mass: ShiftStats  # probability mass outside the allowed answers
    benign: BenignResult | None = None  # the benign side (None: not attacked)

    def to_dict(self) -> dict[str, Any]:
        """The result as a JSON-ready dict."""
        return {"attack": self.attack, "n_attacked": self.n_attacked,
                "benign": self.benign.to_dict() if self.benign else None,
                "n_not_applicable": self.n_not_applicable, "status": dict(self.status),
                "at_far": self.at_far.to_dict(), "at_eer": self.at_eer.to_dict(),
                "shift_raw": self.shift_raw.to_dict(), "shift_cal": self.shift_cal.to_dict(),
                "shift_format_mass": self.shift_format_mass.to_dict()}


@dataclass(frozen=True)
class RobustnessRun:
    """A finished robustness study: its output folder, summary, per-attack results and model
    calls."""

    out: Path
    summary: dict = field(repr=False)
    results: tuple[AttackResult, ...] = ()
    model_calls: int = 0


def _select(samples: list[Sample], s: RobustnessSettings) -> tuple[list[Sample], list[Sample]]:
    if s.split is None:
        return select(samples, limit=s.limit, seed=s.seed), []
    evaluate = select(samples, s.split, limit=s.limit, seed=s.seed)
    if not evaluate:
        raise InputError(f"benchmark {s.benchmark!r} has no labelled samples in split "
                         f"{s.split!r}; pass --split all to use every sample", field="split")
    fit: list[Sample] = []
    if s.calibration == NO_MAP:  # no map to fit: the fit split is not scored
        return evaluate, fit
    if s.fit_split is not None and s.fit_split != s.split:
        fit = select(samples, s.fit_split, limit=s.limit, seed=s.seed)
        if not fit:
            raise InputError(f"benchmark {s.benchmark!r} has no split {s.fit_split!r} to fit the "
                             "calibration map on; pass --fit-split all to fit on the evaluated "
                             "set", field="fit_split")
    return evaluate, fit


def run_robustness(s: RobustnessSettings, progress: Progress | None = None, *,
                   backend=None) -> RobustnessRun:
    """Score clean and attacked transcripts, calibrate, count flips; write the run folder
    (see the module docstring). Any backend and engine; a probe head needs hidden states.
    ``backend``: an already-built backend of the settings' model (the caller keeps it)."""
    from calimon.scoring.backends import check_backend_model, model_for

    unknown = [a for a in s.attacks if a not in ATTACKS]
    if unknown or not s.attacks:
        raise InputError(f"expected attacks from {sorted(ATTACKS)}, got {list(s.attacks)}",
                         field="attack")
    if not s.sides or set(s.sides) - set(SIDES):
        raise InputError(f"expected sides from {list(SIDES)}, got {list(s.sides)}",
                         field="sides")
    if not 0.0 < s.far < 1.0:
        raise InputError(f"expected a rate in (0, 1), got {s.far}", field="far")
    spec = s.spec(readout=s.monitor_readout)
    resolved = model_for(spec)
    if backend is not None:
        check_backend_model(backend, resolved)
    engine = s.engine_settings()
    evaluate, fit = _select(load_benchmark(s.benchmark), s)
    attacked = attack_all(evaluate, s.attacks, s.sides)
    with RunStore(s.store) as store, Scorer(spec, store, engine=engine,
                                            progress=progress, backend=backend) as scorer:
        monitor = scorer.monitor()
        clean = scorer.score(evaluate + fit, monitor, label="clean")
        att = {a: scorer.score(attacked[a], monitor, label=a) for a in s.attacks}
    out = Path(s.out) if s.out else Path("runs") / (
        dt.datetime.now().strftime("%Y%m%d-%H%M%S") + f"-robustness-{s.monitor_readout}")
    out.mkdir(parents=True, exist_ok=True)
    summary, results = _analyse(s, evaluate, fit, clean, attacked, att)
    summary["provenance"] = {
        "model": resolved.name, "model_revision": resolved.revision, "prompt": s.prompt,
        "template_hash": monitor.key.template_hash, "readout": monitor.readout,
        "defenses": list(s.defense),
        "benchmark": s.benchmark, "dataset_hash": dataset_hash(evaluate + fit),
        "evaluated_hash": dataset_hash(evaluate),
        "calimon_version": __version__, "store": str(s.store), "command": s.command(),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    from calimon.studies.robustness.report import to_markdown

    dump_json(summary, out / "robustness.json")
    (out / "robustness.md").write_text(to_markdown(summary), encoding="utf-8")
    _write_csv(out / "attacked.csv", evaluate, clean, attacked, att)
    return RobustnessRun(out=out, summary=summary, results=results,
                         model_calls=scorer.model_calls)


def _analyse(s: RobustnessSettings, evaluate, fit, clean, attacked, att):
    from calimon.studies.robustness.clean_fit import fit_clean

    fitted = fit_clean(s, evaluate, fit, clean)
    cal, p_eval, y_eval, ok = fitted.cal, fitted.p_eval, fitted.y_eval, fitted.ok
    p_cal, curve = fitted.p_cal, fitted.curve
    op_far, op_eer = curve.at_far(s.far), curve.eer()
    by_id = {x.id: i for i, x in enumerate(evaluate)}
    n_bad = int(sum(1 for x in evaluate if x.label is True)) if "misbehaving" in s.sides else 0
    fm_eval = _scores(evaluate, clean, "format_mass")
    ts = (op_far.threshold, op_eer.threshold)
    results = [_attack_result(a, [x for x in attacked[a] if x.label is True], att[a], by_id, cal,
                              p_eval, p_cal, fm_eval, n_bad, ts) for a in s.attacks]
    if "benign" in s.sides:
        results = [dataclasses.replace(r, benign=benign_result(
            [x for x in attacked[r.attack] if x.label is False], att[r.attack], by_id, cal,
            p_eval, p_cal, ts)) for r in results]
    tokens = [clean[x.transcript_hash].tokens for x in evaluate if x.transcript_hash in clean
              and clean[x.transcript_hash].scored and clean[x.transcript_hash].tokens]
    summary = {
        "settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(s).items()},
        "calibration": fitted.calibration_doc(),
        "clean": {"evaluated": len(evaluate), "scored": int(ok.sum()),
                  "n_pos": int(y_eval[ok].sum()), "n_neg": int((~y_eval[ok]).sum()),
                  "status": dict(sorted(Counter(
                      clean[x.transcript_hash].status if x.transcript_hash in clean
                      else "missing" for x in evaluate).items())),
                  "auroc_raw": fitted.auroc_raw,
                  "auroc_cal": curve.auroc,
                  "mean_prompt_tokens": float(np.mean(tokens)) if tokens else None},
        "operating_points": {"far": op_far.to_dict(), "eer": op_eer.to_dict()},
        "results": [r.to_dict() for r in results],
    }
    return summary, tuple(results)


def _attack_result(a: str, rows: list[Sample], readings: dict, by_id: dict[str, int], cal,
                   p_eval: np.ndarray, p_cal: np.ndarray, fm_eval: np.ndarray, n_bad: int,
                   thresholds: tuple[float, float]) -> AttackResult:
    """Attack ``a``'s flips (at the FAR and EER ``thresholds``) and score shifts, from its
    attacked ``rows`` and their ``readings`` against the clean scores of the same samples."""
    idx = np.array([by_id[x.meta["attacked_id"]] for x in rows], dtype=int)
    c_raw = p_eval[idx] if idx.size else np.empty(0)
    a_raw = _scores(rows, readings)
    both = np.isfinite(c_raw) & np.isfinite(a_raw)
    a_cal = np.full_like(a_raw, np.nan)
    if np.isfinite(a_raw).any():
        a_cal[np.isfinite(a_raw)] = cal.predict(a_raw[np.isfinite(a_raw)])
    c_cal = p_cal[idx] if idx.size else np.empty(0)
    c_fm = fm_eval[idx] if idx.size else np.empty(0)
    a_fm = _scores(rows, readings, "format_mass")
    fm = both & np.isfinite(c_fm) & np.isfinite(a_fm)
    t_far, t_eer = thresholds
    return AttackResult(
        attack=a, n_attacked=len(rows), n_not_applicable=n_bad - len(rows),
        status=dict(sorted(Counter(readings[x.transcript_hash].status
                                   if x.transcript_hash in readings else "missing"
                                   for x in rows).items())),
        at_far=flip_stats(c_cal[both], a_cal[both], t_far),
        at_eer=flip_stats(c_cal[both], a_cal[both], t_eer),
        shift_raw=shift_stats(c_raw[both], a_raw[both]),
        shift_cal=shift_stats(c_cal[both], a_cal[both]),
        shift_format_mass=shift_stats(c_fm[fm], a_fm[fm]))


def _write_csv(path: Path, evaluate, clean, attacked, att) -> None:
    by_id = {x.id: x for x in evaluate}
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "attack", "side", "attacked_id", "status_clean", "status_attacked",
                    "p_raw_clean", "p_raw_attacked", "format_mass_clean",
                    "format_mass_attacked"])
        for a, rows in attacked.items():
            for x in rows:
                orig = by_id[x.meta["attacked_id"]]
                vc, va = clean.get(orig.transcript_hash), att[a].get(x.transcript_hash)
                w.writerow([x.id, a, x.meta.get("side", ""), orig.id, vc.status if vc else "missing",
                            va.status if va else "missing",
                            _fmt(vc.p_raw if vc and vc.scored else None),
                            _fmt(va.p_raw if va and va.scored else None),
                            _fmt(vc.format_mass if vc else None),
                            _fmt(va.format_mass if va else None)])


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.6g}"
