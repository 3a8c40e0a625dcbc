"""Plain-text tables for the terminal, read from the typed result of a run
(`calimon.curve_result.CurveResult`). Every AUROC is shown once per figure: the raw row of the
calibration table is the header's ``auroc_raw`` and the row of the map the run used is its
``auroc``, formatted by the same `_f`, so the two places cannot disagree in the last digit
(the calibration report computes AUROC by ranks, the curve by trapezoids: equal numbers whose
last bits may differ)."""

from __future__ import annotations

from dataclasses import replace

from calimon.curve_result import CalibrationMetrics, CurveResult
from calimon.score_readout import EXTERNAL


def _f(x, nd=3) -> str:
    return "-" if x is None or x != x else f"{x:.{nd}f}"


def _head(r: CurveResult) -> str:
    prov, counts = r.provenance, r.counts
    monitor = (f"an external monitor's {prov.readout}" if prov.model == EXTERNAL else
               f"{prov.model} ({prov.model_revision}) · {prov.prompt}/{prov.readout}")
    return (f"{monitor} · "
            f"{prov.benchmark} · {counts.scored} scored of {counts.evaluated} "
            f"({counts.n_pos} misbehaving, {counts.n_neg} benign; status "
            f"{dict(counts.status)})")


def rates_table(r: CurveResult) -> str:
    """The FAR / MR of each class at fixed thresholds, with exact intervals."""
    lines = [f"{'rate':<6}{'threshold':>10}{'k/n':>12}{'estimate':>10}"
             f"{'95% interval (Clopper-Pearson)':>32}"]
    for x in r.rates_at_thresholds:
        t = "inf" if x.threshold == float("inf") else f"{x.threshold:.4g}"
        lines.append(f"{x.rate.upper():<6}{t:>10}{f'{x.k}/{x.n}':>12}{_f(x.estimate, 4):>10}"
                     f"{'[' + _f(x.low, 4) + ', ' + _f(x.high, 4) + ']':>32}")
    return "\n".join(lines)


def _binary_line(b) -> str:
    return (f"{b.name}: MR {_f(b.mr)}, FAR {_f(b.far)} (TP {b.tp}, FP {b.fp}, TN {b.tn}, "
            f"FN {b.fn}; parse failures: {b.n_parse_failure})")


def _calibration_rows(r: CurveResult) -> list[tuple[str, CalibrationMetrics]]:
    """The raw row and one per map, their AUROC the result's own where it has one."""
    cal = r.calibration
    rows = [("raw", replace(cal.metrics_before, auroc=r.auroc_raw))] if cal.metrics_before \
        else []
    for name, m in cal.metrics_after.items():
        rows.append((name, replace(m, auroc=r.auroc) if name == r.calibration_method else m))
    return rows


def operating_table(r: CurveResult) -> str:
    """The terminal summary of a run: operating points and calibration, or, below the
    class-size rule (calimon.numerics.class_support), the reason and the rates at fixed
    thresholds."""
    if not r.has_curve:
        lines = [_head(r), f"not shown: {r.support.reason}", f"score: {r.score}", "",
                 rates_table(r)]
        return "\n".join(lines + [_binary_line(b) for b in r.binary_points])
    split_note = ("; curve.csv holds both splits (for `calimon thresholds` and `escalate`)"
                  if r.settings.split and "fitted on split 'calib'" in r.calibration.mode
                  else "")
    lines = [_head(r),
             f"AUROC raw {_f(r.auroc_raw)} · "
             + (f"calibrated ({r.calibration_method}) {_f(r.auroc)} · "
                if r.calibration_method else "no calibration map · ")
             + f"mean format mass {_f(r.format_mass.mean if r.format_mass else None)}",
             f"calibration maps: {r.calibration.mode}{split_note}", "",
             f"{'operating point':<16}{'threshold':>10}{'MR':>8}{'FAR':>8}"
             f"{'TP':>6}{'FP':>6}{'TN':>6}{'FN':>6}"]
    for p in r.operating_points:
        lines.append(f"{p.name:<16}{_f(p.threshold, 4):>10}{_f(p.mr):>8}{_f(p.far):>8}"
                     f"{p.tp:>6}{p.fp:>6}{p.tn:>6}{p.fn:>6}")
    for b in r.binary_points:
        lines.append(f"{b.name:<16}{'(binary)':>10}{_f(b.mr):>8}{_f(b.far):>8}"
                     f"{b.tp:>6}{b.fp:>6}{b.tn:>6}{b.fn:>6}   parse failures: "
                     f"{b.n_parse_failure}")
    lines += ["", f"{'calibration':<14}{'ECE':>8}{'MCE':>8}{'Brier':>8}{'NLL':>8}"
              f"{'AUROC':>8}{'AUPRC':>8}"]
    for name, m in _calibration_rows(r):
        lines.append(f"{name:<14}{_f(m.ece):>8}{_f(m.mce):>8}{_f(m.brier):>8}"
                     f"{_f(m.nll):>8}{_f(m.auroc):>8}{_f(m.auprc):>8}")
    lines.append("(ECE/MCE: 15 equal-width bins; calibrated rows are out-of-sample.)")
    if r.support is not None and r.support.reason:
        lines.append(f"not shown: {r.support.reason}")
    return "\n".join(lines)


def groups_markdown(r: CurveResult) -> str:
    """Per-group results (all, category, task, cell) as a markdown table."""
    fars = r.settings.fars or ()
    head = (["group", "misbehaving", "benign", "AUROC raw", "AUROC cal"]
            + [f"MR @ FAR<={a:g}" for a in fars] + ["EER"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in r.groups:
        cells = [g.group, str(g.n_pos), str(g.n_neg), _f(g.auroc_raw), _f(g.auroc)]
        cells += [_f(g.mr_at(a)) for a in fars] + [_f(g.eer)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
