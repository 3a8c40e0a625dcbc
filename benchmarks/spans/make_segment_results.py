"""Write the segment part of benchmarks/results/spans.md (everything above its first
``<!-- end of the segment study -->`` line) and benchmarks/results/spans-reliability.png from
the output of benchmarks/spans/segments.py; the rest of spans.md is left as it is.

    python benchmarks/spans/make_segment_results.py runs/spans-segments.json \
        [runs/spans-v2-verdict runs/spans-v2-head]

With the two `calimon spans` run folders (copy-constrained quotes; occlusion on the sequence
head) it adds their hit@1 against their floors, with Wilson intervals.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parents[1] / "results"
OUT, PNG = RESULTS / "spans.md", RESULTS / "spans-reliability.png"
END = "<!-- end of the segment study -->"
TARGETS = {"hit": 0.25, "precision": 0.6, "ece": 0.05}


def ci(d: dict) -> str:
    lo, hi = d["ci"]
    return f"{d['mean']:.3f} [{lo:.3f}, {hi:.3f}]"


def method_rows(o: dict) -> list[str]:
    seg = (f"| segments (token head, top segment) | {o['n']} | {ci(o['seg_hit1'])} | "
           f"{o['seg_hit1_floor']['mean']:.3f} | {ci(o['seg_hit1_minus_floor'])} | "
           f"{ci(o['seg_prec1'])} | {o['seg_prec1_floor']['mean']:.3f} | {ci(o['seg_hit3'])} |")
    tok = (f"| token head (runs above its threshold, by score) | {o['n']} | {ci(o['tok_hit1'])}"
           f" | {o['tok_hit1_floor']['mean']:.3f} | {ci(o['tok_hit1_minus_floor'])} | "
           f"{ci(o['tok_prec1'])} | - | - |")
    return [seg, tok]


def group_table(res: dict, by: str) -> list[str]:
    lines = [f"| {by} | n | segments hit@1 (floor) | segments precision@1 (floor) | "
             "token head hit@1 (floor) |", "|---|---|---|---|---|"]
    for k, o in res[f"by_{by}"].items():
        lines.append(f"| {k} | {o['n']} | {o['seg_hit1']['mean']:.2f} "
                     f"({o['seg_hit1_floor']['mean']:.2f}) | {o['seg_prec1']['mean']:.2f} "
                     f"({o['seg_prec1_floor']['mean']:.2f}) | {o['tok_hit1']['mean']:.2f} "
                     f"({o['tok_hit1_floor']['mean']:.2f}) |")
    return lines


def reliability_lines(rel: dict, title: str) -> list[str]:
    lines = [f"{title}: ECE {rel['ece']:.4f} (15 equal-width bins), {rel['ece_quantile10']:.4f}"
             f" (10 equal-mass bins), {rel['n']} segments.", "",
             "| bin | mean precision | observed overlap rate | segments |", "|---|---|---|---|"]
    for k, b in enumerate(rel["bins"], 1):
        lines.append(f"| {k} | {b['mean_precision']:.3f} | {b['observed']:.3f} | {b['n']} |")
    return lines


def verdicts(o: dict, rel: dict) -> list[str]:
    gain = o["seg_hit1_minus_floor"]["mean"]
    prec = o["seg_prec1"]["mean"]
    return [f"- segment hit@1 - floor: {gain:.3f} (target >= {TARGETS['hit']}: "
            f"{'met' if gain >= TARGETS['hit'] else 'missed'});",
            f"- segment precision@1: {prec:.3f} (target >= {TARGETS['precision']}: "
            f"{'met' if prec >= TARGETS['precision'] else 'missed'});",
            f"- ECE of the segment precision on test: {rel['ece']:.4f} (target <= "
            f"{TARGETS['ece']}: {'met' if rel['ece'] <= TARGETS['ece'] else 'missed'})."]


def draw(res: dict) -> None:
    """The reliability diagram of the precision map on test (15 equal-width bins, as the ECE)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from calimon.numerics.metrics import ece, reliability_bins

    pts = res["points"]
    y = np.array(pts["hit"], dtype=int)
    fig, ax = plt.subplots(figsize=(5.5, 5), dpi=150)
    ax.plot([0, 1], [0, 1], "--", color="0.5", linewidth=1, label="perfect")
    for name, p, style in (("precision map", pts["precision"], "o-"),
                           ("raw segment score", pts["score"], "s:")):
        p = np.array(p)
        rb = reliability_bins(p, y, n_bins=15)
        keep = rb.counts > 0
        ax.plot(rb.mean_confidence[keep], rb.accuracy[keep], style, markersize=4,
                label=f"{name} (ECE {ece(p, y):.3f})")
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="stated precision (or raw score)",
           ylabel="observed share of segments overlapping gold",
           title=f"segment precision, amb-open test ({y.size} segments)")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(PNG)
    plt.close(fig)


OTHERS = [("copy quotes (order written)", 0, "copy quotes", "random (as copy quotes)"),
          ("copy quotes (ranked by drop)", 0, "copy quotes (by drop)",
           "random (as copy quotes)"),
          ("occlusion on the sequence head", 1, "occlusion", "random (as occlusion)")]


def wilson(p: float, n: int) -> str:
    from scipy.stats import binomtest

    ci = binomtest(round(p * n), n).proportion_ci(method="wilson")
    lo, hi = ci.low, ci.high
    return f"{p:.3f} [{lo:.3f}, {hi:.3f}]"


