"""The learning-loop study (benchmarks/results/learning-loop.md): leave one source out on
amb-open v2 and humaneval-pairs; the monitor trained without the source, then retrained on
25, 50, 100 and 200 reviewed labels of the source's traffic (in the review planner's order and
uniformly), against recalibration only, on a held-out part of the source.

    nice -n 10 python benchmarks/learning_loop/run.py [--capture-minutes M] [--n-boot 200]
        [--max-input-tokens 1024] [--candidate-layer N] [--model NAME] [--out F --results F]
        [--folds NAME ...] [--resume]

One command: the capture pass first (`capture.py`, cached: a second run captures only what is
missing; with ``--capture-minutes`` it starts no new fold after M minutes), then every fold
whose features are all cached (`study.py`), then the JSON (benchmarks/learning_loop/out/) and
the results page. Folds not captured are listed on the page as missing.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from capture import MAX_INPUT_TOKENS, MODEL, PROMPT, capture, log  # noqa: E402
from report import to_markdown  # noqa: E402
from selection import select  # noqa: E402
from study import LAYER, FoldData, run_fold  # noqa: E402


def fold_features(sel, fold, max_input_tokens: int, model: str = MODEL):
    """`FoldData` of ``fold`` from ``model``'s cache (base rows of the sources it may see)."""
    from calimon.models import resolve_model
    from calimon.prompts import load_prompt
    from calimon.scoring.probes.features import FeatureCache

    cache = FeatureCache(resolve_model(model), load_prompt(PROMPT), max_input_tokens)
    base = [s for src, rows in sel.base.items() if src not in fold.excluded_sources
            for s in rows]
    return FoldData(fold.name, cache.load(base), cache.load(list(fold.traffic)),
                    cache.load(list(fold.held_out)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--capture-minutes", type=float, default=None,
                    help="start no new fold's capture after this many minutes")
    ap.add_argument("--no-capture", action="store_true", help="use the cache as it is")
    ap.add_argument("--max-input-tokens", type=int, default=MAX_INPUT_TOKENS,
                    help="the prompt's input limit features are read at (default %(default)s)")
    ap.add_argument("--candidate-layer", type=int, default=None,
                    help="train the retrained head at this layer (heads train --layer); "
                         "default: the layer sweep's, as heads train without --layer")
    ap.add_argument("--model", default=MODEL,
                    help="the feature model (default %(default)s, the shipped probe monitor's, "
                         "its monitor at layer 15; another model's monitor at the layer sweep's)")
    ap.add_argument("--folds", nargs="+", default=None,
                    help="run only these held-out sources (the others are listed as not run)")
    ap.add_argument("--resume", action="store_true",
                    help="keep the folds already in --out (made with the same settings) and "
                         "run only the others")
    ap.add_argument("--steps", type=int, nargs="+", default=None,
                    help="label counts to read (default 0 25 50 100 200)")
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "learning-loop.json")
    ap.add_argument("--results", type=Path,
                    default=HERE.parents[1] / "benchmarks" / "results" / "learning-loop.md")
    args = ap.parse_args(argv)
    t0 = time.time()
    sel = select(args.seed)
    if args.no_capture:
        from calimon.models import resolve_model
        from calimon.prompts import load_prompt
        from calimon.scoring.probes.features import FeatureCache

        cache = FeatureCache(resolve_model(args.model), load_prompt(PROMPT),
                             args.max_input_tokens)
        base = [s for rows in sel.base.values() for s in rows]
        ready = [f.name for f in sel.folds if not cache.missing(
            base + list(f.traffic + f.held_out))]
    else:
        deadline = None if args.capture_minutes is None else t0 + 60 * args.capture_minutes
        ready = capture(sel, deadline=deadline, max_input_tokens=args.max_input_tokens,
                        model=args.model)
    doc = {"model": args.model, "prompt": PROMPT, "max_input_tokens": args.max_input_tokens,
           "candidate_layer": args.candidate_layer, "steps": args.steps,
           "seed": args.seed, "n_boot": args.n_boot, "command": command(argv),
           "folds": [], "missing": [f.name for f in sel.folds if f.name not in ready],
           "selection": {f.name: {"traffic": len(f.traffic), "held_out": len(f.held_out)}
                         for f in sel.folds}}
    if args.folds:
        ready = [f for f in ready if f in args.folds]
        doc["missing"] = [f.name for f in sel.folds if f.name not in ready]
    kept = resumed(args, doc) if args.resume else {}
    for fold in sel.folds:
        if fold.name in kept:
            doc["folds"].append(kept[fold.name])
            doc["missing"] = [m for m in doc["missing"] if m != fold.name]
            continue
        if fold.name not in ready:
            continue
        log(f"{fold.name}: study")
        t_fold = time.time()
        doc["folds"].append(run_fold(
            fold_features(sel, fold, args.max_input_tokens, args.model), n_boot=args.n_boot,
            seed=args.seed, candidate_layer=args.candidate_layer,
            monitor_layer=LAYER if args.model == MODEL else None,
            **({"steps": tuple(args.steps)} if args.steps else {})))
        doc["folds"][-1]["seconds"] = round(time.time() - t_fold, 1)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    doc["reference"] = reference(args.model)
    doc["seconds"] = round(time.time() - t0 + sum(f.get("seconds", 0) for f in kept.values()),
                           1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    args.results.write_text(to_markdown(doc), encoding="utf-8")
    log(f"wrote {args.out} and {args.results}")
    return 0


SAME = ("model", "prompt", "max_input_tokens", "candidate_layer", "seed", "n_boot", "steps")


def resumed(args, doc: dict) -> dict:
    """The folds of the JSON at ``args.out`` made with the same settings as ``doc``, by name
    (none when the file is missing or was made otherwise)."""
    if not args.out.is_file():
        return {}
    old = json.loads(args.out.read_text())
    if any(old.get(k) != doc.get(k) for k in SAME):
        log(f"{args.out}: made with other settings; not resumed")
        return {}
    return {f["fold"]: f for f in old["folds"]}


def reference(model: str) -> dict:
    """The in-source reference per source from the ceiling page's JSON (`ceiling.py`) of the
    same model, when it was made: ``{source: {"auroc", "layer"}}``."""
    family = model.split("-")[0].rstrip("0123456789")  # gemma3-270m: -gemma
    name = "learning-loop-ceiling" + ("" if model == MODEL else f"-{family}")
    path = HERE / "out" / f"{name}.json"
    if not path.is_file():
        return {}
    doc = json.loads(path.read_text())
    if doc.get("model") != model:
        return {}
    return {r["source"]: {"auroc": r["in_source"]["auroc"], "layer": r["in_source"]["layer"]}
            for r in doc["rows"]}


def command(argv) -> str:
    return "nice -n 10 python benchmarks/learning_loop/run.py " + " ".join(
        sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    raise SystemExit(main())
