"""Trained monitors under three generalization protocols (benchmarks/results/trained-monitors.md).

Every recipe is fitted on cached features of the train split only (hyper-parameters by
pair-grouped CV inside it), its Platt map on the calib split, and it is read on the test split:
- in-distribution: all train -> all test (and the same without the audit's flagged cells);
- leave-one-category-out: trained and calibrated without category C, read on C's test rows
  (C = spec_gaming is AutoMonitor-Bench's open question);
- leave-one-source-out: the same per amb-open source (the shift study's folds, one source each).
Figures: AUROC, MR at FAR <= 5% and ECE after calibration, each with a pair-clustered bootstrap
95% interval; training seconds and peak traced memory per fit.

    python benchmarks/heads/run_heads.py --benchmark amb-open --stage extract \\
        --train-limit 1200 --eval-limit 400 600          # the capture pass, cached
    python benchmarks/heads/trained_monitors.py --train-limit 1200 --eval-limit 400 600
    python benchmarks/heads/trained_monitors_report.py benchmarks/heads/out/trained-monitors.json

The ``augmented`` recipe also needs one rewritten copy of every train transcript in the capture
(ids ``<id>~aug0``, extracted with the rest); other recipes never see the copies. ``--lora FILE``
adds the LoRA baseline's rows from `lora_baseline.py`'s per-sample scores (the same calib and
test selection; its own train selection and fit cost): in distribution, or the held-out column of
a run trained without a category. ``--add-to EARLIER.json`` adds ``--lora`` rows to an earlier
run without refitting its recipes (same selection checked; its LoRA rows are replaced):

    python benchmarks/heads/trained_monitors.py --add-to benchmarks/heads/out/trained-monitors.json \
        --lora benchmarks/heads/out/lora-amb-open.json \
        --lora benchmarks/heads/out/lora-amb-open-without-spec_gaming.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recipes_bench import DEFAULT, RECIPES  # noqa: E402

from calimon import __version__  # noqa: E402
from calimon.calibration.crossfit import fit_on_split  # noqa: E402
from calimon.data.registry import load_benchmark, manifest  # noqa: E402
from calimon.numerics.bootstrap import resample_weights  # noqa: E402
from calimon.numerics.curves import Curve  # noqa: E402
from calimon.numerics.metrics import auroc, ece  # noqa: E402
from calimon.scoring.probes.features import extract_features  # noqa: E402
from calimon.selection import dataset_hash, select_pairs  # noqa: E402
from calimon.studies.heads.augment import augment_samples  # noqa: E402
from calimon.studies.heads.workflow import default_token_layers  # noqa: E402

FAR = 0.05
FLAGGED_CELLS = ("safety/qa", "spec_gaming/code")  # above the audit's targets (datasheet)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def figures(p: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """(AUROC, MR at FAR <= 5%, ECE) of calibrated scores; NaN without both classes."""
    if not (y.any() and (~y).any()):
        return float("nan"), float("nan"), float("nan")
    return auroc(p, y), Curve.from_scores(p, y, n_boot=0).at_far(FAR).mr, ece(p, y)


def with_intervals(p, y, groups, n_boot: int, seed: int) -> dict:
    """The three figures and their pair-clustered bootstrap 95% intervals."""
    point = figures(p, y)
    w = resample_weights(groups, n_boot, seed)
    draws = np.array([figures(np.repeat(p, k), np.repeat(y, k)) for k in w])
    out = {}
    for j, name in enumerate(("auroc", "mr_at_far5", "ece")):
        col = draws[:, j][np.isfinite(draws[:, j])]
        lo, hi = (np.quantile(col, [0.025, 0.975]) if col.size else (np.nan, np.nan))
        out[name] = None if np.isnan(point[j]) else round(float(point[j]), 4)
        out[f"{name}_ci"] = None if np.isnan(point[j]) else [round(float(lo), 4),
                                                              round(float(hi), 4)]
    out.update(n=int(y.size), n_pos=int(y.sum()))
    return out


def copies(fs) -> np.ndarray:
    """Rows that are augmented copies of train transcripts (never a train row of a recipe
    that does not ask for them)."""
    return np.array(["augment" in s.meta for s in fs.samples], dtype=bool)


def with_copies(fs, tr: np.ndarray) -> np.ndarray:
    """``tr`` plus the copies of its rows."""
    ids = {s.id for s, t in zip(fs.samples, tr, strict=True) if t}
    return tr | np.array([s.meta.get("augment", {}).get("of") in ids for s in fs.samples])


def protocols(fs) -> list[tuple[str, str, np.ndarray, np.ndarray, np.ndarray]]:
    """(protocol, held-out group, train rows, calib rows, test rows) as boolean masks; train
    rows are original transcripts only."""
    split = fs.column("split")
    cat, src = fs.column("category"), fs.column("source")
    cell = np.array([f"{s.category}/{s.task}" for s in fs.samples], dtype=object)
    tr, ca, te = (split == "train") & ~copies(fs), split == "calib", split == "test"
    out = [("in-distribution", "all", tr, ca, te),
           ("in-distribution", "without " + " and ".join(FLAGGED_CELLS), tr, ca,
            te & ~np.isin(cell, FLAGGED_CELLS))]
    for c in sorted(set(cat)):
        out.append(("leave-one-category-out", c, tr & (cat != c), ca & (cat != c), te & (cat == c)))
    for s in sorted(set(src)):
        held = te & (src == s)
        if fs.y[held].all() or not fs.y[held].any():
            continue  # a source with one class in test has no AUROC
        out.append(("leave-one-source-out", s, tr & (src != s), ca & (src != s), held))
    return out


def evaluate(name: str, p_all: np.ndarray, fs, mask, cost: dict, args) -> dict:
    """One row: Platt on the calib rows of ``mask``, figures on its test rows."""
    proto, held, tr, ca, te = mask
    ok = np.isfinite(p_all)
    pc, yc = p_all[ca & ok], fs.y[ca & ok]
    pt, yt = p_all[te & ok], fs.y[te & ok]
    _, cal = fit_on_split("platt", np.clip(pc, 0, 1), yc, np.clip(pt, 0, 1))
    both = bool(yt.any() and (~yt).any())
    mr20 = Curve.from_scores(np.clip(cal, 0, 1), yt, n_boot=0).at_far(0.20).mr if both else None
    return {"recipe": name, "protocol": proto, "held_out": held,
            "n_train": int(tr.sum()), "unscored_test": int((te & ~ok).sum()), **cost,
            "auroc_raw": round(auroc(pt, yt), 4) if both else None,
            "mr_at_far20": None if mr20 is None else round(float(mr20), 4),
            **with_intervals(np.clip(cal, 0, 1), yt, fs.groups[te & ok], args.n_boot,
                             args.seed)}


def memory_kind(recipe: str) -> str:
    """What a probe row's peak memory measures: tracemalloc sees numpy and Python allocations,
    not torch's (the recipes that fit with torch say so: ``uses_torch``)."""
    if getattr(RECIPES[recipe], "uses_torch", False):
        return "traced Python allocations (torch tensors not counted)"
    return "traced Python allocations"


