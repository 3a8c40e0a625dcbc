"""Does a trained monitor's figure on another benchmark lean on problems it was trained on?

    python benchmarks/heads/overlap.py runs/demo-monitor --train amb-open --key problem

Reads a curve run (its curve.csv, split ``test``), the benchmark it scored and the training
benchmark, and splits the scored samples by whether their ``meta[KEY]`` (for code, the
HumanEval or MBPP problem) occurs among the training benchmark's ``train`` samples. Prints the
AUROC (raw score) of each part with its counts; a part with one class only prints n/a.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from calimon.data.registry import load_benchmark
from calimon.numerics.metrics import auroc


def split_by_overlap(run: Path, train: str, key: str) -> dict[str, list[dict]]:
    """The run's test rows, grouped into ``seen`` (key among train's) and ``unseen``."""
    summary = json.loads((run / "curve.json").read_text())
    bench = summary["provenance"]["benchmark"]
    by_id = {s.id: s for s in load_benchmark(bench)}
    seen_keys = {s.meta.get(key) for s in load_benchmark(train)
                 if s.split == "train" and s.meta.get(key) is not None}
    rows = [r for r in csv.DictReader((run / "curve.csv").open()) if r["split"] == "test"]
    out: dict[str, list[dict]] = {"all": rows, "seen": [], "unseen": []}
    for r in rows:
        value = by_id[r["id"]].meta.get(key)
        out["seen" if value in seen_keys else "unseen"].append(r)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--train", required=True, help="the benchmark the monitor was trained on")
    ap.add_argument("--key", default="problem", help="the meta field naming the problem")
    args = ap.parse_args()
    for name, rows in split_by_overlap(args.run, args.train, args.key).items():
        y = [int(r["label"]) for r in rows if r["status"] == "ok"]
        p = [float(r["p_raw"]) for r in rows if r["status"] == "ok"]
        value = f"{auroc(p, y):.3f}" if 0 < sum(y) < len(y) else "n/a"
        print(f"{name:7s} n={len(y):4d} misbehaving={sum(y):4d} AUROC raw={value}")


if __name__ == "__main__":
    main()
