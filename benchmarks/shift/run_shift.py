"""The shift study: leave one amb-open source out, certify on the others, meet the held-out one.

    python benchmarks/shift/extract.py     # one capture pass per sample (cached; re-runs free)
    python benchmarks/shift/run_shift.py   # every fold from the cache; writes shift.json + .md

Per held-out source S (all of its subsample is "new traffic", labels used only to score the
outcome): the other sources' samples are split by pair 50/50 into ``train`` (the sequence head)
and ``calib`` (thresholds). Two readouts: the verdict P(Yes) of the capture pass, and a logistic
sequence head (layer 17, mean pooling, C by pair-grouped CV) trained on ``train`` without S.
For alpha in {0.05, 0.10} at delta = 0.05:

- naive: ``certify_far`` on the calibration benign scores; its realized FAR / MR on S;
- shift check: domain classifier calib vs S (score, length, TF-IDF+SVD; + the head's pooled
  state for the head readout), AUROC and permutation p-value;
- shift-aware: weighted FAR estimate of the naive threshold, Kish n_eff, and the
  rejection-sampling certificate (or the abstention and the labels it asks for);
- a control fold with no shift (new traffic = a random quarter of the pairs of every source),
  where the check should not fire and certificates can be tested;
- verdict (``calimon.studies.shift.verdict``, no labels of S): no shift / shift, certificate holds /
  shift breaks the certificate, from the score tail (FAR floor; prevalence cap = the calibration
  rows' misbehaving share, detection cap = the upper bound of the calibration detection rate)
  and the weighted FAR (read when n_eff allows); right when it says "breaks" exactly where the
  naive threshold's realized FAR on S is above alpha;
- recertified: the naive threshold as a pass/block policy on S with an audit slice; the helper
  (the target's one label plan, ``calimon.studies.shift.label_plan``, no labels of S: weighted
  benign shares only where the verdict reads the weighted estimate) says how many labels; the audit of that many (seeded) gives the FAR bound on S's traffic; the labels that
  were actually needed (first audit size whose bound meets alpha, same audit order) for
  comparison.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from extract import BENCHMARK, MAX_INPUT_TOKENS, PER_SOURCE, SOURCES, study_samples  # noqa: E402

from calimon import __version__  # noqa: E402
from calimon.numerics.metrics import auroc  # noqa: E402
from calimon.studies.shift.certify import weighted_rates  # noqa: E402
from calimon.studies.shift.check import certify_sides, check_sides  # noqa: E402
from calimon.studies.shift.recertify import Stratum, stratified_bounds  # noqa: E402
from calimon.studies.shift.sides import Side  # noqa: E402
from calimon.studies.shift.verdict import BREAKS, NOT_CERTIFIED  # noqa: E402

ALPHAS = (0.05, 0.10)
DELTA = 0.05
LAYER, POOLING = 17, "mean"
CONTROL = "control (no shift)"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def pair_half(pair_id: str, seed: int, salt: str = "train", below: int = 128) -> bool:
    """A seeded pair split (``below / 256`` of the pairs). Salted: ``select_pairs`` picks the
    pairs with the smallest ``sha256(f"{seed}:{pair_id}")``, so an unsalted hash would put them
    all on one side."""
    return hashlib.sha256(f"shift-{salt}:{seed}:{pair_id}".encode()).digest()[0] < below


def load_features(per_source: int, max_tokens: int, model: str = "smollm2-135m",
                  prompt: str = "direct", benchmark: str = BENCHMARK):
    from calimon.models import resolve_model
    from calimon.prompts import load_prompt
    from calimon.scoring.probes.features import FeatureCache

    samples = study_samples(benchmark, per_source=per_source)
    cache = FeatureCache(resolve_model(model), load_prompt(prompt), max_tokens)
    return cache.load(samples)


def side(fs, idx, scores) -> Side:
    ss = [fs.samples[i] for i in idx]
    return Side("x", tuple(s.id for s in ss), tuple(s.request for s in ss),
                tuple(s.response for s in ss), np.asarray(scores, float),
                np.array([int(s.label) for s in ss]), tuple(s.pair_id for s in ss))


def rates(scores, y, t):
    flag = scores >= t
    return float(np.mean(flag[~y])), float(np.mean(~flag[y]))


def recertify_row(s_new, y_new, t, need, alpha, seed):
    """Audit the pass/block policy at ``t`` on the new traffic (module doc); ``need``: the
    target's label plan (calimon.studies.shift.label_plan)."""
    block = s_new >= t
    order = np.random.default_rng(seed).permutation(s_new.size)

    def bound(m):
        audited = np.zeros(s_new.size, bool)
        audited[order[:m]] = True
        st = {a: Stratum(a, int(mask.sum()), int((mask & audited).sum()),
                         int((mask & audited & ~y_new).sum()), m / s_new.size)
              for a, mask in (("auto_block", block), ("auto_pass", ~block))}
        return stratified_bounds(st, DELTA)[0].bound

    got = bound(need) if need is not None else math.nan
    actual = next((m for m in range(1, s_new.size + 1) if bound(m) <= alpha), None)
    return {"labels_helper": need, "bound_at_helper": got,
            "certified_at_helper": bool(need is not None and got <= alpha),
            "labels_actually_needed": actual}


