"""``calimon compare RUN...``: a leaderboard of monitors. Several curve runs (models x readouts
x prompts) on one MR/FAR figure and one table.

Each run is read from its folder's ``curve.json`` only (``calimon.report.data.read_result``);
nothing is recomputed from scores. Per run: model, readout, prompt, benchmark and split, the
scored count, AUROC raw and calibrated, MR at FAR <= 5% and <= 10% (the run's own operating
points; for a run made with other ``--far`` values, the same rule applied to its stored curve),
ECE after calibration, each binary-protocol point (MR, FAR, parse failures) and samples per
second (the run's ``timing``: transcripts the model scored / wall time of the scoring phase,
model load included; n/a when the run records no timing or took every reading from the store).
A missing value is None (printed n/a), never 0.

A run below the class-size rule (``calimon.numerics.class_support``) has no curve: it is listed with
its reason and its rates at fixed thresholds, and not drawn. Runs scored on different samples
(different ``dataset_hash``) are compared only under a warning (``same_samples`` False in the
JSON); runs of one benchmark on different splits get a warning of their own.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any, ClassVar

from calimon.curve_result import BinaryPoint, Counts, CurveResult, Timing
from calimon.errors import InputError
from calimon.numerics.curves import Curve

COMPARE_FARS = (0.05, 0.10)
HEADERS = ("run", "model", "readout", "prompt", "benchmark/split", "n scored", "AUROC raw",
           "AUROC cal", "MR@FAR<=5%", "MR@FAR<=10%", "ECE cal", "samples/s")
BINARY_HEADERS = ("run", "binary prompt", "n", "MR", "FAR", "parse failures")


@dataclass(frozen=True)
class RunEntry:
    """One run of the comparison, as its ``curve.json`` states it (None: not recorded or not
    estimable). ``curve``: the overall calibrated curve, None for a run without one
    (``reason`` says why); ``mr_at_far``: (FAR bound, MR) pairs for ``COMPARE_FARS``."""

    path: Path
    label: str
    model: str | None
    readout: str | None
    prompt: str | None
    benchmark: str | None
    split: str | None
    dataset_hash: str | None
    n_scored: int | None
    n_pos: int | None
    n_neg: int | None
    auroc_raw: float | None
    auroc: float | None
    mr_at_far: tuple[tuple[float, float | None], ...]
    calibration: str | None
    ece_raw: float | None
    ece: float | None
    binary: tuple[BinaryPoint, ...]
    timing: dict | None
    samples_per_s: float | None
    reason: str | None = None
    rates: tuple[dict, ...] = ()
    curve: Curve | None = field(default=None, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN as None); ``curve`` says whether the run is drawn."""
        return {"path": str(self.path), "label": self.label, "model": self.model,
                "readout": self.readout, "prompt": self.prompt, "benchmark": self.benchmark,
                "split": self.split, "dataset_hash": self.dataset_hash,
                "n_scored": self.n_scored, "n_pos": self.n_pos, "n_neg": self.n_neg,
                "auroc_raw": self.auroc_raw, "auroc": self.auroc,
                "mr_at_far": {f"{a:g}": mr for a, mr in self.mr_at_far},
                "calibration": self.calibration, "ece_raw": self.ece_raw, "ece": self.ece,
                "binary": [{**b.to_dict(), "prompt": b.name.removeprefix("binary/")}
                           for b in self.binary],
                "timing": self.timing, "samples_per_s": self.samples_per_s,
                "curve": self.curve is not None, "reason": self.reason,
                "rates_at_thresholds": list(self.rates)}