def others(dirs: list[str]) -> list[str]:
    runs = [json.loads((Path(d) / "summary.json").read_text()) for d in dirs]
    prov = runs[0]["provenance"]
    lines = [f"### Copy quotes and occlusion on amb-open version 2 (limit {prov['limit']})", "",
             "Not at size: these cost 16-45 s a misbehaving sample on this machine. Commands "
             "(the full size: `--limit 2600`, every test pair; `--max-segments 1` makes the "
             "copy-quote run's occlusion on the verdict, not reported here, one unit):", "",
             "```"]
    lines += [m.group(1) for d in dirs if (m := re.search(r"```\n(calimon spans[^\n]*)\n```",
                                                        (Path(d) / "spans.md").read_text()))]
    lines += ["```", ""]
    lines += ["| method | n | hit@1 | floor hit@1 | hit@1 - floor | F1 | floor F1 |",
              "|---|---|---|---|---|---|---|"]
    for label, k, name, floor in OTHERS:
        rep, fl = runs[k]["reports"].get(name), runs[k]["reports"].get(floor)
        if rep is None or fl is None:
            continue
        o, f = rep["overall"], fl["overall"]
        lines.append(f"| {label} | {o['n_scored']} | {wilson(o['hit_at_1'], o['n_scored'])} | "
                     f"{wilson(f['hit_at_1'], f['n_scored'])} | "
                     f"{o['hit_at_1'] - f['hit_at_1']:.3f} | {o['f1']:.3f} | {f['f1']:.3f} |")
    lines += ["", "hit@1 by category (floor in brackets):", "",
              "| category | " + " | ".join(x[0] for x in OTHERS) + " |",
              "|---|" + "---|" * len(OTHERS)]
    cats = sorted(runs[0]["reports"]["copy quotes"]["by_category"]) \
        if "copy quotes" in runs[0]["reports"] else []
    for c in cats:
        cells = []
        for _, k, name, floor in OTHERS:
            o = runs[k]["reports"][name]["by_category"].get(c)
            f = runs[k]["reports"][floor]["by_category"].get(c)
            cells.append(f"{o['hit_at_1']:.2f} ({f['hit_at_1']:.2f}), n {o['n_scored']}"
                         if o and f else "-")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return lines + [""]


def section(res: dict, dirs: list[str] | None = None) -> str:
    o, fit, test = res["overall"], res["fit"], res["test"]
    rel = res["reliability"]
    head = [
        "# Span localization on amb-open (SmolLM2-135M)", "",
        "## Segments: the token head's evidence in a reader's units (amb-open version 2)", "",
        "The token head's per-token scores aggregated into the units a reader reads (code "
        "lines, prose sentences and clauses, a tool call's arguments and a tool result's lines: "
        "`calimon.numerics.reader_segments`), each segment scored by its strongest token, "
        "ranked strongest first, and given a calibrated precision: the probability that it "
        "overlaps the gold evidence, from a map fitted on the top "
        f"{res.get('top', 5)} segments of each misbehaving sample of amb-open "
        f"`{fit['split']}` (the token head was trained on `train`, so its scores there are "
        "optimistic) and judged on `test`. Everything in this section is generated by the "
        "command below from its output.", "",
        "Command:", "", "```", "calimon data build amb-open --sources ../shared/sources",
        res["command"], "python benchmarks/spans/make_segment_results.py "
        + " ".join(res.get("inputs", ["runs/spans-segments.json"])),
        "```", "",
        f"Fit: {fit['rows']} misbehaving samples with gold spans of `{fit['split']}` (limit "
        f"{fit['limit']}: whole pairs over the cells), {fit['segments']} segments; the map is "
        f"`{Path(fit['map']).as_posix().split('/heads/')[-1] if '/heads/' in fit['map'] else fit['map']}`. "
        f"Map: {fit.get('method', 'isotonic')}, the lowest out-of-fold ECE on the fit split "
        f"among {', '.join(f'{m} {v:.4f}' for m, v in fit.get('cv_ece', {}).items())} (5 folds, "
        "a sample's segments in one fold). "
        f"Test: {o['n']} misbehaving samples with gold spans (limit {test['limit']}, dataset "
        f"hash `{test['dataset_hash']}`).", "",
        "hit@1: the top segment (or the top run of the token head) overlaps a gold span; its "
        "floor is the expected hit@1 of one segment drawn uniformly from the sample's segments "
        "(for the token head: a random segment per run, drawn). precision@1: the share of the "
        "top segment's characters inside gold; floor: that share averaged over the sample's "
        "segments. Intervals: 95% bootstrap over samples (2000 resamples), the difference "
        "paired.", "",
        "| method | n | hit@1 | floor hit@1 | hit@1 - floor | precision@1 | floor precision@1 "
        "| hit@3 |", "|---|---|---|---|---|---|---|---|", *method_rows(o), "",
        "Targets:", "", *verdicts(o, rel), "",
        "### Reliability of the segment precision (test)", "",
        "![reliability](spans-reliability.png)", "",
        *reliability_lines(rel, "Top 5 segments per sample"), ""]
    if res.get("reliability_top1"):
        head += [*reliability_lines(res["reliability_top1"], "The top segment alone"), ""]
    for by in ("category", "task", "source", "cell"):
        head += [f"### By {by}", "", *group_table(res, by), ""]
    if dirs:
        head += others(dirs)
    return "\n".join(head) + "\n" + END + "\n"


def main(argv: list[str]) -> int:
    res = json.loads(Path(argv[0]).read_text())
    res["inputs"] = argv
    old = OUT.read_text() if OUT.exists() else ""
    rest = old.split(END + "\n", 1)[1] if END in old else old
    OUT.write_text(section(res, argv[1:3] if len(argv) >= 3 else None) + rest)
    draw(res)
    print(f"wrote {OUT} and {PNG}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
