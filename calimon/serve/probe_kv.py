"""A session's state for a probe monitor (`calimon.scoring.probes.monitor.ProbeMonitor`) on the
transformers backend, extended step by step: the step itself lives with the probes
(`calimon.scoring.probes.steps`, which the span study runs too); here, what a served monitor's
session adds to it.
"""

from __future__ import annotations

from calimon.scoring.probes.steps import ProbeState, depth_of, extend_probe, held_layers
from calimon.serve.kv import KVState


def probe_monitor(monitor):
    """The `ProbeMonitor` a served monitor is or wraps (a `WindowedMonitor`), else None."""
    from calimon.scoring.probes.monitor import ProbeMonitor

    inner = getattr(monitor, "inner", monitor)
    return inner if isinstance(inner, ProbeMonitor) else None


def seed_state(seed: KVState | None, response_start: int) -> ProbeState | None:
    """A new session's state from the template head's cache (`HeadCache.seed`)."""
    return None if seed is None else ProbeState(seed.ids, seed.cache, response_start)


__all__ = ["ProbeState", "depth_of", "extend_probe", "held_layers", "probe_monitor",
           "seed_state"]
