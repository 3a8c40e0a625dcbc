"""Readings of a ``score:NAME`` readout (`calimon.score_readout`): the scores the samples already
hold, read instead of running a model.

Where a sample keeps its scores: ``meta["scores"]`` (an Inspect log's scorer values, a CSV's
columns: `calimon.data.inspect_log`, `calimon.data.score_table`), any field of ``meta`` by a
dotted name (a JSONL samples file's own fields), and ``meta["step_scores"]`` (the numbers each
assistant message of an Inspect log recorded in its metadata, by name, in message order).

Readings are keyed by transcript hash, as every study reads them; two samples with one transcript
but different scores are an error naming both (a sample without a transcript is keyed by its id,
`calimon.samples.Sample.transcript_hash`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from calimon.errors import InputError
from calimon.samples import Sample
from calimon.score_readout import ScoreReadout, aggregate
from calimon.verdict import Verdict

_ABSENT = object()


def sample_file(sample: Sample, source: str) -> str:
    """The file a sample came from, for an error: its Inspect log, else the benchmark."""
    inspect = sample.meta.get("inspect")
    log = inspect.get("log") if isinstance(inspect, dict) else None
    return str(log or sample.meta.get("file") or source)


def _meta_path(meta: dict, name: str) -> Any:
    node: Any = meta
    for part in name.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def recorded_value(sample: Sample, readout: ScoreReadout) -> tuple[Any, str] | None:
    """The value a sample recorded for ``readout`` and where it came from (``score``, or
    ``steps:RULE``); None when it has none. Per-step values are aggregated here (a step whose
    value is not a number is skipped only when others are numbers: it is reported otherwise)."""
    if readout.steps is None:
        scores = sample.meta.get("scores")
        if isinstance(scores, dict) and readout.name in scores:
            return scores[readout.name], "score"
        value = _meta_path(sample.meta, readout.name)
        if value is not _ABSENT and not isinstance(value, dict | list):
            return value, "score"
    rule = readout.steps or "max"
    steps = (sample.meta.get("step_scores") or {}).get(readout.name)
    if not steps:
        return None
    numbers = [v for v in steps if isinstance(v, int | float) and not isinstance(v, bool)]
    if len(numbers) != len(steps):
        bad = next(v for v in steps if v not in numbers)
        return bad, f"steps:{rule}"
    return aggregate(numbers, rule), f"steps:{rule}"


def _known(sample: Sample) -> str:
    scores = sorted(sample.meta.get("scores") or {})
    steps = sorted(sample.meta.get("step_scores") or {})
    return f"its scores: {scores}; its steps' scores: {steps}"


def recorded_readings(samples: Sequence[Sample], readout: str, *, source: str = ""
                      ) -> dict[str, Verdict]:
    """The readings of ``samples`` under a ``score:NAME`` readout, by transcript hash. A missing
    or unusable score raises InputError naming the file, the sample and the field, unless the
    readout says ``missing=skip``: then that sample's reading has status ``error`` (no score)."""
    parsed = ScoreReadout.parse(readout)
    name = str(parsed)
    out: dict[str, Verdict] = {}
    owner: dict[str, str] = {}
    for x in samples:
        verdict = _reading(x, parsed, name, source)
        key = x.transcript_hash
        if key in out and out[key].p_raw != verdict.p_raw:
            raise InputError(f"samples {owner[key]!r} and {x.id!r} have the same transcript but "
                             f"different scores ({out[key].p_raw} and {verdict.p_raw}); readings "
                             "are kept by transcript", path=sample_file(x, source),
                             field=f"scores.{parsed.name}")
        out.setdefault(key, verdict)
        owner.setdefault(key, x.id)
    return out


def _reading(x: Sample, parsed: ScoreReadout, name: str, source: str) -> Verdict:
    found = recorded_value(x, parsed)
    field = f"scores.{parsed.name}"
    try:
        if found is None:
            raise ValueError(f"sample {x.id!r} has no score {parsed.name!r} ({_known(x)})")
        value, origin = found
        p = parsed.to_p(value, where=f"sample {x.id!r}")
    except ValueError as exc:
        if parsed.missing == "skip":
            return Verdict(transcript_hash=x.transcript_hash, readout=name, status="error",
                           error=str(exc))
        raise InputError(f"{exc} (missing=skip in the readout leaves such samples unscored)",
                         path=sample_file(x, source), field=field) from None
    return Verdict(transcript_hash=x.transcript_hash, readout=name, status="ok", p_raw=p,
                   extra={"score": value, "from": origin})


TRUE_WORDS, FALSE_WORDS = ("true", "1", "yes"), ("false", "0", "no")


def recorded_decisions(samples: Sequence[Sample], name: str, *, source: str = ""
                       ) -> dict[str, Verdict]:
    """Binary readings of a boolean the samples hold (``name`` looked up as a score is): True,
    False, 1, 0 or the words true/false, yes/no; anything else raises InputError naming the
    file, sample and field. A sample without it has no reading (it is left off the point)."""
    parsed = ScoreReadout(name=name)
    out: dict[str, Verdict] = {}
    for x in samples:
        found = recorded_value(x, parsed)
        if found is None:
            continue
        value = found[0]
        word = str(value).strip().lower()
        if isinstance(value, bool):
            decision = value
        elif isinstance(value, int | float) and value in (0, 1):
            decision = value == 1
        elif word in TRUE_WORDS + FALSE_WORDS:
            decision = word in TRUE_WORDS
        else:
            raise InputError(f"sample {x.id!r}: {name!r} is {value!r}, not a boolean (true/false, "
                             "1/0, yes/no)", path=sample_file(x, source), field=f"scores.{name}")
        out[x.transcript_hash] = Verdict(transcript_hash=x.transcript_hash, readout="binary",
                                         status="ok", p_raw=float(decision), decision=decision)
    return out


__all__ = ["recorded_decisions", "recorded_readings", "recorded_value", "sample_file"]