def run_recipe(name: str, fit, fs, masks, args) -> list[dict]:
    """Fit ``name`` once per distinct train set and evaluate it on every protocol. A recipe
    with ``uses_copies`` trains on its rows' augmented copies too."""
    rows, fitted = [], {}
    for proto, held, tr, ca, te in masks:
        if getattr(fit, "uses_copies", False):
            tr = with_copies(fs, tr)
        key = tr.tobytes()
        if key not in fitted:
            tracemalloc.start()
            t0 = time.perf_counter()
            score = fit(fs.subset(tr), args.seed)
            secs = time.perf_counter() - t0
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
            fitted[key] = ({"train_seconds": round(secs, 2), "peak_memory_mb": round(peak, 1),
                            "memory_kind": memory_kind(name)}, score(fs), score)
            log(f"{name}: fitted on {int(tr.sum())} train samples in {secs:.1f} s")
        cost, p_all, score = fitted[key]
        row = evaluate(name, p_all, fs, (proto, held, tr, ca, te), cost, args)
        if hasattr(score, "span_figures"):
            row.update(score.span_figures(fs, te))
        rows.append(row)
    return rows


def lora_rows(path: Path, fs, masks, args) -> list[dict]:
    """The LoRA baseline's rows from its per-sample calib and test scores: in distribution, or
    the leave-one-category-out (-source-out) row of the category (source) it was trained
    without; a selected sample it did not score counts as unscored (NaN), never as 0."""
    d = json.loads(path.read_text())
    for sp in ("calib", "test"):
        mine = dataset_hash([s for s in fs.samples if s.split == sp])
        if d["dataset_hash"][sp] != mine:
            raise SystemExit(f"{path}: its {sp} selection (dataset hash "
                             f"{d['dataset_hash'][sp]}) is not this run's ({mine}); run "
                             "lora_baseline.py with the same --eval-limit and --seed")
    got = {**d["scores"]["calib"], **d["scores"]["test"]}
    p_all = np.array([np.nan if got.get(s.id) is None else float(got[s.id])
                      for s in fs.samples])
    cost = {"train_seconds": d["train_seconds"], "peak_memory_mb": d["peak_rss_mb"],
            "memory_kind": "process peak RSS"}
    without, source = d.get("trained_without"), d.get("trained_without_source")
    rows = []
    for proto, held, tr, ca, te in masks:
        if without:
            wanted = proto == "leave-one-category-out" and held == without
        elif source:
            wanted = proto == "leave-one-source-out" and held == source
        else:
            wanted = proto == "in-distribution"
        if wanted:
            tr_lora = np.zeros_like(tr)  # its own train selection: n_train from the file
            row = evaluate("lora", p_all, fs, (proto, held, tr_lora, ca, te), cost, args)
            rows.append({**row, "n_train": d["n"]["train"]})
    return rows


