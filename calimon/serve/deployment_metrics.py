"""``/metrics`` of a deployment: the servers of one ``--deployment`` name (the replicas of
`calimon serve --replicas N`, or servers started with the same name on one decision log) each
write their metrics to the shared log, and a scrape of any of them answers the deployment's
totals under the usual names, then every server's own series under ``calimon_replica_*`` with a
``replica`` label (so a sum over either never counts a request twice).

Every answer is counted in the log before it is sent (`SharedMetrics.durable`): the server
counts it, then waits until a snapshot of its metrics (`calimon.serve.metrics.Metrics.snapshot`)
taken after that is written, and only then sends it. One write serves every answer that waited
for it (a group commit: at most one write is in flight per server, and answers arriving
meanwhile share the next). So a server killed at any moment has every answer it sent in its
row, and the totals count every answered request, a SIGKILLed server's included. (Before, the
row was written every second and read up to that old; under load the write came later still,
and a server killed in between was missing its last answers from the totals.) A server also
writes its row every `PUSH_S` seconds (its gauges), when it stops and when it is scraped.
While the log cannot be written (its decisions are 503 then), answers without a decision are
sent after one failed write and counted with the next write that succeeds.

Counters and histograms of a server that died or was replaced stay in the totals, so a total
never goes down; a gauge (queue depth, cache bytes) counts only servers that wrote within
`STALE_S`.

Why the log and not Ray's metrics (`ray.util.metrics`): Ray's are exported by each node's
metrics agent on its own port, for a Prometheus to scrape every node and sum, and reach it
after Ray's report interval (seconds); they cannot answer ``/metrics`` behind Serve's proxy,
and two `calimon serve` processes without Ray would have none. The log is already shared by
every server of a deployment.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable

from calimon.serve.metrics import Metrics

PUSH_S = 1.0
STALE_S = 15.0
REPLICA_PREFIX = "calimon_replica_"


def merge(states: Iterable[list[list]]) -> list[list]:
    """The sum of metric states (`calimon.serve.metrics` ``state()``) by label values: numbers
    added, histogram series added element by element."""
    total: dict[tuple, float | list[float]] = {}
    for state in states:
        for labels, value in state:
            key = tuple(labels)
            if key not in total:
                total[key] = list(value) if isinstance(value, list) else float(value)
            elif isinstance(value, list):
                total[key] = [a + b for a, b in zip(total[key], value, strict=True)]
            else:
                total[key] += float(value)
    return [[list(k), v] for k, v in sorted(total.items())]


def render(metrics: Metrics, snapshots: list[tuple[str, float, dict]], now: float) -> str:
    """The exposition text of a deployment: for each core metric of ``metrics``, the sum of
    ``snapshots`` (``(replica, written at, snapshot)``; gauges only from those written within
    `STALE_S` of ``now``), then each replica's series; then ``metrics``' extra metrics (this
    server's own)."""
    lines: list[str] = []
    per_replica: list[str] = []
    for metric in metrics.core():
        live = [s for s in snapshots if metric.kind != "gauge" or now - s[1] <= STALE_S]
        lines += metric.header() + metric.lines_of(merge(s[2].get(metric.name, [])
                                                         for s in live))
        name = REPLICA_PREFIX + metric.name.removeprefix("calimon_")
        per_replica += metric.header(name, metric.help + " Per replica of the deployment.")
        per_replica += metric.lines_of(
            [[[replica, *labels], value] for replica, _, snap in live
             for labels, value in snap.get(metric.name, [])],
            name=name, labelnames=("replica", *metric.labelnames))
    for extra in metrics.extra:
        per_replica += extra.header() + extra.lines()
    return "\n".join(lines + per_replica) + "\n"


class SharedMetrics:
    """One server's part of a deployment's ``/metrics`` (module docstring): ``log`` is the
    shared decision log, ``replica`` this server's name in it."""

    def __init__(self, metrics: Metrics, log, deployment: str, replica: str):
        self.metrics, self.log = metrics, log
        self.deployment, self.replica = deployment, replica
        self._task: asyncio.Task | None = None
        self._lock = asyncio.Lock()  # one write at a time, so a row never goes back in time
        self._asked = self._written = 0
        self._failed_at: float | None = None

    def push(self) -> None:
        """Write this server's snapshot now (blocking; `durable` is the way in that keeps
        writes in order)."""
        self.log.push_metrics(self.deployment, self.replica, self.metrics.snapshot(),
                              time.time())

    async def durable(self, strict: bool = False) -> None:
        """Return once a snapshot taken after this call began is in the log, so everything
        counted before the call is (module docstring). Callers waiting meanwhile share one
        write. A write that fails is counted (``errors{kind="log"}``) and, with ``strict``,
        raised; otherwise the caller goes on, and for `PUSH_S` after a failure callers do not
        wait for the log at all."""
        self._asked += 1
        wanted = self._asked
        async with self._lock:
            if self._written >= wanted:
                return
            if not strict and self._failed_at is not None and (
                    time.monotonic() - self._failed_at < PUSH_S):
                return
            upto = self._asked  # everything counted by now is in the snapshot taken next
            try:
                await asyncio.to_thread(self.push)
            except Exception:
                self._failed_at = time.monotonic()
                self.metrics.errors.inc("log")
                if strict:
                    raise
                return
            self._failed_at, self._written = None, upto

    async def start(self) -> None:
        """Write now, then every `PUSH_S` seconds until `stop`."""
        await self.durable(strict=True)
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(PUSH_S)
            await self.durable()  # a failure is counted; the next write tries again

    async def stop(self) -> None:
        """Stop writing, after a last write (a log that fails it is left as it was)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            with contextlib.suppress(Exception):
                await self.durable(strict=True)

    async def render(self) -> str:
        """The deployment's exposition text: this server's snapshot written, every server's
        read back."""
        await self.durable(strict=True)
        snapshots = await asyncio.to_thread(self.log.pull_metrics, self.deployment)
        return render(self.metrics, snapshots, time.time())
