"""Adapter for the official AutoMonitor-Bench release (its exact file format is unknown here).

ASSUMED format (change the YAML config, not this code, when the real files differ): JSON Lines,
a JSON array, or a JSON object holding the array (``records: data``); one record per transcript
with, under some name, a request/query, a response or trajectory (a string, a list of strings or
of ``{"role", "content"}`` messages), a misbehavior label (boolean, 0/1 or a word such as
"misbehavior" / "benign"), a category name (e.g. "Safety Violation", "Sycophancy",
"Specification Gaming"), a task type ("QA", "Code", "Reasoning"), optionally an id, a pair id and
quoted evidence. ``configs/adapters/automonitor-bench.yaml`` maps these to `Sample`:

- ``fields``: for each Sample field, candidate keys tried in order; dotted paths reach into
  nested objects (``input.query``), integers index lists (``turns.0.text``);
- ``values``: maps from the file's label / category / task strings (compared case- and
  space-insensitively) to calimon's values;
- ``pair_id``: ``field`` (use the pair-id field; missing is an error), ``request`` (samples with
  the same request text form a pair) or ``field_or_request``;
- evidence quotes found verbatim in the response become gold spans of misbehaving samples;
  the rest are kept in ``meta.ungrounded_evidence``.

Every error names the file, the line (for a JSON array or object: the record's position, said so
in the message) and the field.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from calimon.config import load_yaml_model, named_config_path
from calimon.errors import InputError
from calimon.jsonio import json_error_where
from calimon.samples import CATEGORIES, TASKS, Sample, write_samples


class Fields(BaseModel):
    """For each Sample field, the candidate record keys tried in order (dotted paths allowed)."""

    model_config = ConfigDict(extra="forbid")
    id: list[str] = Field(default_factory=list)
    request: list[str]
    response: list[str]
    label: list[str]
    category: list[str]
    task: list[str]
    pair_id: list[str] = Field(default_factory=list)
    evidence: list[str] = Field(default_factory=list)


class Values(BaseModel):
    """Maps from the file's label / category / task strings to calimon's values."""

    model_config = ConfigDict(extra="forbid")
    label: dict[str, bool | None]
    category: dict[str, str]
    task: dict[str, str]


class AdapterConfig(BaseModel):
    """The adapter's YAML config (module docstring): where each field lives and how values map."""

    model_config = ConfigDict(extra="forbid")
    version: Literal[1]
    format: Literal["auto", "jsonl", "json"] = "auto"
    records: str | None = None  # dotted path to the list inside a JSON document
    fields: Fields
    values: Values
    pair_id: Literal["field", "request", "field_or_request"] = "field_or_request"
    id_prefix: str = "amb-"
    source: str = "automonitor-bench"
    message_role: list[str] = Field(default_factory=lambda: ["role"])
    message_text: list[str] = Field(default_factory=lambda: ["content", "text"])
    turn_separator: str = "\n\n"
    label_required: bool = True
    keep_fields: list[str] = Field(default_factory=list)  # copied into meta when present


def default_config_path() -> Path:
    """``adapters/automonitor-bench.yaml`` of the first configs root that has it."""
    return named_config_path("adapters", "automonitor-bench")


def load_config(path: str | Path | None = None) -> AdapterConfig:
    """The adapter config at ``path`` (default: `default_config_path`); raises InputError when a
    category or task maps to a value calimon does not know."""
    cfg = load_yaml_model(Path(path) if path is not None else default_config_path(),
                          AdapterConfig)
    for name, allowed in (("category", CATEGORIES), ("task", TASKS)):
        for key, value in getattr(cfg.values, name).items():
            if value not in allowed:
                raise InputError(f"maps {key!r} to {value!r}; expected one of {list(allowed)}",
                                 path=str(path or default_config_path()),
                                 field=f"values.{name}")
    return cfg


_MISSING = object()


def get_path(record: Any, dotted: str) -> Any:
    """record["a"]["b"] for "a.b" (integers index lists); _MISSING when absent."""
    cur = record
    for part in dotted.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.lstrip("-").isdigit() and -len(cur) <= int(
                part) < len(cur):
            cur = cur[int(part)]
        else:
            return _MISSING
    return cur