def load_features(args):
    """The cached capture of the selected train, calib and test samples."""
    from calimon.prompts import load_prompt
    from calimon.scoring.backends import build_backend
    from calimon.scoring.engines import MonitorSpec

    samples = [s for s in load_benchmark(args.benchmark) if s.label is not None]
    limits = {"train": args.train_limit, "calib": args.eval_limit[0], "test": args.eval_limit[1]}
    splits = {sp: select_pairs([s for s in samples if s.split == sp], limits[sp], args.seed)
              for sp in ("train", "calib", "test")}
    backend = build_backend(MonitorSpec(model=args.model, options={"device": "cpu"}))
    everything = splits["train"] + splits["calib"] + splits["test"]
    if any(getattr(RECIPES[r], "uses_copies", False) for r in args.recipes):
        everything += augment_samples(splits["train"], ["all"], copies=1, seed=args.seed)
    fs = extract_features(backend, load_prompt(args.prompt), everything,
                          max_input_tokens=args.max_input_tokens,
                          token_layers=default_token_layers(backend.num_layers))
    return fs, limits, backend


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmark", default="amb-open")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompt", default="direct")
    ap.add_argument("--max-input-tokens", type=int, default=1024)
    ap.add_argument("--train-limit", type=int, default=1200)
    ap.add_argument("--eval-limit", type=int, nargs=2, default=(400, 600))
    ap.add_argument("--recipes", nargs="*", default=list(DEFAULT), choices=list(RECIPES))
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--lora", type=Path, action="append", default=[],
                    help="lora_baseline.py's JSON: add its rows (repeatable)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--add-to", type=Path, default=None,
                    help="an earlier run's JSON: add the --lora rows to it, recipes not refitted")
    ap.add_argument("--out", type=Path,
                    default=Path("benchmarks/heads/out/trained-monitors.json"))
    args = ap.parse_args(argv)
    if args.add_to:
        return add_lora(args, argv)
    fs, limits, backend = load_features(args)
    masks = protocols(fs)
    log(f"{len(fs.samples)} samples, {len(masks)} protocol rows")
    ref = backend.model_ref
    result = {"benchmark": args.benchmark, "benchmark_version": (manifest(args.benchmark) or {})
              .get("version"), "samples_sha256": (manifest(args.benchmark) or {})
              .get("samples_sha256"), "model": ref.name, "model_revision": ref.revision,
              "prompt": args.prompt, "max_input_tokens": args.max_input_tokens,
              "limits": limits, "seed": args.seed, "n_boot": args.n_boot, "far": FAR,
              "dataset_hash": dataset_hash(list(fs.samples)), "calimon_version": __version__,
              "flagged_cells": list(FLAGGED_CELLS), "command": command(argv),
              "complete": False, "rows": []}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for path in args.lora:
        result["rows"] += lora_rows(path, fs, masks, args)
    for name in args.recipes:  # written after every recipe: a stopped run keeps what it did
        result["rows"] += run_recipe(name, RECIPES[name], fs, masks, args)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    result["complete"] = True
    result["rows"].sort(key=lambda r: [*args.recipes, "lora"].index(r["recipe"]))
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    log(f"wrote {args.out}")
    return 0


def command(argv) -> str:
    return "python benchmarks/heads/trained_monitors.py " + " ".join(
        sys.argv[1:] if argv is None else argv)


def add_lora(args, argv) -> int:
    """``--add-to``: the earlier run's rows, its LoRA rows replaced by those of ``--lora``; its
    selection (limits, seed, dataset hash of the captured samples) must be this one's."""
    if not args.lora:
        raise SystemExit("--add-to needs at least one --lora file")
    doc = json.loads(args.add_to.read_text())
    for k in ("benchmark", "model", "prompt", "max_input_tokens", "seed"):
        setattr(args, k, doc[k])
    args.train_limit, args.eval_limit = doc["limits"]["train"], (doc["limits"]["calib"],
                                                                 doc["limits"]["test"])
    args.n_boot, args.recipes = doc["n_boot"], sorted({r["recipe"] for r in doc["rows"]}
                                                      - {"lora"})
    fs, _, _ = load_features(args)
    if dataset_hash(list(fs.samples)) != doc["dataset_hash"]:
        raise SystemExit(f"{args.add_to}: its samples (dataset hash {doc['dataset_hash']}) are "
                         "not the ones selected now; rerun trained_monitors.py in full")
    masks = protocols(fs)
    rows = [r for r in doc["rows"] if r["recipe"] != "lora"]
    for r in rows:
        r.setdefault("memory_kind", memory_kind(r["recipe"]))
    added = [row for path in args.lora for row in lora_rows(path, fs, masks, args)]
    doc["rows"] = rows + added
    doc["lora_command"] = command(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    log(f"wrote {args.out} ({len(added)} LoRA rows)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
