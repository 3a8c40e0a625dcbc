"""Write benchmarks/results/spans.md (everything above its first
``<!-- end of the segment study -->`` line) and benchmarks/results/spans-reliability.png from
the output of benchmarks/spans/segments.py and, optionally, of benchmarks/spans/collect_runs.py
(copy-constrained quotes and occlusion on the sequence head: hit@1 against their floors, with
bootstrap intervals, per category, task and cell). benchmarks/spans/study.sh runs all of it.

    python benchmarks/spans/make_segment_results.py benchmarks/spans/out/spans-segments.json \
        [benchmarks/spans/out/spans-runs.json | RUN_FOLDER_COPY_QUOTES RUN_FOLDER_OCCLUSION]

``--runs-only RUNS_JSON`` prints the copy-quote and occlusion tables alone (either run may be
missing from the JSON) and writes nothing.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent / "results"
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


# label, run, key in the collected rows (benchmarks/spans/collect_runs.py)
OTHERS = [("copy quotes (order written)", "verdict", "copy"),
          ("copy quotes (ranked by drop)", "verdict", "copy_drop"),
          ("occlusion on the sequence head", "head", "occ")]
GROUPS = ("category", "task", "cell")


def run_figures(runs: dict) -> dict:
    """(label -> overall and per-group figures) of the copy-quote and occlusion runs present:
    hit@1, its expected floor and their difference, with paired bootstrap intervals."""
    from calimon.studies.spans.segment_study import summarize

    out = {}
    for label, run, key in OTHERS:
        rows = (runs.get(run) or {}).get("rows") or []
        if not rows or f"{key}_hit1" not in rows[0]:
            continue

        def table(rs, key=key):
            return [{"hit1": r[f"{key}_hit1"], "hit1_floor": r[f"{key}_hit1_floor"]}
                    for r in rs]
        out[label] = {"overall": summarize(table(rows))}
        for by in GROUPS:
            out[label][by] = {g: summarize(table([r for r in rows if r[by] == g]))
                              for g in sorted({r[by] for r in rows})}
    return out


RUN_NAMES = {"verdict": "copy-quote run", "head": "occlusion run"}
DRAWN = {"copy quotes (order written)": ("copy quotes", "random (as copy quotes)"),
         "copy quotes (ranked by drop)": ("copy quotes (by drop)", "random (as copy quotes)"),
         "occlusion on the sequence head": ("occlusion", "random (as occlusion)")}


def _run_line(kind: str, r: dict) -> str:
    auroc = (f", raw AUROC of the sequence head on them {r['auroc_raw']:.3f}"
             if kind == "head" and r.get("auroc_raw") is not None else "")
    return (f"{RUN_NAMES[kind].capitalize()}: limit {r['limit']}, {r['samples']} samples, "
            f"{r['misbehaving']} misbehaving (dataset hash `{r['dataset_hash']}`){auroc}.")


def _seconds(kind: str, r: dict) -> str:
    if kind == "verdict":
        copy = (r.get("quotes") or {}).get("copy") or {}
        return f"{copy['seconds']:.1f} (quotes)" if copy.get("seconds") else "-"
    c = r["cost"]
    if c.get("variants_scored") == c.get("variants") and c.get("variants") and r["misbehaving"]:
        return f"{c['seconds_variants'] / r['misbehaving']:.1f} (variants)"
    return "-"


def others(runs: dict, seg: dict | None) -> list[str]:
    """The copy-quote and occlusion section (the runs present), and every method side by side
    per category (the segment study's too, given ``seg``)."""
    figs = run_figures(runs)
    present = [k for k in ("verdict", "head") if runs.get(k)]
    lines = ["### Copy quotes and occlusion on the sequence head (test)", "",
             "The runs (`calimon spans`; the copy-quote run's occlusion on the verdict, not "
             "reported here, is one unit: `--max-segments 1`):", "", "```",
             *_commands(runs), "```", "", " ".join(_run_line(k, runs[k]) for k in present),
             "Scored: the misbehaving samples with gold spans. hit@1: the method's first span "
             "(copy quotes: the first written, or the one whose masking lowers the verdict most; "
             "occlusion: the unit whose masking lowers the head's score most) overlaps gold. "
             "Floor: the expected hit@1 of one segment drawn uniformly in its place (the `auto` "
             "segments for copy quotes, the occlusion units for occlusion; 0 where the method "
             "gave no span). F1: the runs' character F1 of all the method's spans, floor F1 of "
             "the runs' drawn floor. Seconds: this machine's, per misbehaving sample. Intervals: "
             "95% bootstrap over samples (2000 resamples), the difference paired.", "",
             "| method | n | hit@1 | floor hit@1 | hit@1 - floor | F1 | floor F1 | "
             "seconds / sample |", "|---|---|---|---|---|---|---|---|"]
    for label, run, _ in OTHERS:
        if label not in figs:
            continue
        o, drawn = figs[label]["overall"], runs[run]["drawn"]
        rep, fl = DRAWN[label]
        lines.append(f"| {label} | {o['n']} | {ci(o['hit1'])} | {o['hit1_floor']['mean']:.3f} | "
                     f"{ci(o['hit1_minus_floor'])} | {drawn[rep]['f1']:.3f} | "
                     f"{drawn[fl]['f1']:.3f} | {_seconds(run, runs[run])} |")
    lines += ["", *side_by_side(figs, seg, "category"), ""]
    for by in ("task", "cell"):
        lines += [f"hit@1 by {by}, copy quotes and occlusion (floor in brackets):", "",
                  f"| {by} | " + " | ".join(x[0] for x in OTHERS if x[0] in figs) + " |",
                  "|---|" + "---|" * len(figs)]
        keys = sorted({g for f in figs.values() for g in f[by]})
        for g in keys:
            cells = [_cell(figs[x[0]][by].get(g), "hit1") for x in OTHERS if x[0] in figs]
            lines.append(f"| {g} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def _commands(runs: dict) -> list[str]:
    return [runs[k]["command"] for k in ("verdict", "head")
            if runs.get(k) and runs[k].get("command")]


def _cell(o: dict | None, key: str) -> str:
    if not o or not o.get("n"):
        return "-"
    return f"{o[key]['mean']:.2f} ({o[f'{key}_floor']['mean']:.2f}), n {o['n']}"


def side_by_side(figs: dict, seg: dict, by: str) -> list[str]:
    """hit@1 per ``by`` of every method, its floor and the difference's interval."""
    heads = (["segments (token head)", "token head"] if seg else []) + list(figs)
    lines = [f"hit@1 by {by}, every method: hit@1 (floor), n, and hit@1 - floor [95% interval]:",
             "", f"| {by} | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
    keys = sorted(set(seg[f"by_{by}"] if seg else ()) | {g for f in figs.values() for g in f[by]})

    def cell(o, key):
        if not o or not o.get("n"):
            return "-"
        d = o[f"{key}_minus_floor"]
        return (f"{o[key]['mean']:.2f} ({o[f'{key}_floor']['mean']:.2f}), n {o['n']}, "
                f"{d['mean']:+.2f} [{d['ci'][0]:+.2f}, {d['ci'][1]:+.2f}]")

    for g in ["all", *keys]:
        cells = []
        if seg:
            s = seg["overall"] if g == "all" else seg[f"by_{by}"].get(g)
            cells = [cell(s, "seg_hit1"), cell(s, "tok_hit1")]
        cells += [cell(f["overall"] if g == "all" else f[by].get(g), "hit1")
                  for f in figs.values()]
        lines.append(f"| {g} | " + " | ".join(cells) + " |")
    return lines


def study_command(res: dict, runs: dict | None) -> str:
    """The benchmarks/spans/study.sh line that makes these figures (the segment study's own
    command when it ran alone)."""
    if not (runs and runs.get("verdict") and runs.get("head")):
        return res["command"]
    return (f"bash benchmarks/spans/study.sh {res['test']['limit']} "
            f"{runs['verdict']['limit']} {runs['head']['limit']}")


def section(res: dict, runs: dict | None = None) -> str:
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
        study_command(res, runs), "```", "",
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
    if runs:
        head += others(runs, res)
    return "\n".join(head) + "\n" + END + "\n"


def read_runs(args: list[str]) -> dict | None:
    """The collected runs: collect_runs.py's JSON, or the two run folders (copy quotes, then
    occlusion on the sequence head) collected here."""
    if not args:
        return None
    if len(args) == 1:
        return json.loads(Path(args[0]).read_text())
    import importlib.util

    spec = importlib.util.spec_from_file_location("collect_runs", HERE / "collect_runs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {"verdict": mod.collect(Path(args[0]), "verdict"),
            "head": mod.collect(Path(args[1]), "head")}


def main(argv: list[str]) -> int:
    if argv[:1] == ["--runs-only"]:  # the copy-quote and occlusion tables alone, printed
        print("\n".join(others(read_runs(argv[1:]), None)))
        return 0
    res = json.loads(Path(argv[0]).read_text())
    old = OUT.read_text() if OUT.exists() else ""
    rest = old.split(END + "\n", 1)[1] if END in old else old
    runs = read_runs(argv[1:])
    OUT.write_text(section(res, runs) + rest)
    draw(res)
    print(f"wrote {OUT} and {PNG}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