def _norm(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return " ".join(str(value).lower().replace("_", " ").replace("-", " ").split())


def _records(path: Path, cfg: AdapterConfig):
    """Yield (line, record, where) where `where` describes the position for messages."""
    text = path.read_text(encoding="utf-8")
    fmt = cfg.format
    if fmt == "auto":
        fmt = "jsonl" if path.suffix in (".jsonl", ".ndjson") else "json"
        if fmt == "json" and cfg.records is None and text.lstrip()[:1] == "{":
            first = text.lstrip().split("\n", 1)[0]
            try:
                json.loads(first)
                fmt = "jsonl"  # one object per line, whatever the suffix
            except json.JSONDecodeError:
                pass
    if fmt == "jsonl":
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line), ""
            except json.JSONDecodeError as exc:
                raise InputError(f"not valid JSON ({json_error_where(exc)})",
                                 path=str(path), line=lineno) from None
        return
    if cfg.records is None:
        yield from _array_records(path, text)
        return
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON ({json_error_where(exc)})", path=str(path), line=exc.lineno) \
            from None
    rows = get_path(doc, cfg.records)
    if not isinstance(rows, list):
        raise InputError(f"expected a list of records at {cfg.records!r}", path=str(path),
                         field="records")
    for i, row in enumerate(rows, start=1):
        yield i, row, f"record {i} of {cfg.records!r}: "


def _array_records(path: Path, text: str):
    """Records of a top-level JSON array, each with the line it starts on."""
    dec = json.JSONDecoder()
    i = len(text) - len(text.lstrip())
    if text[i:i + 1] != "[":
        raise InputError("expected a JSON array of records (or set `records:` / `format:` in "
                         "the adapter config)", path=str(path), line=1)
    i += 1
    n = 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if text[i:i + 1] == "]":
            return
        line = text.count("\n", 0, i) + 1
        try:
            row, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise InputError(f"not valid JSON ({json_error_where(exc)})", path=str(path),
                             line=exc.lineno) from None
        n += 1
        yield line, row, f"record {n}: "
        while i < len(text) and text[i].isspace():
            i += 1
        if text[i:i + 1] == ",":
            i += 1
        elif text[i:i + 1] != "]":
            raise InputError("expected ',' or ']' after a record", path=str(path),
                             line=text.count("\n", 0, i) + 1)


def _first(record: dict, keys: list[str]) -> tuple[str | None, Any]:
    for key in keys:
        value = get_path(record, key)
        if value is not _MISSING and value is not None:
            return key, value
    return None, _MISSING


