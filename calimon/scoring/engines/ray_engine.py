"""Ray engine: shard scoring over the actors of a Ray cluster.

The driver owns the run store. It splits the missing transcripts into the same chunks a local
run would score (same order, same `chunk_size`), sends them to a pool of actors that each hold
one monitor (rebuilt from a `MonitorSpec`), and writes each chunk's readings into the store as
it arrives, so an interrupted run resumes like a local one. Samples and readings travel as
plain dicts (`Sample.to_dict`, `Verdict.to_row`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

from calimon.errors import MissingExtraError
from calimon.samples import Sample, sample_from_dict
from calimon.scoring.engines.spec import MonitorSpec
from calimon.scoring.store import MonitorKey, RunStore
from calimon.verdict import Verdict

INSTALL = "pip install 'calimon[ray]'  (or: pip install 'ray>=2.9')"


def import_ray():
    """The ``ray`` module; raises MissingExtraError when Ray is not installed."""
    try:
        import ray
    except ImportError:
        raise MissingExtraError(f"the ray engine needs Ray: {INSTALL}") from None
    return ray


class ScoringWorker:
    """One monitor per actor; `score` runs one chunk exactly as a local run would."""

    def __init__(self, spec_json: str, threads: int | None = None):
        if threads:
            import torch

            torch.set_num_threads(threads)
        self.monitor = MonitorSpec.from_json(spec_json).build()

    def score(self, rows: list[dict]) -> tuple[list[dict], int]:
        """The readings of one chunk of sample dicts (as `Verdict.to_row` rows) and the backend
        calls scoring it took."""
        from calimon.scoring.monitor import score_chunk

        chunk = [sample_from_dict(r) for r in rows]
        before = self.monitor.backend.forward_calls
        verdicts = score_chunk(self.monitor, chunk)
        return [v.to_row() for v in verdicts], self.monitor.backend.forward_calls - before


def score_with_ray(spec: MonitorSpec, samples: Sequence[Sample], store: RunStore, *,
                   key: MonitorKey, address: str | None = None, workers: int | None = None,
                   chunk_size: int = 32, cpus_per_worker: float | None = None,
                   progress: Callable[[int], None] | None = None
                   ) -> tuple[dict[str, Verdict], int]:
    """Score the store's missing transcripts on Ray; returns (all readings, model calls).

    `address`: an existing cluster ("auto", "ray://host:10001", ...); None starts a local one
    (and stops it afterwards). `workers`: actors to start (default: one per chunk, at most
    the cluster's CPUs divided by `cpus_per_worker`)."""
    ray = import_ray()
    by_hash = {s.transcript_hash: s for s in samples}
    todo = [by_hash[h] for h in store.missing(key, list(by_hash))]
    chunks = [todo[i:i + chunk_size] for i in range(0, len(todo), chunk_size)]
    calls = 0
    if chunks:
        started = connect(address)
        try:
            calls = _run(ray, spec, chunks, store, key, workers, cpus_per_worker, progress)
        finally:
            if started:
                ray.shutdown()
    return store.get(key, list(by_hash)), calls


def connect(address: str | None = None) -> bool:
    """Join the Ray cluster at `address` (None: start a local one) unless this process is
    connected to one already, with the environment the actors need (offline flags, model and
    data folders); True when this call connected (and its caller should `ray.shutdown()`)."""
    ray = import_ray()
    if ray.is_initialized():
        return False
    ray.init(address=address, include_dashboard=False, log_to_driver=False,
             configure_logging=False,
             runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                       **_passthrough_env()}})
    return True


def _passthrough_env() -> dict[str, str]:
    names = ("CALIMON_HOME", "CALIMON_MODELS_DIR", "CALIMON_SOURCES", "HF_HOME")
    return {n: os.environ[n] for n in names if n in os.environ}


def _run(ray, spec, chunks, store, key, workers, cpus_per_worker, progress) -> int:
    from ray.util import ActorPool

    cpus = cpus_per_worker or 1.0
    if workers is None:
        available = int(ray.cluster_resources().get("CPU", 1) // cpus) or 1
        workers = max(1, min(len(chunks), available))
    threads = max(1, int(cpus))
    actor = ray.remote(num_cpus=cpus)(ScoringWorker)
    pool = ActorPool([actor.remote(spec.to_json(), threads) for _ in range(workers)])
    payloads = [[s.to_dict() for s in chunk] for chunk in chunks]
    calls = 0
    for rows, n_calls in pool.map_unordered(lambda a, rows: a.score.remote(rows), payloads):
        store.put(key, [Verdict.from_row(r) for r in rows])
        calls += n_calls
        if progress:
            progress(len(rows))
    return calls
