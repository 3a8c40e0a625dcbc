"""`calimon curve`: score a benchmark, calibrate, sweep thresholds, write the run folder."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from calimon import __version__
from calimon.curve_result import CurveResult
from calimon.data.registry import load_benchmark
from calimon.errors import InputError
from calimon.jsonio import dump_json, json_default
from calimon.numerics.class_support import MIN_PER_CLASS_CALIBRATION, MIN_PER_CLASS_CURVE
from calimon.progress import Progress, note
from calimon.prompts import load_prompt
from calimon.readings import status_counts, usable
from calimon.samples import Sample
from calimon.score_readout import ScoreReadout, is_score_readout
from calimon.scoring.backends import check_backend_model, model_for, release
from calimon.scoring.engines import MonitorSpec, RunSettings, Scorer, api_usage
from calimon.scoring.store import RunStore
from calimon.selection import dataset_hash, select, select_pairs
from calimon.studies.curve.format_check import FREE_CHECK, check_free_format
from calimon.verdict import Verdict

ALL_METHODS = ("temperature", "platt", "isotonic", "histogram", "beta")


@dataclass(frozen=True, kw_only=True)
class CurveSettings(RunSettings):
    """A curve run: the monitor, benchmark, budget, seed, store and backend/engine flags of
    `RunSettings`, plus which split is judged (``split``; None: every sample, cross-fitted),
    where the maps are fitted (``fit_on``), the binary-protocol points (each prompt under each
    of ``binary_decodings``: ``free``, the paper's protocol, and/or ``json``, the schema
    enforced; ``check_free_format``: the free protocol tried on `FREE_CHECK` samples first,
    see `score_binary`), the calibration maps, the bootstrap, the operating points and the
    output folder."""

    binary_prompts: tuple[str, ...] = ("direct", "evidence")
    binary_decodings: tuple[str, ...] = ("free",)
    binary_limit: int | None = None
    binary_scores: tuple[str, ...] = ()  # a score readout's binary points: booleans it holds
    check_free_format: bool = True  # try the free protocol on FREE_CHECK samples first
    split: str | None = None
    fit_on: str = "calib"  # with a split: fit maps on "calib", or "crossfit" within the split
    calibration: str = "platt"
    methods: tuple[str, ...] = ALL_METHODS
    n_boot: int = 200
    fars: tuple[float, ...] = (0.01, 0.05, 0.10)
    rate_thresholds: tuple[float, ...] = (0.5,)  # FAR / MR with exact intervals at these
    calibration_map: Path | None = None  # apply this saved map instead of fitting maps
    allow_inverted: bool = False  # keep a map fitted decreasing (recorded in curve.json)
    cost_miss: float = 1.0
    cost_false_alarm: float = 1.0
    out: Path | None = None


@dataclass(frozen=True)
class CurveRun:
    """What `run_curve` returns: the run folder, the summary written to its curve.json (as
    JSON values), the model calls the run made (0 when the store had every reading) and the
    typed result (`calimon.curve_result.CurveResult`)."""

    out: Path
    summary: dict = field(repr=False)
    model_calls: int = 0
    result: CurveResult | None = field(default=None, repr=False)


def default_out(settings: CurveSettings) -> Path:
    """A new run folder under runs/, named by the time, the model and the readout."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    if is_score_readout(settings.readout):
        name = ScoreReadout.parse(settings.readout).name
        return Path("runs") / f"{stamp}-score-{name}"
    return Path("runs") / f"{stamp}-{settings.model.replace('/', '_')}-{settings.readout}"


def _no_labels(s: CurveSettings) -> InputError:
    """Why a benchmark gave nothing to draw a curve on, with the Inspect hint only for a log."""
    hint = (" (an Inspect log: add ?scorer=NAME&positive=VALUE, see docs/inspect.md)"
            if ".eval" in s.benchmark or "?" in s.benchmark else "")
    return InputError(f"benchmark {s.benchmark!r} has no labelled samples; a curve needs "
                      f"labels{hint}", field="benchmark")


