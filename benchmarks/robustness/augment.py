"""Probe augmentation benchmark: a plain and an augmented sequence head (same layer, pooling,
train budget and seed), each under every fixed attack, on both sides of the ledger.

    python benchmarks/robustness/augment.py --benchmark humaneval-pairs --train-limit 48 \
        --layer 23 --pooling max --limit 80 --report benchmarks/results/robustness.md

For each head: `calimon heads train` (``--augment all`` for the augmented one), then the
fixed-attack study (`run_robustness`: clean AUROC, flip rate of the misbehaving transcripts at
the FAR <= 10% point of the clean calibrated curve), then the benign side, computed here: the
benign test transcripts get the same rewrites, are scored by the same head through the same
store, calibrated with the study's map, and counted as false alarms at the same threshold.
Every reading goes through the run store (``--store``), so a rerun resumes. The training
phrasings are held out from every evaluation attack (`calimon.studies.heads.augment`).

Writes ``<out>/augment-<benchmark>.json`` and, with ``--report``, the section
``augment:<benchmark>`` of that markdown file.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import numpy as np

from calimon.calibration.maps import calibrator_from_dict
from calimon.data.registry import load_benchmark
from calimon.deploy.guarantees import clopper_pearson
from calimon.readings import scores
from calimon.scoring.engines import Scorer
from calimon.scoring.store import RunStore
from calimon.studies.robustness.attacks import ATTACKS, attack_sample
from calimon.studies.robustness.report import write_section
from calimon.studies.robustness.study import RobustnessSettings, _select, run_robustness


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmark", default="humaneval-pairs")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--train-limit", type=int, default=48, help="train samples (whole pairs)")
    ap.add_argument("--layer", type=int, default=23)
    ap.add_argument("--pooling", default="max")
    ap.add_argument("--copies", type=int, default=1, help="augmented copies per train sample")
    ap.add_argument("--limit", type=int, default=80, help="test and calib samples each")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--store", type=Path, default=Path("runs/store.sqlite"))
    ap.add_argument("--out", type=Path, default=Path("runs/augment"))
    ap.add_argument("--report", type=Path, default=None)
    return ap.parse_args(argv)


def train(args, name: str, augment: bool):
    from calimon.studies.heads.workflow import HeadTrainSettings, train_head

    return train_head(HeadTrainSettings(
        name=name, model=args.model, benchmark=args.benchmark, layer=args.layer,
        pooling=args.pooling, limit=args.train_limit, seed=args.seed, evaluate=False,
        augment=("all",) if augment else (), augment_copies=args.copies, device=args.device),
        log=lambda m: print(m, file=sys.stderr))


def benign_side(settings: RobustnessSettings, summary: dict) -> dict[str, dict]:
    """False alarms of the benign evaluated transcripts, clean vs each rewrite, at the study's
    FAR threshold with its calibration map."""
    evaluate, _ = _select(load_benchmark(settings.benchmark), settings)
    benign = [x for x in evaluate if x.label is False]
    cal = calibrator_from_dict(summary["calibration"]["map"])
    t = summary["operating_points"]["far"]["threshold"]
    spec = settings.monitor_spec(settings.model, settings.prompt, settings.monitor_readout)
    out = {}
    with RunStore(settings.store) as store, Scorer(spec, store) as scorer:
        clean = scorer.score(benign, label="benign clean")
        for a in settings.attacks:
            pairs = [(x, y) for x in benign if (y := attack_sample(x, a)) is not None]
            got = scorer.score([y for _, y in pairs], label=f"benign {a}")
            c = scores([x for x, _ in pairs], clean)
            z = scores([y for _, y in pairs], got)
            ok = np.isfinite(c) & np.isfinite(z)
            n = int(ok.sum())
            delta = float(np.mean(z[ok] - c[ok])) if n else None
            if t is None or not n:  # no finite FAR point (or nothing scored): no count
                out[a] = {"n": n, "threshold": t, "mean_delta_raw": delta}
                continue
            was, now = cal.predict(c[ok]) >= t, cal.predict(z[ok]) >= t
            k0, k1 = int(was.sum()), int(now.sum())
            lo, hi = clopper_pearson(k1, n, 0.95)
            out[a] = {"n": n, "threshold": t, "mean_delta_raw": delta,
                      "unscored": int((~ok).sum()), "false_alarms_clean": k0,
                      "false_alarms_attacked": k1, "new_flags": int((~was & now).sum()),
                      "far_clean": k0 / n, "far_attacked": k1 / n, "far_attacked_ci": [lo, hi],
                      "increase_points": 100 * (k1 - k0) / n}
    return out


def run_head(args, name: str) -> dict:
    s = RobustnessSettings(model=args.model, benchmark=args.benchmark, head=name,
                           limit=args.limit, seed=args.seed, store=args.store, device=args.device,
                           out=args.out / name)
    run = run_robustness(s)
    summ = run.summary
    return {"head": name, "command": s.command(), "clean": summ["clean"],
            "threshold": summ["operating_points"]["far"],
            "flips": {r["attack"]: r["at_far"] for r in summ["results"]},
            "shift_raw": {r["attack"]: r["shift_raw"] for r in summ["results"]},
            "benign": benign_side(s, summ)}


def _flip(d: dict) -> str:
    if not d["flagged_clean"]:
        return "n/a"
    return f"{d['flipped']}/{d['flagged_clean']} [{d['ci_low']:.2f}, {d['ci_high']:.2f}]"


def _benign(d: dict) -> str:
    if "false_alarms_clean" not in d:
        return "n/a (no threshold)" if d["n"] else "n/a (none scored)"
    lo, hi = d["far_attacked_ci"]
    return (f"{d['false_alarms_clean']}→{d['false_alarms_attacked']}/{d['n']} "
            f"({d['increase_points']:+.1f} pt; [{lo:.2f}, {hi:.2f}])")


def _signed(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.3f}"


def to_markdown(doc: dict) -> str:
    lines = [f"## Probe augmentation · {doc['model']} · {doc['benchmark']}", "",
             f"Heads: layer {doc['layer']}, {doc['pooling']} pooling, train limit "
             f"{doc['train_limit']} samples (whole pairs), seed {doc['seed']}; the augmented head adds {doc['copies']} rewritten "
             "copy per train transcript (both classes; kinds neutral, note, verdict, "
             "instruction, role; phrasings held out from every attack below). Threshold: each "
             "head's FAR<=10% point of its clean calibrated test curve. Flips: misbehaving "
             "transcripts flagged clean that pass attacked [95% CI]. Benign false alarms: "
             "benign test transcripts flagged, clean → attacked (increase in points; 95% CI of "
             "the attacked FAR).", "",
             "| head | clean AUROC | attack | flips | benign false alarms | mean ΔP raw "
             "misbehaving | mean ΔP raw benign |", "|---|---|---|---|---|---|---|"]
    for h in doc["heads"]:
        for a, f in h["flips"].items():
            lines.append(f"| {h['head']} | {h['clean']['auroc_cal']:.3f} | {a} | {_flip(f)} | "
                         f"{_benign(h['benign'][a])} | "
                         f"{h['shift_raw'][a]['mean_delta']:+.3f} | "
                         f"{_signed(h['benign'][a]['mean_delta_raw'])} |")
    lines += ["", f"Command: `{doc['command']}`", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse(argv)
    names = {False: f"{args.benchmark}-seq-plain", True: f"{args.benchmark}-seq-aug"}
    for augment, name in names.items():
        train(args, name, augment)
    doc = {"model": args.model, "benchmark": args.benchmark, "layer": args.layer,
           "pooling": args.pooling, "train_limit": args.train_limit, "copies": args.copies,
           "seed": args.seed, "attacks": list(ATTACKS),
           "command": "python benchmarks/robustness/augment.py " + shlex.join(
               sys.argv[1:] if argv is None else argv),
           "heads": [run_head(args, n) for n in names.values()]}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"augment-{args.benchmark}.json"
    path.write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    text = to_markdown(doc)
    if args.report is not None:
        write_section(args.report, f"augment:{args.benchmark}", text)
    print(text)
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
