"""What a model name brings with it: the calibration map a probe bundle ships (``probe:<bundle>``
readouts). A policy file brings everything it decides with itself, read by the one resolver
`calimon serve` uses too (`calimon.deploy.pinned.resolve_policy`): no map is looked up beside
it or put in the place of the one it pins.
"""

from __future__ import annotations

from typing import Any

from calimon.deploy.pinned import ResolvedPolicy, monitor_identity, resolve_policy


def bundle_map(monitor: Any) -> Any:
    """The calibration map a probe bundle ships (``probe:<bundle>`` readouts), or None; used
    for a monitor built from a model name without a map, never for a policy."""
    bundle = getattr(monitor, "bundle", None)
    return getattr(bundle, "calibration", None)


# the identity `calimon.provenance.meet` compares, for a built monitor
monitor_provenance = monitor_identity

__all__ = ["ResolvedPolicy", "bundle_map", "monitor_provenance", "resolve_policy"]