@dataclass(frozen=True)
class Comparison:
    """What ``compare_runs`` found: the runs in the order given, the warnings (different
    samples, splits), ``same_samples`` (True, False, or None when a run records no dataset
    hash) and the files written (name -> path)."""

    runs: tuple[RunEntry, ...]
    warnings: tuple[str, ...]
    same_samples: bool | None
    files: dict[str, str] = field(default_factory=dict)

    headers: ClassVar[tuple[str, ...]] = HEADERS
    binary_headers: ClassVar[tuple[str, ...]] = BINARY_HEADERS

    def title(self) -> str:
        """The comparison figure's title (see :func:`figure_title`)."""
        return figure_title(self)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"runs": [r.to_dict() for r in self.runs], "warnings": list(self.warnings),
                "same_samples": self.same_samples, "files": dict(self.files)}

    def table_rows(self) -> list[list[str]]:
        """The leaderboard's cells (``headers``): see `table_rows`."""
        return table_rows(self)

    def binary_rows(self) -> list[list[str]]:
        """The binary points' cells (``binary_headers``): see `binary_rows`."""
        return binary_rows(self)

    def no_curve_lines(self) -> list[str]:
        """The runs without a curve: see `no_curve_lines`."""
        return no_curve_lines(self)


def fmt(x: Any, digits: int = 3) -> str:
    """A figure as the tables print it: ``digits`` decimals, n/a for None or NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _f(x: Any) -> float | None:
    """A number of curve.json as a float; None for null, NaN or a non-number."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return None if math.isnan(x) else float(x)


def _mr_at(result: CurveResult, curve: Curve | None, alpha: float) -> float | None:
    """The MR of the run's ``FAR<=alpha`` operating point; for a run made with other FAR
    bounds, ``Curve.at_far`` (the rule that wrote those points) on its stored curve."""
    if curve is None:
        return None
    point = result.point(f"FAR<={100 * alpha:.4g}%")
    if point is not None:
        return _f(point.mr)
    return float(curve.at_far(alpha).mr)


def _curve(result: CurveResult) -> tuple[Curve | None, str | None]:
    """The overall curve, or None and why (the class-size rule, or an undefined curve)."""
    if not result.has_curve:
        return None, result.support.reason or "below the class-size rule"
    if result.overall is None:
        return None, "curve.json holds no overall curve"
    curve = Curve.from_data(result.overall)
    if not curve.defined:
        return None, curve.undefined_reason
    return curve, None


def _rate(timing: Timing | None) -> float | None:
    """Transcripts scored by the model per second of the scoring phase; None when nothing was
    scored (every reading from the store) or no timing is recorded."""
    if timing is None:
        return None
    scored, seconds = _f(timing.scored), _f(timing.scoring_seconds)
    if not scored or not seconds or scored <= 0 or seconds <= 0:
        return None
    return scored / seconds


def read_run(run: str | Path) -> RunEntry:
    """One run folder's entry (module docstring); raises InputError naming ``curve.json`` when
    it is missing or not a curve run's."""
    from calimon.report.data import read_result

    run_dir = Path(run)
    path = run_dir / "curve.json"
    if not path.is_file():
        raise InputError("no such file (write a run folder with `calimon curve --out DIR`)",
                         path=str(path))
    r = read_result(run_dir)[0]
    prov, counts = r.provenance, r.counts or Counts()
    after = r.metrics_after
    before = r.calibration.metrics_before if r.calibration else None
    curve, reason = _curve(r)
    return RunEntry(
        path=run_dir, label=run_dir.name, model=prov.model, readout=prov.readout,
        prompt=prov.prompt, benchmark=prov.benchmark, split=r.settings.split,
        dataset_hash=prov.dataset_hash, n_scored=counts.scored, n_pos=counts.n_pos,
        n_neg=counts.n_neg, auroc_raw=_f(r.auroc_raw) if curve else None,
        auroc=_f(r.auroc) if curve else None,
        mr_at_far=tuple((a, _mr_at(r, curve, a)) for a in COMPARE_FARS),
        calibration=r.calibration_method, ece_raw=_f(before.ece) if before else None,
        ece=_f(after.ece) if after else None, binary=r.binary_points,
        timing=r.timing.as_dict() if r.timing else None, samples_per_s=_rate(r.timing),
        reason=reason, rates=tuple(x.to_dict() for x in r.rates_at_thresholds), curve=curve)


