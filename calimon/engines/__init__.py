"""Scoring engines: where a monitor's forward passes run.

- `local`: this process (`calimon.monitor.score_with_store`);
- `ray`: chunks sharded over the actors of a Ray cluster (`calimon.engines.ray_engine`).

Both write the same rows into the same run store. A `MonitorSpec` is the plain, JSON-able
description of a monitor (backend name, model, backend options, prompt, readout) that a remote
worker rebuilds the monitor from.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from calimon.errors import InputError
from calimon.samples import Sample
from calimon.store import RunStore
from calimon.verdict import Verdict

ENGINES = ("local", "ray")


def backend_options(backend: str, *, device: str = "auto", batch_tokens: int = 8192,
                    base_url: str | None = None, served_model: str | None = None,
                    top_logprobs: int | None = None, concurrency: int = 8,
                    kv_cache_gib: int | None = None) -> dict[str, Any]:
    """A backend's constructor keywords (MonitorSpec.options) from the settings that apply to
    it; `calimon score` and `calimon curve` pass their flags here. A plugin backend gets none."""
    if backend == "transformers":
        return {"device": device, "batch_tokens": batch_tokens}
    if backend == "http":
        if not base_url:
            raise InputError("the http backend needs --base-url (e.g. http://127.0.0.1:8000/v1)",
                             field="base_url")
        opts: dict[str, Any] = {"base_url": base_url, "concurrency": concurrency}
        if served_model:
            opts["served_model"] = served_model
        if top_logprobs:
            opts["top_logprobs"] = top_logprobs
        return opts
    if backend == "vllm":
        opts = {}
        if top_logprobs:
            opts["top_logprobs"] = top_logprobs
        if kv_cache_gib:
            opts["kv_cache_gib"] = kv_cache_gib
        return opts
    return {}


@dataclass(frozen=True)
class MonitorSpec:
    """Everything needed to rebuild a monitor anywhere: `options` are the backend's keyword
    arguments (JSON values only, e.g. {"device": "cpu"} or {"base_url": "http://..."})."""

    model: str = "smollm2-135m"
    backend: str = "transformers"
    prompt: str = "direct"
    readout: str = "verdict"
    options: dict[str, Any] = field(default_factory=dict, hash=False)
    max_input_tokens: int | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> MonitorSpec:
        return cls(**json.loads(text))

    def build_backend(self):
        from calimon.backends import backend_class
        from calimon.models import resolve_model

        cls = backend_class(self.backend)
        return cls(resolve_model(self.model), **self.options)

    def build(self, backend=None):
        """The monitor (the backend is created lazily: no weights load until it scores)."""
        from calimon.monitor import make_monitor
        from calimon.prompts import load_prompt

        kwargs = {"max_input_tokens": self.max_input_tokens} if self.max_input_tokens else {}
        return make_monitor(backend if backend is not None else self.build_backend(),
                            load_prompt(self.prompt), self.readout, **kwargs)


@dataclass(frozen=True)
class ScoreResult:
    readings: dict[str, Verdict] = field(repr=False)
    scored: int  # transcripts sent to the model in this run
    reused: int  # transcripts already in the store
    model_calls: int  # backend forward/generate calls (summed over workers)
    engine: str = "local"

    def status_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for v in self.readings.values():
            counts[v.status] = counts.get(v.status, 0) + 1
        return dict(sorted(counts.items()))


def score_samples(spec: MonitorSpec, samples: Sequence[Sample], store: RunStore, *,
                  engine: str = "local", address: str | None = None,
                  workers: int | None = None, chunk_size: int = 32,
                  progress: Callable[[int], None] | None = None, monitor=None) -> ScoreResult:
    """Score what the store lacks with the chosen engine; return every reading."""
    if engine not in ENGINES:
        raise InputError(f"expected one of {list(ENGINES)}, got {engine!r}", field="engine")
    if chunk_size < 1:
        raise InputError(f"expected chunk_size >= 1, got {chunk_size}", field="chunk_size")
    monitor = monitor if monitor is not None else spec.build()
    hashes = list(dict.fromkeys(s.transcript_hash for s in samples))
    todo = len(store.missing(monitor.key, hashes))
    if engine == "ray":
        from calimon.engines.ray_engine import score_with_ray

        readings, calls = score_with_ray(spec, samples, store, key=monitor.key, address=address,
                                         workers=workers, chunk_size=chunk_size,
                                         progress=progress)
    else:
        from calimon.monitor import score_with_store

        before = monitor.backend.forward_calls
        readings = score_with_store(monitor, samples, store, chunk_size=chunk_size,
                                    progress=progress)
        calls = monitor.backend.forward_calls - before
    return ScoreResult(readings, scored=todo, reused=len(hashes) - todo, model_calls=calls,
                       engine=engine)


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
