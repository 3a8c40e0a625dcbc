"""The settings every study shares, declared once and composed into each study's settings:
`BackendSettings` (which backend scores, with its options, and where its passes run) and
`RunSettings` (the monitor, the benchmark, the sample budget, the seed and the store, on top of
the backend flags). `CurveSettings`, `SpanSettings`, `RobustnessSettings` and
`HeadTrainSettings` inherit `RunSettings` and add only their own fields."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from calimon.backends.options import backend_options
from calimon.defaults import (
    DEFAULT_BENCHMARK,
    DEFAULT_MODEL,
    DEFAULT_PROMPT,
    DEFAULT_READOUT,
    DEFAULT_SEED,
    DEFAULT_STORE,
)
from calimon.engines.service import Engine
from calimon.engines.spec import MonitorSpec
from calimon.errors import InputError


@dataclass(frozen=True, kw_only=True)
class BackendSettings:
    """Which backend scores (with its options) and where its passes run."""

    backend: str = "transformers"  # a name in calimon.backends (or a plugin's)
    device: str = "auto"  # transformers backend
    batch_tokens: int = 8192  # transformers backend
    threads: int | None = None  # transformers backend: torch CPU threads
    base_url: str | None = None  # http and chat backends
    served_model: str | None = None  # http and chat backends
    top_logprobs: int | None = None  # vllm and http backends
    concurrency: int = 8  # http and chat backends
    prefill: str | None = None  # chat backend: none or continue_final_message
    kv_cache_gib: int | None = None  # vllm backend (whole GiB)
    engine: str = "local"  # local, or ray
    ray_address: str | None = None  # ray engine: an existing cluster (None: a local one)
    workers: int | None = None  # ray engine: actors
    offline: bool = False  # readings from the run store only; the backend is never called

    def monitor_spec(self, model: str, prompt: str, readout: str) -> MonitorSpec:
        """The spec of a monitor of ``model`` on this backend, options checked."""
        opts = backend_options(self.backend, device=self.device, batch_tokens=self.batch_tokens,
                               base_url=self.base_url, served_model=self.served_model,
                               top_logprobs=self.top_logprobs, concurrency=self.concurrency,
                               kv_cache_gib=self.kv_cache_gib, threads=self.threads,
                               prefill=self.prefill)
        return MonitorSpec(model=model, backend=self.backend, prompt=prompt, readout=readout,
                           options=opts, offline=self.offline)

    def engine_settings(self, chunk_size: int = 32) -> Engine:
        """The engine these flags name, committing ``chunk_size`` samples at a time."""
        return Engine(self.engine, self.ray_address, self.workers, chunk_size)


@dataclass(frozen=True, kw_only=True)
class RunSettings(BackendSettings):
    """What every scoring run names: the monitor (model, prompt, readout), the benchmark, at
    most ``limit`` samples (whole pairs), the seed of every random choice, and the run store
    its readings go to, and the prompt defenses (`calimon.defenses`; names, a comma-separated
    string or None, kept in canonical order), and ``force`` (an artifact made for another
    monitor used anyway, recorded: a probe head here, a calibration map in a curve run); the
    backend and engine flags come from `BackendSettings`."""

    model: str = DEFAULT_MODEL
    benchmark: str = DEFAULT_BENCHMARK
    prompt: str = DEFAULT_PROMPT
    readout: str = DEFAULT_READOUT
    limit: int | None = None
    seed: int = DEFAULT_SEED
    store: Path = DEFAULT_STORE
    defense: tuple[str, ...] = ()
    max_input_tokens: int | None = None  # None: the model's own limit (its config)
    force: bool = False  # use an artifact made for another monitor anyway (recorded)

    def __post_init__(self):
        from calimon.defenses import parse_defenses

        object.__setattr__(self, "defense", parse_defenses(self.defense))
        limit = self.max_input_tokens
        if limit is not None and (isinstance(limit, bool) or limit < 1):
            raise InputError(f"expected a token count >= 1, got {limit!r}",
                             field="max_input_tokens")

    def spec(self, prompt: str | None = None, readout: str | None = None) -> MonitorSpec:
        """The spec of this run's monitor (or of another prompt/readout of the same model)."""
        spec = self.monitor_spec(self.model, prompt or self.prompt, readout or self.readout)
        if self.max_input_tokens:
            spec = replace(spec, max_input_tokens=self.max_input_tokens)
        if self.force:
            spec = replace(spec, force=True)
        return replace(spec, defenses=self.defense) if self.defense else spec
