"""What a policy's design run recorded it scored with: the ``provenance`` of its curve.json
(read by `calimon escalate` and `calimon pin-policy` to pin it into the policy,
`calimon.deploy.pinned`, through the one typed curve.json reader)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def run_provenance(run_dir: Path | None) -> dict[str, Any]:
    """The ``provenance`` of a run's curve.json ({} when the run has no curve.json; a broken
    one is an error naming the file)."""
    from calimon.run_folder import read_curve_json

    if run_dir is None or not (Path(run_dir) / "curve.json").is_file():
        return {}
    return read_curve_json(run_dir).provenance.as_dict()
