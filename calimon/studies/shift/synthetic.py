"""A synthetic calibration run and new traffic with a known covariate shift (examples, tests).

Two kinds of transcripts, ``chat`` and ``code``, with their own words. The monitor is worse on
code: benign code transcripts score higher (``z = -1 + e`` against ``-2 + e`` for chat; the
misbehaving ones ``+1.5 + e``), so a threshold certified on chat-heavy data false-alarms more on
code-heavy traffic. ``P(label | transcript)`` is the same everywhere (covariate shift holds by
construction); only the share of code changes (``code_share``). Not a model's output.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from calimon.samples import Sample, write_samples

_WORDS = {"chat": "please explain recipe travel weather story movie friend advice history "
                  "music garden".split(),
          "code": "def return import list dict loop index parse json class assert yield "
                  "lambda".split()}


def synthetic_traffic(n_pairs: int, code_share: float, seed: int, prefix: str,
                      split: bool = False) -> tuple[list[Sample], np.ndarray]:
    """``2 n_pairs`` samples (benign + misbehaving per pair) and their scores ``p_raw``; with
    ``split``, even pairs are ``calib`` and odd ones ``test``."""
    rng = np.random.default_rng(seed)
    samples, scores = [], []
    for i in range(n_pairs):
        kind = "code" if rng.random() < code_share else "chat"
        words = _WORDS[kind]
        request = " ".join(rng.choice(words, 12))
        for label in (False, True):
            response = " ".join(rng.choice(words, int(rng.integers(20, 60))))
            z = (1.5 if label else (-1.0 if kind == "code" else -2.0)) + rng.normal()
            samples.append(Sample(id=f"{prefix}-{i:05d}-{int(label)}", request=request,
                                  response=response, label=label, category="safety",
                                  task="code" if kind == "code" else "qa",
                                  pair_id=f"{prefix}-{i:05d}", source=kind,
                                  split=("test" if i % 2 else "calib") if split else None))
            scores.append(1 / (1 + np.exp(-z)))
    return samples, np.asarray(scores)


def write_synthetic_shift(out: str | Path, *, n_calib: int = 1200, n_new: int = 400,
                          calib_code: float = 0.2, new_code: float = 0.8,
                          seed: int = 0) -> dict[str, Path]:
    """Write ``out/calib/{samples.jsonl,curve.csv,curve.json}`` (a calibration run: ``n_calib``
    pairs, half ``calib`` and half ``test``) and ``out/new/...`` (``n_new`` pairs of new
    traffic, labels kept for checking). The
    curve.json files name their samples JSONL as the benchmark and carry its dataset hash."""
    from calimon.curve_result import CurveResult, Provenance
    from calimon.run_folder import write_curve_json
    from calimon.selection import dataset_hash

    out = Path(out)
    paths = {}
    for name, n, share, s in (("calib", n_calib, calib_code, seed),
                              ("new", n_new, new_code, seed + 1)):
        folder = out / name
        folder.mkdir(parents=True, exist_ok=True)
        samples, p = synthetic_traffic(n, share, s, name, split=name == "calib")
        write_samples(samples, folder / "samples.jsonl")
        with (folder / "curve.csv").open("w", encoding="utf-8") as fh:
            fh.write("id,pair_id,label,category,task,split,status,p_raw,p_cal\n")
            for x, v in zip(samples, p, strict=True):
                fh.write(f"{x.id},{x.pair_id},{int(x.label)},{x.category},{x.task},"
                         f"{x.split or ''},ok,{float(v)!r},{float(v)!r}\n")
        prov = {"benchmark": str((folder / "samples.jsonl").resolve()),
                "dataset_hash": dataset_hash(samples), "readout": "synthetic"}
        write_curve_json(folder / "curve.json", CurveResult(provenance=Provenance(prov)))
        paths[name] = folder
    return paths
