"""The ``window`` truncation policy: a transcript over the input limit is read in overlapping
windows of its response instead of having its middle cut out (``head_tail``).

Each window is the whole request (cut head_tail only when it alone would take more than half
the budget) followed by a contiguous stretch of the response that fits the rest of the budget;
windows overlap by ``overlap`` of their length and the last one ends at the response's end, so
every response token is read in at least one window. Each window is scored by the wrapped
monitor as a transcript of its own (prompted readouts and probe heads alike), and the
transcript's reading aggregates them: ``max`` (the default: a monitor flags a transcript when
any part of it looks bad) or ``mean`` of ``p_raw``. The reading's other fields come from the
window with the highest score; probe heads' spans and token scores from every window are
shifted back into the whole response and merged. A transcript that fits is scored unchanged.

What each reading used is in ``extra["windows"]`` (windows, their tokens, stride, aggregate,
every window's score, the chosen one); the run store keys windowed readings apart from
head_tail ones, and a curve run records the policy in curve.json's provenance
(``truncation``). ``truncation`` of a windowed reading stays None unless the request itself
had to be cut (status ``truncated``), since nothing of the response was dropped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace

from calimon.errors import ConfigError
from calimon.samples import Sample
from calimon.verdict import Verdict

POLICIES = ("head_tail", "window")
AGGREGATES = ("max", "mean")
MARGIN = 8  # tokens kept free in each window for tokenization differences at its edges


@dataclass(frozen=True)
class WindowPolicy:
    """Overlapping windows of the response: ``overlap`` (share of a window shared with the
    next, 0 <= overlap < 1) and ``aggregate`` (one of `AGGREGATES`)."""

    overlap: float = 0.25
    aggregate: str = "max"

    def describe(self) -> dict:
        """The policy as recorded in provenance and hashed into the store key."""
        return {"policy": "window", "overlap": self.overlap, "aggregate": self.aggregate}


def parse_truncation(text: str | None) -> WindowPolicy | None:
    """``head_tail`` (or None): None; ``window[:AGGREGATE[:OVERLAP]]``, e.g. ``window``,
    ``window:mean``, ``window:max:0.5``: the policy; anything else raises ConfigError."""
    if text is None or text == "head_tail":
        return None
    name, *rest = str(text).split(":")
    if name != "window" or len(rest) > 2:
        raise ConfigError(f"truncation {text!r}: expected head_tail or "
                          "window[:max|mean[:OVERLAP]]", field="truncation")
    aggregate = rest[0] if rest else "max"
    if aggregate not in AGGREGATES:
        raise ConfigError(f"truncation {text!r}: the aggregate must be one of "
                          f"{list(AGGREGATES)}", field="truncation")
    try:
        overlap = float(rest[1]) if len(rest) > 1 else 0.25
    except ValueError:
        overlap = -1.0
    if not 0 <= overlap < 1:
        raise ConfigError(f"truncation {text!r}: the overlap must be a number in [0, 1)",
                          field="truncation")
    return WindowPolicy(overlap, aggregate)


def truncation_record(monitor) -> dict:
    """How a monitor handles a transcript over its input limit, for a run's provenance."""
    policy = getattr(monitor, "window_policy", None)
    return policy.describe() if policy is not None else {"policy": "head_tail"}


