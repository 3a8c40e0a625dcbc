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

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]


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

    def lines(self) -> list[str]:
        with self._lock:
            items = sorted(self._values.items())
        if not items and not self.labelnames:
            items = [((), 0.0)]
        return [f"{self.name}{_labels(self.labelnames, k)} {_num(v)}" for k, v in items]


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

    def lines(self) -> list[str]:
        value = self._read() if self._read is not None else self._value
        return [f"{self.name} {_num(value)}"]


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

    def lines(self) -> list[str]:
        out = []
        with self._lock:
            items = sorted((k, list(v)) for k, v in self._series.items())
        for key, s in items:
            bounds = [*(_num(b) for b in self.buckets), "+Inf"]
            counts = [*s[:len(self.buckets)], s[-1]]
            for bound, count in zip(bounds, counts, strict=True):
                le = 'le="' + bound + '"'
                out.append(f"{self.name}_bucket{_labels(self.labelnames, key, le)} "
                           f"{_num(count)}")
            out.append(f"{self.name}_sum{_labels(self.labelnames, key)} {_num(s[-2])}")
            out.append(f"{self.name}_count{_labels(self.labelnames, key)} {_num(s[-1])}")
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
        self.extra: list = []  # more metrics (header() and lines()), e.g. the review's gauges

    def all(self) -> list[_Metric]:
        """Every metric, in export order."""
        return [self.requests, self.decisions, self.latency, self.queue_depth, self.batch_size,
                self.forward, self.truncations, self.errors, self.rejected, self.replays,
                self.kv_tokens, self.evictions, self.session_bytes, *self.extra]

    def render(self) -> str:
        """The exposition text."""
        lines = []
        for metric in self.all():
            lines += metric.header() + metric.lines()
        return "\n".join(lines) + "\n"
