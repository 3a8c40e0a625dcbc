"""Open records of a run file: blocks whose keys their producer decides (the pipeline's
provenance, the settings object, the scoring service's timing), read as typed attributes.

An open record is a frozen dataclass holding every key as written (``values``, written back
as it was: `calimon.typed_json.REST`); each key the readers use is declared once as a typed
attribute (``_Key``), checked when the record is built, None when absent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from calimon.typed_json import REST, FieldError


class _Key:
    """A typed key of an open record: ``record.<name>`` reads ``record.values[name]``."""

    def __init__(self, *types: type, seq: bool = False):
        self.types, self.seq = types, seq

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        owner._keys = {**getattr(owner, "_keys", {}), name: self}

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        value = obj.values.get(self.name)
        return tuple(value) if self.seq and value is not None else value

    def check(self, value: Any) -> None:
        bad = isinstance(value, bool) and bool not in self.types
        if value is not None and (bad or not isinstance(value, self.types)):
            raise FieldError(self.name, f"expected {' or '.join(t.__name__ for t in self.types)}"
                                        f", got {type(value).__name__}")


_STR, _INT, _NUM, _LIST = (str,), (int,), (int, float), (list, tuple)


@dataclass(frozen=True)
class Record:
    """An open record (module docstring)."""

    values: Mapping[str, Any] = field(default_factory=dict, metadata=REST)

    def __post_init__(self) -> None:
        for name, key in getattr(type(self), "_keys", {}).items():
            key.check(self.values.get(name))

    def as_dict(self) -> dict[str, Any]:
        """Every key as written."""
        return dict(self.values)


@dataclass(frozen=True)
class Provenance(Record):
    """What the run scored with: model and revision, prompt and template hash, readout,
    defenses, benchmark and dataset hash, store, versions (open record)."""

    model = _Key(*_STR)
    model_revision = _Key(*_STR)
    model_path = _Key(*_STR)
    backend = _Key(*_STR)
    prompt = _Key(*_STR)
    defenses = _Key(*_LIST, seq=True)
    template_hash = _Key(*_STR)
    max_input_tokens = _Key(*_INT)
    readout = _Key(*_STR)
    binary_template_hashes = _Key(dict)
    benchmark = _Key(*_STR)
    dataset_hash = _Key(*_STR)
    calimon_version = _Key(*_STR)
    store = _Key(*_STR)
    created = _Key(*_STR)
    head_forced = _Key(*_LIST, seq=True)


@dataclass(frozen=True)
class RunSettings(Record):
    """The settings the run was made with (`calimon.studies.curve.run.CurveSettings`, open record)."""

    model = _Key(*_STR)
    benchmark = _Key(*_STR)
    prompt = _Key(*_STR)
    readout = _Key(*_STR)
    backend = _Key(*_STR)
    base_url = _Key(*_STR)
    split = _Key(*_STR)
    binary_prompts = _Key(*_LIST, seq=True)
    fars = _Key(*_LIST, seq=True)
    rate_thresholds = _Key(*_LIST, seq=True)
    calibration_map = _Key(*_STR)
    offline = _Key(bool)


@dataclass(frozen=True)
class Timing(Record):
    """The scoring phase: wall time (model load included), readings needed, transcripts the
    model scored, model calls and, behind a chat API, its usage (open record)."""

    scoring_seconds = _Key(*_NUM)
    scored = _Key(*_INT)
    readings = _Key(*_INT)
    model_calls = _Key(*_INT)
    api_usage = _Key(dict)


__all__ = ["Provenance", "Record", "RunSettings", "Timing"]
