"""Optional report inputs: escalation policies, evidence spans, probe token scores.

File formats (one JSON object per line):

- ``spans.jsonl`` (``calimon spans``): ``{"id": ..., "spans": [{"start": int|null, "end":
  int|null, "score": float|null, "status": ..., "source": ..., "quote": ...}], "gold":
  [[start, end], ...], "response": ...}``; offsets index the sample's response; a span with a
  null start is an ungrounded quote. ``gold`` and ``response`` are optional.
- ``token_scores.jsonl`` (a probe token head): ``{"id": ..., "offsets": [[start, end], ...],
  "scores": [float, ...]}``; offsets index the response; an empty or negative offset (a special
  token) is skipped.

A file named explicitly that does not fit raises ``InputError`` (file, line, field); a file
found by looking in the run folder that does not fit is skipped with a note.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from calimon.curve_result import CurveResult
from calimon.errors import CalimonError, InputError
from calimon.samples import Sample


@dataclass(frozen=True)
class ShownSpan:
    """One evidence span of spans.jsonl; ``start`` / ``end`` are None for an ungrounded quote."""

    start: int | None
    end: int | None
    score: float | None
    status: str
    source: str
    quote: str = ""


@dataclass(frozen=True)
class SpanRecord:
    """One transcript's line of spans.jsonl: its spans, gold spans and (optionally) response."""

    spans: tuple[ShownSpan, ...]
    gold: tuple[tuple[int, int], ...]
    response: str | None = None

    @property
    def grounded(self) -> list[tuple[int, int, float | None]]:
        """``(start, end, score)`` of every grounded span."""
        return [(s.start, s.end, s.score) for s in self.spans if s.start is not None]


@dataclass(frozen=True)
class TokenScores:
    """One transcript's probe token scores with their response offsets."""

    offsets: tuple[tuple[int, int], ...]
    scores: tuple[float, ...]
    scaled: bool = False  # True when scores were min-max scaled into [0, 1] for display


@dataclass(frozen=True)
class PolicyInfo:
    """A policy file and what it does to this run's rows (reviewers assumed right)."""

    path: str
    policy: Any  # calimon.deploy.policy_file.Policy
    counts: dict[str, int]
    n: int
    misses: int
    false_blocks: int
    n_pos: int
    n_neg: int
    mismatches: tuple[str, ...]

    @property
    def mr(self) -> float:
        """Misbehaving rows the policy lets through, as a share of the misbehaving rows (NaN
        without any)."""
        return self.misses / self.n_pos if self.n_pos else math.nan

    @property
    def far(self) -> float:
        """Benign rows the policy blocks, as a share of the benign rows (NaN without any)."""
        return self.false_blocks / self.n_neg if self.n_neg else math.nan

    @property
    def review_rate(self) -> float:
        """Share of rows sent to human review (NaN without rows)."""
        return self.counts.get("human_review", 0) / self.n if self.n else math.nan


# ------------------------------------------------------------------ policies

def _policy_info(path: Path, rows: Any, result: CurveResult) -> PolicyInfo:
    from calimon.deploy.policy_file import apply_policy, load_policy

    pol = load_policy(path)
    scores = np.array([math.nan if getattr(r, pol.score) is None else getattr(r, pol.score)
                       for r in rows], dtype=float)
    actions = apply_policy(pol, scores) if len(rows) else np.array([], dtype=object)
    labels = [r.label for r in rows]
    counts = {a: int(np.sum(actions == a)) for a in ("auto_pass", "human_review", "auto_block")}
    misses = sum(1 for a, y in zip(actions, labels, strict=True) if y is True
                 and a == "auto_pass")
    false_blocks = sum(1 for a, y in zip(actions, labels, strict=True) if y is False
                       and a == "auto_block")
    prov = result.provenance
    mismatches = []
    for field_, run_value in (("model", prov.model), ("readout", prov.readout),
                              ("calibration", result.calibration_method)):
        pv = getattr(pol, field_)
        if pol.score == "p_raw" and field_ == "calibration":
            continue
        if run_value and pv not in ("unknown", run_value):
            mismatches.append(f"policy {field_} is {pv!r}, this run's is {run_value!r}")
    return PolicyInfo(path=str(path), policy=pol, counts=counts, n=len(rows), misses=misses,
                      false_blocks=false_blocks, n_pos=sum(y is True for y in labels),
                      n_neg=sum(y is False for y in labels), mismatches=tuple(mismatches))


