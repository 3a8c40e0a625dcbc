"""How far a linear head on the study's features can go on each held-out source at all
(benchmarks/results/learning-loop-ceiling.md): the learning-loop target asks MR at FAR <= 5%
halved; this page says whether the features allow it, whatever the labels.

    nice -n 10 python benchmarks/learning_loop/ceiling.py [--max-input-tokens 1024] [--model NAME]

On the cached features of `run.py` (nothing is captured here; run it first), per source:

- **source only**: a head trained on all of the source's traffic (every label the study could
  give, and no base rows) as ``calimon heads train`` trains one (`fit_sequence`: layer sweep,
  then C by pair-grouped CV), read on the held-out part;
- **in-source reference**: the source's traffic and held-out part pooled, pair-grouped 5-fold
  out-of-fold scores of a logistic head (C by the sweep's 0.01) at every layer and pooling;
  the held-out rows' scores read, the best (layer, pooling) kept. Each of its heads trains on
  about 240 of the source's own transcripts (the study gives at most 200 labels), and it picks
  its layer and pooling on the figures it reports: an optimistic reference, not a result a
  deployment reaches.

Both beside the monitor's MR before any label (the study's 0-label row) and its half.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from capture import MAX_INPUT_TOKENS, MODEL  # noqa: E402
from report import _ci  # noqa: E402
from run import fold_features  # noqa: E402
from selection import select  # noqa: E402
from study import FAR, LAYER, POOLING, compare, monitor_of  # noqa: E402

from calimon.numerics.curves import Curve  # noqa: E402
from calimon.scoring.backends.capture import POOLINGS  # noqa: E402
from calimon.studies.heads.train import fit_sequence, head_scores, oof_scores  # noqa: E402


def _point(p: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    c = Curve.from_scores(p, y, n_boot=0)
    return float(c.auroc), float(c.at_far(FAR).mr)


def ceiling(fd, n_boot: int, seed: int, monitor_layer: int | None) -> dict:
    """The fold's three heads on its held-out part (module docstring)."""
    y, g = fd.held_out.y, fd.held_out.groups
    monitor = monitor_of(fd, monitor_layer, seed).head
    p0 = head_scores(monitor, fd.held_out)
    own, _ = fit_sequence(fd.traffic, None, POOLING, seed=seed)
    p1 = head_scores(own.head, fd.held_out)
    both = fd.traffic.concat(fd.held_out)
    held = np.arange(len(fd.traffic.samples), len(both.samples))
    best = None
    for pooling in POOLINGS:
        for layer in range(both.num_layers + 1):
            oof = oof_scores(both.X(layer, pooling), both.y, both.groups, seed=seed)[held]
            a, m = _point(oof, y)
            if best is None or (m, -a) < (best[2], -best[1]):
                best = (f"{layer} {pooling}", a, m, oof)
    layer, _, _, p2 = best
    row = {"source": fd.name, "n_traffic": len(fd.traffic.samples), "n_held_out": int(y.size),
           "monitor": dict(zip(("auroc", "mr"), _point(p0, y), strict=True)),
           "source_only": dict(zip(("auroc", "mr"), _point(p1, y), strict=True),
                               layer=own.head.layer),
           "in_source": dict(zip(("auroc", "mr"), _point(p2, y), strict=True), layer=layer)}
    row["source_only"]["ci"] = compare(p1, p0, y, g, n_boot, seed)
    row["in_source"]["ci"] = compare(p2, p0, y, g, n_boot, seed)
    return row


def to_markdown(doc: dict) -> str:
    """The page."""
    lines = [
        "# Learning loop: what the features allow on each held-out source",
        "",
        f"Made by `{doc['command']}` ({doc['seconds']} s). Features of {doc['model']} from "
        "`run.py`'s cache "
        f"(at most {doc['max_input_tokens']} input tokens); MR at FAR <= 5% and AUROC on each "
        "source's held-out part, pair-clustered bootstrap 95% intervals. Protocol: "
        "`benchmarks/learning_loop/ceiling.py`. *In-source* picks its layer and pooling on "
        "the figures it reports: an optimistic reference, not a reachable result.",
        "",
        "| held-out source | MR before | half | source only: layer, AUROC, MR | "
        "in-source reference: layer and pooling, AUROC, MR |",
        "|---|---:|---:|---|---|",
    ]
    reach = 0
    for r in doc["rows"]:
        m, s, c = r["monitor"], r["source_only"], r["in_source"]
        reach += c["mr"] <= m["mr"] / 2
        lines.append(
            f"| {r['source']} | {m['mr']:.3f} | {m['mr'] / 2:.3f} | {s['layer']}, "
            f"{s['auroc']:.3f}{_ci(s['ci']['auroc_ci'])}, {s['mr']:.3f}"
            f"{_ci(s['ci']['mr_ci'])} | {c['layer']}, {c['auroc']:.3f}"
            f"{_ci(c['ci']['auroc_ci'])}, {c['mr']:.3f}{_ci(c['ci']['mr_ci'])} |")
    lines += ["", f"Source only reaches half the monitor's MR on "
              f"{sum(r['source_only']['mr'] <= r['monitor']['mr'] / 2 for r in doc['rows'])} of "
              f"{len(doc['rows'])} sources; the in-source reference reaches half the monitor's MR on {reach} of "
              f"{len(doc['rows'])} sources.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-input-tokens", type=int, default=MAX_INPUT_TOKENS)
    ap.add_argument("--model", default=MODEL, help="the feature model (run.py's --model)")
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "learning-loop-ceiling.json")
    ap.add_argument("--results", type=Path, default=HERE.parents[1] / "benchmarks" / "results"
                    / "learning-loop-ceiling.md")
    args = ap.parse_args(argv)
    t0 = time.time()
    sel = select(args.seed)
    rows = [ceiling(fold_features(sel, f, args.max_input_tokens, args.model), args.n_boot,
                    args.seed, LAYER if args.model == MODEL else None) for f in sel.folds]
    doc = {"command": "nice -n 10 python benchmarks/learning_loop/ceiling.py " + " ".join(
        sys.argv[1:] if argv is None else argv), "max_input_tokens": args.max_input_tokens,
        "model": args.model, "seed": args.seed, "n_boot": args.n_boot, "rows": rows,
        "seconds": round(time.time() - t0, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    args.results.write_text(to_markdown(doc), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
