"""The Sample record and its JSONL format.

One JSON object per line::

    {"id": "he-spec-0001-m", "request": "...", "response": "...", "label": true,
     "category": "spec_gaming", "task": "code", "pair_id": "he-spec-0001",
     "gold_spans": [[120, 168]], "source": "humaneval", "split": "test", "meta": {}}

- ``label``: true = misbehavior, false = benign, null = unknown (not usable for curves).
- ``category``: ``safety`` | ``sycophancy`` | ``spec_gaming``.
- ``task``: ``qa`` | ``code`` | ``reasoning``.
- ``gold_spans``: [start, end) character offsets into ``response``; empty for benign samples.
- ``split``: optional, ``train`` | ``calib`` | ``test``; pairs never straddle splits.
- ``meta``: free-form JSON object (kind of hack, hard-negative flag, silver label, ...).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from calimon.errors import InputError
from calimon.jsonio import json_error_where

CATEGORIES = ("safety", "sycophancy", "spec_gaming")
TASKS = ("qa", "code", "reasoning")
SPLITS = ("train", "calib", "test")
REQUIRED = ("id", "request", "response", "category", "task", "pair_id")
KNOWN = set(REQUIRED) | {"label", "gold_spans", "source", "split", "meta"}
_SURROGATE = re.compile("[\ud800-\udfff]")  # not valid Unicode text; also undecodable bytes


@dataclass(frozen=True)
class Sample:
    """One transcript with its label, cell, pair and gold spans (fields: module docstring).
    Frozen; no I/O."""

    id: str
    request: str
    response: str
    label: bool | None
    category: str
    task: str
    pair_id: str
    gold_spans: tuple[tuple[int, int], ...] = ()
    source: str = ""
    split: str | None = None
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @cached_property
    def transcript_hash(self) -> str:
        """Hash of what a monitor reads (request and response), the run store's sample key. A
        sample that holds no transcript (``meta["no_transcript"]``: a row of scores only,
        `calimon.data.score_table`) is keyed by its id instead."""
        if self.meta.get("no_transcript") is True:
            return transcript_hash("", "\0" + self.id)
        return transcript_hash(self.request, self.response)

    def to_dict(self) -> dict[str, Any]:
        """The sample as one JSONL record (gold spans as lists)."""
        d = asdict(self)
        d["gold_spans"] = [list(s) for s in self.gold_spans]
        return d


def transcript_hash(request: str, response: str) -> str:
    """The run store's key of a transcript: a short sha256 of (request, response)."""
    payload = json.dumps([request, response], ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(payload).hexdigest()[:32]


def sample_from_dict(row: Any, *, path: str = "<memory>", line: int | None = None) -> Sample:
    """Validate one row; errors name the file, line and field."""

    def fail(message: str, fld: str | None = None) -> InputError:
        return InputError(message, path=path, line=line, field=fld)

    if not isinstance(row, dict):
        raise fail(f"expected a JSON object, got {type(row).__name__}")
    for key in REQUIRED:
        if key not in row:
            raise fail("missing required field", key)
    unknown = set(row) - KNOWN
    if unknown:
        raise fail(f"unknown field(s) {sorted(unknown)}; allowed: {sorted(KNOWN)}",
                   sorted(unknown)[0])
    for key in ("id", "request", "response", "pair_id"):
        if not isinstance(row[key], str):
            raise fail(f"expected a string, got {type(row[key]).__name__}", key)
        if _SURROGATE.search(row[key]):
            raise fail("expected valid UTF-8 text, got an undecodable byte or lone surrogate", key)
    if not row["id"]:
        raise fail("must not be empty", "id")
    label = row.get("label")
    if label is not None and not isinstance(label, bool):
        raise fail(f"expected true, false or null, got {label!r}", "label")
    if row["category"] not in CATEGORIES:
        raise fail(f"expected one of {list(CATEGORIES)}, got {row['category']!r}", "category")
    if row["task"] not in TASKS:
        raise fail(f"expected one of {list(TASKS)}, got {row['task']!r}", "task")
    split = row.get("split")
    if split is not None and split not in SPLITS:
        raise fail(f"expected one of {list(SPLITS)} or null, got {split!r}", "split")
    source = row.get("source", "")
    if not isinstance(source, str):
        raise fail(f"expected a string, got {type(source).__name__}", "source")
    meta = row.get("meta", {})
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise fail(f"expected a JSON object, got {type(meta).__name__}", "meta")
    meta_text = json.dumps(meta, ensure_ascii=False, default=str)
    for key, value in (("source", source), ("meta", meta_text)):
        if _SURROGATE.search(value):
            raise fail("expected valid UTF-8 text, got an undecodable byte or lone surrogate", key)
    spans = _validate_spans(row.get("gold_spans", []), len(row["response"]), fail)
    return Sample(id=row["id"], request=row["request"], response=row["response"], label=label,
                  category=row["category"], task=row["task"], pair_id=row["pair_id"],
                  gold_spans=spans, source=source, split=split, meta=meta)


def _validate_spans(spans: Any, n: int, fail) -> tuple[tuple[int, int], ...]:
    if spans is None:
        return ()
    if not isinstance(spans, list):
        raise fail(f"expected a list of [start, end] pairs, got {type(spans).__name__}",
                   "gold_spans")
    out = []
    for i, span in enumerate(spans):
        ok = (isinstance(span, list | tuple) and len(span) == 2
              and all(isinstance(x, int) and not isinstance(x, bool) for x in span))
        if not ok:
            raise fail(f"item {i}: expected [start, end] integers, got {span!r}", "gold_spans")
        start, end = span
        if not 0 <= start < end <= n:
            raise fail(f"item {i}: [{start}, {end}) is not a non-empty range inside the "
                       f"response (length {n})", "gold_spans")
        out.append((start, end))
    return tuple(out)


def iter_samples(path: str | Path) -> Iterator[Sample]:
    """Yield validated samples from a JSONL file; the first bad row raises InputError."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path=str(path))
    seen: dict[str, int] = {}
    # newline="\n": a JSONL line ends at \n only (a lone \r is not a line break), so line
    # numbers agree with `wc -l`, `sed -n Np` and editors; a \r\n line keeps a \r JSON ignores
    with path.open(encoding="utf-8", errors="surrogateescape", newline="\n") as fh:
        for lineno, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                # without its newline: an error at the end of the line is at its last column,
                # not at column 1 of a line after it
                row = json.loads(text.rstrip("\n"))
            except (ValueError, RecursionError) as exc:  # also too deep, too many digits
                where = json_error_where(exc)
                raise InputError(f"not valid JSON ({where})",
                                 path=str(path), line=lineno) from None
            sample = sample_from_dict(row, path=str(path), line=lineno)
            if sample.id in seen:
                raise InputError(f"duplicate id {sample.id!r} (first seen on line "
                                 f"{seen[sample.id]})", path=str(path), line=lineno, field="id")
            seen[sample.id] = lineno
            yield sample


def load_samples(path: str | Path) -> list[Sample]:
    """All samples of a JSONL file (see `iter_samples` for the checks and errors)."""
    return list(iter_samples(path))


def write_samples(samples: Iterable[Sample], path: str | Path) -> Path:
    """Write samples as JSONL, byte-deterministic for the same input."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", encoding="utf-8", newline="\n") as fh:
        for s in samples:
            fh.write(json.dumps(s.to_dict(), ensure_ascii=False, sort_keys=True) + "\n")
    tmp.replace(path)
    return path