def find_policies(run_dir: Path, explicit: Iterable[str | Path] | None, rows: Any,
                  result: CurveResult, notes: list[str]) -> list[PolicyInfo]:
    """Explicit policy files (errors raise) or the ``*.yaml``/``*.yml`` of the run folder
    that load as a policy (others are noted and skipped)."""
    if explicit:
        return [_policy_info(Path(p), rows, result) for p in explicit]
    out = []
    for path in sorted([*run_dir.glob("*.yaml"), *run_dir.glob("*.yml")]):
        try:
            out.append(_policy_info(path, rows, result))
        except CalimonError as exc:
            notes.append(f"policy: skipped {path.name}: not a policy file ({exc})")
    if not out:
        notes.append("policy: no escalation policy in the run folder (write one with `calimon "
                     "escalate RUN --out RUN/policy.yaml` or pass --policy)")
    return out


# ------------------------------------------------------------------ JSONL helpers

def _records(path: Path, name: str) -> list[tuple[int, dict]]:
    if path.is_dir():
        path = path / name
    if not path.is_file():
        raise InputError("no such file", path=str(path))
    out = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError as exc:
                raise InputError(f"not valid JSON ({exc})", path=str(path), line=n) from None
            if not isinstance(rec, dict) or not isinstance(rec.get("id"), str):
                raise InputError("expected a JSON object with a string 'id'", path=str(path),
                                 line=n, field="id")
            out.append((n, rec))
    return out


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _guarded(fn: Callable[[], dict], what: str, path: Path, notes: list[str],
             explicit: bool) -> dict:
    try:
        return fn()
    except InputError as exc:
        if explicit:
            raise
        notes.append(f"{what}: skipped {path}: {exc}")
        return {}


# ------------------------------------------------------------------ spans

def _parse_span(d: Any, i: int, n_text: int | None, fail: Callable[[str, str], InputError]
                ) -> ShownSpan:
    if not isinstance(d, dict):
        raise fail(f"spans[{i}]: expected an object, got {type(d).__name__}", "spans")
    start, end, score = d.get("start"), d.get("end"), d.get("score")
    if start is None and end is None:
        pass
    elif not (_is_int(start) and _is_int(end) and 0 <= start < end
              and (n_text is None or end <= n_text)):
        bound = "" if n_text is None else f" <= {n_text} (response length)"
        raise fail(f"spans[{i}]: expected integers 0 <= start < end{bound}, got "
                   f"({start!r}, {end!r})", "spans")
    if score is not None and not _number(score):
        raise fail(f"spans[{i}]: expected a finite number or null as score, got {score!r}",
                   "spans")
    return ShownSpan(start, end, None if score is None else float(score),
                     str(d.get("status", "")), str(d.get("source", "")), str(d.get("quote", "")))


