"""UK AISI Inspect eval logs (``.eval`` or ``.json``) as benchmarks, read with inspect_ai's own
log reader (the ``inspect`` extra).

A benchmark spec is the log's path, optionally followed by options as a query string::

    logs/run.eval
    logs/run.eval?scorer=includes&positive=I
    logs/run.json?scorer=match&positive=I,P&negative=C&category=spec_gaming&task=code

Options:

- ``scorer``: the scorer whose value labels each sample; without it every sample is unlabelled
  (``calimon score`` works, ``calimon curve`` needs labels).
- ``positive``: comma-separated values of that scorer that mean misbehavior (required with
  ``scorer``); values are compared as text, numbers as numbers, booleans as true/false.
- ``negative``: values that mean benign; default: every value not in ``positive``. When given, a
  value in neither list leaves the sample unlabelled.
- ``category`` (default ``safety``) and ``task`` (default ``reasoning``): the sample's cell.

Each sample (and epoch) becomes one `Sample`:

- ``request``: the task input (the sample's ``input``: its text, or the text of its non-system
  messages); the system prompt is left out (it is the agent's scaffold, not the task).
- ``response``: the trajectory, every message from the first assistant message on, rendered by
  `calimon.data.trajectory.render_parts`: the assistant's text, each tool call (the function
  and its arguments, one ``name: value`` line each), each tool result (and its error), and any
  later user or system message, each under a header line. Reasoning blocks, images and other
  media are not included.
- ``id``: ``<eval id>:<sample id>:<epoch>``; ``pair_id``: ``<eval id>:<sample id>`` (the epochs
  of one sample stay together); ``source``: ``inspect``; ``split``: none.
- ``meta``: ``inspect`` (log, eval id, run id, task, sample id, epoch, scorer and its value, and
  the error a sample ended in: such a sample is kept with the trajectory it has)
  and ``messages`` (the offsets of every rendered part, see `calimon.data.trajectory`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from calimon.data.trajectory import Part, render_parts
from calimon.errors import InputError, MissingExtraError
from calimon.samples import Sample, sample_from_dict

SUFFIXES = (".eval", ".json")
OPTIONS = ("scorer", "positive", "negative", "category", "task")


@dataclass(frozen=True)
class InspectOptions:
    """How the samples of a log are labelled and filed (module docstring)."""

    scorer: str | None = None
    positive: tuple[str, ...] = ()
    negative: tuple[str, ...] | None = None
    category: str = "safety"
    task: str = "reasoning"

    def label(self, value: Any) -> bool | None:
        """The label of a score ``value``: True (misbehavior), False (benign) or None."""
        if any(_same(value, v) for v in self.positive):
            return True
        if self.negative is None or any(_same(value, v) for v in self.negative):
            return False
        return None


def _same(value: Any, token: str) -> bool:
    if isinstance(value, bool):
        return token.strip().lower() == str(value).lower()
    if isinstance(value, int | float):
        try:
            return float(token) == float(value)
        except ValueError:
            return False
    return str(value) == token


def split_spec(spec: str) -> tuple[Path, str]:
    """The log path and the option query of a benchmark spec (query empty when none)."""
    if "?" in spec and not Path(spec).is_file():
        path, _, query = spec.partition("?")
        return Path(path), query
    return Path(spec), ""


def is_inspect_spec(spec: str) -> bool:
    """Whether a --benchmark value names an Inspect log (a ``.eval`` or ``.json`` path)."""
    return split_spec(spec)[0].suffix in SUFFIXES


def parse_options(query: str) -> InspectOptions:
    """The options of a spec's query string; an unknown or incomplete option raises
    InputError naming it."""
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise InputError(f"expected options as key=value&key=value, got {query!r}",
                         field="benchmark") from None
    given: dict[str, str] = {}
    for key, value in pairs:
        if key not in OPTIONS:
            raise InputError(f"unknown Inspect log option {key!r}; known: {list(OPTIONS)}",
                             field="benchmark")
        given[key] = value

    def values(key: str) -> tuple[str, ...]:
        return tuple(v.strip() for v in given[key].split(",") if v.strip())

    if "scorer" not in given and ({"positive", "negative"} & set(given)):
        raise InputError("positive/negative values need a scorer (add scorer=NAME)",
                         field="benchmark")
    positive = values("positive") if "positive" in given else ()
    if "scorer" in given and not positive:
        raise InputError(f"scorer={given['scorer']} needs positive=VALUE[,VALUE] (the values "
                         "that mean misbehavior)", field="benchmark")
    return InspectOptions(scorer=given.get("scorer") or None,
                          positive=positive,
                          negative=values("negative") if "negative" in given else None,
                          category=given.get("category", "safety"),
                          task=given.get("task", "reasoning"))


def _reader():
    try:
        from inspect_ai.log import read_eval_log, read_eval_log_samples
    except ImportError:
        raise MissingExtraError("reading Inspect logs needs inspect_ai: "
                                "pip install 'calimon[inspect]'") from None
    return read_eval_log, read_eval_log_samples


def load_inspect_log(spec: str) -> list[Sample]:
    """Every sample (and epoch) of the Inspect log a spec names, as `Sample` s (module
    docstring); errors name the file (and the sample and field)."""
    path, query = split_spec(spec)
    opts = parse_options(query)
    if not path.is_file():
        raise InputError("no such file", path=str(path))
    read_eval_log, read_eval_log_samples = _reader()
    try:
        header = read_eval_log(str(path), header_only=True)
    except Exception as exc:  # the reader raises pydantic, JSON, zip and key errors alike
        first = str(exc).splitlines()[0] if str(exc) else ""
        hint = "; a samples file is read as one when named .jsonl" if path.suffix == ".json" else ""
        raise InputError(f"not an Inspect eval log ({type(exc).__name__}: {first}){hint}",
                         path=str(path)) from None
    out: list[Sample] = []
    seen: set[str] = set()
    # events (often most of an agent log) and the store are not read; attachments are, to
    # resolve the messages' deduplicated content
    for es in read_eval_log_samples(str(path), all_samples_required=False,
                                    resolve_attachments=True, exclude_fields={"events", "store"}):
        sample = convert_sample(es, header.eval, opts, path)
        if sample.id in seen:
            raise InputError(f"duplicate sample {sample.id!r}", path=str(path), field="id")
        seen.add(sample.id)
        out.append(sample)
    return out


def convert_sample(es: Any, spec: Any, opts: InspectOptions, path: Path) -> Sample:
    """One Inspect ``EvalSample`` of the log whose ``EvalSpec`` is ``spec`` as a `Sample`."""
    sid = f"{spec.eval_id}:{es.id}:{es.epoch}"
    text, records = render_parts(trajectory_parts(es.messages))
    label, value = None, None
    if opts.scorer is not None:
        scores = es.scores or {}
        if opts.scorer not in scores:
            ended = "" if es.error is None else f" (it ended in an error: {es.error.message})"
            raise InputError(f"sample {es.id!r} (epoch {es.epoch}) has no score from scorer "
                             f"{opts.scorer!r}; its scorers: {sorted(scores)}{ended}",
                             path=str(path), field=f"scores.{opts.scorer}")
        value = scores[opts.scorer].value
        if isinstance(value, dict | list):
            raise InputError(f"sample {es.id!r}: scorer {opts.scorer!r} has a "
                             f"{type(value).__name__} value; only a single value can label",
                             path=str(path), field=f"scores.{opts.scorer}")
        label = opts.label(value)
    inspect_meta = {"log": str(path), "eval_id": spec.eval_id, "run_id": spec.run_id,
                    "task": spec.task, "sample_id": es.id, "epoch": es.epoch,
                    "scorer": opts.scorer, "score": value,
                    "error": es.error.message if es.error is not None else None}
    row = {"id": sid, "request": task_input(es.input), "response": text, "label": label,
           "category": opts.category, "task": opts.task,
           "pair_id": f"{spec.eval_id}:{es.id}", "source": "inspect",
           "meta": {"inspect": inspect_meta, "messages": records}}
    return sample_from_dict(row, path=str(path))


def task_input(value: Any) -> str:
    """The task input of a sample: its text, or its non-system messages' text."""
    if isinstance(value, str):
        return value
    return "\n\n".join(m.text for m in value if m.role != "system")


