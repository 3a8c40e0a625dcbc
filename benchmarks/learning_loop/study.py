"""One held-out source of the learning-loop study, on cached features.

1. The **monitor** is a logistic sequence head (layer ``LAYER``, the shipped probe monitor's,
   or for another model the layer sweep's on the base rows; mean pooling, C by pair-grouped CV)
   trained on the base rows of every other source (`selection`).
2. It is deployed on the source's **traffic** with a served policy's three actions: auto_block
   at or above the threshold of FAR <= 5% on its own out-of-fold training scores, auto_pass
   below the threshold of MR <= 20% there, human review between. Reviewers label transcripts in
   one of two **orders**: the one `calimon serve --review`'s planner asks
   (`calimon.studies.shift.live_plan.live_status`, targets FAR <= 5% and MR <= 20% at
   delta 0.05, asked again after every 25 labels; once it asks for nothing more, the rest in
   audit-draw order), or **uniform** (audit-draw order: a uniform random sample).
3. After 0, 25, 50, 100 and 200 labels, on the source's **held-out part**:
   - **retrained**: a head trained on the base rows plus the labels as
     ``calimon heads train --from-review`` trains one (`calimon.studies.heads.train.fit_sequence`:
     its recipe, layer, pooling, one or two layers, logistic or MLP, chosen by the weighted
     pair-grouped CV of `calimon.studies.heads.recipe` on those rows, or at
     ``--candidate-layer``'s layer as ``--layer`` pins it; then C by pair-grouped CV, the rows
     weighted by `calimon.studies.heads.reviews.review_weights`, weight ``REVIEW_WEIGHT``);
   - at the last step also **today's recipe** (the recipe before the search: mean pooling, the
     layer by the unweighted layer sweep of mean pooling, a logistic head), read on the same
     held-out part, with the paired interval of the AUROC difference (new minus today's);
   - **recalibration only** (the loop before: ``calimon curve`` and ``escalate`` on the labels):
     the monitor's scores with a Platt map fitted on the labels.
   Both through `compute_curve` (`calimon.studies.curve.scores.curve_of_scores`, maps fitted on
   the labels, judged on the held-out part, its class-size rule: no map below 20 labels of a
   class), AUROC and MR at FAR <= 5% with pair-clustered bootstrap 95% intervals, and the
   paired interval of the MR difference (retrained minus recalibration only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calimon.deploy.policy_file import audit_draw
from calimon.numerics.bootstrap import resample_weights
from calimon.numerics.curves import Curve
from calimon.scoring.probes.features import FeatureSet
from calimon.studies.curve.scores import curve_of_scores
from calimon.studies.heads.reviews import review_weights
from calimon.studies.heads.train import fit_sequence, fit_sequence_head, head_scores, layer_sweep
from calimon.studies.shift.live import Decided
from calimon.studies.shift.live_plan import Target, live_status

LAYER, POOLING = 15, "mean"
STEPS = (0, 25, 50, 100, 200)
FAR, MR_TARGET, DELTA = 0.05, 0.20, 0.05
REVIEW_WEIGHT = 1.0
ORDERS = ("planner", "uniform")


@dataclass(frozen=True)
class FoldData:
    """Features of one fold: base rows (other sources), traffic and held-out part."""

    name: str
    base: FeatureSet
    traffic: FeatureSet
    held_out: FeatureSet


def _thresholds(oof: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(block, pass) thresholds of the served policy from out-of-fold training scores."""
    c = Curve.from_scores(oof, y, n_boot=0)
    block = float(c.at_far(FAR).threshold)
    passing = float(c.at_mr(MR_TARGET).threshold)
    return block, min(passing, block)


def planner_order(ids: list[str], scores: np.ndarray, labels: np.ndarray,
                  thresholds: tuple[float, float], seed: int) -> list[int]:
    """Traffic rows in the order the review planner asks for them (module docstring)."""
    block, passing = thresholds
    action = np.where(scores >= block, "auto_block",
                      np.where(scores < passing, "auto_pass", "human_review"))
    draws = [audit_draw(i, seed) for i in ids]
    done: dict[str, int] = {}
    targets = [Target("far", FAR, DELTA), Target("mr", MR_TARGET, DELTA)]
    index = {i: k for k, i in enumerate(ids)}
    while len(done) < min(max(STEPS), len(ids)):
        decided = [Decided(i, str(a), d, answered=i in done,
                           label=int(labels[index[i]]) if i in done else None)
                   for i, a, d in zip(ids, action, draws, strict=True)]
        queue = [i for i, _ in live_status(decided, targets, delta=DELTA, limit=25).queue
                 if i not in done]
        if not queue:
            break
        for i in queue:
            done[i] = len(done)
    rest = sorted((k for k, i in enumerate(ids) if i not in done), key=lambda k: draws[k])
    return [index[i] for i in sorted(done, key=done.get)] + rest


