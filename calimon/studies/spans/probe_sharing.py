"""Prefix sharing for a probe head's masked variants: occlusion on a sequence head
(``--readout probe:<head>``) at a fraction of the plain cost.

A probe head reads the hidden states of one layer ``k``; nothing past it changes what it reads.
:class:`SharedPrefixProbe` scores a chunk of prompts in token order (the variants of one sample
then follow each other, and each shares with the one before it every token up to the first
place they differ), running each prompt only from that place and only through the first ``k``
decoder blocks, on the keys, values and held response states of the prompt before it
(`calimon.scoring.probes.steps.extend_probe`, the step of a probe monitor, which a service's
session runs too). Its readings
equal the probe monitor's own within float rounding and go to the store under the same key.
The pass stops before the model's last layer, so it reads no verdict (``extra["verdict"]`` is
None).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from calimon.samples import Sample
from calimon.scoring.backends.capture import Captured
from calimon.verdict import Verdict


@dataclass(frozen=True)
class _Prompt:
    """The fields of an `EncodedPrompt` that `extend_probe` reads."""

    ids: list[int]
    response_start: int
    response_end: int


class SharedPrefixProbe:
    """A `ProbeMonitor` (``probe``) whose ``score`` runs its prompts with prefix sharing (module
    docstring); every other attribute, the store key among them, is the probe monitor's.
    The state of the last prompt scored is kept for the next call, so the template prefix is
    run once. ``tokens_computed`` counts the tokens run through the model after the template
    prefix, ``group_calls`` the calls."""

    def __init__(self, probe):
        self.probe = probe
        self.tokens_computed = 0
        self.group_calls = 0
        self._state = None

    def __getattr__(self, name: str):
        if name == "probe":  # not set yet (copy probing)
            raise AttributeError(name)
        return getattr(self.probe, name)

    def score(self, samples: Sequence[Sample]) -> list[Verdict]:
        """The head's readings of ``samples``, in order."""
        from calimon.scoring.probes.steps import extend_probe

        if not samples:
            return []
        probe = self.probe
        encoded = [probe.encoder.encode(s.request, s.response) for s in samples]
        spec = probe.capture_spec
        start = time.perf_counter()
        pooled: list[np.ndarray | None] = [None] * len(samples)
        tokens: list[np.ndarray | None] = [None] * len(samples)
        state, prefix = self._state, probe.encoder.prefix_len
        self.group_calls += 1
        for i in sorted(range(len(samples)), key=lambda i: encoded[i].ids):
            e = encoded[i]
            got, state, reused = extend_probe(
                probe.backend, state, _Prompt(list(e.ids), e.response_start, e.response_end),
                spec)
            pooled[i], tokens[i] = got.pooled[0], got.tokens[0]
            self.tokens_computed += len(e.ids) - max(reused, prefix)
        self._state = state
        captured = Captured(logprobs=np.empty((len(samples), 0), np.float32),
                            pooled=np.stack(pooled), tokens=tokens, spec=spec)
        seconds = (time.perf_counter() - start) / len(samples)
        return probe.head_readings(samples, encoded, captured, seconds, None)


__all__ = ["SharedPrefixProbe"]
