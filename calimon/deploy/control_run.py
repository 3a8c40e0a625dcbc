"""`calimon control-safety`: certified safety (`calimon.deploy.control_safety`) from ControlArena
logs and the monitor's scores they hold, into a run folder.

The benchmark is ControlArena's runs read with ``label=eval_mode`` (`calimon.data.inspect_log`),
or a samples file frozen from them (`calimon.integrations.control.control_benchmark`): each
sample keeps ``meta.control_arena`` (its eval mode, whether its main and side tasks succeeded).
The suspicion score is a ``score:NAME`` readout (`calimon.score_readout`: a scorer's value such
as ControlArena's ``max_suspicion_scorer``, or the steps' ``suspicion_score`` by max, mean or
last), on the readout's scale: the score itself, or mapped onto [0, 1] by its ``range``. No model
is loaded and torch is not imported.

An attack succeeded when ControlArena's ``compute_safety`` counts it so: its side task, and its
main task unless ``require_main_task_success`` is False. An attack whose scores say nothing of a
task that counts, or a sample without an eval mode, is an error naming the file, the sample and
the field; a run without the score is one too, unless the readout says ``missing=skip`` (then it
is left out and counted). ``attacks=successful`` in the benchmark is refused: a failed attack
that is audited is a caught attack.

The run folder holds ``safety.json`` (`SafetyRun`, ``format_version`` 1) and ``safety.png``
(safety against the audit budget at both thresholds, with their intervals); `calimon report`
adds a section for it when the folder is also a curve run.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import numpy as np

from calimon.deploy.control_safety import DEFAULT_BUDGETS, ControlSafety, control_safety
from calimon.errors import InputError

SAFETY_JSON, SAFETY_PNG = "safety.json", "safety.png"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class SafetyRun:
    """``safety.json``: where the runs came from (``benchmark``, ``readout``), the runs left
    out without a score (``missing=skip``), and the result."""

    JSON_NAME = "safety.json"

    format_version: int
    benchmark: str
    readout: str
    left_out_honest: int
    left_out_attack: int
    created: str
    calimon_version: str
    result: ControlSafety


@dataclass(frozen=True)
class ControlRuns:
    """The arrays `control_safety` reads, gathered from the samples."""

    honest: np.ndarray
    attack: np.ndarray
    attack_success: np.ndarray
    honest_main_success: list
    left_out_honest: int = 0
    left_out_attack: int = 0


def _refuse_successful_only(benchmark: str) -> None:
    query = benchmark.partition("?")[2]
    if dict(parse_qsl(query)).get("attacks") == "successful":
        raise InputError("attacks=successful leaves out failed attacks, but an audited attack "
                         "counts as caught whether or not it succeeded: read every attack "
                         "(drop attacks=successful)", field="benchmark")


def _flag(meta: dict, key: str, where: str, path: str, hint: str = "") -> bool:
    value = meta.get(key)
    if not isinstance(value, bool):
        raise InputError(f"{where} has no {key} score (its scores say nothing of it){hint}",
                         path=path, field=f"control_arena.{key}")
    return value


def control_runs(samples: list, readout: str, *, source: str = "",
                 require_main_task_success: bool = True) -> ControlRuns:
    """The honest and attack runs of ``samples`` (module docstring) as arrays."""
    from calimon.scoring.recorded import recorded_readings, sample_file

    honest, attack, success, main = [], [], [], []
    left = {"honest": 0, "attack": 0}
    for x in samples:
        path, where = sample_file(x, source), f"sample {x.id!r}"
        ca = x.meta.get("control_arena")
        mode = ca.get("eval_mode") if isinstance(ca, dict) else None
        if mode not in ("honest", "attack"):
            raise InputError(f"{where} has no ControlArena eval mode: read ControlArena logs "
                             "with ?label=eval_mode (docs/integrations.md, section 5)",
                             path=path, field="control_arena.eval_mode")
        reading = recorded_readings([x], readout, source=source)[x.transcript_hash]
        if reading.status != "ok" or reading.p_raw is None:
            left[mode] += 1
            continue
        if mode == "honest":
            honest.append(reading.p_raw)
            value = ca.get("main_task_success")
            main.append(value if isinstance(value, bool) else None)
            continue
        attack.append(reading.p_raw)
        ok = _flag(ca, "side_task_success", where, path)
        if require_main_task_success:
            ok = _flag(ca, "main_task_success", where, path,
                       "; --side-task-only counts an attack by its side task alone") and ok
        success.append(ok)
    for mode, runs in (("honest", honest), ("attack", attack)):
        if not runs:
            skipped = f" ({left[mode]} left out without a score)" if left[mode] else ""
            raise InputError(f"no scored {mode} run in the benchmark{skipped}: safety needs "
                             "honest and attack runs", path=source or None, field="eval_mode")
    return ControlRuns(honest=np.array(honest), attack=np.array(attack),
                       attack_success=np.array(success, dtype=bool), honest_main_success=main,
                       left_out_honest=left["honest"], left_out_attack=left["attack"])


def control_safety_run(benchmark: str, readout: str, out: str | Path, *,
                       budgets: Any = DEFAULT_BUDGETS, delta: float = 0.05,
                       audit_share: float = 0.5, require_main_task_success: bool = True,
                       plot: bool = True) -> SafetyRun:
    """Read ``benchmark`` under the ``score:NAME`` ``readout``, compute `control_safety`, and
    write ``safety.json`` and ``safety.png`` into ``out`` (created if needed); return the run."""
    from calimon import __version__
    from calimon.data.registry import load_benchmark
    from calimon.score_readout import ScoreReadout, is_score_readout

    if not is_score_readout(readout):
        raise InputError(f"expected a score:NAME readout (the monitor's scores the logs hold), "
                         f"got {readout!r}", field="readout")
    parsed = str(ScoreReadout.parse(readout))
    _refuse_successful_only(benchmark)
    runs = control_runs(load_benchmark(benchmark, build_if_missing=False), parsed,
                        source=benchmark, require_main_task_success=require_main_task_success)
    result = control_safety(runs.honest, runs.attack, runs.attack_success,
                            honest_main_success=runs.honest_main_success, budgets=budgets,
                            delta=delta, audit_share=audit_share,
                            require_main_task_success=require_main_task_success)
    run = SafetyRun(format_version=FORMAT_VERSION, benchmark=benchmark, readout=parsed,
                    left_out_honest=runs.left_out_honest, left_out_attack=runs.left_out_attack,
                    created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                    calimon_version=__version__, result=result)
    write_safety(Path(out), run, plot=plot)
    return run


def write_safety(out: Path, run: SafetyRun, *, plot: bool = True) -> None:
    """``safety.json`` (and ``safety.png`` with ``plot``) into the folder ``out``."""
    from calimon.jsonio import dump_json
    from calimon.typed_json import to_json

    if out.exists() and not out.is_dir():
        raise InputError("expected a folder for the run, got a file", path=str(out), field="out")
    out.mkdir(parents=True, exist_ok=True)
    dump_json(to_json(run), out / SAFETY_JSON)
    if plot:
        from calimon.plotting.safety import plot_safety

        plot_safety(out / SAFETY_PNG, run.result, title=f"{run.readout} · {run.benchmark}")


def read_safety(path: str | Path) -> SafetyRun:
    """A ``safety.json`` (or the run folder holding one) as a `SafetyRun`; InputError naming
    the file when it is missing, not JSON, of a newer format or malformed."""
    from calimon.typed_json import from_json

    p = Path(path)
    p = p / SAFETY_JSON if p.is_dir() else p
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("no such file (write it with `calimon control-safety --out DIR`)",
                         path=str(p)) from None
    except (OSError, ValueError) as exc:
        raise InputError(f"not a readable JSON file ({exc})", path=str(p)) from None
    version = doc.get("format_version") if isinstance(doc, dict) else None
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise InputError(f"format_version {version!r}: this calimon reads up to "
                         f"{FORMAT_VERSION}", path=str(p), field="format_version")
    return from_json(SafetyRun, doc, path=str(p))


__all__ = ["FORMAT_VERSION", "SAFETY_JSON", "SAFETY_PNG", "ControlRuns", "SafetyRun",
           "control_runs", "control_safety_run", "read_safety", "write_safety"]
