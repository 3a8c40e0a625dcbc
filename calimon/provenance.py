"""Where artifacts meet a run: a calibration map, a policy, a probe head or a bundle made for one
monitor and applied to the readings (or the model) of another would give numbers that mean
nothing, silently. `meet` compares what both record (model and revision, prompt and template
hash, readout, defenses) and refuses a mismatch with one line naming both sides; ``force``
lets it through and returns what differed, for the caller to record."""

from __future__ import annotations

from typing import Any

from calimon.errors import InputError

CHECKED = ("model", "model_revision", "prompt", "template_hash", "readout", "defenses")


class ProvenanceMismatchError(InputError):
    """An artifact applied to a run of another model, prompt, readout or defense."""


def mismatches(artifact: dict[str, Any], run: dict[str, Any],
               keys: tuple[str, ...] = CHECKED, *, against: str = "run") -> list[str]:
    """``"KEY 'a' vs run 'b'"`` for each key both record with different values (``against``
    names the other side: a run, a bundle, a model)."""
    out = []
    for key in keys:
        a, b = artifact.get(key), run.get(key)
        if a is None or b is None:
            continue
        if isinstance(a, list | tuple) or isinstance(b, list | tuple):
            a, b = sorted(a or []), sorted(b or [])
        if a != b:
            out.append(f"{key} {a!r} vs {against} {b!r}")
    return out


def meet(what: str, artifact: dict[str, Any], run: dict[str, Any], *, force: bool = False,
         path: str | None = None, keys: tuple[str, ...] = CHECKED,
         against: str = "run") -> list[str]:
    """Check that ``artifact`` (e.g. ``"calibration map"``) fits ``run`` (``against``: what
    the other side is called); returns the mismatches let through by ``force`` ([] when
    none), else raises `ProvenanceMismatchError` naming both sides and ``--force``."""
    found = mismatches(artifact, run, keys, against=against)
    if found and not force:
        raise ProvenanceMismatchError(
            f"this {what} was made for another monitor: " + "; ".join(
                f"{what.split()[-1]} {m}" for m in found)
            + " (--force applies it anyway, recorded)", path=path)
    return found