def _eval_and_fit_sets(samples: list[Sample], s: CurveSettings) -> tuple[list, list]:
    """The evaluated samples and the ``calib`` samples maps are fitted on (none when maps are
    cross-fitted or a saved map is applied: a map-only run scores only the rows it applies the
    map to). Under ``--limit``, the set a map is fitted on holds 20 of each class when the
    limit allows it, the evaluated set 10 (`select_pairs`, ``min_per_class``)."""
    if not samples:
        raise InputError(f"benchmark {s.benchmark!r} holds no samples (an empty file?)",
                         field="benchmark")
    fitted_here = s.calibration_map is None  # cross-fitted within the evaluated set
    if s.split is None:
        evaluate = select(samples, limit=s.limit, seed=s.seed,
                          min_per_class=_needs(fitted_here))
        if not evaluate:
            raise _no_labels(s)
        return evaluate, []
    if s.fit_on not in ("calib", "crossfit"):
        raise InputError(f"expected 'calib' or 'crossfit', got {s.fit_on!r}", field="fit_on")
    use_calib = s.fit_on == "calib" and s.split != "calib" and s.calibration_map is None
    # --limit counts every scored sample: with calib maps, half of it is drawn from 'calib'
    fit_limit = s.limit // 2 if (s.limit is not None and use_calib) else s.limit
    eval_limit = s.limit - fit_limit if (s.limit is not None and use_calib) else s.limit
    evaluate = select(samples, s.split, limit=eval_limit, seed=s.seed,
                      min_per_class=_needs(fitted_here and not use_calib))
    fit = (select(samples, "calib", limit=fit_limit, seed=s.seed, min_per_class=_needs(True))
           if use_calib else [])
    if not evaluate:
        raise InputError(f"benchmark {s.benchmark!r} has no labelled samples in split "
                         f"{s.split!r}", field="split")
    if use_calib and not fit:
        raise InputError(f"benchmark {s.benchmark!r} has no 'calib' split to fit calibration "
                         "maps on; use --fit-on crossfit", field="split")
    return evaluate, fit


def check_transcripts(samples: list[Sample], s) -> None:
    """Refuse a model's readout on samples that hold no transcript (a CSV of scores only)."""
    bare = next((x for x in samples if x.meta.get("no_transcript") is True), None)
    if bare is not None:
        raise InputError(f"benchmark {s.benchmark!r} holds scores, not transcripts (sample "
                         f"{bare.id!r}): read them with --readout score:NAME, not a model's "
                         f"{s.readout!r}", field="readout")


def _needs(fits_a_map: bool) -> int:
    """Samples of each class a selected set should hold: a map's rule, or a curve's."""
    return MIN_PER_CLASS_CALIBRATION if fits_a_map else MIN_PER_CLASS_CURVE


def monitor_spec(s: CurveSettings) -> MonitorSpec:
    """The confidence monitor of a curve run, with its backend's options from the settings
    (the same factory `calimon score` uses)."""
    return s.spec()


def _distinct(samples: list[Sample]) -> int:
    """Readings a monitor needs for ``samples``: one per distinct transcript."""
    return len({x.transcript_hash for x in samples})


def store_line(timing: dict) -> str | None:
    """The first line of a run answered wholly or partly from the store (None when every
    reading was computed now)."""
    needed, scored = timing.get("readings"), timing.get("scored")
    if not needed or scored is None or scored >= needed:
        return None
    return (f"{needed - scored} of {needed} readings reused from the store; "
            f"{timing.get('model_calls', 0)} model calls")


def binary_label(prompt: str, decoding: str) -> str:
    """The name of a binary point: the prompt, and the decoding when it is not ``free``
    (``direct``, ``direct (json)``); drawn as ``binary/<label>``."""
    return prompt if decoding == "free" else f"{prompt} ({decoding})"


def binary_monitors(s: CurveSettings) -> list[tuple[str, str]]:
    """(prompt, decoding) of every binary point of a run, checked (the decoding, and that each
    prompt's config exists) before any scoring."""
    from calimon.decoding import check_decoding

    for decoding in s.binary_decodings:
        check_decoding(decoding, "binary")
    for name in s.binary_prompts:
        load_prompt(name)
    return [(name, d) for name in s.binary_prompts for d in dict.fromkeys(s.binary_decodings)]