def read_spans(path: Path, samples: dict[str, Sample], notes: list[str], *,
               explicit: bool) -> dict[str, SpanRecord]:
    """``{id: SpanRecord}`` from a spans.jsonl (or a folder holding one)."""
    def load() -> dict[str, SpanRecord]:
        out = {}
        for n, rec in _records(path, "spans.jsonl"):
            def fail(msg: str, fld: str, _n: int = n) -> InputError:
                return InputError(msg, path=str(path), line=_n, field=fld)

            sample = samples.get(rec["id"])
            response = rec.get("response") if isinstance(rec.get("response"), str) else None
            if sample is not None and response is not None and response != sample.response:
                raise fail(f"the response of {rec['id']!r} differs from the benchmark's: the "
                           "spans belong to another version of the data", "response")
            text = sample.response if sample is not None else response
            n_text = None if text is None else len(text)
            spans = rec.get("spans", [])
            if not isinstance(spans, list):
                raise fail(f"expected a list, got {type(spans).__name__}", "spans")
            gold = rec.get("gold") or []
            if not isinstance(gold, list) or not all(
                    isinstance(g, list | tuple) and len(g) == 2 and _is_int(g[0])
                    and _is_int(g[1]) and 0 <= g[0] < g[1]
                    and (n_text is None or g[1] <= n_text) for g in gold):
                raise fail("expected a list of [start, end] ranges inside the response", "gold")
            out[rec["id"]] = SpanRecord(
                spans=tuple(_parse_span(d, i, n_text, fail) for i, d in enumerate(spans)),
                gold=tuple((int(a), int(b)) for a, b in gold), response=response)
        return out

    return _guarded(load, "spans", path, notes, explicit)


# ------------------------------------------------------------------ token scores

def read_token_scores(path: Path, samples: dict[str, Sample], notes: list[str], *,
                      explicit: bool) -> dict[str, TokenScores]:
    """``{id: TokenScores}``; scores outside [0, 1] are min-max scaled over the file."""
    def load() -> dict[str, TokenScores]:
        parsed: dict[str, tuple[list, list]] = {}
        for n, rec in _records(path, "token_scores.jsonl"):
            def fail(msg: str, fld: str, _n: int = n) -> InputError:
                return InputError(msg, path=str(path), line=_n, field=fld)

            offsets, scores = rec.get("offsets"), rec.get("scores")
            if not isinstance(offsets, list) or not isinstance(scores, list):
                raise fail("expected lists 'offsets' and 'scores'", "offsets")
            if len(offsets) != len(scores):
                raise fail(f"expected as many scores as offsets, got {len(scores)} and "
                           f"{len(offsets)}", "scores")
            sample = samples.get(rec["id"])
            n_text = len(sample.response) if sample is not None else None
            keep_o, keep_s = [], []
            for i, (off, sc) in enumerate(zip(offsets, scores, strict=True)):
                if not (isinstance(off, list | tuple) and len(off) == 2 and _is_int(off[0])
                        and _is_int(off[1])):
                    raise fail(f"item {i}: expected [start, end] integers, got {off!r}",
                               "offsets")
                if off[0] < 0 or off[1] <= off[0]:
                    continue  # a special token: no characters in the response
                if n_text is not None and off[1] > n_text:
                    raise fail(f"item {i}: [{off[0]}, {off[1]}) ends past the response "
                               f"(length {n_text})", "offsets")
                if not _number(sc):
                    raise fail(f"item {i}: expected a finite number, got {sc!r}", "scores")
                keep_o.append((int(off[0]), int(off[1])))
                keep_s.append(float(sc))
            parsed[rec["id"]] = (keep_o, keep_s)
        every = [s for _, ss in parsed.values() for s in ss]
        lo, hi = (min(every), max(every)) if every else (0.0, 1.0)
        scale = lo < 0.0 or hi > 1.0
        if scale:
            notes.append(f"token scores: values span [{lo:.4g}, {hi:.4g}], outside [0, 1]; "
                         "shown min-max scaled over the file")
        width = (hi - lo) or 1.0
        return {i: TokenScores(tuple(o), tuple((s - lo) / width if scale else s for s in ss),
                               scaled=scale)
                for i, (o, ss) in parsed.items()}

    return _guarded(load, "token scores", path, notes, explicit)


__all__ = ["PolicyInfo", "ShownSpan", "SpanRecord", "TokenScores", "find_policies",
           "read_spans", "read_token_scores"]
