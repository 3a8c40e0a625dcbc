"""`calimon curve`: score a benchmark, calibrate, sweep thresholds, write the run folder."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from calimon import __version__
from calimon.data.registry import DEFAULT_BENCHMARK, load_benchmark
from calimon.engines import MonitorSpec, Scorer, backend_options
from calimon.errors import InputError
from calimon.jsonio import dump_json, json_default
from calimon.models import resolve_model
from calimon.progress import Progress
from calimon.readings import status_counts, usable
from calimon.samples import Sample
from calimon.selection import dataset_hash, select, select_pairs
from calimon.store import RunStore

ALL_METHODS = ("temperature", "platt", "isotonic", "histogram", "beta")


@dataclass(frozen=True)
class CurveSettings:
    model: str = "smollm2-135m"
    benchmark: str = DEFAULT_BENCHMARK
    prompt: str = "direct"
    readout: str = "verdict"
    binary_prompts: tuple[str, ...] = ("direct", "evidence")
    binary_limit: int | None = None
    limit: int | None = None
    split: str | None = None
    fit_on: str = "calib"  # with a split: fit maps on "calib", or "crossfit" within the split
    calibration: str = "platt"
    methods: tuple[str, ...] = ALL_METHODS
    n_boot: int = 200
    seed: int = 0
    fars: tuple[float, ...] = (0.01, 0.05, 0.10)
    rate_thresholds: tuple[float, ...] = (0.5,)  # FAR / MR with exact intervals at these
    calibration_map: Path | None = None  # apply this saved map instead of fitting maps
    cost_miss: float = 1.0
    cost_false_alarm: float = 1.0
    backend: str = "transformers"  # a name in calimon.backends (or a plugin's)
    device: str = "auto"  # transformers backend
    batch_tokens: int = 8192  # transformers backend
    base_url: str | None = None  # http backend
    served_model: str | None = None  # http backend
    top_logprobs: int | None = None  # vllm and http backends
    concurrency: int = 8  # http backend
    kv_cache_gib: int | None = None  # vllm backend (whole GiB)
    store: Path = Path("runs/store.sqlite")
    out: Path | None = None


@dataclass(frozen=True)
class CurveRun:
    """A finished curve run: its folder, the curve.json summary and the model calls it took."""

    out: Path
    summary: dict = field(repr=False)
    model_calls: int = 0


def default_out(settings: CurveSettings) -> Path:
    """``runs/<timestamp>-<model>-<readout>``, the run folder when none is given."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{stamp}-{settings.model.replace('/', '_')}-{settings.readout}"


def _eval_and_fit_sets(samples: list[Sample], s: CurveSettings) -> tuple[list, list]:
    if s.split is None:
        return select(samples, limit=s.limit, seed=s.seed), []
    if s.fit_on not in ("calib", "crossfit"):
        raise InputError(f"expected 'calib' or 'crossfit', got {s.fit_on!r}", field="fit_on")
    use_calib = s.fit_on == "calib" and s.split != "calib"
    # --limit counts every scored sample: with calib maps, half of it is drawn from 'calib'
    fit_limit = s.limit // 2 if (s.limit is not None and use_calib) else s.limit
    eval_limit = s.limit - fit_limit if (s.limit is not None and use_calib) else s.limit
    evaluate = select(samples, s.split, limit=eval_limit, seed=s.seed)
    fit = select(samples, "calib", limit=fit_limit, seed=s.seed) if use_calib else []
    if not evaluate:
        raise InputError(f"benchmark {s.benchmark!r} has no labelled samples in split "
                         f"{s.split!r}", field="split")
    if use_calib and not fit:
        raise InputError(f"benchmark {s.benchmark!r} has no 'calib' split to fit calibration "
                         "maps on; use --fit-on crossfit", field="split")
    return evaluate, fit


def monitor_spec(s: CurveSettings) -> MonitorSpec:
    """The confidence monitor of a curve run, with its backend's options from the settings
    (the same factory `calimon score` uses)."""
    opts = backend_options(s.backend, device=s.device, batch_tokens=s.batch_tokens,
                           base_url=s.base_url, served_model=s.served_model,
                           top_logprobs=s.top_logprobs, concurrency=s.concurrency,
                           kv_cache_gib=s.kv_cache_gib)
    return MonitorSpec(model=s.model, backend=s.backend, prompt=s.prompt, readout=s.readout,
                       options=opts)


def run_curve(s: CurveSettings, progress: Progress | None = None,
              log: Callable[[str], None] = lambda m: None) -> CurveRun:
    """Score the benchmark through the run store, calibrate, sweep thresholds and write the run
    folder (`write_curve_outputs`); a missing model or bad backend option fails before any
    scoring."""
    resolved = resolve_model(s.model)  # first: a missing model fails before any other work
    spec = monitor_spec(s)  # then a bad backend name or option (no weights load here)
    backend = spec.build_backend()
    samples = load_benchmark(s.benchmark)
    evaluate, fit = _eval_and_fit_sets(samples, s)
    out = Path(s.out) if s.out else default_out(s)
    out.mkdir(parents=True, exist_ok=True)
    try:
        with RunStore(s.store) as store:
            scorer = Scorer(spec, store, progress=progress, backend=backend)
            main = scorer.monitor()
            readings = scorer.score(evaluate + fit, main, label=f"{s.prompt}/{s.readout}")
            binary_set = (select_pairs(evaluate, s.binary_limit, s.seed)
                          if s.binary_prompts else [])
            binary_readings = {}
            for name in s.binary_prompts:
                binary_readings[name] = scorer.score(binary_set, scorer.monitor(name, "binary"),
                                                     label=f"{name}/binary")
    finally:
        backend.close()  # e.g. vLLM's engine processes
    from calimon.curve_outputs import write_curve_outputs

    summary = write_curve_outputs(
        out, s, evaluate=evaluate, fit=fit, readings=readings, binary_set=binary_set,
        binary_readings=binary_readings,
        provenance={"model": resolved.name, "model_revision": resolved.revision,
                    "model_path": str(resolved.path), "backend": s.backend,
                    "prompt": s.prompt, "template_hash": main.key.template_hash,
                    "readout": s.readout, "benchmark": s.benchmark,
                    "dataset_hash": dataset_hash(evaluate + fit),
                    "calimon_version": __version__, "store": str(s.store),
                    "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")})
    return CurveRun(out=out, summary=summary, model_calls=backend.forward_calls)


__all__ = ["ALL_METHODS", "CurveRun", "CurveSettings", "Progress", "default_out", "dump_json",
           "json_default", "monitor_spec", "run_curve", "status_counts", "usable"]
