"""The scoring service: one backend + run store + engine (local or Ray) + progress, the only
path by which a study turns samples into readings.

    with Scorer(spec, store, engine=Engine("ray"), progress=progress) as scorer:
        readings = scorer.score(samples, label="direct/verdict")
        quotes = scorer.score(bad, scorer.monitor("evidence", "binary"), label="quotes")

The backend is built once from the spec (`calimon.scoring.backends.build_backend`, shared within the
process), lazily, and released with the service. Every reading goes through the store: what it has is never recomputed, and
an interrupted run resumes where it stopped. With the Ray engine the readings of each chunk
are computed by actors that rebuild the monitor from its `MonitorSpec` and land in the same
store rows a local run writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from calimon.errors import InputError
from calimon.progress import Progress, Tick, note, ticker
from calimon.samples import Sample
from calimon.scoring.engines.spec import MonitorSpec
from calimon.scoring.store import RunStore
from calimon.verdict import Verdict

ENGINES = ("local", "ray")


@dataclass(frozen=True)
class Engine:
    """Where forward passes run: ``local`` (this process) or ``ray`` (actors of a cluster at
    ``address``; None starts a local one). ``chunk_size``: samples per Ray task, and the most
    per store commit of a local run (whose chunks are paced: `Scorer.score`)."""

    name: str = "local"
    address: str | None = None
    workers: int | None = None
    chunk_size: int = 32

    def __post_init__(self):
        if self.name not in ENGINES:
            raise InputError(f"expected one of {list(ENGINES)}, got {self.name!r}",
                             field="engine")
        if isinstance(self.chunk_size, bool) or self.chunk_size < 1:
            raise InputError(f"expected chunk_size >= 1, got {self.chunk_size}",
                             field="chunk_size")


class Scorer:
    """Scores samples with monitors of one backend into one store (see the module docstring).

    ``backend``: an already-built backend to use instead of building one from ``spec`` (a
    caller that owns it also closes it; the service closes only what it built)."""

    def __init__(self, spec: MonitorSpec, store: RunStore, *, engine: Engine | None = None,
                 progress: Progress | None = None, backend=None):
        self.spec = spec
        self.store = store
        self.engine = engine or Engine()
        self.progress = progress
        self._backend = backend
        self._owns_backend = backend is None
        self._calls0 = backend.forward_calls if backend is not None else 0
        self.remote_calls = 0  # model calls made by Ray actors
        self._kept: dict[str, tuple[int, int]] = {}  # label -> (readings stored, needed)

    @property
    def backend(self):
        """The local backend, built on first use (no weights load until it scores)."""
        if self._backend is None:
            self._backend = self.spec.build_backend()
            self._calls0 = self._backend.forward_calls  # a shared backend may have scored
        return self._backend

    @property
    def model_calls(self) -> int:
        """Model calls made through this service (local backend and Ray actors)."""
        local = self._backend.forward_calls - self._calls0 if self._backend is not None else 0
        return local + self.remote_calls

    def monitor(self, prompt: str | None = None, readout: str | None = None,
                decoding: str = "free"):
        """A monitor over the service's backend: the spec's own, or another prompt/readout
        (and, for the binary readout, decoding)."""
        spec = self.spec.with_monitor(prompt or self.spec.prompt, readout or self.spec.readout,
                                      decoding)
        return spec.build(self.backend)

    def todo(self, samples: Sequence[Sample], monitor=None) -> int:
        """How many distinct transcripts of ``samples`` the store lacks for ``monitor``."""
        monitor = monitor if monitor is not None else self.monitor()
        hashes = list(dict.fromkeys(s.transcript_hash for s in samples))
        return len(self.store.missing(monitor.key, hashes))

    def score(self, samples: Sequence[Sample], monitor=None, *, label: str | None = None,
              tick: Tick | None = None, chunk_size: int | None = None) -> dict[str, Verdict]:
        """Readings of ``samples`` by transcript hash, scoring what the store lacks with
        ``monitor`` (default: the spec's). ``label`` opens a progress bar for this call (and
        says first how many readings the store already had); ``tick`` reports to one the
        caller opened. Locally, chunks are paced (`calimon.progress.paced`: the first of one
        sample, then about `PACE_SECONDS` each, at most the engine's ``chunk_size``) unless
        ``chunk_size`` fixes them. Interrupted (Ctrl-C), it says how many readings the store
        kept, then re-raises."""
        monitor = monitor if monitor is not None else self.monitor()
        hashes = list(dict.fromkeys(s.transcript_hash for s in samples))
        name = label or getattr(monitor, "readout", "scoring")
        try:
            if label is not None and tick is None:
                tick = self._open_bar(label, monitor, hashes)
            readings = self._score(samples, monitor, tick, chunk_size)
        except KeyboardInterrupt as exc:
            self._kept[name] = (len(hashes) - len(self.store.missing(monitor.key, hashes)),
                                len(hashes))
            close_bar = getattr(self.progress, "close", None)
            if close_bar is not None:
                close_bar()  # the line comes after the bar it stopped
            line = self.interrupt_line()
            note(self.progress, line, always=True)
            exc.add_note(line)  # said: the command line adds no line of its own
            raise
        self._kept[name] = (len(hashes), len(hashes))
        return readings

    def _open_bar(self, label: str, monitor, hashes: list[str]) -> Tick | None:
        """The bar of one call: first a line on what the store already had, and the weights
        loaded (`_load_weights`) when there is anything to score."""
        todo = len(self.store.missing(monitor.key, hashes))
        if todo < len(hashes):
            note(self.progress, f"{label}: {len(hashes) - todo} of {len(hashes)} readings "
                                f"reused from the store; {todo} to score")
        if todo and self.engine.name == "local":
            self._load_weights(monitor.backend)
        return ticker(self.progress, label, todo)

    def _load_weights(self, backend) -> None:
        """Load a local model's weights before a bar opens, saying so: the bar's first update,
        rate and ETA then count scoring only."""
        if getattr(backend, "loaded", True):  # loaded, or a backend that loads nothing
            return
        note(self.progress, f"loading the weights of {backend.model_ref.name}")
        backend.model  # noqa: B018 - the property loads them

    def interrupt_line(self) -> str:
        """What an interrupt leaves: the readings of this service's calls in the store."""
        kept = sum(k for k, _ in self._kept.values())
        parts = ", ".join(f"{name} {k} of {n}" for name, (k, n) in self._kept.items())
        return (f"interrupted: {kept} readings kept in the store ({parts}); the same command "
                "resumes from them")

    def _score(self, samples, monitor, tick, chunk_size) -> dict[str, Verdict]:
        size = chunk_size or self.engine.chunk_size
        if self.engine.name == "ray":
            from calimon.scoring.engines.ray_engine import score_with_ray

            spec = self.remote_spec(monitor)
            readings, calls = score_with_ray(spec, samples, self.store, key=monitor.key,
                                             address=self.engine.address,
                                             workers=self.engine.workers, chunk_size=size,
                                             progress=tick)
            self.remote_calls += calls
            return readings
        from calimon.scoring.monitor import score_with_store

        return score_with_store(monitor, samples, self.store, chunk_size=size, progress=tick,
                                paced=chunk_size is None)

    def remote_spec(self, monitor) -> MonitorSpec:
        """The spec a Ray actor rebuilds ``monitor`` from (its prompt, readout, decoding and
        limit)."""
        spec = self.spec.with_monitor(monitor.prompt.name, monitor.readout,
                                      getattr(monitor, "decoding", "free"))
        if monitor.max_input_tokens != spec.max_input_tokens:
            from dataclasses import replace

            spec = replace(spec, max_input_tokens=monitor.max_input_tokens)
        return spec

    def close(self) -> None:
        """Release the backend the service built (`calimon.scoring.backends.release`: a shared one
        stays loaded for the process)."""
        if self._owns_backend and self._backend is not None:
            from calimon.scoring.backends import release

            release(self._backend)

    def __enter__(self) -> Scorer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
