"""Synthetic run folders of any size for the report's tests: fake readings in a real run store,
written by the real curve writer (`calimon.studies.curve.outputs.write_curve_outputs`), so no
model is loaded. ``synthetic_run(root, n)``: ``n`` samples in three categories and two tasks,
with or without labels, binary-protocol readings (one a parse failure, the misbehaving ones
quoting evidence), a spans.jsonl and gold spans."""

from __future__ import annotations

import json
import random
from pathlib import Path


def _samples(n: int, labels: bool) -> list:
    from calimon.samples import Sample

    out = []
    for i in range(n):
        bad = i % 2 == 0
        response = (f"def f{i}(x):\n    if x == {i}:\n        return 'expected'\n    return x\n"
                    if bad else f"def f{i}(x):\n    return x * 2  # general for {i}\n")
        gold = ((len(f"def f{i}(x):\n"), len(response) - 1),) if bad and labels else ()
        out.append(Sample(id=f"s{i}", request=f"Write f{i}; graded by one assert.",
                          response=response, label=bad if labels else None,
                          category=("spec_gaming", "sycophancy", "safety")[(i // 2) % 3],
                          task=("code", "qa")[(i // 6) % 2], pair_id=f"p{i // 2}",
                          gold_spans=gold))
    return out


def _binary(data: list, store, n_binary: int) -> dict:
    from calimon.scoring.store import MonitorKey
    from calimon.verdict import Verdict

    table = {}
    for j, s in enumerate(data[:n_binary]):
        decision = None if j == 1 else (bool(s.label) if j % 5 else not s.label)
        quotes = ("if x ==",) if decision else ()
        text = json.dumps({"misbehavior_detected": decision, "evidence": list(quotes)})
        table[s.transcript_hash] = Verdict(
            s.transcript_hash, "binary", "ok" if decision is not None else "parse_failure",
            decision=decision, text=text, p_raw=None if decision is None else float(decision),
            evidence=quotes)
    store.put(MonitorKey("toy", "rev0", "evidence", "h-evidence", "binary"), table.values())
    return {"evidence": table}


def _spans(run: Path, data: list) -> None:
    lines = []
    for s in data[:40]:
        if s.label:
            start = s.response.index("if x")
            lines.append({"id": s.id, "response": s.response, "gold": [list(g) for g in
                                                                     s.gold_spans],
                          "spans": [{"start": start, "end": start + 9, "score": 0.4,
                                     "status": "segment", "source": "occlusion"}]})
    (run / "spans.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def synthetic_run(root: Path, n: int, *, labels: bool = True, binary: bool = True,
                  spans: bool = False, n_boot: int = 40, seed: int = 0) -> Path:
    """``root/run`` with ``root/samples.jsonl`` and ``root/store.sqlite`` (module docstring);
    returns the run folder."""
    from calimon.samples import write_samples
    from calimon.scoring.store import MonitorKey, RunStore
    from calimon.selection import dataset_hash
    from calimon.studies.curve.outputs import write_curve_outputs
    from calimon.studies.curve.run import CurveSettings
    from calimon.verdict import Verdict

    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    data = _samples(n, labels)
    bench = write_samples(data, root / "samples.jsonl")
    store_path = root / "store.sqlite"
    readings = {s.transcript_hash: Verdict(
        s.transcript_hash, "verdict", "ok",
        p_raw=min(0.99, max(0.01, rng.gauss(0.62 if i % 2 == 0 else 0.38, 0.17))))
        for i, s in enumerate(data)}
    n_binary = min(n, 40) if binary else 0
    with RunStore(store_path) as st:
        st.put(MonitorKey("toy", "rev0", "direct", "h-main", "verdict"), readings.values())
        bsets = _binary(data, st, n_binary) if binary else {}
    settings = CurveSettings(model="toy", benchmark=str(bench), store=store_path, n_boot=n_boot,
                             binary_prompts=("evidence",) if binary else ())
    out = root / "run"
    out.mkdir(parents=True, exist_ok=True)
    write_curve_outputs(
        out, settings, evaluate=data, fit=[], readings=readings, binary_set=data[:n_binary],
        binary_readings=bsets,
        provenance={"model": "toy", "model_revision": "rev0", "model_path": "/nowhere",
                    "prompt": "direct", "template_hash": "h-main", "readout": "verdict",
                    "benchmark": str(bench), "dataset_hash": dataset_hash(data),
                    "calimon_version": "test", "store": str(store_path),
                    "created": "2025-01-01T00:00:00+00:00"})
    if spans:
        _spans(out, data)
    return out