def fold(fs, held: str, readout: str, permutations: int, seed: int) -> list[dict]:
    from calimon.studies.heads.train import fit_sequence_head, head_scores

    src = np.array([s.source for s in fs.samples])
    y_all = fs.y
    if held == CONTROL:  # no shift: a random quarter of the pairs of every source
        is_new = np.array([pair_half(s.pair_id, seed, "control", 64) for s in fs.samples])
    else:
        is_new = src == held
    new = np.flatnonzero(is_new)
    rest = np.flatnonzero(~is_new)
    tr = np.array([i for i in rest if pair_half(fs.samples[i].pair_id, seed)])
    ca = np.array([i for i in rest if not pair_half(fs.samples[i].pair_id, seed)])
    info = {}
    if readout == "verdict":
        scores = fs.verdict[:, 0]
        state_c = state_n = None
    else:
        fit = fit_sequence_head(fs.subset(tr), LAYER, POOLING, seed=seed)
        scores = head_scores(fit.head, fs)
        info["head_C"], info["head_cv_auroc"] = fit.C, float(fit.cv_auroc[fit.C])
        X = fs.X(LAYER, POOLING)
        state_c, state_n = X[ca], X[new]
    ok = np.isfinite(scores)
    dropped = int((~ok[ca]).sum() + (~ok[new]).sum())
    if state_c is not None:
        state_c, state_n = state_c[ok[ca]], state_n[ok[new]]
    ca, new = ca[ok[ca]], new[ok[new]]
    s_cal, y_cal, s_new, y_new = scores[ca], y_all[ca], scores[new], y_all[new]
    t0 = time.perf_counter()
    rep = check_sides(side(fs, ca, s_cal), side(fs, new, s_new), permutations=permutations,
                      seed=seed, calib_state=state_c, new_state=state_n)
    check_s = time.perf_counter() - t0
    rows = []
    res = certify_sides(rep, s_cal, y_cal, far=ALPHAS, delta=DELTA, seed=seed, new_scores=s_new)
    for alpha, naive, aware, v, plan in zip(ALPHAS, res.naive, res.aware, res.verdicts,
                                            res.plans, strict=True):
        t = naive.threshold
        far_n, mr_n = rates(s_new, y_new, t)
        w_est = weighted_rates(s_cal, y_cal, rep.weights, t)
        far_v = rates(s_new, y_new, v.certified_threshold)[0] if v.certified else math.nan
        far_a, mr_a = rates(s_new, y_new, aware.threshold) if not aware.abstained else \
            (math.nan, math.nan)
        recert = recertify_row(s_new, y_new, t, plan.labels, alpha, seed)
        rows.append({
            "source": held, "readout": readout, "alpha": alpha, **info,
            "n_train": int(tr.size), "n_calib": int(ca.size), "n_new": int(new.size),
            "n_new_benign": int((~y_new).sum()), "dropped_unscored": dropped,
            "auroc_calib": auroc(s_cal, y_cal), "auroc_new": auroc(s_new, y_new),
            "naive_threshold": t, "naive_bound": naive.bound, "naive_certified": naive.certified,
            "naive_far_new": far_n, "naive_mr_new": mr_n,
            "naive_violated": bool(naive.certified and far_n > naive.bound),
            "domain_auroc": rep.auroc, "p_value": rep.p_value, "shifted": rep.shifted,
            "driver": rep.driver, "by_group": rep.by_group, "outside_share": rep.outside_share,
            "check_seconds": round(check_s, 1),
            "weighted_far": w_est["far"], "weighted_mr": w_est["mr"], "ess_neg": w_est["ess_neg"],
            "aware_abstained": aware.abstained, "aware_reason": aware.reason,
            "aware_labels_needed": aware.labels_needed, "aware_threshold": aware.threshold,
            "aware_bound": aware.bound, "aware_n_kept": aware.n_kept,
            "aware_far_new": far_a, "aware_mr_new": mr_a,
            "aware_violated": bool(not aware.abstained and far_a > aware.bound),
            "verdict": v.kind, "verdict_far_floor": v.far_floor,
            "verdict_flag_rate": v.new_flag_rate, "verdict_max_prevalence": v.max_prevalence,
            "verdict_tpr_cap": v.tpr_cap, "verdict_weighted_read": v.ess >= v.ess_needed,
            "verdict_certified": v.certified, "verdict_bound": v.bound,
            "verdict_far_new": far_v,
            "verdict_right": None if v.kind == NOT_CERTIFIED else
            bool((v.kind == BREAKS) == (far_n > alpha)),
            **{f"recert_{k}": x for k, x in recert.items()}})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-source", type=int, default=PER_SOURCE)
    ap.add_argument("--benchmark", default=BENCHMARK)
    ap.add_argument("--max-input-tokens", type=int, default=MAX_INPUT_TOKENS)
    ap.add_argument("--permutations", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sources", nargs="*", default=list(SOURCES))
    ap.add_argument("--no-control", dest="control", action="store_false",
                    help="skip the control fold (a random quarter of the pairs of every source "
                         "as new traffic: no shift)")
    ap.add_argument("--out", type=Path, default=Path("benchmarks/shift/out/shift.json"))
    args = ap.parse_args(argv)
    from threadpoolctl import threadpool_limits

    start = time.perf_counter()
    fs = load_features(args.per_source, args.max_input_tokens, benchmark=args.benchmark)
    log(f"{len(fs.samples)} samples loaded from the feature cache")
    rows = []
    with threadpool_limits(1):
        for held in [*args.sources, *([CONTROL] if args.control else [])]:
            for readout in ("verdict", "head"):
                rows.extend(fold(fs, held, readout, args.permutations, args.seed))
                log(f"{held} / {readout} done")
    counts = {src: {"n": int(sum(s.source == src for s in fs.samples)),
                    "n_benign": int(sum(s.source == src and not s.label for s in fs.samples))}
              for src in SOURCES}
    result = {"settings": {**vars(args), "out": str(args.out), "alphas": ALPHAS,
                           "delta": DELTA, "layer": LAYER, "pooling": POOLING},
              "counts": counts, "rows": rows, "calimon_version": __version__,
              "machine": platform.machine(),
              "wall_seconds": round(time.perf_counter() - start, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=float) + "\n")
    log(f"wrote {args.out} in {result['wall_seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
