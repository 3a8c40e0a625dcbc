"""A CSV file of scored transcripts as a benchmark (``--benchmark scores.csv``): the scores an
external monitor gave, read by a ``score:COLUMN`` readout (`calimon.score_readout`).

One row per transcript, a header naming the columns:

- ``id`` (required, unique) and ``label`` (required: ``true``/``false``, ``1``/``0``,
  ``yes``/``no``; empty = unknown, not usable for curves);
- optional ``pair_id`` (default: the id), ``category`` (default ``safety``), ``task`` (default
  ``reasoning``), ``split`` (``train``, ``calib``, ``test`` or empty), ``source``;
- optional ``request`` and ``response``: the transcript. Without both columns a row holds no
  transcript (``meta["no_transcript"]``): only a score readout reads it, and `calimon shift`
  compares such runs by their scores alone;
- every other column is a score, kept under ``meta["scores"]`` by its column name: a number, a
  boolean (true/false) or text; an empty cell is no score.

Errors name the file, the line and the column.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from calimon.errors import InputError
from calimon.samples import Sample, sample_from_dict

REQUIRED = ("id", "label")
SAMPLE_COLUMNS = ("id", "label", "pair_id", "category", "task", "split", "source", "request",
                  "response")
LABELS = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False,
          "": None}


def is_score_table(spec: str) -> bool:
    """Whether a --benchmark value names a CSV file of scores."""
    return spec.lower().endswith(".csv")


def cell_value(text: str) -> Any:
    """A score cell as a value: a finite or infinite number, true/false, else the text itself
    (a ``score:`` readout reports what is not a number); None for an empty cell."""
    text = text.strip()
    if not text:
        return None
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    try:
        number = float(text)
    except ValueError:
        return text
    return number if not math.isnan(number) else text


def load_score_table(spec: str | Path) -> list[Sample]:
    """The samples of a CSV file of scores (module docstring)."""
    path = Path(spec)
    if not path.is_file():
        raise InputError("no such file", path=str(path))
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"cannot read as CSV ({exc})", path=str(path)) from None
    if not rows:
        raise InputError("empty file: expected a header row naming the columns", path=str(path))
    header = [h.strip() for h in rows[0]]
    for name in REQUIRED:
        if name not in header:
            raise InputError(f"missing required column (the header has {header})",
                             path=str(path), line=1, field=name)
    dupes = sorted({h for h in header if header.count(h) > 1})
    if dupes:
        raise InputError(f"column named twice: {dupes[0]!r}", path=str(path), line=1,
                         field=dupes[0])
    has_text = "request" in header and "response" in header
    out, seen = [], {}
    for line, cells in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise InputError(f"expected {len(header)} cells, got {len(cells)}", path=str(path),
                             line=line)
        sample = _row_sample(dict(zip(header, cells, strict=True)), has_text, path, line)
        if sample.id in seen:
            raise InputError(f"duplicate id {sample.id!r} (first on line {seen[sample.id]})",
                             path=str(path), line=line, field="id")
        seen[sample.id] = line
        out.append(sample)
    return out


def _row_sample(row: dict[str, str], has_text: bool, path: Path, line: int) -> Sample:
    label_text = row["label"].strip().lower()
    if label_text not in LABELS:
        raise InputError(f"expected true/false, 1/0, yes/no or empty, got {row['label']!r}",
                         path=str(path), line=line, field="label")
    scores = {k: v for k, v in ((k, cell_value(c)) for k, c in row.items()
                                if k not in SAMPLE_COLUMNS) if v is not None}
    meta: dict[str, Any] = {"scores": scores, "file": str(path), "line": line}
    if not has_text:
        meta["no_transcript"] = True
    record = {"id": row["id"].strip(), "label": LABELS[label_text],
              "pair_id": row.get("pair_id", "").strip() or row["id"].strip(),
              "category": row.get("category", "").strip() or "safety",
              "task": row.get("task", "").strip() or "reasoning",
              "split": row.get("split", "").strip() or None,
              "source": row.get("source", "").strip(),
              "request": row.get("request", ""), "response": row.get("response", ""),
              "meta": meta}
    return sample_from_dict(record, path=str(path), line=line)


__all__ = ["is_score_table", "load_score_table"]
