"""UK AISI Inspect eval logs (``.eval`` or ``.json``) as benchmarks (the ``inspect`` extra): a
complete ``.eval`` log read directly (`calimon.data.inspect_files`, the same samples), any other
with inspect_ai's own log reader.

A benchmark spec names one log, a folder of logs, or a glob pattern of logs, optionally followed
by options as a query string::

    logs/run.eval
    logs/run.eval?scorer=includes&positive=I
    logs/run.json?scorer=match&positive=I,P&negative=C&category=spec_gaming&task=code
    logs/control?label=eval_mode
    logs/control?label=eval_mode&attacks=successful
    logs/control/*attack*.eval?label=eval_mode

A folder is every log Inspect's own listing would find in it, sub-folders included (``.eval`` files,
and ``.json`` files named as Inspect names logs, so its ``logs.json`` or ``eval-set.json`` are not
read); a pattern (``*``, ``**``, ``[...]``) is every ``.eval`` / ``.json`` file it matches. The
logs are read in path order as one benchmark; a folder or pattern without a log is an error
naming it, as is a sample id found in two logs.

Options:

- ``scorer``: the scorer whose value labels each sample; without it (and without ``label``)
  every sample is unlabelled (``calimon score`` works, ``calimon curve`` needs labels).
- ``positive``: comma-separated values of that scorer that mean misbehavior (required with
  ``scorer``); values are compared as text, numbers as numbers, booleans as true/false.
- ``negative``: values that mean benign; default: every value not in ``positive``. When given, a
  value in neither list leaves the sample unlabelled.
- ``label=eval_mode``: label by the eval mode ControlArena recorded (`calimon.data.eval_modes`):
  ``attack`` means misbehavior, ``honest`` benign; a sample without a mode, or whose own mode
  and its task's disagree, is an error naming the file and the sample. Not with ``scorer``.
- ``attacks`` (with ``label=eval_mode``): ``all`` (default), or ``successful``: leave out the
  attacks whose side task failed (an attack whose scores say nothing of its side task is an
  error). Honest samples are all kept.
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
  the error a sample ended in: such a sample is kept with the trajectory it has),
  ``messages`` (the offsets of every rendered part, see `calimon.data.trajectory`) and, with
  ``label=eval_mode``, ``control_arena`` (the eval mode and whether the main and side tasks
  succeeded: true, false, or null where no scorer says); ``scores`` (every single value its
  scorers gave, a dict value as ``scorer.key``) and ``step_scores`` (the numbers each
  assistant message recorded in its metadata, such as ControlArena's ``suspicion_score``): what
  a ``score:NAME`` readout reads (`calimon.score_readout`).
"""

from __future__ import annotations

import glob
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from calimon.data.eval_modes import ATTACKS, control_meta, eval_mode, keep_sample
from calimon.data.inspect_files import folder_logs, read_eval_zip
from calimon.data.trajectory import Part, render_parts
from calimon.errors import InputError, MissingExtraError
from calimon.samples import Sample, sample_from_dict

SUFFIXES = (".eval", ".json")
OPTIONS = ("scorer", "positive", "negative", "label", "attacks", "category", "task")
LABELS = ("eval_mode",)  # the values of the label option
GLOB_CHARS = "*["


@dataclass(frozen=True)
class InspectOptions:
    """How the samples of a log are labelled and filed (module docstring)."""

    scorer: str | None = None
    positive: tuple[str, ...] = ()
    negative: tuple[str, ...] | None = None
    category: str = "safety"
    task: str = "reasoning"
    by_eval_mode: bool = False  # label=eval_mode: ControlArena's mode labels
    attacks: str = "all"  # with by_eval_mode: all, or successful (side task succeeded) only

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
    """Whether a --benchmark value names Inspect logs: a ``.eval`` or ``.json`` path (or a
    pattern of them), or a folder (a registered benchmark's name is checked first by
    `calimon.data.registry`)."""
    path = split_spec(spec)[0]
    return path.suffix in SUFFIXES or path.is_dir()


