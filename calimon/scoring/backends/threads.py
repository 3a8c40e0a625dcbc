"""How many torch threads a CPU backend uses when the user names none: the cores that are free.

A torch CPU forward with more threads than free cores is not a little slower but many times
slower (threads spin-wait for each other on an oversubscribed machine: two threads ran about 3x
slower than one on a busy 2-core machine). So the default is the cores this process may run on
less the cores other processes keep busy (measured over a quarter of a second from /proc/stat,
this process's own CPU time taken out; the 1-minute load average where /proc/stat is missing),
capped at the physical cores (a hyperthread sibling adds little to a matmul), at least 1.
Inter-op parallelism (independent ops side by side) stays at one thread: a batch of one prompt
gives it nothing to run side by side.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def physical_cores() -> int:
    """Distinct physical cores of the CPUs this process may run on (/sys topology), else the
    logical count."""
    cpus = available_cores()
    seen = set()
    for cpu in _allowed_cpus():
        topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            seen.add((topo / "physical_package_id").read_text().strip()
                     + ":" + (topo / "core_id").read_text().strip())
        except OSError:
            return cpus
    return len(seen) or cpus


def available_cores() -> int:
    """Logical CPUs this process may run on (its affinity), at least 1."""
    return max(1, len(_allowed_cpus()))


def _allowed_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def busy_cores(window: float = 0.25) -> float:
    """Cores other processes kept busy over the last ``window`` seconds: the machine's busy
    CPU time (/proc/stat) less this process's own, per second of wall time; the 1-minute load
    average where /proc/stat cannot be read."""
    try:
        before, own0, t0 = _cpu_jiffies(), time.process_time(), time.monotonic()
        time.sleep(window)
        after, own1, t1 = _cpu_jiffies(), time.process_time(), time.monotonic()
    except (OSError, ValueError):
        try:
            return os.getloadavg()[0]
        except OSError:
            return 0.0
    busy = (after[0] - before[0]) / (os.sysconf("SC_CLK_TCK") * (t1 - t0))
    return max(0.0, busy - (own1 - own0) / (t1 - t0))


def _cpu_jiffies() -> tuple[int, int]:
    """(busy, total) clock ticks of all CPUs since boot, from /proc/stat's ``cpu`` line."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()
    ticks = [int(v) for v in fields[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    return sum(ticks[:8]) - idle, sum(ticks[:8])


def default_threads(*, busy: float | None = None, available: int | None = None,
                    physical: int | None = None) -> int:
    """Torch intra-op threads for a CPU backend given no ``threads``: the available cores less
    the cores others keep busy (rounded), capped at the physical cores, at least 1 (module
    docstring). The arguments stand in for this machine's readings."""
    busy = busy_cores() if busy is None else busy
    available = available_cores() if available is None else available
    physical = physical_cores() if physical is None else physical
    return max(1, min(physical, available, available - round(max(busy, 0.0))))


def apply_threads(threads: int | None) -> int:
    """Set torch's intra-op threads (``threads``, else `default_threads`) and, once per
    process, one inter-op thread; returns the intra-op count."""
    import torch

    n = threads or default_threads()
    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # set once per process, before any inter-op work: already fixed
        pass
    return n


class ThreadGovernor:
    """Keeps a CPU backend's default thread count on the cores that are free as the machine's
    load changes: a reading taken once at weight load can catch a passing spike and hold a whole
    run to one thread. :meth:`update`, called before each scoring call, re-reads the busy cores
    over the time since its last reading (at most every ``interval`` seconds, so it adds no
    wait) and resets torch's intra-op threads when the count changes. Never used when the user
    named ``threads``."""

    def __init__(self, interval: float = 2.0):
        self.interval = interval
        self.threads = apply_threads(None)
        self.changes = 0
        self._mark = self._reading()

    @staticmethod
    def _reading() -> tuple[int, float, float] | None:
        try:
            return _cpu_jiffies()[0], time.process_time(), time.monotonic()
        except (OSError, ValueError):
            return None

    def update(self) -> int:
        """Re-read the free cores if ``interval`` has passed; set and return the thread count."""
        now = self._reading()
        if now is None or self._mark is None or now[2] - self._mark[2] < self.interval:
            return self.threads
        wall = now[2] - self._mark[2]
        others = (now[0] - self._mark[0]) / (os.sysconf("SC_CLK_TCK") * wall) \
            - (now[1] - self._mark[1]) / wall
        self._mark = now
        n = default_threads(busy=max(0.0, others))
        if n != self.threads:
            import torch

            torch.set_num_threads(n)
            self.threads, self.changes = n, self.changes + 1
        return n
