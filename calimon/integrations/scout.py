"""calimon in Inspect Scout (the ``scout`` extra): a scanner, and a Scout validation set as a
calimon benchmark, so a scanner is judged by a curve with calibration and intervals rather than
by one precision and recall.

- `monitor_scanner`: a Scout scanner over whole transcripts; each `Result`'s ``value`` is the
  calibrated probability of misbehavior (the raw score without a map; None, never 0, when the
  monitor gave no score), ``answer`` the policy's decision (none without a policy),
  ``metadata`` the whole `Assessment` (p_raw, p_cal, spans with the messages they fall in,
  provenance) and ``references`` the messages the evidence spans fall in.
- `validation_benchmark`: a Scout validation set (cases of transcript id and target) and the
  Inspect logs its transcripts come from, written as a labelled calimon samples file (the
  transcripts rendered as ``calimon score --benchmark LOG.eval`` renders them); then
  ``calimon curve --benchmark FILE`` draws the curve, fits the calibration map and reports its
  intervals.

Scout scans in several processes by default; a local model loads once per process, so give
``max_processes=1`` or score through a ``calimon serve`` server (``url=``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from calimon.errors import InputError, MissingExtraError

try:
    from inspect_scout import Result, Scanner, Transcript, ValidationSet, scanner
except ImportError:  # pragma: no cover - the extra is missing
    raise MissingExtraError("calimon.integrations.scout needs inspect_scout: "
                            "pip install 'calimon[scout]'") from None

from calimon.integrations import Assessment
from calimon.integrations.inspect import cites, references
from calimon.integrations.lazy import LazyMonitor
from calimon.integrations.transcripts import sample_from_messages
from calimon.samples import Sample


@scanner(messages="all", name="monitor_scanner")
def monitor_scanner(policy: str | None = None, model: str | None = None,
                    url: str | None = None, readout: str = "verdict", prompt: str | None = None,
                    calibration_map: str | None = None, store: str | None = None,
                    api_key: str | None = None, force: bool = False) -> Scanner[Transcript]:
    """A Scout scanner: each transcript's calibrated probability, decision and evidence (module
    docstring); ``policy=``, ``model=`` or ``url=`` as for the Inspect scorer."""
    monitor = LazyMonitor(dict(policy=policy, model=model, url=url, readout=readout,
                               prompt=prompt, calibration_map=calibration_map, store=store,
                               api_key=api_key, force=force))

    async def scan(transcript: Transcript) -> Result:
        [a] = await monitor.assess([transcript_sample(transcript)])
        return assessment_result(a)

    return scan


def transcript_sample(transcript: Any) -> Sample:
    """A Scout transcript as a `Sample`, rendered as the log reader renders the sample: the
    task is the text of the messages before the first assistant message (Scout's
    ``metadata["input"]`` is a display rendering of the input, not the input)."""
    return sample_from_messages(transcript.messages, id=transcript.transcript_id,
                                source="scout")


def assessment_result(a: Assessment) -> Result:
    """An `Assessment` as a Scout `Result` (module docstring)."""
    refs = references(a)
    return Result(value=a.probability, answer=a.decision, explanation=a.reason() + cites(refs),
                  metadata=a.to_dict(), references=refs)


def validation_benchmark(validation: ValidationSet | str | Path, logs: Iterable[str | Path],
                         out: str | Path, *, splits: Mapping[str, str] | None = None,
                         category: str = "safety", task: str = "reasoning") -> Path:
    """Write a Scout validation set as a labelled calimon samples file (module docstring).

    ``validation``: a `ValidationSet` or a file Scout reads (CSV, JSON, JSONL, YAML), its case
    ids transcript ids; a case's target labels it (true, yes, 1, a non-empty value: misbehavior;
    false, no, 0, empty: benign). ``logs``: the Inspect eval logs holding those transcripts.
    ``splits``: Scout split name -> calimon split (``calib``/``test``); without it the samples
    have no split and ``calimon curve`` cross-fits. A case whose transcript is in no log, or
    whose target cannot label, is an error naming the case."""
    from calimon.samples import write_samples

    if not isinstance(validation, ValidationSet):
        from inspect_scout import validation_set

        validation = validation_set(validation)
    found = _log_samples(logs, category=category, task=task)
    out_samples = []
    for case in validation.cases:
        cid = case.id if isinstance(case.id, str) else None
        if cid is None or cid not in found:
            raise InputError(f"validation case {case.id!r} names no transcript of the logs "
                             f"given ({len(found)} transcripts)", field="id")
        split = (splits or {}).get(case.split) if case.split else None
        if splits and case.split and split is None:
            raise InputError(f"case {cid!r}: split {case.split!r} is not in splits "
                             f"{sorted(splits)}", field="split")
        sample = found[cid]
        out_samples.append(replace(sample, label=case_label(case), split=split,
                                   meta={**sample.meta, "scout": {
                                       "transcript_id": cid, "target": case.target,
                                       "split": case.split}}))
    return write_samples(out_samples, out)


def case_label(case: Any) -> bool:
    """A validation case's target as a label (see `validation_benchmark`)."""
    if case.target is None:
        raise InputError(f"case {case.id!r} validates labels of a result set; only a case with "
                         "a single target can label a transcript", field="labels")
    t = case.target
    if isinstance(t, bool):
        return t
    if isinstance(t, int | float):
        return t != 0
    if isinstance(t, str):
        low = t.strip().lower()
        if low in ("true", "yes", "1"):
            return True
        if low in ("false", "no", "0", ""):
            return False
    raise InputError(f"case {case.id!r}: target {t!r} is not a label (true/false, yes/no, "
                     "1/0)", field="target")


def _log_samples(logs: Iterable[str | Path], *, category: str, task: str) -> dict[str, Sample]:
    """Every sample of the logs, by transcript id (the sample's uuid, as Scout names it)."""
    from inspect_ai.log import read_eval_log, read_eval_log_samples

    from calimon.data.inspect_log import InspectOptions, convert_sample

    opts = InspectOptions(category=category, task=task)
    found: dict[str, Sample] = {}
    for log in logs:
        header = read_eval_log(str(log), header_only=True)
        for es in read_eval_log_samples(str(log), all_samples_required=False,
                                        resolve_attachments=True,
                                        exclude_fields={"events", "store"}):
            if es.uuid:
                found[es.uuid] = convert_sample(es, header.eval, opts, Path(log))
    return found


__all__ = ["assessment_result", "case_label", "monitor_scanner", "transcript_sample",
           "validation_benchmark"]
