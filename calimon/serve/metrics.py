"""``/metrics`` in Prometheus' text format (version 0.0.4), written by hand: counters, gauges and
histograms with labels, no dependency. Every metric is named ``calimon_*``."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


def _labels(names: Sequence[str], values: Sequence[str], extra: str = "") -> str:
    parts = [f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True)]
    if extra:
        parts.append(extra)
    return "{" + ",".join(parts) + "}" if parts else ""


def _escape(value: str) -> str:
    return str(value).replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _num(x: float) -> str:
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    return repr(float(x)) if not float(x).is_integer() else str(int(x))


class _Metric:
    kind = "untyped"

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()):
        self.name, self.help, self.labelnames = name, help_text, tuple(labels)
        self._lock = threading.Lock()

    def header(self, name: str | None = None, help_text: str | None = None) -> list[str]:
        name = name or self.name
        return [f"# HELP {name} {help_text or self.help}", f"# TYPE {name} {self.kind}"]

    def state(self) -> list[list]:
        """The values now, as JSON: ``[[label values], value], ...`` in label order."""
        raise NotImplementedError

    def lines(self) -> list[str]:
        return self.lines_of(self.state())

    def lines_of(self, state: list[list], name: str | None = None,
                 labelnames: Sequence[str] | None = None) -> list[str]:
        """The exposition lines of ``state`` (this metric's, another server's, or a sum),
        under ``name`` and ``labelnames`` (default: this metric's)."""
        name = name or self.name
        names = self.labelnames if labelnames is None else tuple(labelnames)
        return [f"{name}{_labels(names, k)} {_num(v)}" for k, v in state]


class Counter(_Metric):
    """A count that only grows, per label values."""

    kind = "counter"

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()):
        super().__init__(name, help_text, labels)
        self._values: dict[tuple[str, ...], float] = {}

    def inc(self, *labels: str, by: float = 1.0) -> None:
        """Add ``by`` to the count of these label values."""
        with self._lock:
            self._values[labels] = self._values.get(labels, 0.0) + by

    def value(self, *labels: str) -> float:
        """The count of these label values (0 when never counted)."""
        return self._values.get(labels, 0.0)

    def state(self) -> list[list]:
        """``[[label values], count], ...``; an unlabelled counter never counted is 0."""
        with self._lock:
            items = sorted(self._values.items())
        if not items and not self.labelnames:
            items = [((), 0.0)]
        return [[list(k), v] for k, v in items]


class Gauge(_Metric):
    """A value set now (or read from ``read`` at each scrape)."""

    kind = "gauge"

    def __init__(self, name: str, help_text: str, read: Callable[[], float] | None = None,
                 kind: str = "gauge"):
        super().__init__(name, help_text)
        self._value = 0.0
        self._read = read
        self.kind = kind  # "counter" for a count read from elsewhere

    def set(self, value: float) -> None:
        """The gauge's value from now on."""
        self._value = float(value)

    def state(self) -> list[list]:
        """``[[[], value]]``: the value now."""
        return [[[], float(self._read() if self._read is not None else self._value)]]


class Histogram(_Metric):
    """Observations counted in cumulative buckets, with their sum and count, per label values."""

    kind = "histogram"

    def __init__(self, name: str, help_text: str, buckets: Sequence[float],
                 labels: Sequence[str] = ()):
        super().__init__(name, help_text, labels)
        self.buckets = tuple(sorted(buckets))
        self._series: dict[tuple[str, ...], list[float]] = {}  # bucket counts, then sum, count

    def observe(self, value: float, *labels: str) -> None:
        """Count one observation."""
        with self._lock:
            s = self._series.setdefault(labels, [0.0] * (len(self.buckets) + 2))
            for i, bound in enumerate(self.buckets):
                if value <= bound:
                    s[i] += 1
            s[-2] += value
            s[-1] += 1

    def state(self) -> list[list]:
        """``[[label values], [bucket counts..., sum, count]], ...``."""
        with self._lock:
            return [[list(k), list(v)] for k, v in sorted(self._series.items())]

    def lines_of(self, state: list[list], name: str | None = None,
                 labelnames: Sequence[str] | None = None) -> list[str]:
        name = name or self.name
        names = self.labelnames if labelnames is None else tuple(labelnames)
        out = []
        for key, s in state:
            bounds = [*(_num(b) for b in self.buckets), "+Inf"]
            counts = [*s[:len(self.buckets)], s[-1]]
            for bound, count in zip(bounds, counts, strict=True):
                le = 'le="' + bound + '"'
                out.append(f"{name}_bucket{_labels(names, key, le)} {_num(count)}")
            out.append(f"{name}_sum{_labels(names, key)} {_num(s[-2])}")
            out.append(f"{name}_count{_labels(names, key)} {_num(s[-1])}")
        return out