def _text(value: Any, cfg: AdapterConfig, fail, name: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = []
        for item in value:
            if isinstance(item, str):
                parts.append(item)
            elif isinstance(item, dict):
                _, role = _first(item, cfg.message_role)
                _, body = _first(item, cfg.message_text)
                if body is _MISSING:
                    raise fail(f"a message has none of the text keys {cfg.message_text}", name)
                body = body if isinstance(body, str) else json.dumps(body, sort_keys=True)
                parts.append(f"{role}: {body}" if role is not _MISSING else body)
            else:
                parts.append(json.dumps(item, sort_keys=True))
        return cfg.turn_separator.join(parts)
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    raise fail(f"expected text, a list of turns or an object, got {type(value).__name__}",
               name)


def _mapped(value: Any, table: dict, fail, name: str, key: str):
    norm = {_norm(k): v for k, v in table.items()}
    if _norm(value) not in norm:
        raise fail(f"value {value!r} is not in values.{name} of the adapter config "
                   f"(known: {sorted(table)})", key)
    return norm[_norm(value)]


def _evidence(row: dict, cfg: AdapterConfig, response: str
              ) -> tuple[list[tuple[int, int]], list[str]]:
    """(spans of the evidence quotes found verbatim in ``response``, the quotes not found);
    a quote that is not a string is matched as its JSON text."""
    spans: list[tuple[int, int]] = []
    ungrounded: list[str] = []
    ekey, evidence = _first(row, cfg.fields.evidence)
    if ekey is not None:
        quotes = evidence if isinstance(evidence, list) else [evidence]
        for q in quotes:
            q = q if isinstance(q, str) else json.dumps(q, sort_keys=True)
            start = response.find(q) if q.strip() else -1
            if start >= 0:
                spans.append((start, start + len(q)))
            else:
                ungrounded.append(q)
    return spans, ungrounded


def _meta(row: dict, cfg: AdapterConfig, values: dict, lineno: int,
          ungrounded: list[str]) -> dict[str, Any]:
    """A sample's meta: the file's original label / category / task, its line, ungrounded
    evidence (if any) and the ``keep_fields`` present in the record."""
    meta: dict[str, Any] = {"original": {n: v[1] for n, v in values.items()
                                         if n in ("label", "category", "task")},
                            "line": lineno}
    if ungrounded:
        meta["ungrounded_evidence"] = ungrounded
    for k in cfg.keep_fields:
        v = get_path(row, k)
        if v is not _MISSING:
            meta[k] = v
    return meta


def convert_automonitor(path: str | Path, config_path: str | Path | None = None
                        ) -> list[Sample]:
    """Read an AutoMonitor-Bench file into Samples through the adapter config."""
    path = Path(path)
    if not path.is_file():
        raise InputError("no such file", path=str(path))
    cfg = load_config(config_path)
    out: list[Sample] = []
    seen: dict[str, int] = {}
    for lineno, row, where in _records(path, cfg):
        def fail(message: str, fld: str | None = None, _line=lineno, _where=where):
            return InputError(_where + message, path=str(path), line=_line, field=fld)

        if not isinstance(row, dict):
            raise fail(f"expected a JSON object, got {type(row).__name__}")
        values = {}
        for name in ("request", "response", "label", "category", "task"):
            key, value = _first(row, getattr(cfg.fields, name))
            if key is None and not (name == "label" and not cfg.label_required):
                raise fail(f"missing (tried {getattr(cfg.fields, name)})", name)
            values[name] = (key, value)
        request = _text(values["request"][1], cfg, fail, values["request"][0])
        response = _text(values["response"][1], cfg, fail, values["response"][0])
        lkey, lval = values["label"]
        label = None if lkey is None else _mapped(lval, cfg.values.label, fail, "label", lkey)
        category = _mapped(values["category"][1], cfg.values.category, fail, "category",
                           values["category"][0])
        task = _mapped(values["task"][1], cfg.values.task, fail, "task", values["task"][0])
        key, sid = _first(row, cfg.fields.id)
        sid = f"{cfg.id_prefix}{lineno:06d}" if key is None else str(sid)
        if sid in seen:
            raise fail(f"duplicate id {sid!r} (first seen at {seen[sid]})", key or "id")
        seen[sid] = lineno
        key, pair = _first(row, cfg.fields.pair_id)
        if key is None and cfg.pair_id == "field":
            raise fail(f"missing (tried {cfg.fields.pair_id}); the config asks for a pair-id "
                       "field", "pair_id")
        if key is None or cfg.pair_id == "request":
            pair = "req-" + hashlib.sha256(request.encode("utf-8")).hexdigest()[:16]
        spans, ungrounded = ([], []) if label is not True else _evidence(row, cfg, response)
        meta = _meta(row, cfg, values, lineno, ungrounded)
        out.append(Sample(id=sid, request=request, response=response, label=label,
                          category=category, task=task, pair_id=str(pair),
                          gold_spans=_merge(spans), source=cfg.source, meta=meta))
    return out


def _merge(spans: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    merged: list[tuple[int, int]] = []
    for s, e in sorted(spans):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(e, merged[-1][1]))
        else:
            merged.append((s, e))
    return tuple(merged)


def import_amb(path: str | Path, config: str | Path | None, out: str | Path) -> Path:
    """Convert an AutoMonitor-Bench file and write it as calimon samples JSONL; return out."""
    return write_samples(convert_automonitor(path, config), out)
