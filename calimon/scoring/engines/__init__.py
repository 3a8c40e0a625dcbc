"""Scoring engines: where a monitor's forward passes run.

- `local`: this process (`calimon.scoring.monitor.score_with_store`, in paced chunks: the first of one
  sample, then about `calimon.progress.PACE_SECONDS` each);
- `ray`: chunks sharded over the actors of a Ray cluster (`calimon.scoring.engines.ray_engine`).

Both write the same rows into the same run store. `Scorer` (`calimon.scoring.engines.service`) is the
scoring service every study uses; a `MonitorSpec` (`calimon.scoring.engines.spec`) is the plain,
JSON-able description of a monitor that a remote worker rebuilds the monitor from.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from calimon.progress import Progress
    from calimon.samples import Sample
    from calimon.scoring.engines.settings import RunSettings
    from calimon.scoring.engines.spec import MonitorSpec
    from calimon.scoring.store import RunStore
    from calimon.verdict import Verdict

# Imported on first use (PEP 562), so that a command's flags, declared from `BackendSettings`,
# cost no model, store or backend import: ``calimon curve --help`` answers at once.
_LAZY = {"ENGINES": "service", "Engine": "service", "Scorer": "service",
         "BackendSettings": "settings", "RunSettings": "settings", "MonitorSpec": "spec",
         "make_monitor": "spec"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"calimon.scoring.engines.{_LAZY[name]}"), name)
    if name == "backend_options":
        from calimon.scoring.backends.options import backend_options

        return backend_options
    if name == "RunStore":
        from calimon.scoring.store import RunStore

        return RunStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass(frozen=True)
class ScoreResult:
    """What a scoring run returns: the readings by sample id and how many were scored, reused
    from the store, and how many model calls it took."""

    readings: dict[str, Verdict] = field(repr=False)
    scored: int  # transcripts sent to the model in this run
    reused: int  # transcripts already in the store
    model_calls: int  # backend forward/generate calls (summed over workers)
    engine: str = "local"

    def status_counts(self) -> dict[str, int]:
        """Readings per verdict status, sorted by status."""
        counts: dict[str, int] = {}
        for v in self.readings.values():
            counts[v.status] = counts.get(v.status, 0) + 1
        return dict(sorted(counts.items()))


def score_samples(spec: MonitorSpec, samples: Sequence[Sample], store: RunStore, *,
                  engine: str = "local", address: str | None = None,
                  workers: int | None = None, chunk_size: int = 32,
                  progress: Callable[[int], None] | None = None, monitor=None) -> ScoreResult:
    """Score what the store lacks with the chosen engine; return every reading."""
    from calimon.scoring.engines.service import Engine, Scorer

    scorer = Scorer(spec, store, engine=Engine(engine, address, workers, chunk_size),
                    backend=monitor.backend if monitor is not None else None)
    monitor = monitor if monitor is not None else scorer.monitor()
    hashes = list(dict.fromkeys(s.transcript_hash for s in samples))
    todo = scorer.todo(samples, monitor)
    readings = scorer.score(samples, monitor, tick=progress)
    return ScoreResult(readings, scored=todo, reused=len(hashes) - todo,
                       model_calls=scorer.model_calls, engine=engine)


def score_benchmark(settings: RunSettings, *, chunk_size: int = 32,
                    export: str | Path | None = None, progress: Progress | None = None
                    ) -> dict[str, Any]:
    """`calimon score`: score a benchmark (labelled or not; ``limit`` whole pairs) with the
    settings' monitor into their run store on their backend and engine, optionally export
    every reading as JSONL; returns the run's summary."""
    from calimon.data.registry import load_benchmark
    from calimon.scoring.engines.service import Scorer
    from calimon.scoring.store import RunStore
    from calimon.selection import select

    prompt, readout, store = settings.prompt, settings.readout, settings.store
    spec = settings.spec()
    monitor = spec.build()  # resolves the model and checks the readout before any work
    samples = select(load_benchmark(settings.benchmark, progress=progress), limit=settings.limit,
                     seed=settings.seed, labelled=False)
    usage0 = api_usage(monitor.backend)
    with RunStore(store) as st:
        scorer = Scorer(spec, st, engine=settings.engine_settings(chunk_size),
                        progress=progress, backend=monitor.backend)
        hashes = list(dict.fromkeys(s.transcript_hash for s in samples))
        todo = scorer.todo(samples, monitor)
        readings = scorer.score(samples, monitor, label="scoring")
    result = ScoreResult(readings, scored=todo, reused=len(hashes) - todo,
                         model_calls=scorer.model_calls, engine=settings.engine)
    if export:
        export_jsonl(samples, result.readings, export, key=monitor.key)
    return {"samples": len(samples), "scored": result.scored, "reused": result.reused,
            "model_calls": result.model_calls, "statuses": result.status_counts(),
            "engine": settings.engine, "backend": settings.backend, "model": monitor.key.model,
            "model_revision": monitor.key.model_revision, "prompt": prompt,
            "template_hash": monitor.key.template_hash, "readout": readout,
            "defenses": list(settings.defense),
            "store": str(store), "export": str(export) if export else None,
            **api_usage(monitor.backend, since=usage0)}


def api_usage(backend, since: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{"api_usage": ...}`` for a backend behind a chat API (requests, journal hits, failed
    requests, tokens, cost), else ``{}``. ``since``: an earlier `api_usage` of the same
    backend, subtracted (a shared backend's counts cover every run of the process)."""
    from calimon.scoring.backends import Messages, supports

    if not supports(backend, Messages):
        return {}
    usage = backend.usage
    before = (since or {}).get("api_usage") or {}
    for name, value in before.items():
        if isinstance(value, int | float) and isinstance(usage.get(name), int | float):
            usage[name] = usage[name] - value
    return {"api_usage": usage}


EXPORT_SAMPLE_FIELDS = ("id", "pair_id", "label", "category", "task", "split", "source")


def export_jsonl(samples: Sequence[Sample], readings: dict[str, Verdict], path: str | Path,
                 *, key=None) -> Path:
    """One JSON object per sample, in input order: its identifying fields, then the reading."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for s in samples:
            row: dict[str, Any] = {k: getattr(s, k) for k in EXPORT_SAMPLE_FIELDS}
            if key is not None:
                row.update(model=key.model, model_revision=key.model_revision,
                           prompt=key.prompt, template_hash=key.template_hash)
            v = readings.get(s.transcript_hash)
            if v is None:
                row.update(status="missing")
            else:
                d = asdict(v)
                d["evidence"] = list(v.evidence)
                row.update(d)
            fh.write(json.dumps(row, ensure_ascii=False, sort_keys=False) + "\n")
    return path


__all__ = ["ENGINES", "BackendSettings", "Engine", "MonitorSpec", "RunSettings", "ScoreResult", "Scorer", "backend_options",
           "export_jsonl", "make_monitor", "score_benchmark", "score_samples"]