def _labels(runs: list[RunEntry]) -> list[str]:
    """``model prompt/readout``, with the folder name where two runs would share one."""
    base = [f"{r.model} {r.prompt}/{r.readout}" for r in runs]
    labels = [b if base.count(b) == 1 else f"{b} ({r.path.name})"
              for b, r in zip(base, runs, strict=True)]
    return [lab if labels.count(lab) == 1 else f"{lab} #{i + 1}"
            for i, lab in enumerate(labels)]


def _split(r: RunEntry) -> str:
    return r.split or "all"


def sample_warnings(runs: tuple[RunEntry, ...]) -> tuple[list[str], bool | None]:
    """(warning lines, same_samples): runs scored on different samples (dataset hashes), runs
    that record no hash, and runs of one benchmark on different splits."""
    warnings = [f"{r.label}: curve.json records no dataset_hash; which samples it scored "
                "cannot be checked" for r in runs if not r.dataset_hash]
    hashes = {r.dataset_hash for r in runs if r.dataset_hash}
    same = False if len(hashes) > 1 else (None if warnings else True)
    if len(hashes) > 1:
        groups: dict[str, list[RunEntry]] = {}
        for r in runs:
            if r.dataset_hash:
                groups.setdefault(r.dataset_hash, []).append(r)
        warnings.append("these runs were NOT scored on the same samples, so their figures are "
                        "not a like-for-like comparison: " + "; ".join(
                            f"dataset_hash {h} ({group[0].benchmark} split {_split(group[0])})"
                            f": {', '.join(r.label for r in group)}"
                            for h, group in groups.items()))
    by_bench: dict[str | None, list[RunEntry]] = {}
    for r in runs:
        by_bench.setdefault(r.benchmark, []).append(r)
    for bench, group in by_bench.items():
        if len({_split(r) for r in group}) > 1:
            warnings.append(f"same benchmark {bench}, different splits: " + ", ".join(
                f"{r.label}: {_split(r)}" for r in group))
    return warnings, same


def compare_runs(runs: list[str | Path]) -> Comparison:
    """Read every run folder (``read_run``) and check that they scored the same samples."""
    from dataclasses import replace

    if not runs:
        raise InputError("expected at least one run folder, got none", field="runs")
    entries = [read_run(r) for r in runs]
    entries = [replace(e, label=lab) for e, lab in zip(entries, _labels(entries), strict=True)]
    warnings, same = sample_warnings(tuple(entries))
    return Comparison(tuple(entries), tuple(warnings), same)


def table_rows(c: Comparison) -> list[list[str]]:
    """The leaderboard's cells (``HEADERS``), figures formatted, n/a where missing."""
    return [[r.label, fmt(r.model), fmt(r.readout), fmt(r.prompt),
             f"{fmt(r.benchmark)}/{_split(r)}", fmt(r.n_scored), fmt(r.auroc_raw),
             fmt(r.auroc), *(fmt(mr) for _, mr in r.mr_at_far), fmt(r.ece),
             fmt(r.samples_per_s, 2)] for r in c.runs]


def binary_rows(c: Comparison) -> list[list[str]]:
    """One row per run and binary prompt (``BINARY_HEADERS``): MR and FAR over parsed
    replies, and the parse failures."""
    return [[r.label, b.name.removeprefix("binary/"),
             str(b.tp + b.fp + b.tn + b.fn + b.n_parse_failure), fmt(b.mr), fmt(b.far),
             str(b.n_parse_failure)] for r in c.runs for b in r.binary]


def no_curve_lines(c: Comparison) -> list[str]:
    """For each run without a curve: why, and its rates at fixed thresholds with their exact
    intervals."""
    lines = []
    for r in c.runs:
        if r.curve is not None:
            continue
        rates = "; ".join(
            f"{d.get('rate', '?').upper()} at threshold {fmt(d.get('threshold'))}: "
            f"{d.get('k')}/{d.get('n')} = {fmt(d.get('estimate'))} [{fmt(d.get('low'))}, "
            f"{fmt(d.get('high'))}]" for d in r.rates)
        lines.append(f"{r.label}: no curve ({r.reason})" + (f"; {rates}" if rates else ""))
    return lines


