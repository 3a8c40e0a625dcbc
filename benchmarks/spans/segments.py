"""The segment study of benchmarks/results/spans.md: the token head read on misbehaving samples
of two splits of amb-open, its scores aggregated into a reader's segments, the segment
precision map fitted on the first split and judged on the second (`calimon.studies.spans.
segment_study`). Writes the map (JSON, beside the token head's card unless --map says
otherwise) and the figures (--out, JSON). Readings go through the run store: a rerun computes
nothing.

    python benchmarks/spans/segments.py --benchmark amb-open --fit-limit 400 --test-limit 400

The fit split is ``calib``, not ``train``: the token head was trained on amb-open train, whose
segments it scores higher than it will score new ones.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from calimon.calibration.segment_precision import (
    TOP,
    choose_method,
    fit_precision_map,
    precision_map_path,
)
from calimon.data.registry import load_benchmark
from calimon.scoring.engines.service import Scorer
from calimon.scoring.probes.artifacts import find_head_card
from calimon.scoring.probes.labels import span_offsets
from calimon.scoring.store import RunStore
from calimon.selection import dataset_hash, select
from calimon.studies.spans.segment_study import fit_points, judge, nan_free, segment_row
from calimon.studies.spans.settings import SpanSettings


def rows_of(scorer, monitor, samples, label):
    """The segment rows of the misbehaving samples with gold spans among ``samples``."""
    bad = [s for s in samples if s.label and s.gold_spans]
    start = time.perf_counter()
    got = scorer.score(bad, monitor, label=label, chunk_size=32)
    rows = []
    for s in bad:
        v = got.get(s.transcript_hash)
        if v is None or not v.scored:
            continue
        ts = v.extra["token_scores"]
        rows.append(segment_row(s, span_offsets(ts["offsets"]), ts["scores"],
                                v.extra.get("spans") or ()))
    return rows, len(bad), time.perf_counter() - start


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--benchmark", default="amb-open")
    ap.add_argument("--head", default="amb-open-token")
    ap.add_argument("--fit-split", default="calib")
    ap.add_argument("--fit-limit", type=int, default=400)
    ap.add_argument("--test-limit", type=int, default=400)
    ap.add_argument("--method", default="auto", help="the map's calibration method; auto: "
                    "the lowest out-of-fold ECE on the fit split")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--store", default="runs/spans-compare-store.sqlite")
    ap.add_argument("--map", default=None, help="where the map goes (default: beside the head)")
    ap.add_argument("--out", default="runs/spans-segments.json")
    a = ap.parse_args(argv)
    st = SpanSettings(benchmark=a.benchmark, readout=f"probe:{a.head}", threads=a.threads,
                      store=Path(a.store))
    samples = load_benchmark(a.benchmark)
    fit_set = select(samples, a.fit_split, limit=a.fit_limit, seed=0)
    test_set = select(samples, "test", limit=a.test_limit, seed=0)
    with RunStore(st.store) as db, Scorer(st.spec(), db, engine=st.engine_settings()) as scorer:
        monitor = scorer.monitor()
        fit_rows, n_fit, t_fit = rows_of(scorer, monitor, fit_set, f"{a.fit_split} token head")
        test_rows, n_test, t_test = rows_of(scorer, monitor, test_set, "test token head")
        card = find_head_card(a.head, scorer.backend.model_ref, None)
    where = Path(a.map) if a.map else precision_map_path(card)
    scores, hits, ids = fit_points(fit_rows)
    method, cv = a.method, {}
    if method == "auto":
        method, cv = choose_method(scores, hits, [i.rsplit("#", 1)[0] for i in ids])
    extra = {"token_head": a.head, "top": TOP, "benchmark": a.benchmark, "split": a.fit_split,
             "limit": a.fit_limit, "dataset_hash": dataset_hash(fit_set),
             "weights_sha256": monitor.card.weights_sha256, "cv_ece": cv,
             "command": "python benchmarks/spans/segments.py " + " ".join(argv or sys.argv[1:])}
    stored = fit_precision_map(scores, hits, ids, where, extra=extra, method=method)
    result = judge(test_rows, stored.predict)
    result.update(fit={"split": a.fit_split, "limit": a.fit_limit, "samples": len(fit_set),
                       "misbehaving_with_gold": n_fit, "rows": len(fit_rows),
                       "segments": len(scores), "seconds": t_fit, "map": str(where),
                       "map_metrics": stored.metrics, "method": method, "cv_ece": cv},
                  test={"limit": a.test_limit, "samples": len(test_set),
                        "misbehaving_with_gold": n_test, "rows": len(test_rows),
                        "seconds": t_test, "dataset_hash": dataset_hash(test_set)},
                  command=extra["command"], benchmark=a.benchmark, head=a.head)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(nan_free(result), indent=1) + "\n")
    o = result["overall"]
    print(f"test rows {o['n']}: segment hit@1 {o['seg_hit1']['mean']:.3f} "
          f"(floor {o['seg_hit1_floor']['mean']:.3f}), precision@1 {o['seg_prec1']['mean']:.3f}, "
          f"ECE {result['reliability'].get('ece', float('nan')):.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
