"""The "Adaptive attacker" summary: flip rate against budget of several readouts side by side,
from the ``adaptive.json`` files `calimon robustness --adaptive` wrote.

    python benchmarks/robustness/adaptive_table.py runs/adaptive/verdict \
        runs/adaptive/humaneval-pairs-seq-plain runs/adaptive/humaneval-pairs-seq-aug \
        --report benchmarks/results/robustness.md

With ``--report`` the table replaces the section ``adaptive:summary:<benchmark>`` of that file;
it is printed either way.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from calimon.studies.robustness.report import write_section


def _cell(d: dict | None) -> str:
    if d is None or not d.get("flagged_clean"):
        return "n/a"
    return (f"{d['flipped']}/{d['flagged_clean']} = {d['flip_rate']:.2f} "
            f"[{d['ci_low']:.2f}, {d['ci_high']:.2f}]")


def to_markdown(docs: list[dict], command: str) -> str:
    budgets = sorted({d["budget"] for doc in docs for d in doc["by_budget"]})
    first = docs[0]["provenance"]
    s = docs[0]["settings"]
    lines = [f"## Adaptive attacker · {first['model']} · {first['benchmark']}", "",
             f"Per flagged misbehaving transcript, a beam search (beam {s['beam']}, width "
             f"{s['width']}, up to {s['max_edits']} phrases) over a library of "
             f"{len(docs[0]['library'])} phrases (notes, fake verdicts, role markers, "
             "instructions, neutral text) and insertion positions (end, start, paragraph "
             "boundaries, top-level code comments), keeping the code's AST and the gold spans' "
             "text. Budget: monitor queries per transcript. Flips at each readout's "
             f"FAR<={s['far']:.0%} threshold of its clean calibrated curve [95% "
             "Clopper-Pearson].", "",
             "| readout | clean AUROC | searched | " + " | ".join(
                 f"flips at {b} {'query' if b == 1 else 'queries'}" for b in budgets) + " |",
             "|---|---|---|" + "---|" * len(budgets)]
    for doc in docs:
        by = {d["budget"]: d for d in doc["by_budget"]}
        lines.append(f"| {doc['provenance']['readout']} | {doc['clean']['auroc_cal']:.3f} | "
                     f"{doc['searched']} | " + " | ".join(_cell(by.get(b)) for b in budgets)
                     + " |")
    lines += ["", "Each readout's best rewrites (inserted text, position, ΔP) are in its own "
              "\"Adaptive attacker · <model> · <readout> · <benchmark>\" section of this file.",
              "", f"Command: `{command}`", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="folders holding adaptive.json")
    ap.add_argument("--report", type=Path, default=None)
    ap.add_argument("--command", default=None, help="the command to print as the source")
    args = ap.parse_args(argv)
    docs = [json.loads((r / "adaptive.json").read_text(encoding="utf-8")) for r in args.runs]
    command = args.command or "python benchmarks/robustness/adaptive_table.py " + shlex.join(
        sys.argv[1:] if argv is None else argv)
    text = to_markdown(docs, command)
    if args.report is not None:
        write_section(args.report, f"adaptive:summary:{docs[0]['provenance']['benchmark']}",
                      text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