@dataclass
class BinaryScores:
    """The binary protocol of a curve run: the samples it reads, the readings of each point
    drawn (by label), their template hashes, the free-format checks that drew no point, and
    how many readings were needed and scored now."""

    samples: list[Sample]
    readings: dict[str, dict[str, Verdict]] = field(default_factory=dict)
    template_hashes: dict[str, str] = field(default_factory=dict)
    checks: list[dict] = field(default_factory=list)
    needed: int = 0
    scored: int = 0


def score_binary(scorer: Scorer, s: CurveSettings, evaluate: list[Sample]) -> BinaryScores:
    """Score each binary point of ``s`` on whole pairs of ``evaluate`` (at most
    ``binary_limit``). With ``check_free_format``, whether the model follows the free format
    is decided first, on a few short replies, and remembered in the store
    (`calimon.studies.curve.format_check`): when it does not, no point is drawn and the rest is
    not scored (`binary_check_line` says so once)."""
    out = BinaryScores(select_pairs(evaluate, s.binary_limit, s.seed)
                       if s.binary_prompts else [])
    for name, decoding in binary_monitors(s):
        monitor = scorer.monitor(name, "binary", decoding)
        label = binary_label(name, decoding)
        wanted = out.samples
        if (decoding == "free" and s.check_free_format and len(wanted) > FREE_CHECK
                and scorer.todo(wanted, monitor)):
            check = check_free_format(scorer, monitor, wanted, s.seed,
                                      f"{label}/binary (format check)")
            if not check.follows:
                out.checks.append(check.record(f"binary/{label}"))
                continue
        out.readings[label] = _scored(out, scorer, wanted, monitor, f"{label}/binary")
        out.needed += _distinct(wanted)
        out.template_hashes[label] = monitor.key.template_hash
    return out


def _scored(out: BinaryScores, scorer: Scorer, samples: list[Sample], monitor, label: str
            ) -> dict[str, Verdict]:
    out.scored += scorer.todo(samples, monitor)
    return scorer.score(samples, monitor, label=label)


def binary_check_line(summary: dict) -> str | None:
    """The line of a run whose free binary protocol drew no point (None when every point was
    drawn): which, on how many replies, and the flags that choose otherwise."""
    skipped = [c for c in summary.get("binary_checks") or [] if not c.get("drawn")]
    if not skipped:
        return None
    names = ", ".join(c["name"] for c in skipped)
    return (f"{names}: this model does not follow the free binary format (none of "
            f"{skipped[0]['tried']} short replies gave the boolean; the run store keeps this "
            "verdict for the model and template), so no point is drawn; --binary-decoding json "
            "holds the answer to the prompt's JSON schema (--binary-decoding free scores every "
            "sample anyway)")


def plan_line(s: CurveSettings, evaluate: list, fit: list, todo: int) -> str:
    """What a run is about to score, said before the first forward pass: the samples judged
    and fitted on, and how many transcripts the monitor reads (the rest are in the store); the
    bar that follows gives the time left once the first is scored."""
    where = f"split {s.split!r}" if s.split else "all splits (cross-fitted)"
    fitted = f", {len(fit)} on 'calib' to fit the maps on" if fit else ""
    whole = "" if s.limit else " (every labelled sample: --limit N scores fewer)"
    if s.limit and len(evaluate) + len(fit) < s.limit:
        whole = (f" (--limit {s.limit} takes whole pairs, balanced over cells: "
                 f"{len(evaluate) + len(fit)} here)")
    left = (f"{todo} to score with {s.prompt}/{s.readout}, the time left on the bar after the "
            "first" if todo else "every reading in the store")
    return f"curve: {len(evaluate)} samples judged on {where}{fitted}{whole}; {left}"


def _run_recorded(s: CurveSettings, progress: Progress | None) -> CurveRun:
    """`run_curve` of a score readout: no model (`calimon.studies.curve.recorded`)."""
    from calimon.run_folder import curve_json_doc
    from calimon.studies.curve.recorded import run_recorded_curve

    evaluate, fit = _eval_and_fit_sets(load_benchmark(s.benchmark, progress=progress), s)
    out = Path(s.out) if s.out else default_out(s)
    result = run_recorded_curve(s, evaluate, fit, out, progress)
    return CurveRun(out=out, summary=curve_json_doc(result), model_calls=0, result=result)


