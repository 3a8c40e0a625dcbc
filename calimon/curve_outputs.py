"""The files of a curve run: curve.json, curve.csv, curve.png, curves_by_group.png,
reliability.png, calibration/<method>.json and, for a token-head readout (probe:NAME),
token_scores.jsonl (the per-token scores the HTML report draws as a heat map)."""

from __future__ import annotations

import json
import math
import shutil
import warnings
from pathlib import Path

import numpy as np

from calimon.calibration.crossfit import calibrate, fit_on_split
from calimon.calibration.direction import inversion_findings, inversion_message
from calimon.calibration.io import fit_set_hash, save_map
from calimon.class_support import MIN_PER_CLASS_CURVE, class_support, rates_at
from calimon.curve_support import applied_map, fit_support, rates_only_summary, uncalibrated
from calimon.curves import BinaryPoint, Curve, binary_point, curves_by
from calimon.errors import InputError, InvertedMapError
from calimon.metrics import calibration_report
from calimon.run_folder import CurveRow, curve_csv_info, write_curve_csv
from calimon.samples import Sample
from calimon.verdict import Verdict


def _none_scored(evaluate: list[Sample], readings: dict[str, Verdict]) -> InputError:
    """The error of a run in which no evaluated sample has a score: the statuses, and the first
    error a backend recorded (e.g. the API's refusal)."""
    from calimon.readings import status_counts

    counts = status_counts(evaluate, readings)
    first = next((v.error for x in evaluate if (v := readings.get(x.transcript_hash))
                  and v.error), None)
    return InputError(f"none of the {len(evaluate)} evaluated samples has a score (statuses "
                      f"{counts}" + (f"; first error: {first}" if first else "") + "); a run "
                      "needs scored samples (readings with errors are retried on the next run)")


def write_curve_outputs(out: Path, s, *, evaluate: list[Sample], fit: list[Sample],
                        readings: dict[str, Verdict], binary_set: list[Sample],
                        binary_readings: dict[str, dict[str, Verdict]], provenance: dict,
                        timing: dict | None = None, binary_checks: list | None = None) -> dict:
    """Write a curve run's files into ``out`` (curve.json, with ``timing`` when given, curve.csv,
    plots, calibration maps, token scores); returns the summary. InputError: none scored.
    ``binary_checks``: the free-format checks of binary points not drawn (curve.json's
    ``binary_checks``)."""
    from calimon.jsonio import dump_json
    from calimon.readings import usable

    kept, p_raw, y = usable(evaluate, readings)
    if len(kept) == 0:
        raise _none_scored(evaluate, readings)
    base, bpoints = _base_summary(s, evaluate, readings, kept, y, binary_set,
                                  binary_readings, provenance, timing)
    base["binary_checks"] = list(binary_checks or [])
    fkept, fp, fy = usable(fit, readings)
    fit_p = {x.id: float(v) for x, v in zip(fkept, fp, strict=True)}
    support = class_support(int(y.sum()), int((~y).sum()))
    if not support.curve:
        return _write_rates_only(out, s, evaluate, fit, readings, fit_p, kept, p_raw, y,
                                 support, base)
    groups = np.array([x.pair_id for x in kept])
    cal_support = fit_support(fy) if fit else support
    after_by_method, calib, fit_rows = _calibration(
        s, fit, readings, fit_p, cal_support, kept, p_raw, y, groups, out, provenance)
    method = next(iter(after_by_method)) if s.calibration_map else s.calibration
    calibrated = bool(after_by_method)
    fit_scores = (None if s.calibration_map else (fp, fy) if fit else (p_raw, y))
    inverted = (check_inversion(s, calib, method, fit_scores, out) if calibrated else None)
    p_cal = np.clip(after_by_method[method], 0.0, 1.0) if calibrated else p_raw
    keys = _group_keys(kept)
    curves = curves_by(p_cal, y, groups, keys=keys, n_boot=s.n_boot, seed=s.seed,
                       min_per_class=MIN_PER_CLASS_CURVE)
    raw_curve = Curve.from_scores(p_raw, y, groups, n_boot=0)
    overall = curves["all"]
    points = overall.operating_points(fars=s.fars, cost_miss=s.cost_miss,
                                      cost_false_alarm=s.cost_false_alarm)
    summary = {
        **base, "support": {**support.to_dict(), "calibration": calibrated,
                            "reason": None if calibrated else cal_support.reason},
        "run": {**base["run"], "calibration": method if calibrated else "none"},
        "score": "p_cal" if calibrated else "p_raw",
        "calibration_method": method if calibrated else None,
        "auroc_raw": raw_curve.auroc, "auroc": overall.auroc,
        "thresholds": overall.to_dict()["thresholds"], "mr": overall.to_dict()["mr"],
        "far": overall.to_dict()["far"], "band": overall.to_dict()["band"],
        "operating_points": [p.to_dict() for p in points],
        "rates_at_thresholds": [r.to_dict() for r in rates_at(p_cal, y, s.rate_thresholds)],
        "calibration": calib,
        "inverted": inverted,
        "raw_curve": raw_curve.to_dict(),
        "curves": {k: c.to_dict() for k, c in curves.items()},
        "groups": group_rows(curves, p_raw, y, keys, s.fars),
    }
    dump_json(summary, out / "curve.json")
    # the calib rows too (p_cal = the deployed map, fitted on them), so that the deployment
    # tools can certify on calib and report on the evaluated split from one file
    p_cal_by_id = ({x.id: v for x, v in zip(kept, p_cal, strict=True)} | fit_rows
                   if calibrated else {})
    _write_csv(out / "curve.csv", [*evaluate, *fit], readings, p_cal_by_id)
    write_token_scores(out / "token_scores.jsonl", evaluate, readings)
    _plots(out, curves, bpoints, points, p_raw, y, s, after_by_method, method)
    return summary


