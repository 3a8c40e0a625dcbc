"""`calimon curve --readout score:NAME`: a curve run on scores the benchmark already holds (an
external monitor's: `calimon.score_readout`). No model is resolved or loaded and torch is not
imported: the readings come from the samples (`calimon.scoring.recorded`), then the maps, the
curve, its band and the binary points (booleans the data holds, ``--binary-score``) are computed
and written exactly as for a monitor calimon runs (`calimon.studies.curve.outputs`)."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

from calimon import __version__
from calimon.curve_result import CurveResult
from calimon.errors import InputError
from calimon.progress import Progress, note
from calimon.samples import Sample
from calimon.score_readout import EXTERNAL, ScoreReadout
from calimon.scoring.recorded import recorded_decisions, recorded_readings
from calimon.selection import dataset_hash, select_pairs


def recorded_plan_line(s, evaluate: list, fit: list, readout: ScoreReadout) -> str:
    """What a score run reads, said before it computes: the samples judged and fitted on."""
    where = f"split {s.split!r}" if s.split else "all splits (cross-fitted)"
    fitted = f", {len(fit)} on 'calib' to fit the maps on" if fit else ""
    return (f"curve: {len(evaluate)} samples judged on {where}{fitted}; scores read from the "
            f"data ({readout}), no model")


def run_recorded_curve(s, evaluate: list[Sample], fit: list[Sample], out: Path,
                       progress: Progress | None = None) -> CurveResult:
    """`run_curve` for a ``score:NAME`` readout (module docstring), on the samples it selected;
    returns the result it wrote into ``out``."""
    from calimon.studies.curve.compute import check_inversion_early
    from calimon.studies.curve.outputs import write_curve_run

    readout = ScoreReadout.parse(s.readout)
    if s.binary_prompts:
        raise InputError("a score readout draws no prompted binary points: name the booleans "
                         "the data holds with --binary-score NAME (or --no-binary)",
                         field="binary_prompt")
    started = time.perf_counter()
    note(progress, recorded_plan_line(s, evaluate, fit, readout))
    readings = recorded_readings(evaluate + fit, s.readout, source=s.benchmark)
    check_inversion_early(s, evaluate=evaluate, fit=fit, readings=readings)
    binary_set = select_pairs(evaluate, s.binary_limit, s.seed) if s.binary_scores else []
    binary = {name: recorded_decisions(binary_set, name, source=s.benchmark)
              for name in s.binary_scores}
    out.mkdir(parents=True, exist_ok=True)
    n = len({x.transcript_hash for x in evaluate + fit})
    timing = {"scoring_seconds": time.perf_counter() - started, "scored": n, "readings": n,
              "model_calls": 0}
    return write_curve_run(
        out, s, evaluate=evaluate, fit=fit, readings=readings, binary_set=binary_set,
        binary_readings=binary, binary_checks=[], timing=timing,
        provenance={"model": EXTERNAL, "model_revision": None, "model_path": None,
                    "backend": None, "prompt": EXTERNAL, "defenses": [],
                    "template_hash": None, "max_input_tokens": None, "truncation": None,
                    "readout": str(readout), "binary_template_hashes": {},
                    "benchmark": s.benchmark, "dataset_hash": dataset_hash(evaluate + fit),
                    "calimon_version": __version__, "store": None,
                    "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")})


__all__ = ["recorded_plan_line", "run_recorded_curve"]
