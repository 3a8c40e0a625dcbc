"""Keep or replace the shipped monitor (benchmarks/results/ship-monitor.md): the current bundle
and a candidate made by `ship_monitor.sh` under another name, scored on the same held-out
transcripts from the feature cache (the heads' own input limit, 1,024 tokens).

    NAME=amb-open-monitor-next bash benchmarks/heads/ship_monitor.sh     # the candidate
    nice -n 10 python benchmarks/heads/ship_compare.py --candidate amb-open-monitor-next

Rule (docs/heads.md): the candidate replaces the current monitor only if its AUROC on amb-open
test is higher and, on humaneval-pairs test (never trained on), the paired pair-clustered 95%
interval of its AUROC minus the current one's reaches 0 or above (not worse beyond the paired
interval). Both read the sequence head's raw score (a Platt map keeps the ranking).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODEL, PROMPT, MAX_INPUT_TOKENS = "smollm2-135m", "direct", 1024
SETS = (("amb-open", 400), ("humaneval-pairs", 80))


def bundle_head(name: str, model_ref, root: Path | None):
    """(sequence head, recipe words) of bundle ``name``."""
    from calimon.scoring.probes.bundle import bundle_path, load_bundle

    b = load_bundle(bundle_path(model_ref.name, name, root), model_ref=model_ref)
    c = b.sequence_card
    rec = c.training.recipe
    words = rec.chosen if rec is not None else (
        f"{c.estimator} {c.layer} {c.pooling}" if c.estimator != "attention"
        else f"attention {c.layer}")
    return b.sequence, words


def paired(p_new: np.ndarray, p_old: np.ndarray, y: np.ndarray, groups, n_boot: int,
           seed: int) -> dict:
    """Both AUROCs and the pair-clustered bootstrap 95% intervals of each and of the
    difference (new minus current)."""
    from calimon.numerics.bootstrap import resample_weights
    from calimon.numerics.metrics import auroc

    draws = []
    for k in resample_weights(groups, n_boot, seed):
        yy = np.repeat(y, k)
        a1, a0 = auroc(np.repeat(p_new, k), yy), auroc(np.repeat(p_old, k), yy)
        draws.append((a1, a0, a1 - a0))
    d = np.array(draws)

    def ci(j):
        col = d[:, j][np.isfinite(d[:, j])]
        return [round(float(v), 4) for v in np.quantile(col, [0.025, 0.975])]

    return {"candidate": auroc(p_new, y), "current": auroc(p_old, y), "candidate_ci": ci(0),
            "current_ci": ci(1), "difference_ci": ci(2), "n": int(y.size),
            "n_positive": int(y.sum())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--current", default="amb-open-monitor")
    ap.add_argument("--candidate", required=True)
    ap.add_argument("--heads-dir", type=Path, default=None, help="default: heads/")
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=HERE / "out" / "ship-monitor.json")
    ap.add_argument("--results", type=Path,
                    default=ROOT / "benchmarks" / "results" / "ship-monitor.md")
    args = ap.parse_args(argv)
    t0 = time.time()
    from calimon.data.registry import load_benchmark
    from calimon.prompts import load_prompt
    from calimon.scoring.backends import build_backend
    from calimon.scoring.engines import MonitorSpec
    from calimon.scoring.probes.features import extract_features
    from calimon.selection import select
    from calimon.studies.heads.train import head_scores

    backend = build_backend(MonitorSpec(model=MODEL, options={"device": "cpu"}))
    prompt = load_prompt(PROMPT)
    old, old_words = bundle_head(args.current, backend.model_ref, args.heads_dir)
    new, new_words = bundle_head(args.candidate, backend.model_ref, args.heads_dir)
    layers = tuple(sorted({h.layer for h in (old, new) if h.reads_tokens}))
    doc = {"command": "nice -n 10 python benchmarks/heads/ship_compare.py " + " ".join(
        sys.argv[1:] if argv is None else argv), "current": args.current,
        "candidate": args.candidate, "current_recipe": old_words,
        "candidate_recipe": new_words, "max_input_tokens": MAX_INPUT_TOKENS,
        "n_boot": args.n_boot, "sets": {}}
    for bench, limit in SETS:
        rows = select(load_benchmark(bench), "test", limit=limit, seed=args.seed,
                      min_per_class=10)
        fs = extract_features(backend, prompt, rows, max_input_tokens=MAX_INPUT_TOKENS,
                              token_layers=layers)
        doc["sets"][bench] = paired(head_scores(new, fs), head_scores(old, fs), fs.y,
                                    fs.groups, args.n_boot, args.seed)
    amb, he = doc["sets"]["amb-open"], doc["sets"]["humaneval-pairs"]
    better = amb["candidate"] > amb["current"]
    not_worse = he["difference_ci"][1] >= 0
    doc["replace"] = bool(better and not_worse)
    doc["seconds"] = round(time.time() - t0, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    args.results.write_text(to_markdown(doc), encoding="utf-8")
    print(f"replace: {doc['replace']} (wrote {args.results})")
    return 0


def to_markdown(doc: dict) -> str:
    """The page: both monitors on both test sets, the rule and the decision."""
    def ci(p):
        return f"[{p[0]:.3f}, {p[1]:.3f}]"

    lines = ["# The shipped monitor: keep or replace", "",
             f"Made by `{doc['command']}` ({doc['seconds']} s). The current bundle "
             f"`{doc['current']}` ({doc['current_recipe']}) against the candidate "
             f"`{doc['candidate']}` ({doc['candidate_recipe']}), both trained on amb-open "
             "train by `benchmarks/heads/ship_monitor.sh`, read from the feature cache at "
             f"{doc['max_input_tokens']} input tokens; AUROC of the sequence head's raw "
             f"score, pair-clustered bootstrap 95% intervals ({doc['n_boot']} resamples), "
             "the difference paired.", "",
             "| test set | n (misbehaving) | current AUROC | candidate AUROC | "
             "difference (candidate - current) |", "|---|---:|---:|---:|---|"]
    for bench, r in doc["sets"].items():
        lines.append(f"| {bench} test | {r['n']} ({r['n_positive']}) | {r['current']:.3f} "
                     f"{ci(r['current_ci'])} | {r['candidate']:.3f} {ci(r['candidate_ci'])} | "
                     f"{ci(r['difference_ci'])} |")
    lines += ["", "Rule: replace only if the candidate's amb-open test AUROC is higher and "
              "its humaneval-pairs difference interval reaches 0 or above (not worse beyond "
              "the paired interval).", "",
              f"**Decision: {'replace' if doc['replace'] else 'keep the current monitor'}.**",
              ""]
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