def check_inversion(s, calib: dict, method: str, fit_scores, out: Path) -> dict | None:
    """The deployed map's inversion findings (`calimon.calibration.direction`): None when
    there are none; recorded (``{"findings", "allowed": True}``) with ``s.allow_inverted``;
    else the maps this run saved are removed and `InvertedMapError` stops the run."""
    p_fit, y_fit = fit_scores if fit_scores is not None else (None, None)
    findings = inversion_findings(calib.get("maps", {}).get(method), p_fit, y_fit)
    if not findings:
        return None
    if getattr(s, "allow_inverted", False):
        return {"findings": findings, "allowed": True, "method": method}
    if not s.calibration_map:
        shutil.rmtree(out / "calibration", ignore_errors=True)
    raise InvertedMapError(inversion_message(findings, s.readout))


def _group_keys(kept: list[Sample]) -> dict[str, list[str]]:
    """The group labels of each kept sample the curves are split by: category, task, cell and,
    when any sample has one, source."""
    keys = {"category": [x.category for x in kept], "task": [x.task for x in kept],
            "cell": [f"{x.category}/{x.task}" for x in kept]}
    if any(x.source for x in kept):  # per source too, as per category and task
        keys["source"] = [x.source for x in kept]
    return keys


def _calibration(s, fit, readings, fit_p, cal_support, kept, p_raw, y, groups, out,
                 provenance):
    """(calibrated scores by method, the ``calibration`` block, id -> p_cal of the calib rows):
    a saved map applied, no map (too few of a class), maps fitted on calib, or cross-fitted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit_rows: dict[str, float] = {}
        if s.calibration_map:
            after_by_method, calib, fit_rows = applied_map(s, p_raw, y, fit_p, provenance)
        elif not cal_support.calibration:
            after_by_method, calib = {}, uncalibrated(p_raw, y, cal_support)
        elif fit:
            after_by_method, calib, fit_rows = _fit_apply(s, fit, readings, p_raw, y, out,
                                                           provenance)
        else:
            result = calibrate(p_raw, y, groups, methods=s.methods, seed=s.seed)
            after_by_method = {m: np.asarray(result.oof[m]) for m in s.methods}
            calib = {"mode": "cross-fitted (pair-grouped, out-of-fold)", **result.to_dict()}
            fhash = fit_set_hash(p_raw, y, [x.id for x in kept])
            (out / "calibration").mkdir(exist_ok=True)
            for m in s.methods:
                save_map(result.maps[m], out / "calibration" / f"{m}.json", fit_hash=fhash,
                         metrics=result.metrics_after[m], extra=_map_extra(provenance))
    calib["notes"] = list(calib.get("notes", [])) + [str(w.message) for w in caught]
    return after_by_method, calib, fit_rows


def _base_summary(s, evaluate, readings, kept, y, binary_set, binary_readings,
                  provenance, timing=None) -> tuple[dict, list[BinaryPoint]]:
    """The summary keys of every run, with or without a curve, and the binary points.
    ``timing`` (when given): the scoring phase's wall time, model load included, the
    transcripts the model scored (not taken from the store) and its model calls."""
    from calimon.readings import status_counts

    bpoints = []
    for name, table in binary_readings.items():
        labelled = [x for x in binary_set if x.transcript_hash in table]
        decisions = [table[x.transcript_hash].decision
                     if table[x.transcript_hash].scored else None for x in labelled]
        bpoints.append(binary_point(decisions, [bool(x.label) for x in labelled],
                                    name=f"binary/{name}"))
    fm = np.array([readings[x.transcript_hash].format_mass for x in kept
                   if readings[x.transcript_hash].format_mass is not None], dtype=float)
    return {
        "run": {"model": provenance["model"], "backend": provenance.get("backend"),
                "readout": provenance["readout"], "prompt": provenance["prompt"],
                "calibration": s.calibration},
        "provenance": provenance,
        "settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(s).items()},
        "counts": {"evaluated": len(evaluate), "scored": len(kept),
                   "status": status_counts(evaluate, readings),
                   "n_pos": int(y.sum()), "n_neg": int((~y).sum()),
                   "truncated": sum(readings[x.transcript_hash].status == "truncated"
                                    for x in kept)},
        "format_mass": {"mean": float(fm.mean()) if fm.size else None,
                        "max": float(fm.max()) if fm.size else None},
        "binary_points": [b.to_dict() for b in bpoints],
        "binary_sample_count": len(binary_set),
        "files": {"curve.csv": curve_csv_info()},
        **({"timing": timing} if timing is not None else {}),
    }, bpoints


def _write_rates_only(out, s, evaluate, fit, readings, fit_p, kept, p_raw, y, support,
                      base) -> dict:
    """A set below the curve rule (calimon.class_support): rates at fixed thresholds only."""
    from calimon.jsonio import dump_json

    summary, p_cal_by_id = rates_only_summary(s, fit_p=fit_p, kept=kept, p_raw=p_raw, y=y,
                                              support=support, base=base)
    if s.calibration_map:
        calib = summary.get("calibration", {})
        summary["inverted"] = check_inversion(s, calib, next(iter(calib.get("maps", {})), ""),
                                              None, out)
    dump_json(summary, out / "curve.json")
    _write_csv(out / "curve.csv", [*evaluate, *fit], readings, p_cal_by_id)
    write_token_scores(out / "token_scores.jsonl", evaluate, readings)
    for stale in ("curve.png", "curves_by_group.png", "reliability.png"):
        (out / stale).unlink(missing_ok=True)  # left by an earlier run into the same folder
    return summary


def write_token_scores(path: Path, samples: list[Sample], readings: dict[str, Verdict]) -> int:
    """One ``{"id", "offsets", "scores"}`` line per sample whose reading carries a token head's
    per-token scores (``Verdict.extra["token_scores"]``); the file the report reads. Writes
    nothing (and leaves an existing file alone) when no reading has any. Returns the count."""
    lines = []
    for x in samples:
        v = readings.get(x.transcript_hash)
        tok = v.extra.get("token_scores") if v is not None else None
        if isinstance(tok, dict) and tok.get("offsets"):
            lines.append(json.dumps({"id": x.id, "offsets": tok["offsets"],
                                     "scores": tok["scores"]}, allow_nan=False) + "\n")
    if lines:
        path.write_text("".join(lines), encoding="utf-8")
    return len(lines)


def group_rows(curves: dict, p_raw, y, keys: dict, fars) -> list[dict]:
    """One summary row per curve group: counts, AUROC raw and calibrated, MR at each FAR, EER."""
    from calimon.metrics import auroc

    rows = []
    for name, c in curves.items():
        if name == "all":
            mask = np.ones(len(y), bool)
        else:
            key, value = name.split("=", 1)
            mask = np.array([v == value for v in keys[key]])
        row = {"group": name, "n_pos": c.n_pos, "n_neg": c.n_neg,
               "auroc_raw": auroc(p_raw[mask], y[mask]) if c.defined else None,
               "auroc": c.auroc}
        if not c.defined:
            row["note"] = c.undefined_reason
        else:
            row.update({f"mr_at_far_{a:g}": c.at_far(a).mr for a in fars})
            eer = c.eer()
            row["eer"] = (eer.mr + eer.far) / 2
        rows.append({k: (None if isinstance(v, float) and np.isnan(v) else v)
                     for k, v in row.items()})
    return rows


def _map_extra(provenance: dict) -> dict:
    return {k: provenance[k] for k in ("model", "model_revision", "prompt", "template_hash",
                                       "readout", "benchmark", "dataset_hash")}


def _fit_apply(s, fit, readings, p_raw, y, out, provenance):
    from calimon.readings import usable

    fkept, fp, fy = usable(fit, readings)
    (out / "calibration").mkdir(exist_ok=True)
    fhash = fit_set_hash(fp, fy, [x.id for x in fkept])
    after, maps, applied, fit_rows = {}, {}, {}, {}
    for m in s.methods:
        cal, applied[m] = fit_on_split(m, fp, fy, p_raw)
        if m == s.calibration:
            fit_rows = {x.id: float(v) for x, v in zip(
                fkept, np.clip(cal.predict(fp), 0.0, 1.0), strict=True)}
        after[m] = calibration_report(applied[m], y)
        maps[m] = cal.to_dict()
        save_map(cal, out / "calibration" / f"{m}.json", fit_hash=fhash, metrics=after[m],
                 extra={**_map_extra(provenance), "fit_split": "calib",
                        "eval_split": s.split})
    clean = {m: {k: (None if isinstance(v, float) and math.isnan(v) else v)
                 for k, v in d.items()} for m, d in after.items()}
    return applied, {"mode": f"fitted on split 'calib' ({len(fkept)} samples), "
                                f"applied to split {s.split!r}",
                                "metrics_before": calibration_report(p_raw, y),
                                "metrics_after": clean, "maps": maps, "methods": list(s.methods)
                                }, fit_rows


def _write_csv(path: Path, samples: list[Sample], readings: dict[str, Verdict],
               p_cal: dict[str, float]) -> None:
    def row(x: Sample) -> CurveRow:
        v = readings.get(x.transcript_hash)
        return CurveRow(id=x.id, pair_id=x.pair_id, label=x.label, category=x.category,
                        task=x.task, split=x.split or "", status=v.status if v else "missing",
                        p_raw=v.p_raw if v is not None and v.scored else None,
                        p_cal=p_cal.get(x.id), format_mass=v.format_mass if v else None,
                        truncated=bool(v and v.truncation), source=x.source or "")

    write_curve_csv(path, (row(x) for x in samples))


def _plots(out, curves, bpoints, points, p_raw, y, s, after_by_method, method):
    from calimon.plotting.curve import plot_curve_grid, plot_curves
    from calimon.plotting.reliability import plot_reliability

    title = f"{s.model} · {s.prompt}/{s.readout} · {s.benchmark}"
    plot_curves(out / "curve.png", {"all (calibrated)": curves["all"]}, binary_points=bpoints,
                operating_points=points, title=title)
    plot_curve_grid(out / "curves_by_group.png", curves, title=title)
    plot_reliability(out / "reliability.png", p_raw, after_by_method, y, title=title,
                     chosen=method)
