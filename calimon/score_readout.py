"""The ``score:NAME`` readout: a monitor's score that the data already holds (an Inspect scorer's
value, ControlArena's per-step ``suspicion_score``, a JSONL field, a CSV column) or that a client
sends to `calimon serve`, read instead of running a model.

A readout is written ``score:NAME`` with options as a query string, like a benchmark spec::

    score:max_suspicion_scorer
    score:suspicion_score?steps=max
    score:guard.p?range=0,100
    score:margin?range=-5,5&direction=lower&missing=skip

- ``NAME``: the score. A sample's own score of that name comes first (an Inspect scorer, a CSV
  column, a JSONL ``meta`` field; a dotted name reads into ``meta``); without one, the values its
  steps recorded under that name (the metadata of each assistant message of an Inspect log, as
  ControlArena's monitors write ``suspicion_score``) are aggregated by ``steps``.
- ``steps``: ``max`` (default), ``mean`` or ``last``: how per-step values become one score;
  given explicitly, only per-step values are read.
- ``range``: ``LO,HI``, the score's scale: it is mapped linearly onto [0, 1]; a value outside the
  range is an error. Without it, scores must already lie in [0, 1].
- ``direction``: ``higher`` (default: a higher score means more suspicious) or ``lower``.
- ``missing``: ``error`` (default: a sample without the score, or with a value that is not a
  finite number, stops the run naming the file, sample and field) or ``skip`` (such a sample is
  kept unscored, counted as status ``error``, never given a score).

The mapped score is the reading's ``p_raw``: every map, curve, threshold and policy reads it as it
reads a model's confidence. Only the order matters to curves and thresholds; the map fitted on
it turns it into a calibrated probability.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

from calimon.errors import InputError

PREFIX = "score:"
EXTERNAL = "external"  # the model and prompt a run of a score readout records: no model ran
STEPS = ("max", "mean", "last")
DIRECTIONS = ("higher", "lower")
MISSING = ("error", "skip")
OPTIONS = ("steps", "range", "direction", "missing")


def is_score_readout(readout: str | None) -> bool:
    """Whether ``readout`` names a recorded score (``score:NAME``) rather than a model's."""
    return isinstance(readout, str) and readout.startswith(PREFIX)


@dataclass(frozen=True)
class ScoreReadout:
    """A parsed ``score:NAME`` readout (module docstring). ``steps`` None: the sample's own
    score first, then its steps' by ``max``."""

    name: str
    steps: str | None = None
    range: tuple[float, float] | None = None
    direction: str = "higher"
    missing: str = "error"

    @classmethod
    def parse(cls, readout: str, *, field: str = "readout") -> ScoreReadout:
        """The readout a ``score:NAME[?options]`` string names; InputError naming ``field``."""
        if not is_score_readout(readout):
            raise InputError(f"expected score:NAME, got {readout!r}", field=field)
        name, _, query = readout[len(PREFIX):].partition("?")
        if not name or any(c in name for c in " \t\n&=/"):
            raise InputError(f"score readout {readout!r}: expected a score name after "
                             "'score:' (letters, digits, '_', '-', '.')", field=field)
        try:
            pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
        except ValueError:
            raise InputError(f"score readout {readout!r}: expected options as key=value&"
                             "key=value", field=field) from None
        given: dict[str, str] = {}
        for key, value in pairs:
            if key not in OPTIONS:
                raise InputError(f"score readout {readout!r}: unknown option {key!r}; known: "
                                 f"{list(OPTIONS)}", field=field)
            given[key] = value
        for key, allowed in (("steps", STEPS), ("direction", DIRECTIONS), ("missing", MISSING)):
            if key in given and given[key] not in allowed:
                raise InputError(f"score readout {readout!r}: {key}={given[key]}: expected one "
                                 f"of {list(allowed)}", field=field)
        return cls(name=name, steps=given.get("steps"),
                   range=_range(given["range"], readout, field) if "range" in given else None,
                   direction=given.get("direction", "higher"),
                   missing=given.get("missing", "error"))

    def __str__(self) -> str:
        """The canonical readout string (options in a fixed order, defaults left out)."""
        opts = []
        if self.steps is not None:
            opts.append(f"steps={self.steps}")
        if self.range is not None:
            opts.append(f"range={self.range[0]:g},{self.range[1]:g}")
        if self.direction != "higher":
            opts.append(f"direction={self.direction}")
        if self.missing != "error":
            opts.append(f"missing={self.missing}")
        return PREFIX + self.name + ("?" + "&".join(opts) if opts else "")

    def to_p(self, value: Any, *, where: str = "") -> float:
        """The reading (``p_raw``) of a recorded ``value``: checked to be a finite number in its
        range, mapped onto [0, 1], turned around for ``direction=lower``. ValueError (its text
        says what is wrong, after ``where``) otherwise."""
        at = f"{where}: " if where else ""
        if isinstance(value, bool):
            raise ValueError(f"{at}score {self.name!r} is a boolean ({value}); a boolean is a "
                             "binary point (--binary-score), not a score")
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise ValueError(f"{at}score {self.name!r} is {value!r}, not a number") from None
        if not isinstance(value, int | float) or not math.isfinite(value):
            raise ValueError(f"{at}score {self.name!r} is {value!r}, not a finite number")
        lo, hi = self.range if self.range is not None else (0.0, 1.0)
        if not lo <= value <= hi:
            hint = ("" if self.range is not None else
                    "; give the score's scale with ?range=LO,HI in the readout")
            raise ValueError(f"{at}score {self.name!r} is {value:g}, outside [{lo:g}, {hi:g}]"
                             + hint)
        p = (float(value) - lo) / (hi - lo)
        return 1.0 - p if self.direction == "lower" else p


def _range(text: str, readout: str, field: str) -> tuple[float, float]:
    parts = text.split(",")
    try:
        lo, hi = (float(x) for x in parts) if len(parts) == 2 else (math.nan, math.nan)
    except ValueError:
        lo = hi = math.nan
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise InputError(f"score readout {readout!r}: range={text}: expected LO,HI with "
                         "finite LO < HI", field=field)
    return lo, hi


def aggregate(values: list[float], rule: str) -> float:
    """One score from a sample's per-step values by ``rule`` (``max``, ``mean``, ``last``)."""
    if rule == "max":
        return max(values)
    if rule == "mean":
        return sum(values) / len(values)
    return values[-1]


__all__ = ["DIRECTIONS", "EXTERNAL", "MISSING", "OPTIONS", "PREFIX", "STEPS", "ScoreReadout",
           "aggregate", "is_score_readout"]
