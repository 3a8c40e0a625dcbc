"""Collect the per-sample figures of the two `calimon spans` runs of benchmarks/spans/study.sh
(copy-constrained quotes; occlusion on the sequence head) into one small JSON that
make_segment_results.py reads: no transcript text, only sample ids, their groups, whether each
method's first span overlaps gold and its random floor.

    python benchmarks/spans/collect_runs.py --copy runs/spans-v2-verdict \
        --occlusion runs/spans-v2-head --out benchmarks/spans/out/spans-runs.json

Floors are expectations rather than the runs' single draws: the floor's first span is one
segment drawn uniformly (the `auto` segments for copy quotes, the occlusion units for
occlusion), so its expected hit@1 is the share of those segments that overlap gold (0 where the
method predicted nothing, as the drawn floor then draws nothing). The runs' own hit@1 figures
are checked against what is recomputed here.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from calimon.numerics.reader_segments import overlaps_gold
from calimon.numerics.segments import segment
from calimon.numerics.span_metrics import ScoredSpan, hit_at

# method key, run, report name, span source, ranked by score
METHODS = (("copy", "verdict", "copy quotes", "copy_quote", False),
           ("copy_drop", "verdict", "copy quotes (by drop)", "copy_quote", True),
           ("occ", "head", "occlusion", "occlusion", True))


def share_overlapping(units: list[tuple[int, int]], gold) -> float:
    """The share of ``units`` that overlap a gold span (0 for no unit)."""
    return sum(overlaps_gold(u, gold) for u in units) / len(units) if units else 0.0


def row_figures(rec: dict, run: str) -> dict[str, float]:
    """hit@1 of each of ``run``'s methods on one record of spans.jsonl, and its floor."""
    gold = [tuple(g) for g in rec["gold"]]
    out = {}
    for key, r, _, source, by_score in METHODS:
        if r != run:
            continue
        spans = [s for s in rec["spans"] if s["source"] == source and s["start"] is not None]
        pred = [ScoredSpan(s["start"], s["end"], s["score"] if by_score else None)
                for s in spans]
        if source == "occlusion":
            units = [(u["start"], u["end"]) for u in rec["segments"]]
        else:
            units = [(u.start, u.end) for u in segment(rec["response"], "auto", task=rec["task"])]
        out[f"{key}_hit1"] = float(hit_at(pred, gold, 1))
        out[f"{key}_hit1_floor"] = share_overlapping(units, gold) if pred else 0.0
    return out


def collect(folder: Path, run: str) -> dict:
    """The run's per-sample rows (misbehaving samples with gold spans) and its figures."""
    summary = json.loads((folder / "summary.json").read_text())
    recs = [json.loads(x) for x in (folder / "spans.jsonl").read_text().splitlines() if x]
    rows = []
    for rec in recs:
        if not rec["gold"]:
            continue
        rows.append({"id": rec["id"], "category": rec["category"], "task": rec["task"],
                     "source": rec["source"], "cell": f"{rec['category']}/{rec['task']}",
                     **row_figures(rec, run)})
    reports = summary["reports"]
    for key, r, name, _, _ in METHODS:
        if r != run or name not in reports:
            continue
        mine = sum(x[f"{key}_hit1"] for x in rows) / len(rows)
        theirs = reports[name]["overall"]["hit_at_1"]
        if abs(mine - theirs) > 1e-9:
            raise SystemExit(f"{folder}: {name} hit@1 {mine} recomputed, {theirs} in the run")
    md = (folder / "spans.md").read_text()
    command = m.group(1) if (m := re.search(r"```\n(calimon spans[^\n]*)\n```", md)) else None
    prov, cost = summary["provenance"], summary["cost"]
    return {"command": command, "limit": prov["limit"], "dataset_hash": prov["dataset_hash"],
            "samples": summary["counts"]["samples"],
            "misbehaving": summary["counts"]["misbehaving"],
            "auroc_raw": summary["auroc_raw"],
            "drawn": {name: {"hit_at_1": rep["overall"]["hit_at_1"], "f1": rep["overall"]["f1"]}
                      for name, rep in reports.items()},
            "cost": {k: cost.get(k) for k in ("seconds_variants", "variants", "variants_scored",
                                                "seconds_originals")},
            "quotes": cost.get("quotes"), "rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copy", type=Path, help="the copy-quote run's folder")
    ap.add_argument("--occlusion", type=Path, help="the sequence-head occlusion run's folder")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/spans/out/spans-runs.json"))
    a = ap.parse_args(argv)
    if not (a.copy or a.occlusion):
        ap.error("give --copy, --occlusion or both")
    result = {k: collect(d, k) for k, d in (("verdict", a.copy), ("head", a.occlusion)) if d}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {a.out}: " + ", ".join(f"{len(r['rows'])} rows of the {k} run"
                                         for k, r in result.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