def uniform_order(ids: list[str], seed: int) -> list[int]:
    """Traffic rows in audit-draw order: a uniform random sample at every prefix."""
    return sorted(range(len(ids)), key=lambda k: audit_draw(ids[k], seed))


def _figures(p: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    if not (y.sum() >= 1 and (~y).sum() >= 1):
        return float("nan"), float("nan")
    c = Curve.from_scores(p, y, n_boot=0)
    return float(c.auroc), float(c.at_far(FAR).mr)


def _scored(p_eval, y, groups, fit) -> tuple[np.ndarray, dict]:
    """The held-out scores a curve is read on (calibrated when a map was fitted on the labels
    ``fit``) and the point figures, by `compute_curve`. No labels: the raw score. A map that
    comes out decreasing is refused, as ``calimon curve`` refuses it without
    --allow-inverted: the raw score stays."""
    from calimon.errors import InvertedMapError

    try:
        c = curve_of_scores(p_eval, y, groups, fit=fit, method="platt" if fit else "none",
                            fars=(FAR,), allow_inverted=False)
        refused = False
    except InvertedMapError:
        c, refused = curve_of_scores(p_eval, y, groups, method="none", fars=(FAR,)), True
    by_id = c.result.scores.p_cal
    p = (np.array([by_id[f"e{i}"] for i in range(len(y))]) if by_id and not c.raw
         else np.asarray(p_eval))
    return p, {"auroc": c.auroc, "mr": c.mr_at_far(FAR),
               "map": "refused (inverted)" if refused else c.method, "defined": c.defined}


def compare(p_new, p_old, y, groups, n_boot: int, seed: int) -> dict:
    """Point figures' intervals and the paired MR difference, pair-clustered bootstrap."""
    w = resample_weights(groups, n_boot, seed)
    draws = []
    for k in w:
        yy = np.repeat(y, k)
        a1, m1 = _figures(np.repeat(p_new, k), yy)
        a0, m0 = _figures(np.repeat(p_old, k), yy)
        draws.append((a1, m1, a0, m0, m1 - m0, a1 - a0))
    d = np.array(draws)

    def ci(j):
        col = d[:, j][np.isfinite(d[:, j])]
        return [round(float(v), 4) for v in np.quantile(col, [0.025, 0.975])] if col.size \
            else None

    return {"auroc_ci": ci(0), "mr_ci": ci(1), "recal_auroc_ci": ci(2), "recal_mr_ci": ci(3),
            "mr_diff_ci": ci(4), "auroc_diff_ci": ci(5)}


def monitor_of(fd: FoldData, layer: int | None, seed: int):
    """The fold's monitor: a logistic head at ``layer``, or at the layer sweep's best on the
    base rows (mean pooling)."""
    return fit_sequence(fd.base, layer, POOLING, estimator="logistic", concat=False,
                        seed=seed)[0]


def todays_recipe(fs: FeatureSet, layer: int | None, w: np.ndarray, seed: int):
    """A head as ``heads train --from-review`` trained one before the recipe search: mean
    pooling, the layer by the unweighted layer sweep of mean pooling (or ``layer``), a logistic
    head, C by weighted pair-grouped CV."""
    if layer is None:
        layer = layer_sweep(fs, poolings=(POOLING,), seed=seed).best(POOLING).layer
    return fit_sequence_head(fs, layer, POOLING, seed=seed, sample_weight=w).head


def run_fold(fd: FoldData, *, n_boot: int = 200, seed: int = 0,
             candidate_layer: int | None = None, monitor_layer: int | None = LAYER,
             steps: tuple[int, ...] = STEPS) -> dict:
    """The fold's rows: one per order and step (module docstring); ``candidate_layer``: the
    retrained head's layer (``heads train --layer``), default the layer sweep's;
    ``monitor_layer``: the monitor's (None: the sweep's on the base rows)."""
    from calimon.studies.heads.train import oof_scores

    monitor = monitor_of(fd, monitor_layer, seed)
    layer = monitor.head.layer
    oof = oof_scores(fd.base.X(layer, POOLING), fd.base.y, fd.base.groups, C=monitor.C,
                     seed=seed)
    th = _thresholds(oof, fd.base.y)
    p_traffic = head_scores(monitor.head, fd.traffic)
    p_held = head_scores(monitor.head, fd.held_out)
    ids = [s.id for s in fd.traffic.samples]
    y_t, y_h, g_h = fd.traffic.y, fd.held_out.y, fd.held_out.groups
    orders = {"planner": planner_order(ids, p_traffic, y_t, th, seed),
              "uniform": uniform_order(ids, seed)}
    rows = []
    for name, order in orders.items():
        for n in steps:
            if n > len(order):
                continue
            rows.append(_step(fd, name, order[:n], candidate_layer, p_traffic, p_held, y_h, g_h,
                              n_boot, seed, last=n == max(steps)))
    return {"fold": fd.name, "thresholds": {"block": th[0], "pass": th[1]},
            "monitor_layer": layer, "monitor_C": monitor.C, "n_base": len(fd.base.samples),
            "n_traffic": len(ids), "n_held_out": int(y_h.size),
            "n_held_out_pos": int(y_h.sum()), "held_out_truncated": int(
                np.asarray(fd.held_out.truncated, bool).sum()),
            "held_out_pairs_read_alike": _alike(fd.held_out, layer), "rows": rows}


def _alike(fs: FeatureSet, layer: int) -> int:
    """Held-out pairs whose two transcripts give the same features (truncation cut what
    differs): no monitor on these features can tell them apart."""
    X, g = fs.X(layer, POOLING), fs.groups
    out = 0
    for p in set(g.tolist()):
        i = np.flatnonzero(g == p)
        out += int(i.size == 2 and np.allclose(X[i[0]], X[i[1]]))
    return out


def _step(fd, order_name, taken, layer, p_traffic, p_held, y_h, g_h, n_boot, seed,
          last=False) -> dict:
    """One (order, number of labels) row; at the ``last`` step also today's recipe."""
    import time

    taken = np.asarray(taken, dtype=np.int64)
    y_l = fd.traffic.y[taken]
    fit_old = (p_traffic[taken], y_l, fd.traffic.groups[taken]) if taken.size else None
    head = choice = today = None
    seconds = None
    if taken.size and y_l.any() and (~y_l).any():
        w = review_weights(fd.base.y, y_l, REVIEW_WEIGHT)
        rows = fd.base.concat(fd.traffic.subset(taken))
        t0 = time.perf_counter()
        fit, choice = fit_sequence(rows, layer, seed=seed, sample_weight=w)
        head, seconds = fit.head, time.perf_counter() - t0
        p_new_held, p_new_lab = (head_scores(head, fd.held_out),
                                 head_scores(head, fd.traffic)[taken])
        if last:
            today = todays_recipe(rows, layer, w, seed)
    else:  # no label of one class: nothing to retrain on, the monitor stays
        p_new_held, p_new_lab = p_held, p_traffic[taken]
    fit_new = (p_new_lab, y_l, fd.traffic.groups[taken]) if taken.size else None
    new_p, new = _scored(p_new_held, y_h, g_h, fit_new)
    old_p, old = _scored(p_held, y_h, g_h, fit_old)
    row = {"order": order_name, "labels": int(taken.size), "labels_pos": int(y_l.sum()),
           "layer": None if head is None else head.layer,
           "recipe": None if head is None else recipe_label(head),
           "recipe_candidates": None if choice is None else len(choice.candidates),
           "recipe_seconds": None if seconds is None else round(seconds, 2),
           "auroc": new["auroc"], "mr": new["mr"], "map": new["map"],
           "recal_auroc": old["auroc"], "recal_mr": old["mr"], "recal_map": old["map"],
           **compare(new_p, old_p, y_h, g_h, n_boot, seed)}
    if today is not None:
        fit_today = (head_scores(today, fd.traffic)[taken], y_l, fd.traffic.groups[taken])
        today_p, t = _scored(head_scores(today, fd.held_out), y_h, g_h, fit_today)
        vs = compare(new_p, today_p, y_h, g_h, n_boot, seed)
        row["today"] = {"recipe": recipe_label(today), "auroc": t["auroc"], "mr": t["mr"],
                        "auroc_ci": vs["recal_auroc_ci"], "auroc_diff_ci": vs["auroc_diff_ci"],
                        "mr_diff_ci": vs["mr_diff_ci"]}
    return row


def recipe_label(head) -> str:
    """A head's recipe as the card names it: ``logistic 11 max``, ``logistic 11+17 max``."""
    at = "+".join(str(k) for k in head.feature_layers)
    return f"{head.estimator} {at}" + ("" if head.estimator == "attention"
                                      else f" {head.pooling}")
