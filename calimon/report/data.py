"""Everything a report shows, gathered from a run folder (``calimon curve --out DIR``).

Required: ``curve.json`` and ``curve.csv``. Everything else is optional and picked up when
present; what is absent (or unreadable) becomes a line in ``RunData.notes``, never an error:
the benchmark's transcripts (``provenance["benchmark"]``), the run store's readings
(``provenance["store"]``: the main reading and the binary-protocol texts and evidence quotes),
escalation policies (``*.yaml`` in the run folder or given explicitly), evidence spans
(``spans.jsonl``) and probe token scores (``token_scores.jsonl``). A malformed optional file
that was named explicitly is an ``InputError``; one found by looking is a note.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from calimon.curve_result import CurveResult
from calimon.errors import CalimonError, InputError
from calimon.report.extras import (
    PolicyInfo,
    SpanRecord,
    TokenScores,
    find_policies,
    read_spans,
    read_token_scores,
)
from calimon.run_folder import CurveRow, curve_result_from_doc, parse_curve_json, read_curve_csv
from calimon.samples import Sample
from calimon.score_readout import is_score_readout
from calimon.verdict import Verdict

REQUIRED_COLUMNS = ("id", "label", "category", "task", "status", "p_raw", "p_cal")
Row = CurveRow  # one line of curve.csv; a missing score is None, never 0


@dataclass(frozen=True)
class RunData:
    """A run folder's contents for the report (module docstring); absent optional parts are
    empty, with a line in ``notes``. ``result``: curve.json as read (`CurveResult`; built from
    ``summary``, the object as written, when not given)."""

    run_dir: Path
    summary: dict = field(repr=False)
    curve_sha256: str
    rows: tuple[Row, ...]
    samples: dict[str, Sample] = field(default_factory=dict, repr=False)
    readings: dict[str, Verdict] = field(default_factory=dict, repr=False)
    binary: dict[str, dict[str, Verdict]] = field(default_factory=dict, repr=False)
    policies: tuple[PolicyInfo, ...] = ()
    spans: dict[str, SpanRecord] = field(default_factory=dict, repr=False)
    token_scores: dict[str, TokenScores] = field(default_factory=dict, repr=False)
    notes: tuple[str, ...] = ()
    sources: dict[str, str] = field(default_factory=dict)
    result: CurveResult = field(default=None, repr=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.result is None:
            object.__setattr__(self, "result", curve_result_from_doc(
                self.summary, path=str(self.run_dir / "curve.json")))

    @property
    def provenance(self) -> dict:
        """curve.json's ``provenance`` block as written ({} when absent)."""
        return self.result.provenance.as_dict()


def read_rows(path: Path) -> tuple[Row, ...]:
    """All rows of ``curve.csv``, unscored ones included (their scores are None)."""
    return read_curve_csv(path, required=REQUIRED_COLUMNS)


MAIN_KEY = ("model", "model_revision", "prompt", "template_hash", "readout")  # a MonitorKey
REQUIRED_KEYS = ("provenance", "operating_points", "curves")


def read_result(run_dir: Path) -> tuple[CurveResult, dict, str]:
    """``(curve.json's result, the object as written, its sha256)``; raises InputError when it
    is missing, not JSON, of a newer format or not a `calimon curve` summary."""
    path = run_dir / "curve.json"
    if not path.is_file():
        raise InputError("no curve.json here (write a run folder with `calimon curve --out DIR`)",
                         path=str(run_dir), field="run")
    raw = path.read_bytes()
    result, doc = parse_curve_json(raw, path=str(path), required=REQUIRED_KEYS)
    return result, doc, hashlib.sha256(raw).hexdigest()


def read_summary(run_dir: Path) -> tuple[dict, str]:
    """``(curve.json as a dict, its sha256)``, checked as `read_result` does."""
    _, doc, sha = read_result(run_dir)
    return doc, sha


def _load_samples(benchmark: str | None, ids: set[str], notes: list[str]) -> dict[str, Sample]:
    from calimon.data.registry import load_benchmark

    if not benchmark:
        notes.append("transcripts: the run names no benchmark; the viewer shows scores only")
        return {}
    try:
        samples = load_benchmark(benchmark, build_if_missing=False)
    except (CalimonError, OSError) as exc:
        notes.append(f"transcripts: benchmark {benchmark!r} could not be loaded ({exc}); the "
                     "viewer shows scores only (pass --benchmark)")
        return {}
    found = {s.id: s for s in samples if s.id in ids}
    if len(found) < len(ids):
        notes.append(f"transcripts: {len(ids) - len(found)} of {len(ids)} run ids are not in "
                     f"benchmark {benchmark!r}")
    return found


def _check_dataset(result: CurveResult, samples: dict[str, Sample], rows: tuple[Row, ...],
                   notes: list[str]) -> None:
    from calimon.selection import dataset_hash

    expected = result.provenance.dataset_hash
    if not expected or not samples or result.settings.split:
        return  # with --split the hash covers the evaluated and the calib samples together
    got = dataset_hash([samples[r.id] for r in rows if r.id in samples])
    if got != expected:
        notes.append(f"transcripts: the benchmark's samples hash to {got}, the run read "
                     f"{expected}: the benchmark changed since the run; texts may differ from "
                     "what was scored")


