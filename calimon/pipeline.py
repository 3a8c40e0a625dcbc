"""`calimon curve`: score a benchmark, calibrate, sweep thresholds, write the run folder."""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from calimon import __version__
from calimon.data.registry import DEFAULT_BENCHMARK, load_benchmark
from calimon.engines import MonitorSpec, backend_options
from calimon.errors import InputError
from calimon.models import resolve_model
from calimon.monitor import Monitor, score_with_store
from calimon.prompts import load_prompt
from calimon.samples import Sample
from calimon.selection import dataset_hash, select_pairs
from calimon.store import RunStore
from calimon.verdict import Verdict

Progress = Callable[[str, int], Callable[[int], None]]
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
    out: Path
    summary: dict = field(repr=False)
    model_calls: int = 0


def default_out(settings: CurveSettings) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{stamp}-{settings.model.replace('/', '_')}-{settings.readout}"


def _eval_and_fit_sets(samples: list[Sample], s: CurveSettings) -> tuple[list, list]:
    labelled = [x for x in samples if x.label is not None]
    if s.split is None:
        return select_pairs(labelled, s.limit, s.seed), []
    evaluate = [x for x in labelled if x.split == s.split]
    if s.fit_on not in ("calib", "crossfit"):
        raise InputError(f"expected 'calib' or 'crossfit', got {s.fit_on!r}", field="fit_on")
    use_calib = s.fit_on == "calib" and s.split != "calib"
    fit = [x for x in labelled if x.split == "calib"] if use_calib else []
    if not evaluate:
        raise InputError(f"benchmark {s.benchmark!r} has no labelled samples in split "
                         f"{s.split!r}", field="split")
    if use_calib and not fit:
        raise InputError(f"benchmark {s.benchmark!r} has no 'calib' split to fit calibration "
                         "maps on; use --fit-on crossfit", field="split")
    # --limit counts every scored sample: with calib maps, half of it is drawn from 'calib'
    fit_limit = s.limit // 2 if (s.limit is not None and use_calib) else s.limit
    eval_limit = s.limit - fit_limit if (s.limit is not None and use_calib) else s.limit
    return select_pairs(evaluate, eval_limit, s.seed), select_pairs(fit, fit_limit, s.seed)


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
    resolved = resolve_model(s.model)  # first: a missing model fails before any other work
    spec = monitor_spec(s)  # then a bad backend name or option (no weights load here)
    backend = spec.build_backend()
    samples = load_benchmark(s.benchmark)
    evaluate, fit = _eval_and_fit_sets(samples, s)
    out = Path(s.out) if s.out else default_out(s)
    out.mkdir(parents=True, exist_ok=True)
    try:
        with RunStore(s.store) as store:
            main = spec.build(backend)
            readings = _score(main, evaluate + fit, store, progress, f"{s.prompt}/{s.readout}")
            binary_set = (select_pairs(evaluate, s.binary_limit, s.seed)
                          if s.binary_prompts else [])
            binary_readings = {}
            for name in s.binary_prompts:
                mon = Monitor(backend, load_prompt(name), "binary")
                binary_readings[name] = _score(mon, binary_set, store, progress,
                                               f"{name}/binary")
    finally:
        close = getattr(backend, "close", None)  # e.g. vLLM's engine processes
        if callable(close):
            close()
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


def _score(monitor: Monitor, samples: list[Sample], store: RunStore, progress: Progress | None,
           label: str) -> dict[str, Verdict]:
    unique = {x.transcript_hash for x in samples}
    todo = len(store.missing(monitor.key, list(unique)))
    tick = progress(label, todo) if (progress and todo) else None
    return score_with_store(monitor, samples, store, progress=tick)


def status_counts(samples: list[Sample], readings: dict[str, Verdict]) -> dict[str, int]:
    return dict(Counter(readings[x.transcript_hash].status if x.transcript_hash in readings
                        else "missing" for x in samples))


def usable(samples: list[Sample], readings: dict[str, Verdict]):
    """Samples with a score, as arrays; the rest are reported, never scored as 0."""
    kept = [x for x in samples if x.transcript_hash in readings
            and readings[x.transcript_hash].scored]
    p = np.array([readings[x.transcript_hash].p_raw for x in kept], dtype=float)
    y = np.array([bool(x.label) for x in kept])
    return kept, p, y


def json_default(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def dump_json(obj, path: Path) -> None:
    path.write_text(json.dumps(obj, indent=1, default=json_default, allow_nan=False) + "\n")
