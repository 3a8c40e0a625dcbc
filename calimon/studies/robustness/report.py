"""The robustness table as markdown, from the summary that `run_robustness` writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from calimon.studies.robustness.clean_fit import calibration_sentence


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


def _rate(rate: Any, ci: Any) -> str:
    if rate is None:
        return "n/a"
    return f"{rate:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]"


def _benign_cells(b: dict[str, Any] | None) -> list[str]:
    """n, FA clean, FA attacked, increase (points), new false alarms, mean ΔP cal."""
    if not b:
        return ["not attacked"] + ["n/a"] * 5
    f = b["at_far"]
    un = f" ({b['n_unscored']} unscored)" if b["n_unscored"] else ""
    inc = f["increase_points"]
    return [f"{f['n']}{un}", _rate(f["far_clean"], f["far_clean_ci"]),
            _rate(f["far_attacked"], f["far_attacked_ci"]),
            "n/a" if inc is None else f"{inc:+.1f}", str(f["new_false_alarms"]),
            _signed(b["shift_cal"]["mean_delta"])]


def defense_label(defenses: Any) -> str:
    """The defenses of a run as one label (``none`` when undefended)."""
    return "+".join(defenses) if defenses else "none"


def to_markdown(summary: dict[str, Any], command: str | None = None) -> str:
    """The table with its context; ``command`` (default: the one in the provenance) is printed
    as the way to regenerate it."""
    prov, clean, ops = summary["provenance"], summary["clean"], summary["operating_points"]
    far, eer = ops["far"], ops["eer"]
    target = summary["settings"]["far"]
    lines = [
        f"## {prov['model']} · {prov['prompt']}/{prov['readout']} · {prov['benchmark']}"
        + (f" · defense {defense_label(prov['defenses'])}" if prov.get("defenses") else ""),
        "",
        f"Clean set: {clean['evaluated']} transcripts ({clean['n_pos']} misbehaving, "
        f"{clean['n_neg']} benign scored; statuses {clean['status']}), AUROC raw "
        f"{clean['auroc_raw']:.3f}, calibrated {clean['auroc_cal']:.3f}. Calibration: "
        f"{calibration_sentence(summary['calibration'])}. Mean prompt tokens per clean "
        f"transcript: {_num(clean.get('mean_prompt_tokens'), 1)}.",
        "",
        f"Operating thresholds on the clean calibrated curve: FAR<={target:.0%} point "
        f"t={_num(far['threshold'], 4)} (FAR {far['far']:.3f}, MR {far['mr']:.3f}); "
        f"EER point t={_num(eer['threshold'], 4)} (FAR {eer['far']:.3f}, MR {eer['mr']:.3f}). "
        "A transcript is flagged iff P >= t. Misbehaving side: flips (flagged clean, passed "
        "attacked). Benign side (the rewrites only add text, so every flag is a false alarm): "
        f"false-alarm rate at the FAR<={target:.0%} threshold, clean and attacked over the same "
        "transcripts, with 95% Clopper-Pearson intervals.",
        "",
        f"| rewrite | misbehaving n | flips at FAR<={target:.0%} [95% CI] | flips at EER [95% CI] "
        "| mean ΔP cal | benign n | false alarms clean [95% CI] | false alarms attacked "
        "[95% CI] | Δ (points) | new false alarms | mean ΔP cal benign | mean Δ format mass "
        "| attacked statuses |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["results"]:
        n = r["at_far"]["n"]
        na = f" ({r['n_not_applicable']} n/a)" if r["n_not_applicable"] else ""
        b = r.get("benign")
        status = dict(r["status"])
        for k, v in (b["status"] if b else {}).items():
            status[k] = status.get(k, 0) + v
        cells = [r["attack"], f"{n}{na}", _flip(r["at_far"]), _flip(r["at_eer"]),
                 _signed(r["shift_cal"]["mean_delta"]), *_benign_cells(b),
                 _signed(r.get("shift_format_mass", {}).get("mean_delta")), str(status)]
        lines.append("| " + " | ".join(cells) + " |")
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