def log_paths(path: Path) -> list[Path]:
    """The log files a spec's path names: the file itself, every log in a folder (Inspect's own
    listing, sub-folders included: ``.eval`` files and ``.json`` files named as Inspect names
    logs), or every ``.eval`` / ``.json`` file a glob pattern matches; sorted by path. A folder
    or pattern with no log raises InputError naming it."""
    if path.is_dir():
        found = folder_logs(path)
        if not found:
            raise InputError("no Inspect log in this folder (.eval files, or .json files named "
                             "as Inspect names logs, sub-folders included)", path=str(path))
        return found
    if any(c in str(path) for c in GLOB_CHARS) and not path.is_file():
        found = sorted(Path(p) for p in glob.glob(str(path), recursive=True)
                       if Path(p).is_file() and Path(p).suffix in SUFFIXES)
        if not found:
            raise InputError("no Inspect log (.eval or .json file) matches this pattern",
                             path=str(path))
        return found
    if not path.is_file():
        raise InputError("no such file", path=str(path))
    return [path]


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

    by_eval_mode = _label_option(given)
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
                          task=given.get("task", "reasoning"),
                          by_eval_mode=by_eval_mode, attacks=given.get("attacks", "all"))


def _label_option(given: dict[str, str]) -> bool:
    """Whether the options ask for ControlArena's eval-mode labels (``label=eval_mode``),
    checking ``label`` and ``attacks`` against each other and against ``scorer``."""
    label = given.get("label")
    if label is not None and label not in LABELS:
        raise InputError(f"label={label}: expected one of {list(LABELS)} (or label by a scorer "
                         "with scorer=NAME&positive=VALUE)", field="benchmark")
    if label is not None and "scorer" in given:
        raise InputError("label=eval_mode and scorer= both label the samples: give one",
                         field="benchmark")
    attacks = given.get("attacks")
    if attacks is not None and attacks not in ATTACKS:
        raise InputError(f"attacks={attacks}: expected one of {list(ATTACKS)}",
                         field="benchmark")
    if attacks is not None and label is None:
        raise InputError(f"attacks={attacks} needs label=eval_mode (ControlArena's attack "
                         "runs)", field="benchmark")
    return label == "eval_mode"


def _require_inspect() -> None:
    """MissingExtraError unless inspect_ai is installed (found, not imported: a log this module
    reads directly needs none of it)."""
    from importlib.util import find_spec

    if find_spec("inspect_ai") is None:
        raise MissingExtraError("reading Inspect logs needs inspect_ai: "
                                "pip install 'calimon[inspect]'")


def _reader():
    try:
        from inspect_ai.log import read_eval_log, read_eval_log_samples
    except ImportError:
        raise MissingExtraError("reading Inspect logs needs inspect_ai: "
                                "pip install 'calimon[inspect]'") from None
    return read_eval_log, read_eval_log_samples


def load_inspect_log(spec: str) -> list[Sample]:
    """Every sample (and epoch) of the Inspect log(s) a spec names (a file, a folder or a
    pattern), as `Sample` s (module docstring); errors name the file (and the sample and
    field)."""
    path, query = split_spec(spec)
    opts = parse_options(query)
    _require_inspect()  # the extra's error before anything else
    return load_logs(log_paths(path), opts)


def load_logs(paths: Iterable[Path], opts: InspectOptions) -> list[Sample]:
    """The samples of several log files, in order, as one benchmark; a sample id found twice
    raises InputError naming both files."""
    out: list[Sample] = []
    seen: dict[str, Path] = {}
    for log in paths:
        for sample in log_samples(log, opts):
            if sample.id in seen:
                also = "" if seen[sample.id] == log else f" (also in {seen[sample.id]})"
                raise InputError(f"duplicate sample {sample.id!r}{also}", path=str(log),
                                 field="id")
            seen[sample.id] = log
            out.append(sample)
    return out


def log_samples(path: Path, opts: InspectOptions) -> list[Sample]:
    """The samples of one log file under ``opts`` (those ``attacks=successful`` leaves out
    dropped); an unreadable file raises InputError naming it."""
    if not path.is_file():
        raise InputError("no such file", path=str(path))
    header, samples = read_eval_zip(path) or _read_with_inspect(path)
    out: list[Sample] = []
    for es in samples:
        sample = convert_sample(es, header.eval, opts, path)
        mode = sample.meta.get("control_arena", {}).get("eval_mode")
        if mode is None or keep_sample(es, mode, opts.attacks, str(path)):
            out.append(sample)
    return out


def _read_with_inspect(path: Path) -> tuple[Any, Iterable[Any]]:
    """The header and samples of a log by Inspect's own reader (a log `read_eval_zip` does not
    read); an unreadable file raises InputError naming it."""
    read_eval_log, read_eval_log_samples = _reader()
    try:
        header = read_eval_log(str(path), header_only=True)
    except Exception as exc:  # the reader raises pydantic, JSON, zip and key errors alike
        first = str(exc).splitlines()[0] if str(exc) else ""
        hint = "; a samples file is read as one when named .jsonl" if path.suffix == ".json" else ""
        raise InputError(f"not an Inspect eval log ({type(exc).__name__}: {first}){hint}",
                         path=str(path)) from None
    return header, _eval_samples(path, header, read_eval_log, read_eval_log_samples)


