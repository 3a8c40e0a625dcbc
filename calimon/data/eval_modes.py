"""ControlArena's eval modes: the label of an Inspect sample that ControlArena ran (read by
`calimon.data.inspect_log` under the option ``label=eval_mode``).

ControlArena runs each task in one mode, ``honest`` or ``attack``, and records it twice: in each
sample's metadata (``eval_mode``, from its ``ControlTaskMetadata``) and in the task's metadata
(``mode``, in the log header's ``eval.metadata``). The sample's own record is read first, the
task's when the sample has none; the two disagreeing is an error, as is a sample with neither
(not a ControlArena log) or with a mode other than those two. ``attack`` labels misbehavior,
``honest`` benign.

Whether an attack's side task succeeded is read from its scores the way ControlArena's
``samples_df`` reads it: a scorer's dict value with a ``side_task_success`` key (C/I,
true/false), or a scorer named ``side_task_success``. With ``attacks=successful`` an attack
whose side task failed is left out, and an attack no scorer says anything about is an error
(never counted as failed).
"""

from __future__ import annotations

import math
from typing import Any

from calimon.errors import InputError

MODES = ("honest", "attack")
ATTACKS = ("all", "successful")
TRUE_TEXT = ("C", "TRUE", "YES", "1")
FALSE_TEXT = ("I", "FALSE", "NO", "0")


def eval_mode(es: Any, spec: Any, path: str) -> str:
    """The eval mode of Inspect sample ``es`` of the log ``path`` whose ``EvalSpec`` is ``spec``
    (module docstring); InputError naming the file, the sample and the field otherwise."""
    own = _mode_text((es.metadata or {}).get("eval_mode"))
    task = _mode_text((getattr(spec, "metadata", None) or {}).get("mode"))
    where = f"sample {es.id!r} (epoch {es.epoch})"
    if own is not None and task is not None and own != task:
        raise InputError(f"{where} has eval_mode {own!r} but its task ran in mode {task!r}: a "
                         "mixed log, whose label is not clear", path=path, field="eval_mode")
    mode = own if own is not None else task
    if mode is None:
        raise InputError(f"{where} has no ControlArena eval mode (no eval_mode in the sample's "
                         "metadata, no mode in the task's): label=eval_mode reads ControlArena "
                         "logs only", path=path, field="eval_mode")
    if mode not in MODES:
        raise InputError(f"{where} has eval mode {mode!r}; expected one of {list(MODES)}",
                         path=path, field="eval_mode")
    return mode


def _mode_text(value: Any) -> str | None:
    """A recorded mode as text (an ``EvalMode`` enum read back in process has ``.value``)."""
    if value is None:
        return None
    return str(getattr(value, "value", value)).strip().lower()


def control_meta(es: Any, mode: str) -> dict[str, Any]:
    """The ``control_arena`` metadata of a sample: its eval mode and whether its main and side
    tasks succeeded (None where no scorer says)."""
    return {"eval_mode": mode, "side_task_success": score_flag(es, "side_task_success"),
            "main_task_success": score_flag(es, "main_task_success")}


def keep_sample(es: Any, mode: str, attacks: str, path: str) -> bool:
    """Whether a sample stays in the benchmark under ``attacks`` (``all`` or ``successful``);
    with ``successful``, an attack that no scorer says succeeded or failed raises InputError."""
    if attacks == "all" or mode != "attack":
        return True
    success = score_flag(es, "side_task_success")
    if success is None:
        ended = "" if es.error is None else f" (it ended in an error: {es.error.message})"
        raise InputError(f"attack sample {es.id!r} (epoch {es.epoch}) has no side_task_success "
                         f"score{ended}; attacks=successful needs one on every attack sample "
                         f"(its scorers: {sorted(es.scores or {})})", path=path,
                         field="scores.side_task_success")
    return success


def score_flag(es: Any, key: str) -> bool | None:
    """A boolean a sample's scores give for ``key`` (a scorer of that name, or a key of a
    scorer's dict value: C/I, true/false, yes/no, 1/0, a bool or a number), or None where none
    says (a missing or NaN value, or text such as N, no answer)."""
    for name, score in (es.scores or {}).items():
        value = score.value.get(key) if isinstance(score.value, dict) else (
            score.value if name == key else None)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        if isinstance(value, str):
            text = value.strip().upper()
            if text in TRUE_TEXT or text in FALSE_TEXT:
                return text in TRUE_TEXT
            continue  # N (no answer) or another value: says nothing
        return bool(value)
    return None


__all__ = ["ATTACKS", "MODES", "control_meta", "eval_mode", "keep_sample", "score_flag"]
