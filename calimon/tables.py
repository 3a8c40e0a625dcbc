"""Plain-text tables for the terminal."""

from __future__ import annotations


def _f(x, nd=3) -> str:
    return "-" if x is None else f"{x:.{nd}f}"


def operating_table(summary: dict) -> str:
    prov, counts = summary["provenance"], summary["counts"]
    lines = [f"{prov['model']} ({prov['model_revision']}) · {prov['prompt']}/{prov['readout']} · "
             f"{prov['benchmark']} · {counts['scored']} scored of {counts['evaluated']} "
             f"({counts['n_pos']} misbehaving, {counts['n_neg']} benign; status {counts['status']})",
             f"AUROC raw {_f(summary['auroc_raw'])} · calibrated ({summary['calibration_method']}) "
             f"{_f(summary['auroc'])} · mean format mass {_f(summary['format_mass']['mean'])}",
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