def trajectory_parts(messages: list[Any]) -> list[Part]:
    """The parts of every message from the first assistant message on (module docstring)."""
    first = next((i for i, m in enumerate(messages) if m.role == "assistant"), len(messages))
    parts: list[Part] = []
    for i in range(first, len(messages)):
        m = messages[i]
        if m.role == "tool":
            body = m.text
            if m.error is not None:
                body += ("\n" if body else "") + f"error ({m.error.type}): {m.error.message}"
            parts.append(Part(i, "tool", "tool_result", body, m.function or "?"))
            continue
        if m.text or m.role != "assistant" or not m.tool_calls:
            parts.append(Part(i, m.role, "text", m.text))
        for call in getattr(m, "tool_calls", None) or []:
            parts.append(Part(i, m.role, "tool_call", render_arguments(call), call.function))
    return parts


def render_arguments(call: Any) -> str:
    """A tool call's arguments, one ``name: value`` line each (strings as they are, other
    values as JSON), then its parse error if any."""
    lines = [f"{k}: {v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}"
             for k, v in (call.arguments or {}).items()]
    if call.parse_error:
        lines.append(f"parse error: {call.parse_error}")
    return "\n".join(lines) or "(no arguments)"


__all__ = ["OPTIONS", "SUFFIXES", "InspectOptions", "convert_sample", "is_inspect_spec",
           "load_inspect_log", "parse_options", "render_arguments", "split_spec",
           "task_input", "trajectory_parts"]