WHOLE_LOG_SAMPLES = 5000  # a complete log up to this size is read in one pass


def _eval_samples(path: Path, header: Any, read_eval_log: Any, read_eval_log_samples: Any
                  ) -> Iterable[Any]:
    """The samples of a log in its dataset's order (sample ids, then epochs). Events (often
    most of an agent log) and the store are not read; attachments are, to resolve the
    messages' deduplicated content. A complete log of at most `WHOLE_LOG_SAMPLES` samples is
    read in one pass (Inspect's per-sample reader runs an event loop per sample: four times
    the time on 1,000 samples); a larger or incomplete one, sample by sample."""
    fields = {"events", "store"}
    ids = header.eval.dataset.sample_ids
    size = len(ids or ()) * (header.eval.config.epochs or 1)
    if header.status != "success" or header.invalidated or not ids or size > WHOLE_LOG_SAMPLES:
        return read_eval_log_samples(str(path), all_samples_required=False,
                                     resolve_attachments=True, exclude_fields=fields)
    order = {sid: i for i, sid in enumerate(ids)}
    log = read_eval_log(str(path), resolve_attachments=True, exclude_fields=fields)
    return sorted(log.samples or (), key=lambda es: (order.get(es.id, len(order)), es.epoch))


def convert_sample(es: Any, spec: Any, opts: InspectOptions, path: Path) -> Sample:
    """One Inspect ``EvalSample`` of the log whose ``EvalSpec`` is ``spec`` as a `Sample`."""
    sid = f"{spec.eval_id}:{es.id}:{es.epoch}"
    text, records = render_parts(trajectory_parts(es.messages))
    label, value = None, None
    meta: dict[str, Any] = {}
    if opts.scorer is not None:
        label, value = _scorer_label(es, opts, path)
    elif opts.by_eval_mode:
        mode = eval_mode(es, spec, str(path))
        label, meta["control_arena"] = mode == "attack", control_meta(es, mode)
    inspect_meta = {"log": str(path), "eval_id": spec.eval_id, "run_id": spec.run_id,
                    "task": spec.task, "sample_id": es.id, "epoch": es.epoch,
                    "scorer": opts.scorer, "score": value,
                    "error": es.error.message if es.error is not None else None}
    row = {"id": sid, "request": task_input(es.input), "response": text, "label": label,
           "category": opts.category, "task": opts.task,
           "pair_id": f"{spec.eval_id}:{es.id}", "source": "inspect",
           "meta": {"inspect": inspect_meta, "messages": records, **meta,
                    "scores": sample_scores(es), "step_scores": step_scores(es.messages)}}
    return sample_from_dict(row, path=str(path))


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool)


def sample_scores(es: Any) -> dict[str, Any]:
    """Every single value a sample's scorers gave, by scorer name (a scorer whose value is a
    dict gives one entry per key, ``scorer.key``), for a ``score:NAME`` readout."""
    out: dict[str, Any] = {}
    for name, score in (es.scores or {}).items():
        value = score.value
        if isinstance(value, dict):
            out.update({f"{name}.{k}": v for k, v in value.items() if _scalar(v)})
        elif _scalar(value):
            out[name] = value
    return out


def step_scores(messages: list[Any]) -> dict[str, list[float]]:
    """The numbers each assistant message recorded in its metadata (as ControlArena's monitors
    record ``suspicion_score``), by key, in message order."""
    out: dict[str, list[float]] = {}
    for m in messages:
        if m.role != "assistant" or not getattr(m, "metadata", None):
            continue
        for key, value in m.metadata.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                out.setdefault(key, []).append(value)
    return out


def _scorer_label(es: Any, opts: InspectOptions, path: Path) -> tuple[bool | None, Any]:
    """The label and the score value of a sample by the options' scorer."""
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
    return opts.label(value), value


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


__all__ = ["LABELS", "OPTIONS", "SUFFIXES", "InspectOptions", "convert_sample",
           "is_inspect_spec", "load_inspect_log", "load_logs", "log_paths", "log_samples", "parse_options",
           "render_arguments", "sample_scores", "split_spec", "step_scores", "task_input",
           "trajectory_parts"]
