"""One session per trajectory for the integrations that score an agent at every step (the Inspect
approver, the ControlArena monitor): the trajectory of the running Inspect sample is keyed by its
sample id, epoch and the sample run's uuid (so the honest and attack tasks of one ControlArena
evaluation, which share sample ids, never share a session), each step is read as the next step
of that session (`calimon.integrations.local.LocalMonitor.assess_step`, in process, or
`calimon.integrations.remote.RemoteMonitor.assess_step`, through a ``calimon serve`` server), and
the sessions of a sample are forgotten when Inspect ends the sample (an Inspect hook,
`ForgetSessions`, registered on import). Outside a running sample a trajectory is scored whole.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from calimon.errors import MissingExtraError

try:
    from inspect_ai.hooks import Hooks, SampleEnd, hooks
except ImportError:  # pragma: no cover - the extra is missing
    raise MissingExtraError("calimon.integrations.trajectories needs inspect_ai: "
                            "pip install 'calimon[inspect]'") from None

from calimon.integrations.assessment import Assessment
from calimon.integrations.lazy import LazyMonitor
from calimon.samples import Sample

_open: dict[str, set[tuple[LazyMonitor, str]]] = {}  # sample run uuid -> (monitor, key)
_open_lock = threading.Lock()


def running_sample() -> Any:
    """Inspect's `TaskState` of the sample running in this context, or None."""
    try:  # the accessor ControlArena reads too; inspect_ai exports no public one
        from inspect_ai.solver._task_state import sample_state
    except ImportError:  # pragma: no cover - an Inspect without it: every step scored whole
        return None
    return sample_state()


def trajectory_key(state: Any, role: str) -> str:
    """The session key of a sample run's trajectory for one monitor ``role``."""
    return f"{role}:{state.sample_id}:{state.epoch}:{state.uuid}"


async def assess_trajectory(monitor: LazyMonitor, sample: Sample, messages: Sequence[Any],
                            role: str) -> Assessment:
    """The monitor's `Assessment` of the trajectory so far (module docstring): by session in a
    running sample, whole outside one."""
    state = running_sample()
    if state is None:
        [a] = await monitor.assess([sample])
        return a
    key = trajectory_key(state, role)
    with _open_lock:
        _open.setdefault(state.uuid, set()).add((monitor, key))
    return await monitor.assess_step(key, sample, list(messages))


@hooks(name="calimon_sessions", description="ends the sample's monitor sessions")
class ForgetSessions(Hooks):
    """Forgets the sessions of a sample's trajectories when Inspect ends the sample."""

    def enabled(self) -> bool:
        """Always on, so Inspect's start-up lines name it (it does nothing for a sample that
        opened no session)."""
        return True

    async def on_sample_end(self, data: SampleEnd) -> None:
        """Forget every session opened for the sample run ``data.sample_id`` (its uuid)."""
        with _open_lock:
            held = _open.pop(data.sample_id, set())
        for monitor, key in held:
            await monitor.forget(key)


def open_sessions() -> int:
    """How many trajectories have a session that their sample's end has not forgotten yet."""
    with _open_lock:
        return sum(len(v) for v in _open.values())


__all__ = ["ForgetSessions", "assess_trajectory", "open_sessions", "running_sample",
           "trajectory_key"]