def markdown(c: Comparison) -> str:
    """The leaderboard, binary points, runs without a curve and warnings as Markdown."""
    def md(headers, rows) -> list[str]:
        esc = [[str(x).replace("|", "\\|") for x in row] for row in [list(headers), *rows]]
        return ["| " + " | ".join(esc[0]) + " |", "|" + "---|" * len(headers)] + [
            "| " + " | ".join(row) + " |" for row in esc[1:]]

    out = ["# Monitor comparison", ""] + [f"> **warning:** {w}" for w in c.warnings]
    out += ([""] if c.warnings else []) + md(HEADERS, table_rows(c))
    if any(r.binary for r in c.runs):
        out += ["", "## Binary protocol", ""] + md(BINARY_HEADERS, binary_rows(c))
    extra = no_curve_lines(c)
    if extra:
        out += ["", "## Runs without a curve", ""] + [f"- {line}" for line in extra]
    return "\n".join(out) + "\n"


def default_out() -> Path:
    """A new folder under runs/, named by the time."""
    return Path("runs") / f"compare-{dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"


def build_comparison(runs: list[str | Path], out: str | Path | None = None, *,
                     markdown_file: str | Path | None = None,
                     html_file: str | Path | None = None) -> Comparison:
    """``calimon compare``: read the runs (``compare_runs``), write ``compare.png`` and
    ``compare.json`` into ``out`` (default: a new folder under runs/), and the Markdown table
    and the HTML page when asked. Returns the comparison with the files written."""
    from calimon.jsonio import dump_json
    from calimon.plotting.curve import plot_comparison

    comp = compare_runs(runs)
    folder = Path(out) if out is not None else default_out()
    folder.mkdir(parents=True, exist_ok=True)
    files = {"png": str(plot_comparison(
        folder / "compare.png",
        [(r.label, r.curve, r.binary if r.curve is not None else (),
          None if r.curve is not None else _short_reason(r)) for r in comp.runs],
        title=figure_title(comp))),
        "json": str(folder / "compare.json")}
    if markdown_file is not None:
        Path(markdown_file).parent.mkdir(parents=True, exist_ok=True)
        Path(markdown_file).write_text(markdown(comp), encoding="utf-8")
        files["markdown"] = str(markdown_file)
    if html_file is not None:
        from calimon.report.compare_page import render_compare_page

        Path(html_file).parent.mkdir(parents=True, exist_ok=True)
        Path(html_file).write_text(render_compare_page(comp), encoding="utf-8")
        files["html"] = str(html_file)
    comp = Comparison(comp.runs, comp.warnings, comp.same_samples, files)
    dump_json(comp.to_dict(), folder / "compare.json")
    return comp


def figure_title(c: Comparison) -> str:
    """The comparison figure's title (PNG and HTML): what is drawn and on which benchmark
    and split (each one, in order, when the runs differ)."""
    benches = dict.fromkeys(f"{PurePath(str(r.benchmark)).name}/{_split(r)}" for r in c.runs)
    return "calibrated MR/FAR curve per run · " + ", ".join(benches)


def _short_reason(r: RunEntry) -> str:
    if r.n_pos is not None and r.n_neg is not None:
        return f"{r.n_pos} misbehaving / {r.n_neg} benign scored: no curve"
    return "no curve"


__all__ = ["BINARY_HEADERS", "COMPARE_FARS", "Comparison", "HEADERS", "RunEntry",
           "binary_rows", "build_comparison", "compare_runs", "default_out", "figure_title",
           "fmt", "markdown", "no_curve_lines", "read_run", "sample_warnings", "table_rows"]