class WindowedMonitor:
    """A monitor (`calimon.scoring.monitor.Monitor`, `calimon.scoring.probes.monitor.ProbeMonitor`, ...) that
    reads transcripts over its input limit in overlapping windows (module docstring). Every
    other attribute is the wrapped monitor's."""

    def __init__(self, inner, policy: WindowPolicy):
        self.inner = inner
        self.window_policy = policy

    def __getattr__(self, name):
        if name == "inner":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    @property
    def key(self):
        """The wrapped monitor's store key with the policy hashed into its template hash."""
        key = self.inner.key
        payload = json.dumps([key.template_hash, self.window_policy.describe()], sort_keys=True)
        return replace(key, template_hash=hashlib.sha256(payload.encode()).hexdigest()[:16])

    def score(self, samples) -> list[Verdict]:
        """One reading per sample, in order: windows scored in one call of the wrapped
        monitor, then aggregated per transcript."""
        parts, plan = [], []
        for s in samples:
            windows = self.windows(s)
            plan.append((s, windows, len(parts)))
            parts.extend(w for w, _ in windows)
        got = self.inner.score(parts)
        out = []
        for s, windows, at in plan:
            readings = got[at:at + len(windows)]
            if len(windows) == 1 and windows[0][1] is None:
                out.append(readings[0])
            else:
                out.append(self.aggregate(s, windows, readings))
        return out

    def windows(self, sample: Sample) -> list[tuple[Sample, tuple[int, int] | None]]:
        """(window sample, (start, end) characters of the response it holds) for each window;
        ``[(sample, None)]`` when the transcript fits or has no response to window."""
        enc = self.inner.encoder
        if enc.encode(sample.request, sample.response).truncation is None:
            return [(sample, None)]
        offsets = _token_offsets(enc.tokenizer, sample.response)
        request = len(_token_offsets(enc.tokenizer, sample.request))
        size = enc.budget - min(request, enc.budget // 2) - MARGIN
        if not offsets or size < 1 or len(offsets) <= size:
            return [(sample, None)]
        for _ in range(4):  # shrink while a window's response is still cut (a defense's marks)
            spans = window_spans(len(offsets), size, self.window_policy.overlap)
            parts = [(_part(sample, k, sample.response[offsets[a][0]:offsets[b - 1][1]]),
                      (offsets[a][0], offsets[b - 1][1])) for k, (a, b) in enumerate(spans)]
            cut = max(_dropped_response(enc, w) for w, _ in parts)
            if cut == 0 or size <= 16:
                return parts
            size = max(16, size - cut - MARGIN)
        return parts

    def aggregate(self, sample: Sample, windows, readings: list[Verdict]) -> Verdict:
        """The transcript's reading from its windows (`windows`) and their readings, in
        order."""
        scored = [(i, v) for i, v in enumerate(readings) if v.scored]
        if not scored:
            return replace(readings[0], transcript_hash=sample.transcript_hash)
        chosen, best = max(scored, key=lambda iv: iv[1].p_raw)
        scores = [v.p_raw for _, v in scored]
        p_raw = best.p_raw if self.window_policy.aggregate == "max" else sum(scores) / len(scores)
        cut = [v.truncation for v in readings if v.truncation]
        extra = dict(best.extra)
        starts = [span[0] for _, span in windows]
        _merge_spans(extra, [(v.extra, starts[i]) for i, v in enumerate(readings)])
        extra["windows"] = {**self.window_policy.describe(), "windows": len(windows),
                            "window_chars": [list(span) for _, span in windows],
                            "p_windows": [v.p_raw for v in readings], "chosen": chosen}
        return replace(best, transcript_hash=sample.transcript_hash, p_raw=p_raw,
                       status="truncated" if cut else "ok", truncation=cut[0] if cut else None,
                       tokens=sum(v.tokens for v in readings),
                       seconds=sum(v.seconds for v in readings), extra=extra)


def window_spans(n: int, size: int, overlap: float) -> list[tuple[int, int]]:
    """[start, end) token ranges of windows of ``size`` over ``n`` tokens, each sharing about
    ``overlap`` of its length with the next, the last ending at ``n``."""
    if n <= size:
        return [(0, n)]
    stride = max(1, int(size * (1 - overlap)))
    starts = list(range(0, n - size, stride)) + [n - size]
    return [(a, a + size) for a in starts]


def _part(sample: Sample, k: int, response: str) -> Sample:
    return Sample(id=f"{sample.id}#w{k}", request=sample.request, response=response,
                  label=sample.label, category=sample.category, task=sample.task,
                  pair_id=sample.pair_id, source=sample.source, split=sample.split)


def _dropped_response(encoder, sample: Sample) -> int:
    """Response tokens the encoder would cut from ``sample`` (0 when it fits)."""
    t = encoder.encode(sample.request, sample.response).truncation
    return t.dropped_response if t is not None else 0


def _token_offsets(tokenizer, text: str) -> list[tuple[int, int]]:
    """Character (start, end) of each token of ``text`` as untrusted transcript text."""
    if not text:
        return []
    enc = tokenizer(text, add_special_tokens=False, split_special_tokens=True,
                    return_offsets_mapping=True)
    return [tuple(o) for o in enc["offset_mapping"]]


def _merge_spans(extra: dict, parts: list[tuple[dict, int]]) -> None:
    """Probe heads' ``spans`` and ``token_scores`` of every window, shifted by the window's
    first character into the whole response; overlapping spans join (their highest score),
    a token read twice keeps its highest score."""
    spans = sorted([a + shift, b + shift, s] for ex, shift in parts
                   for a, b, s in ex.get("spans", ()))
    if spans or "spans" in extra:
        merged: list[list] = []
        for a, b, s in spans:
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
                merged[-1][2] = max(merged[-1][2], s)
            else:
                merged.append([a, b, s])
        extra["spans"] = merged
    if any("token_scores" in ex for ex, _ in parts):
        best: dict[tuple[int, int], float] = {}
        for ex, shift in parts:
            ts = ex.get("token_scores") or {"offsets": [], "scores": []}
            for (a, b), p in zip(ts["offsets"], ts["scores"], strict=True):
                if a < 0:  # a truncation marker's token: not in the response
                    continue
                key = (a + shift, b + shift)
                best[key] = max(best.get(key, p), p)
        keys = sorted(best)
        extra["token_scores"] = {"offsets": [list(k) for k in keys],
                                 "scores": [best[k] for k in keys]}
