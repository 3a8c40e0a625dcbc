"""Plain-text tables for the terminal."""

from __future__ import annotations


def _f(x, nd=3) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def _head(summary: dict) -> str:
    prov, counts = summary["provenance"], summary["counts"]
    return (f"{prov['model']} ({prov['model_revision']}) · {prov['prompt']}/{prov['readout']} · "
            f"{prov['benchmark']} · {counts['scored']} scored of {counts['evaluated']} "
            f"({counts['n_pos']} misbehaving, {counts['n_neg']} benign; status "
            f"{counts['status']})")


def rates_table(summary: dict) -> str:
    """The FAR / MR of each class at fixed thresholds, with exact intervals."""
    lines = [f"{'rate':<6}{'threshold':>10}{'k/n':>12}{'estimate':>10}"
             f"{'95% interval (Clopper-Pearson)':>32}"]
    for r in summary.get("rates_at_thresholds", []):
        t = "inf" if r["threshold"] is None else f"{r['threshold']:.4g}"
        lines.append(f"{r['rate'].upper():<6}{t:>10}{str(r['k']) + '/' + str(r['n']):>12}"
                     f"{_f(r['estimate'], 4):>10}"
                     f"{'[' + _f(r['low'], 4) + ', ' + _f(r['high'], 4) + ']':>32}")
    return "\n".join(lines)


def operating_table(summary: dict) -> str:
    """The terminal summary of a run: operating points and calibration, or, below the
    class-size rule (calimon.numerics.class_support), the reason and the rates at fixed thresholds."""
    support = summary.get("support") or {}
    if support.get("curve") is False:
        lines = [_head(summary), f"not shown: {support['reason']}",
                 f"score: {summary['score']}", "", rates_table(summary)]
        for b in summary["binary_points"]:
            lines.append(f"{b['name']}: MR {_f(b['mr'])}, FAR {_f(b['far'])} "
                         f"(TP {b['tp']}, FP {b['fp']}, TN {b['tn']}, FN {b['fn']}; "
                         f"parse failures: {b['n_parse_failure']})")
        return "\n".join(lines)
    lines = [_head(summary),
             f"AUROC raw {_f(summary['auroc_raw'])} · "
             + (f"calibrated ({summary['calibration_method']}) {_f(summary['auroc'])} · "
                if summary.get("calibration_method") else "no calibration map · ")
             + f"mean format mass {_f(summary['format_mass']['mean'])}",
             f"calibration maps: {summary['calibration']['mode']}"
             + ("; curve.csv holds both splits (for `calimon thresholds` and `escalate`)"
                if summary.get("settings", {}).get("split") and "fitted on split 'calib'"
                in summary["calibration"]["mode"] else ""),
             "",
             f"{'operating point':<16}{'threshold':>10}{'MR':>8}{'FAR':>8}"
             f"{'TP':>6}{'FP':>6}{'TN':>6}{'FN':>6}"]
    for p in summary["operating_points"]:
        lines.append(f"{p['name']:<16}{_f(p['threshold'], 4):>10}{_f(p['mr']):>8}"
                     f"{_f(p['far']):>8}{p['tp']:>6}{p['fp']:>6}{p['tn']:>6}{p['fn']:>6}")
    for b in summary["binary_points"]:
        lines.append(f"{b['name']:<16}{'(binary)':>10}{_f(b['mr']):>8}{_f(b['far']):>8}"
                     f"{b['tp']:>6}{b['fp']:>6}{b['tn']:>6}{b['fn']:>6}"
                     f"   parse failures: {b['n_parse_failure']}")
    lines += ["", f"{'calibration':<14}{'ECE':>8}{'MCE':>8}{'Brier':>8}{'NLL':>8}"
              f"{'AUROC':>8}{'AUPRC':>8}"]
    cal = summary["calibration"]
    rows = [("raw", cal["metrics_before"])] + list(cal["metrics_after"].items())
    for name, m in rows:
        lines.append(f"{name:<14}{_f(m['ece']):>8}{_f(m['mce']):>8}{_f(m['brier']):>8}"
                     f"{_f(m['nll']):>8}{_f(m['auroc']):>8}{_f(m['auprc']):>8}")
    lines.append("(ECE/MCE: 15 equal-width bins; calibrated rows are out-of-sample.)")
    if support.get("reason"):
        lines.append(f"not shown: {support['reason']}")
    return "\n".join(lines)


def groups_markdown(summary: dict) -> str:
    """Per-group results (all, category, task, cell) as a markdown table."""
    fars = summary["settings"]["fars"]
    head = (["group", "misbehaving", "benign", "AUROC raw", "AUROC cal"]
            + [f"MR @ FAR<={a:g}" for a in fars] + ["EER"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in summary["groups"]:
        cells = [r["group"], str(r["n_pos"]), str(r["n_neg"]), _f(r["auroc_raw"]), _f(r["auroc"])]
        cells += [_f(r.get(f"mr_at_far_{a:g}")) for a in fars] + [_f(r.get("eer"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
