"""The adaptive attacker's table as markdown, from the summary `run_adaptive` writes."""

from __future__ import annotations

from typing import Any

from calimon.studies.robustness.clean_fit import calibration_sentence

TOP = 8


def _rate(d: dict[str, Any]) -> str:
    if not d.get("flagged_clean"):
        return "n/a (none flagged)"
    return (f"{d['flipped']}/{d['flagged_clean']} = {d['flip_rate']:.2f} "
            f"[{d['ci_low']:.2f}, {d['ci_high']:.2f}]")


def _t(x: float | None) -> str:
    return "n/a (no threshold flags a transcript)" if x is None else f"{x:.4f}"


def _clip(text: str, n: int = 70) -> str:
    flat = text.replace("\n", "⏎").replace("|", "\\|").replace("`", "'")
    return flat if len(flat) <= n else flat[:n - 1] + "…"


def to_markdown(summary: dict[str, Any], command: str | None = None) -> str:
    """The flip rate per budget and the best rewrites found; ``command`` (default: the one in
    the provenance) is printed as the way to regenerate it."""
    prov, s, clean = summary["provenance"], summary["settings"], summary["clean"]
    op = summary["operating_point"]
    lines = [
        f"## Adaptive attacker · {prov['model']} · {prov['prompt']}/{prov['readout']} · "
        f"{prov['benchmark']}",
        "",
        f"Clean set: {clean['evaluated']} transcripts ({clean['n_pos']} misbehaving, "
        f"{clean['n_neg']} benign scored), calibrated AUROC {clean['auroc_cal']:.3f}; "
        f"calibration {calibration_sentence(clean['calibration'])}. "
        f"Threshold: the FAR<={s['far']:.0%} point t={_t(summary['threshold'])} (FAR "
        f"{op['far']:.3f}, MR {op['mr']:.3f}); flagged iff P >= t.",
        "",
        f"Search: beam {s['beam']}, width {s['width']}, up to {s['max_edits']} phrases per "
        f"rewrite from a library of {len(summary['library'])}, seed {s['seed']}; "
        f"{summary['searched']} flagged misbehaving transcripts searched, "
        f"{summary['queries']['total']} queries in all, "
        f"{summary['queries']['refused_candidates']} candidates refused before querying "
        "(they would have changed the code's AST or a gold span).",
        "",
        "| budget (queries per transcript) | flips [95% CI] |",
        "|---|---|",
    ]
    lines += [f"| {d['budget']} | {_rate(d)} |" for d in summary["by_budget"]]
    n_best = len(summary["best_attacks"])
    lines += ["", f"Lowest-scoring rewrites (top {min(TOP, n_best)} of {n_best} by "
              "ΔP raw; kinds in all best rewrites: "
              f"{summary['best_attack_kinds'] or 'none'}):", "",
              "| transcript | ΔP raw | ΔP cal | flipped at query | inserted (kind @ position: "
              "text) |", "|---|---|---|---|---|"]
    for d in summary["best_attacks"][:TOP]:
        edits = "<br>".join(f"{e['kind']} @ {e['position']}: `{_clip(e['text'])}`"
                            for e in d["edits"])
        lines.append(f"| {d['id']} | {d['delta_raw']:+.3f} | {d['delta_cal']:+.3f} | "
                     f"{d['flip_query'] if d['flipped'] else '-'} | {edits} |")
    lines += ["", f"Command: `{command or prov['command']}`", ""]
    return "\n".join(lines)
