"""`BackendSettings`: the backend and engine flags every study shares, declared once and
composed into each study's settings (a study's settings class inherits them)."""

from __future__ import annotations

from dataclasses import dataclass

from calimon.backends.options import backend_options
from calimon.engines.service import Engine
from calimon.engines.spec import MonitorSpec


@dataclass(frozen=True, kw_only=True)
class BackendSettings:
    """Which backend scores (with its options) and where its passes run."""

    backend: str = "transformers"  # a name in calimon.backends (or a plugin's)
    device: str = "auto"  # transformers backend
    batch_tokens: int = 8192  # transformers backend
    threads: int | None = None  # transformers backend: torch CPU threads
    base_url: str | None = None  # http backend
    served_model: str | None = None  # http backend
    top_logprobs: int | None = None  # vllm and http backends
    concurrency: int = 8  # http backend
    kv_cache_gib: int | None = None  # vllm backend (whole GiB)
    engine: str = "local"  # local, or ray
    ray_address: str | None = None  # ray engine: an existing cluster (None: a local one)
    workers: int | None = None  # ray engine: actors

    def monitor_spec(self, model: str, prompt: str, readout: str) -> MonitorSpec:
        """The spec of a monitor of ``model`` on this backend, options checked."""
        opts = backend_options(self.backend, device=self.device, batch_tokens=self.batch_tokens,
                               base_url=self.base_url, served_model=self.served_model,
                               top_logprobs=self.top_logprobs, concurrency=self.concurrency,
                               kv_cache_gib=self.kv_cache_gib, threads=self.threads)
        return MonitorSpec(model=model, backend=self.backend, prompt=prompt, readout=readout,
                           options=opts)

    def engine_settings(self, chunk_size: int = 32) -> Engine:
        return Engine(self.engine, self.ray_address, self.workers, chunk_size)