def run_curve(s: CurveSettings, progress: Progress | None = None,
              log: Callable[[str], None] = lambda m: None, *, backend=None) -> CurveRun:
    """`calimon curve`: score the evaluated (and fit) samples through the scoring service
    (local or Ray engine; the store's readings are reused), score the binary-protocol
    prompts on whole pairs, then calibrate, sweep thresholds and write the run folder.

    ``backend``: an already-built backend of the settings' model to score with (the caller
    keeps it); default: the process's shared one for the settings (`build_backend`). A
    ``score:NAME`` readout reads the scores the benchmark holds instead, with no model
    (`calimon.studies.curve.recorded`)."""
    if is_score_readout(s.readout):
        return _run_recorded(s, progress)
    if s.binary_scores:
        raise InputError("--binary-score reads booleans the data holds, for a score:NAME "
                         "readout; a model's binary points come from --binary-prompt",
                         field="binary_score")
    spec = monitor_spec(s)
    load_prompt(s.prompt)  # an unknown prompt, decoding or model fails before any other work:
    binary_monitors(s)  # no weights converted, no benchmark built
    resolved = model_for(spec)
    owned = backend is None
    if owned:
        backend = spec.build_backend()  # then a bad backend name or option (no weights yet)
    else:
        check_backend_model(backend, resolved)
    engine = s.engine_settings()
    usage0 = api_usage(backend)
    try:
        samples = load_benchmark(s.benchmark, progress=progress)
        check_transcripts(samples, s)
        evaluate, fit = _eval_and_fit_sets(samples, s)
        out = Path(s.out) if s.out else default_out(s)
        out.mkdir(parents=True, exist_ok=True)
        with RunStore(s.store) as store:
            scorer = Scorer(spec, store, engine=engine, progress=progress, backend=backend)
            started = time.perf_counter()  # the scoring phase, model load included
            main = scorer.monitor()
            todo, needed = scorer.todo(evaluate + fit, main), _distinct(evaluate + fit)
            note(progress, plan_line(s, evaluate, fit, todo))
            readings = scorer.score(evaluate + fit, main, label=f"{s.prompt}/{s.readout}")
            from calimon.studies.curve.compute import check_inversion_early

            check_inversion_early(s, evaluate=evaluate, fit=fit, readings=readings)
            binary = score_binary(scorer, s, evaluate)
            model_calls = scorer.model_calls
            timing = {"scoring_seconds": time.perf_counter() - started,
                      "scored": todo + binary.scored, "readings": needed + binary.needed,
                      "model_calls": model_calls, **api_usage(backend, since=usage0)}
    finally:
        if owned:
            release(backend)  # a shared backend stays loaded; calimon.scoring.backends.drop_backends
    from calimon.run_folder import curve_json_doc
    from calimon.scoring.windows import truncation_record
    from calimon.studies.curve.outputs import write_curve_run

    result = write_curve_run(
        out, s, evaluate=evaluate, fit=fit, readings=readings, binary_set=binary.samples,
        binary_readings=binary.readings, binary_checks=binary.checks, timing=timing,
        provenance={"model": resolved.name, "model_revision": resolved.revision,
                    "model_path": str(resolved.path), "backend": s.backend,
                    "prompt": s.prompt, "defenses": list(s.defense),
                    "template_hash": main.key.template_hash,
                    "max_input_tokens": (getattr(main, "max_input_tokens", None) or getattr(
                        getattr(resolved, "config", None), "max_input_tokens", None)),
                    "truncation": truncation_record(main),
                    "readout": s.readout, "binary_template_hashes": binary.template_hashes,
                    "benchmark": s.benchmark,
                    "dataset_hash": dataset_hash(evaluate + fit),
                    "calimon_version": __version__, "store": str(s.store),
                    **({"head_forced": main.forced} if getattr(main, "forced", None) else {}),
                    "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")})
    return CurveRun(out=out, summary=curve_json_doc(result), model_calls=model_calls,
                    result=result)


__all__ = ["ALL_METHODS", "FREE_CHECK", "BinaryScores", "CurveRun", "CurveSettings", "Progress",
           "binary_check_line", "binary_label", "score_binary", "store_line",
           "binary_monitors", "default_out", "dump_json",
           "json_default", "monitor_spec", "run_curve", "status_counts", "usable"]
