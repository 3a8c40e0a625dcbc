"""The robustness table as markdown, from the summary that `run_robustness` writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _num(x: Any, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    return f"{x:.{digits}f}"


def _signed(x: Any) -> str:
    return "n/a" if x is None else f"{x:+.3f}"


def _flip(d: dict[str, Any]) -> str:
    if not d["flagged_clean"]:
        return "n/a (none flagged)"
    return (f"{d['flipped']}/{d['flagged_clean']} = {d['flip_rate']:.2f} "
            f"[{d['ci_low']:.2f}, {d['ci_high']:.2f}]")


def to_markdown(summary: dict[str, Any], command: str | None = None) -> str:
    """The table with its context; ``command`` (default: the one in the provenance) is printed
    as the way to regenerate it."""
    prov, clean, ops = summary["provenance"], summary["clean"], summary["operating_points"]
    far, eer = ops["far"], ops["eer"]
    target = summary["settings"]["far"]
    lines = [
        f"## {prov['model']} · {prov['prompt']}/{prov['readout']} · {prov['benchmark']}",
        "",
        f"Clean set: {clean['evaluated']} transcripts ({clean['n_pos']} misbehaving, "
        f"{clean['n_neg']} benign scored; statuses {clean['status']}), AUROC raw "
        f"{clean['auroc_raw']:.3f}, calibrated {clean['auroc_cal']:.3f}. Calibration: "
        f"{summary['calibration']['method']} fitted on {summary['calibration']['fit_on']} "
        f"({summary['calibration']['n_fit']} scored samples).",
        "",
        f"Operating thresholds on the clean calibrated curve: FAR<={target:.0%} point "
        f"t={_num(far['threshold'], 4)} (FAR {far['far']:.3f}, MR {far['mr']:.3f}); "
        f"EER point t={_num(eer['threshold'], 4)} (FAR {eer['far']:.3f}, MR {eer['mr']:.3f}). "
        "A transcript is flagged iff P >= t.",
        "",
        f"| attack | n | flips at FAR<={target:.0%} [95% CI] | new flags | flips at EER "
        "[95% CI] | mean ΔP raw | mean ΔP cal | share lower | mean Δ format mass | "
        "attacked statuses |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["results"]:
        n = r["at_far"]["n"]
        na = f" ({r['n_not_applicable']} n/a)" if r["n_not_applicable"] else ""
        share = r["shift_raw"]["share_lower"]
        lines.append(
            f"| {r['attack']} | {n}{na} | {_flip(r['at_far'])} | {r['at_far']['new_flags']} | "
            f"{_flip(r['at_eer'])} | {_signed(r['shift_raw']['mean_delta'])} | "
            f"{_signed(r['shift_cal']['mean_delta'])} | "
            f"{'n/a' if share is None else f'{share:.2f}'} | "
            f"{_signed(r.get('shift_format_mass', {}).get('mean_delta'))} | {r['status']} |")
    lines += ["", f"Command: `{command or prov['command']}`", ""]
    return "\n".join(lines)


def write_section(path: Path, key: str, text: str) -> Path:
    """Put ``text`` into ``path`` between ``<!-- robustness:KEY -->`` markers, replacing an
    earlier section with the same key and keeping everything else of the file."""
    begin, end = f"<!-- robustness:{key} -->", f"<!-- /robustness:{key} -->"
    block = f"{begin}\n{text.rstrip()}\n{end}\n"
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    i, j = old.find(begin), old.find(end)
    if i >= 0 and j > i:
        new = old[:i] + block + old[j + len(end):].lstrip("\n")
    else:
        new = old + ("\n" if old and not old.endswith("\n\n") else "") + block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(new, encoding="utf-8")
    return path