def _recorded(result: CurveResult, samples: dict[str, Sample], notes: list[str]
              ) -> tuple[dict[str, Verdict], dict[str, dict[str, Verdict]]]:
    """A score run's readings, read again from the samples (an external monitor's scores: no
    run store), by sample id; a benchmark whose scores no longer read is a note."""
    from calimon.scoring.recorded import recorded_decisions, recorded_readings

    xs = list(samples.values())
    try:
        main = recorded_readings(xs, result.provenance.readout)
        binary = {name: recorded_decisions(xs, name)
                  for name in result.settings.values.get("binary_scores") or ()}
    except InputError as exc:
        notes.append(f"readings: the benchmark's scores no longer read ({exc})")
        return {}, {}
    return ({x.id: main[x.transcript_hash] for x in xs if x.transcript_hash in main},
            {n: {x.id: t[x.transcript_hash] for x in xs if x.transcript_hash in t}
             for n, t in binary.items()})


def _load_readings(result: CurveResult, samples: dict[str, Sample], store: str | None,
                   notes: list[str]) -> tuple[dict[str, Verdict], dict[str, dict[str, Verdict]]]:
    from calimon.scoring.store import MonitorKey, RunStore

    prov = result.provenance
    path = store or prov.store
    if not samples:
        return {}, {}
    if is_score_readout(prov.readout):
        return _recorded(result, samples, notes)
    if not path or not Path(path).is_file():
        notes.append(f"readings: run store {path!r} not found; no evidence quotes or binary "
                     "texts (pass --store)")
        return {}, {}
    by_hash: dict[str, list[str]] = {}
    for s in samples.values():
        by_hash.setdefault(s.transcript_hash, []).append(s.id)

    def per_id(found: dict[str, Verdict]) -> dict[str, Verdict]:
        return {i: v for h, v in found.items() for i in by_hash.get(h, ())}

    try:
        with RunStore(path) as st:
            main: dict[str, Verdict] = {}
            lacking = [k for k in MAIN_KEY if k not in prov.values]
            if lacking:
                notes.append(f"readings: provenance lacks {lacking[0]!r}; main readings not "
                             "loaded")
            else:
                key = MonitorKey(*(prov.values[k] for k in MAIN_KEY))
                main = per_id(st.get(key, list(by_hash)))
            binary: dict[str, dict[str, Verdict]] = {}
            wanted = list(result.settings.binary_prompts or [])
            pinned = prov.binary_template_hashes or {}
            for name in (list(pinned) or wanted):
                keys = [k for k in st.keys() if k.readout == "binary"
                        and k.model == prov.model
                        and k.model_revision == prov.model_revision
                        and (k.template_hash == pinned[name] if pinned else k.prompt == name)]
                # a prompt edited since the run has several template hashes: take the one
                # that holds the most of this run's transcripts
                best = max((per_id(st.get(k, list(by_hash))) for k in keys), key=len,
                           default={})
                if best:
                    binary[name] = best
    except Exception as exc:  # noqa: BLE001 - a corrupt or locked store must not sink a report
        notes.append(f"readings: run store {path!r} could not be read ({exc})")
        return {}, {}
    return main, binary


def gather(run: str | Path, *, policies: list[str | Path] | None = None,
           spans: str | Path | None = None, token_scores: str | Path | None = None,
           benchmark: str | None = None, store: str | Path | None = None) -> RunData:
    """Read a run folder and whatever optional inputs exist (see the module docstring)."""
    run_dir = Path(run)
    if not run_dir.is_dir():
        raise InputError("expected a run folder (from `calimon curve --out DIR`)",
                         path=str(run), field="run")
    result, summary, sha = read_result(run_dir)
    rows = read_rows(run_dir / "curve.csv")
    notes: list[str] = []
    split = result.settings.split
    if split:  # curve.csv also holds the calib rows the maps were fitted on
        rows = tuple(r for r in rows if r.split == split)
    bench = benchmark or result.provenance.benchmark
    samples = _load_samples(bench, {r.id for r in rows}, notes)
    _check_dataset(result, samples, rows, notes)
    readings, binary = _load_readings(result, samples, str(store) if store else None, notes)
    sources = {"run": str(run_dir), **({"benchmark": str(bench)} if bench else {})}
    found_policies = find_policies(run_dir, policies, rows, result, notes)
    span_path = Path(spans) if spans else run_dir / "spans.jsonl"
    span_map: dict[str, SpanRecord] = {}
    if spans or span_path.is_file():
        span_map = read_spans(span_path, samples, notes, explicit=spans is not None)
        sources["spans"] = str(span_path)
    else:
        notes.append("spans: no spans.jsonl in the run folder (write one with `calimon spans "
                     "--out DIR` or pass --spans)")
    tok_path = Path(token_scores) if token_scores else run_dir / "token_scores.jsonl"
    tok_map: dict[str, TokenScores] = {}
    if token_scores or tok_path.is_file():
        tok_map = read_token_scores(tok_path, samples, notes, explicit=token_scores is not None)
        sources["token_scores"] = str(tok_path)
    else:
        notes.append("token scores: no token_scores.jsonl (probe token head) in the run folder")
    if not result.binary_points:
        notes.append("binary protocol: the run has no binary points (run without --no-binary)")
    return RunData(run_dir=run_dir, summary=summary, result=result, curve_sha256=sha, rows=rows,
                   samples=samples, readings=readings, binary=binary,
                   policies=tuple(found_policies), spans=span_map, token_scores=tok_map,
                   notes=tuple(notes), sources=sources)


__all__ = ["Row", "RunData", "gather", "read_result", "read_rows", "read_summary"]