class Metrics:
    """Every metric the server exports. ``forward_calls`` reads the backend's own count of
    model calls, so a test can see concurrent requests share one pass."""

    def __init__(self, forward_calls: Callable[[], float] = lambda: 0.0,
                 session_bytes: Callable[[], float] = lambda: 0.0):
        self.requests = Counter("calimon_requests_total", "HTTP requests answered, by route "
                                "and status code.", ("route", "code"))
        self.decisions = Counter("calimon_decisions_total", "Decisions made (replays from the "
                                 "decision log not counted), by kind.", ("decision",))
        self.latency = Histogram("calimon_request_seconds", "Time from a request's arrival to "
                                 "its answer, by route.", LATENCY_BUCKETS, ("route",))
        self.queue_depth = Gauge("calimon_queue_depth", "Scoring jobs waiting or running.")
        self.batch_size = Histogram("calimon_batch_size", "Transcripts scored per monitor "
                                    "call.", BATCH_BUCKETS)
        self.forward = Gauge("calimon_forward_calls_total", "Model forward calls (batches) "
                             "the backend has run.", read=forward_calls, kind="counter")
        self.truncations = Counter("calimon_truncations_total", "Transcripts cut to the model's "
                                   "input limit before scoring.")
        self.errors = Counter("calimon_errors_total", "Requests that failed, by kind.",
                              ("kind",))
        self.rejected = Counter("calimon_queue_rejections_total", "Requests refused with 429: "
                                "the queue was full.")
        self.replays = Counter("calimon_idempotent_replays_total", "Requests answered from the "
                               "decision log (a retried request id).")
        self.kv_tokens = Counter("calimon_session_tokens_total", "Session prompt tokens, by "
                                 "whether they were reused from the cache or computed.",
                                 ("kind",))
        self.evictions = Counter("calimon_session_evictions_total", "Session caches dropped to "
                                 "stay within the memory bound.")
        self.session_bytes = Gauge("calimon_session_cache_bytes", "Bytes held by session "
                                   "caches.", read=session_bytes)
        self.rebuilds = Counter("calimon_session_rebuilds_total", "Sessions this server did "
                                "not hold, rebuilt from the decision log's steps.")
        self.extra: list = []  # more metrics (header() and lines()), e.g. the review's gauges

    def core(self) -> list[_Metric]:
        """The server's own metrics (those a deployment sums), in export order."""
        return [self.requests, self.decisions, self.latency, self.queue_depth, self.batch_size,
                self.forward, self.truncations, self.errors, self.rejected, self.replays,
                self.kv_tokens, self.evictions, self.session_bytes, self.rebuilds]

    def all(self) -> list:
        """Every metric, in export order."""
        return [*self.core(), *self.extra]

    def snapshot(self) -> dict[str, list[list]]:
        """The state of every core metric by name, as JSON (what a server of a deployment
        writes to the shared log: `calimon.serve.deployment_metrics`)."""
        return {m.name: m.state() for m in self.core()}

    def render(self) -> str:
        """The exposition text."""
        lines = []
        for metric in self.all():
            lines += metric.header() + metric.lines()
        return "\n".join(lines) + "\n"
