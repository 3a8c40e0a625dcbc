"""Whether a calibration map keeps the raw score's ranking: a map fitted decreasing (or flattened
to a constant) turns thresholds upside down, and so does a raw score that ranks the wrong way
on the set the map was fitted on. `calimon curve` stops on either unless told to keep it
(``--allow-inverted``), and the deployment commands say so on their first line."""

from __future__ import annotations

from typing import Any

import numpy as np

from calimon.calibration.maps import calibrator_from_dict
from calimon.curve_result import CurveResult
from calimon.numerics.metrics import auroc

ALLOW_FLAG = "--allow-inverted"


def inversion_findings(map_dict: dict[str, Any] | None, p_fit: Any = None,
                       y_fit: Any = None) -> list[str]:
    """What is inverted, in words: the map (``{"method", "params"}`` as saved) fitted
    decreasing, and the raw score's AUROC below 0.5 on its fit set (``p_fit``, ``y_fit``;
    None when the fit set is not at hand, e.g. a saved map applied). Empty: nothing is."""
    out: list[str] = []
    if map_dict is not None:
        cal = calibrator_from_dict(map_dict)
        found = cal.inversion()
        if found:
            out.append(f"{cal.method} map: {found}")
    if p_fit is not None:
        p, y = np.asarray(p_fit, dtype=float), np.asarray(y_fit, dtype=bool)
        if p.size and 0 < int(y.sum()) < y.size:
            a = auroc(p, y)
            if a < 0.5:
                out.append(f"raw AUROC {a:.3f} < 0.5 on the {p.size} samples the map was "
                           "fitted on: the score ranks misbehavior the wrong way")
    return out


def inversion_message(findings: list[str], readout: str) -> str:
    """The one line `calimon curve` stops with: the findings and the fix."""
    return ("; ".join(findings) + f". Thresholds certified on this map would flag the "
            f"transcripts the {readout!r} readout finds least like misbehavior. Use another "
            f"readout, prompt or model, or keep it with {ALLOW_FLAG} (recorded in curve.json; "
            "the readings are in the store, so a rerun makes no model calls)")


def inversion_note(doc: CurveResult | dict[str, Any]) -> str | None:
    """The first line a command that reads a run's curve.json prints when the run kept an
    inverted map (``inverted`` in the result, or in curve.json's object), else None."""
    if isinstance(doc, CurveResult):
        findings = doc.inverted.findings if doc.inverted else None
    else:
        inv = doc.get("inverted") if isinstance(doc, dict) else None
        findings = inv.get("findings", []) if inv else None
    if findings is None:
        return None
    return ("WARNING: this run's calibration is inverted, kept with "
            f"{ALLOW_FLAG}: " + "; ".join(findings))


def run_inversion_note(path) -> str | None:
    """`inversion_note` of the run whose curve.json is in ``path`` (a run folder, or a file in
    one); None when there is none or it cannot be read (the command reading it says why)."""
    from pathlib import Path

    from calimon.errors import InputError
    from calimon.run_folder import read_curve_json

    folder = Path(path)
    try:
        result = read_curve_json(folder if folder.is_dir() else folder.parent)
    except InputError:
        return None
    return inversion_note(result)
