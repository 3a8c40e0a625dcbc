"""Probe heads benchmark: layer sweep, verdict vs sequence/token heads on the test split, the
category transfer matrix, and the head artifacts under heads/<model>/.

    python benchmarks/heads/run_heads.py --benchmark humaneval-pairs --out benchmarks/heads/out

Features are extracted once (cached under ~/.cache/calimon/features) and every head is trained
from the cache; `--stage extract` only fills the cache. Writes <out>/heads-<benchmark>.json;
benchmarks/heads/report.py turns the JSON files into benchmarks/results/heads.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

from calimon import __version__
from calimon.data.registry import load_benchmark, manifest
from calimon.numerics.metrics import auroc
from calimon.scoring.probes.capture import POOLINGS
from calimon.scoring.probes.features import extract_features
from calimon.scoring.probes.head import ProbeHead, fit_logistic
from calimon.selection import dataset_hash, select_pairs
from calimon.studies.heads.evaluate import evaluate_readout, transfer_matrix
from calimon.studies.heads.train import (
    DEFAULT_CS,
    fit_sequence_head,
    fit_token_head,
    head_scores,
    layer_sweep,
    oof_scores,
    token_probs,
)
from calimon.studies.heads.workflow import default_token_layers


def timed(fn, *args, **kwargs):
    tracemalloc.start()
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return out, {"seconds": round(seconds, 2), "peak_traced_mb": round(peak / 2**20, 1)}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--benchmark", default="humaneval-pairs")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--prompt", default="direct")
    ap.add_argument("--max-input-tokens", type=int, default=1024)
    ap.add_argument("--train-limit", type=int, default=None,
                    help="at most this many train samples (whole pairs)")
    ap.add_argument("--eval-limit", type=int, nargs=2, default=(None, None),
                    metavar=("CALIB", "TEST"), help="at most this many calib / test samples")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stage", choices=("extract", "all"), default="all")
    ap.add_argument("--chunk-size", type=int, default=32, help="samples per cache shard")
    ap.add_argument("--save-heads", action="store_true",
                    help="also write the default heads to heads/<model>/ via train_head")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/heads/out"))
    args = ap.parse_args(argv)

    from calimon.models import resolve_model
    from calimon.prompts import load_prompt
    from calimon.scoring.backends import build_backend
    from calimon.scoring.engines import MonitorSpec

    samples = [s for s in load_benchmark(args.benchmark) if s.label is not None]
    limits = {"train": args.train_limit, "calib": args.eval_limit[0], "test": args.eval_limit[1]}
    splits = {sp: select_pairs([s for s in samples if s.split == sp], limits[sp], args.seed)
              for sp in ("train", "calib", "test")}
    resolved = resolve_model(args.model)
    backend = build_backend(MonitorSpec(model=args.model, options={"device": "cpu"}))
    prompt = load_prompt(args.prompt)
    token_layers = default_token_layers(backend.num_layers)
    everything = splits["train"] + splits["calib"] + splits["test"]
    log(f"{args.benchmark}: " + ", ".join(f"{k} {len(v)}" for k, v in splits.items())
        + f"; token layers {token_layers}")
    done = [0]

    def tick(n):
        done[0] += n
        log(f"features {done[0]}/{len(everything)}")

    t0 = time.perf_counter()
    calls0 = backend.forward_calls
    fs_all = extract_features(backend, prompt, everything, max_input_tokens=args.max_input_tokens,
                              token_layers=token_layers, chunk_size=args.chunk_size,
                              progress=tick)
    extract_s = time.perf_counter() - t0
    if args.stage == "extract":
        log(f"extracted in {extract_s:.0f} s ({backend.forward_calls - calls0} batches)")
        return 0
    fs = {sp: fs_all.subset([s.split == sp for s in fs_all.samples])
          for sp in ("train", "calib", "test")}
    result = {"benchmark": args.benchmark, "manifest_sha256": (manifest(args.benchmark) or {})
              .get("samples_sha256"), "model": resolved.name, "model_revision": resolved.revision,
              "prompt": args.prompt, "template_hash": prompt.template_hash("verdict"),
              "max_input_tokens": args.max_input_tokens, "limits": limits, "seed": args.seed,
              "calimon_version": __version__, "machine": platform.machine(),
              "counts": {sp: {"n": len(f.samples), "n_pos": int(f.y.sum()),
                              "truncated": int(f.truncated.sum()),
                              "categories": {c: int(sum(s.category == c for s in f.samples))
                                             for c in sorted({s.category for s in f.samples})}}
                         for sp, f in fs.items()},
              "dataset_hash": {sp: dataset_hash(list(f.samples)) for sp, f in fs.items()},
              "extract_seconds_this_run": round(extract_s, 1),
              "tokens_after_prefix": int(fs_all.n_tokens.sum()), "token_layers": token_layers}

    result.update(analyze(fs_all, token_layers, args.seed))
    best = result.pop("_best")
    tl = result["token_head"]["layer"]
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)

    if args.save_heads:
        result["saved_heads"] = _save_heads(args, best, tl)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"heads-{args.benchmark}.json"
    path.write_text(json.dumps(result, indent=1, default=_json) + "\n")
    log(f"wrote {path}")
    return 0


def analyze(fs_all, token_layers, seed: int = 0) -> dict:
    """Every figure of heads.md that comes from the cached features of train/calib/test."""
    idx = {sp: np.array([i for i, s in enumerate(fs_all.samples) if s.split == sp])
           for sp in ("train", "calib", "test")}
    fs = {sp: fs_all.subset(idx[sp]) for sp in idx}
    tr, ca, te = fs["train"], fs["calib"], fs["test"]
    result = {}
    log("layer sweep")
    sweep, cost = timed(layer_sweep, tr, seed=seed)
    test_by_layer = {}
    for p in POOLINGS:
        test_by_layer[p] = {}
        for layer in range(tr.num_layers + 1):
            head = ProbeHead("sequence", "logistic", layer,
                             fit_logistic(tr.X(layer, p), tr.y, C=sweep.C), pooling=p)
            test_by_layer[p][layer] = auroc(head_scores(head, te), te.y)
    best = sweep.best()
    best_mean = sweep.best("mean")
    result["sweep"] = {"C": sweep.C, "folds": sweep.n_splits, "cv_auroc": sweep.table(),
                      "test_auroc": test_by_layer, "best": vars(best),
                      "best_mean": vars(best_mean), "cost": cost}
    log(f"best layer {best.layer} ({best.pooling}), CV AUROC {best.cv_auroc:.3f}")

    readouts, costs, heads, per_sample = {}, {}, {}, {}

    def add(name, p_calib, p_test):
        readouts[name] = evaluate_readout(name, p_calib, ca.y, p_test, te.y)
        per_sample[name] = {"calib": dict(zip([s.id for s in ca.samples], p_calib.tolist(),
                                              strict=True)),
                            "test": dict(zip([s.id for s in te.samples], p_test.tolist(),
                                             strict=True))}

    add("verdict P(Yes)", ca.verdict[:, 0], te.verdict[:, 0])
    for est in ("logistic", "mlp"):
        fit, costs[f"sequence/{est}"] = timed(fit_sequence_head, tr, best.layer, best.pooling,
                                              estimator=est, Cs=DEFAULT_CS, seed=seed)
        heads[f"sequence/{est}"] = fit.head
        add(f"sequence head ({est}, layer {best.layer}, {best.pooling})",
            head_scores(fit.head, ca), head_scores(fit.head, te))
        costs[f"sequence/{est}"]["C"] = fit.C
    log("token head")
    token_fits = {}
    for layer in token_layers:
        token_fits[layer], costs[f"token/layer{layer}"] = timed(fit_token_head, tr, layer,
                                                                seed=seed)
    tl = max(token_fits, key=lambda k: max(token_fits[k].cv_auroc.values()))
    tf = token_fits[tl]
    heads["token"] = tf.head
    add(f"token head (layer {tl}, {tf.head.aggregate})", head_scores(tf.head, ca),
        head_scores(tf.head, te))
    result["token_head"] = {
        "layer": tl, "aggregate": tf.head.aggregate, "span_threshold": tf.head.span_threshold,
        "n_tokens": tf.n_tokens, "n_positive_tokens": tf.n_positive_tokens,
        "cv_auroc_by_layer": {k: v.cv_auroc for k, v in token_fits.items()},
        "cv_span_f1": tf.cv_span_f1, "spans_test": _span_figures(tf.head, te)}
    result["readouts"] = {k: v.to_dict() for k, v in readouts.items()}
    result["training_cost"] = costs
    result["per_sample"] = per_sample
    result["labels"] = {s.id: bool(s.label) for s in ca.samples + te.samples}

    log("transfer matrix")
    cats = sorted({s.category for s in fs_all.samples})
    rows = {"all": idx["train"], **{c: np.array([i for i in idx["train"]
                                                 if fs_all.samples[i].category == c])
                                    for c in cats}}
    cols = {**{c: np.array([i for i in idx["test"] if fs_all.samples[i].category == c])
               for c in cats}, "all": idx["test"]}
    Xall, yall, gall = fs_all.X(best.layer, best.pooling), fs_all.y, fs_all.groups

    def fit_and_score(train_rows, test_rows):
        sub = fs_all.subset(train_rows)
        head = fit_sequence_head(sub, best.layer, best.pooling, Cs=DEFAULT_CS,
                                 seed=seed).head
        return head.predict_proba(Xall[test_rows])

    cells = transfer_matrix(fit_and_score, rows, cols, yall)
    result["transfer"] = {"layer": best.layer, "pooling": best.pooling,
                          "cells": [vars(c) for c in cells]}
    # the pair-grouped CV AUROC within each category, as a within-category reference
    result["transfer"]["within_cv"] = {
        c: auroc(oof_scores(Xall[rows[c]], yall[rows[c]], gall[rows[c]], seed=seed),
                 yall[rows[c]]) for c in cats}
    result["_best"] = best
    return result


def _span_figures(head, fs) -> dict:
    from calimon.numerics.span_metrics import (
        random_baseline,
        span_metrics,
        span_row_from_sample,
        spans_from_token_scores,
    )
    from calimon.scoring.probes.labels import span_offsets

    rows = []
    for i, s in enumerate(fs.samples):
        if s.label and s.gold_spans:
            pred = spans_from_token_scores(span_offsets(fs.offsets[i]), token_probs(head, fs, i),
                                           head.span_threshold, text=s.response)
            rows.append(span_row_from_sample(s, pred, kind="lines"))
    rep, base = span_metrics(rows), random_baseline(rows)
    return {"head": rep.to_dict()["overall"], "random_lines": base.to_dict()["overall"]}


def _save_heads(args, best, token_layer) -> list[str]:
    from calimon.studies.heads.workflow import HeadTrainSettings, train_head

    out = []
    # evaluate=False: the test figures of these heads are the ones in heads.md (this run)
    common = dict(model=args.model, benchmark=args.benchmark, prompt=args.prompt,
                  max_input_tokens=args.max_input_tokens, limit=args.train_limit, seed=args.seed,
                  evaluate=False, device="cpu")
    for settings in (
            HeadTrainSettings(name=f"{args.benchmark}-seq", layer=best.layer,
                              pooling=best.pooling, **common),
            HeadTrainSettings(name=f"{args.benchmark}-token", kind="token", layer=token_layer,
                              **common)):
        done = train_head(settings, log=log)
        out.append(str(done.card_path))
        log(f"saved {done.card_path}")
    return out


def _json(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, float) and not np.isfinite(o):
        return None
    raise TypeError(type(o).__name__)


if __name__ == "__main__":
    raise SystemExit(main())
