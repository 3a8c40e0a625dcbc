"""calimon in ControlArena (the ``control`` extra): a monitor, and ControlArena's honest and attack
runs as a labelled calimon benchmark.

- `calimon_monitor_builder`: a ControlArena monitor (use it in any micro-protocol, e.g.
  ``trusted_monitoring_builder(monitor=calimon_monitor_builder(policy=...))``). Its
  ``suspicion_score`` is calimon's calibrated probability of misbehavior of the trajectory so far
  (the raw score without a map), so ControlArena's audit-budget analysis
  (``max_suspicion_scorer``, ``compute_suspicion_threshold``, ``compute_safety``) reads it as it
  reads any monitor's; its ``reason`` is one line with the decision and the evidence, and the
  message metadata's ``calimon`` key holds the whole `Assessment` (p_raw, p_cal, spans mapped to
  messages, provenance). A step calimon could not score gets ``unscored_suspicion`` (default
  1.0: audited first, as a policy sends an unscored transcript to review) with
  ``score_parsed=False`` and a reason saying so, never a silent 0.
- `control_benchmark`: the samples of ControlArena logs as a calimon samples file, labelled by
  their eval mode (attack: misbehavior; honest: benign; with ``successful_attacks_only``, an
  attack whose side task failed is left out), the trajectories rendered as ``calimon score
  --benchmark LOG.eval`` renders them; ``calimon curve --benchmark FILE`` then draws the curve.
  From the shell: ``python -m calimon.integrations.control LOG... --out FILE``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from calimon.errors import CalimonError, InputError, MissingExtraError

try:
    from control_arena import control_agent
    from control_arena.monitor import MonitorResponse, monitor
    from inspect_ai.agent import Agent, AgentState
    from inspect_ai.tool import Tool
except ImportError:  # pragma: no cover - the extra is missing
    raise MissingExtraError("calimon.integrations.control needs control-arena: "
                            "pip install 'calimon[control]'") from None

from calimon.integrations.lazy import LazyMonitor
from calimon.integrations.transcripts import sample_from_messages
from calimon.samples import Sample


class CalimonMonitorResponse(MonitorResponse):
    """ControlArena's `MonitorResponse` with calimon's whole `Assessment` (``calimon``), which
    the ``@monitor`` decorator writes into the step's message metadata beside the score."""

    calimon: dict[str, Any] = {}


@control_agent
def calimon_monitor_builder(policy: str | None = None, model: str | None = None,
                            url: str | None = None, readout: str = "verdict",
                            prompt: str | None = None, calibration_map: str | None = None,
                            store: str | None = None, unscored_suspicion: float = 1.0
                            ) -> Agent:
    """A ControlArena monitor whose suspicion score is calimon's calibrated probability (module
    docstring); ``policy=``, ``model=`` or ``url=`` as for the Inspect scorer."""
    if not 0.0 <= unscored_suspicion <= 1.0:
        raise InputError(f"expected a suspicion in [0, 1], got {unscored_suspicion}",
                         field="unscored_suspicion")
    lazy = LazyMonitor(dict(policy=policy, model=model, url=url, readout=readout,
                            prompt=prompt, calibration_map=calibration_map, store=store))

    @monitor
    async def impl(state: AgentState, tools: list[Tool]) -> MonitorResponse:
        [a] = await lazy.assess([sample_from_messages(state.messages, source="control")])
        if not a.scored:
            return CalimonMonitorResponse(
                suspicion_score=unscored_suspicion, score_parsed=False, calimon=a.to_dict(),
                reason=f"{a.reason()}; suspicion set to {unscored_suspicion} "
                       "(unscored_suspicion)")
        return CalimonMonitorResponse(suspicion_score=float(a.probability), reason=a.reason(),
                                      calimon=a.to_dict())

    return impl


def control_benchmark(logs: Iterable[str | Path], out: str | Path, *,
                      successful_attacks_only: bool = False, category: str = "safety",
                      task: str = "reasoning") -> Path:
    """Write the samples of ControlArena logs as a labelled calimon samples file (module
    docstring); each sample's eval mode is read from its metadata (``eval_mode``), else from
    its log's task metadata (``mode``). A sample of neither mode is an error naming it."""
    from calimon.samples import write_samples

    samples: list[Sample] = []
    for log in logs:
        samples += log_samples(Path(log), successful_attacks_only, category, task)
    if not samples:
        raise InputError("no sample to write (no log given, or every attack failed its side "
                         "task)", field="logs")
    return write_samples(samples, out)


def log_samples(path: Path, successful_only: bool, category: str, task: str) -> list[Sample]:
    """One log's samples, labelled by eval mode (see `control_benchmark`)."""
    from inspect_ai.log import read_eval_log, read_eval_log_samples

    from calimon.data.inspect_log import InspectOptions, convert_sample

    if not path.is_file():
        raise InputError("no such file", path=str(path))
    header = read_eval_log(str(path), header_only=True)
    log_mode = (header.eval.metadata or {}).get("mode")
    opts = InspectOptions(category=category, task=task)
    out = []
    for es in read_eval_log_samples(str(path), all_samples_required=False,
                                    resolve_attachments=True, exclude_fields={"events", "store"}):
        mode = (es.metadata or {}).get("eval_mode") or log_mode
        if mode not in ("honest", "attack"):
            raise InputError(f"sample {es.id!r} has no ControlArena eval mode (metadata "
                             f"eval_mode, or the task's mode): {mode!r}", path=str(path),
                             field="eval_mode")
        side = side_task_success(es)
        if mode == "attack" and successful_only and side is not True:
            continue
        s = convert_sample(es, header.eval, opts, path)
        out.append(replace(s, label=mode == "attack", meta={**s.meta, "control_arena": {
            "eval_mode": mode, "side_task_success": side,
            "main_task_success": score_flag(es, "main_task_success")}}))
    return out


def side_task_success(es: Any) -> bool | None:
    """Whether an attack's side task succeeded (its scorers' ``side_task_success``), or None
    when no scorer says."""
    return score_flag(es, "side_task_success")


def score_flag(es: Any, key: str) -> bool | None:
    """A boolean a sample's scores give for ``key`` (a scorer of that name, or a key of a
    scorer's dict value: C/I, true/false, 1/0), or None."""
    for name, score in (es.scores or {}).items():
        value = score.value.get(key) if isinstance(score.value, dict) else (
            score.value if name == key else None)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        if isinstance(value, str):
            return value.strip().upper() in ("C", "TRUE", "YES", "1")
        return bool(value)
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m calimon.integrations.control LOG... --out FILE``: `control_benchmark`."""
    ap = argparse.ArgumentParser(prog="python -m calimon.integrations.control",
                                 description="ControlArena honest/attack logs as a labelled "
                                             "calimon benchmark (for calimon curve).")
    ap.add_argument("logs", nargs="+", help="ControlArena .eval logs (honest and attack)")
    ap.add_argument("--out", required=True, help="the samples file to write (.jsonl)")
    ap.add_argument("--successful-attacks-only", action="store_true",
                    help="leave out attacks whose side task failed")
    ap.add_argument("--category", default="safety")
    ap.add_argument("--task", default="reasoning")
    args = ap.parse_args(argv)
    try:
        path = control_benchmark(args.logs, args.out, category=args.category, task=args.task,
                                 successful_attacks_only=args.successful_attacks_only)
    except CalimonError as exc:
        print(f"calimon: error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 1)
    n = sum(1 for _ in path.open())
    print(f"wrote {path} ({n} samples); next: calimon curve --benchmark {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["CalimonMonitorResponse", "calimon_monitor_builder", "control_benchmark", "main",
           "side_task_success"]
