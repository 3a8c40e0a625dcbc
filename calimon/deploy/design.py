"""The run a policy was designed on: where it is, and what its curve.json says it scored with
(read by `calimon serve` and the integrations, through the one typed curve.json reader)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def design_run(policy: Any, policy_path: Path) -> Path | None:
    """The folder of the run the policy was designed on (its provenance ``source``, read from
    the working directory or next to the policy file); None when it is not on this machine."""
    source = policy.provenance.get("source")
    if not isinstance(source, str) or not source:
        return None
    for candidate in (Path(source), Path(policy_path).parent / source):
        folder = candidate if candidate.is_dir() else candidate.parent
        if candidate.exists() and (folder / "curve.json").is_file():
            return folder
    return None


def run_provenance(run_dir: Path | None) -> dict[str, Any]:
    """The ``provenance`` of a run's curve.json ({} when the run has no curve.json; a broken
    one is an error naming the file)."""
    from calimon.run_folder import read_curve_json

    if run_dir is None or not (Path(run_dir) / "curve.json").is_file():
        return {}
    return read_curve_json(run_dir).provenance.as_dict()
