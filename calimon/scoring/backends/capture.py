"""What to capture from a forward pass, and the pooling done while it runs.

Layer numbering: 0 is the token embeddings, ``k`` (1..num_layers) is the residual stream after
decoder block ``k`` (before the final norm). Pooling runs over a prompt's *response* tokens, the
``[response_start, response_end)`` token range of its :class:`calimon.prompts.EncodedPrompt`:

- ``last``: the state at the prompt's last position (where the verdict token is read);
- ``mean``: the mean over the response tokens;
- ``max``: the per-dimension maximum over the response tokens.

An empty response pools to a zero vector. Per-token states (``token_layers``) are returned for
the response tokens only, in order, as float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from calimon.errors import InputError

POOLINGS = ("last", "mean", "max")


@dataclass(frozen=True)
class CaptureSpec:
    """What one pass captures: pooled states of ``layers`` (each in every ``pooling``) and per-
    token states of ``token_layers``; a bad layer index or pooling name raises InputError."""

    layers: tuple[int, ...] = ()
    pooling: tuple[str, ...] = POOLINGS
    token_layers: tuple[int, ...] = ()

    def __post_init__(self):
        for name in ("layers", "token_layers"):
            vals = tuple(getattr(self, name))
            if any(isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 0
                   for v in vals):
                raise InputError(f"expected non-negative layer indices, got {list(vals)}",
                                 field=name)
            object.__setattr__(self, name, tuple(int(v) for v in vals))
        pooling = tuple(self.pooling)
        bad = [p for p in pooling if p not in POOLINGS]
        if bad or not pooling:
            raise InputError(f"expected a non-empty subset of {list(POOLINGS)}, got "
                             f"{list(pooling)}", field="pooling")
        object.__setattr__(self, "pooling", pooling)


@dataclass(frozen=True, eq=False)
class Captured:
    """``logprobs`` (n, vocab); ``pooled`` (n, len(pooling), len(layers), hidden);
    ``tokens[i]`` (response tokens of prompt i, len(token_layers), hidden)."""

    logprobs: np.ndarray
    pooled: np.ndarray
    tokens: list[np.ndarray] = field(repr=False)
    spec: CaptureSpec = field(default_factory=CaptureSpec)

    def features(self, layer: int, pooling: str) -> np.ndarray:
        """(n, hidden) pooled states of one layer."""
        return self.pooled[:, self.spec.pooling.index(pooling), self.spec.layers.index(layer)]


def check_capture_args(prompts: Sequence[Sequence[int]], prefix_len: int, spec: CaptureSpec,
                       spans: Sequence[tuple[int, int]], num_layers: int) -> None:
    """Raise InputError unless ``spec`` is a CaptureSpec, there is one in-range response span per
    prompt (after the shared prefix) and every layer exists (0..``num_layers``)."""
    if not isinstance(spec, CaptureSpec):
        raise InputError(f"expected a CaptureSpec, got {type(spec).__name__}", field="spec")
    if len(spans) != len(prompts):
        raise InputError(f"expected one (start, end) span per prompt ({len(prompts)}), got "
                         f"{len(spans)}", field="spans")
    too_deep = [k for k in spec.layers + spec.token_layers if k > num_layers]
    if too_deep:
        raise InputError(f"the model has layers 0..{num_layers}, got {too_deep}", field="layers")
    for i, ((start, end), p) in enumerate(zip(spans, prompts, strict=True)):
        if not (prefix_len <= start <= end <= len(p)):
            raise InputError(f"item {i}: expected {prefix_len} <= start <= end <= {len(p)} "
                             f"(response after the shared prefix), got ({start}, {end})",
                             field="spans")


class LayerCollector:
    """Forward hooks that pool each chosen layer's output as the batch passes through it.

    ``spans`` are response ranges relative to the first non-prefix token, ``lengths`` the
    number of non-prefix tokens of each row (rows are right-padded)."""

    def __init__(self, spec: CaptureSpec, spans: Sequence[tuple[int, int]], lengths):
        self.spec = spec
        self.spans = [(int(a), int(b)) for a, b in spans]
        self.lengths = [int(x) for x in lengths]
        self.pooled: dict[int, np.ndarray] = {}
        self.token_states: dict[int, list[np.ndarray]] = {}

    def hook(self, layer: int):
        """A forward hook for decoder layer ``layer`` that pools its output into this collector."""
        def fn(module, inputs, output):
            h = output[0] if isinstance(output, tuple | list) else output
            self._collect(layer, h)
        return fn

    def _collect(self, layer: int, h) -> None:
        import torch

        h = h.detach().float()
        b, t, _ = h.shape
        rows = torch.arange(b, device=h.device)
        if layer in self.spec.layers:
            pos = torch.arange(t, device=h.device).unsqueeze(0)
            start = torch.tensor([s for s, _ in self.spans], device=h.device).unsqueeze(1)
            end = torch.tensor([e for _, e in self.spans], device=h.device).unsqueeze(1)
            inside = ((pos >= start) & (pos < end)).unsqueeze(-1)
            count = inside.sum(1).clamp(min=1)
            out = []
            for p in self.spec.pooling:
                if p == "last":
                    last = torch.tensor(self.lengths, device=h.device) - 1
                    out.append(h[rows, last])
                elif p == "mean":
                    out.append((h * inside).sum(1) / count)
                else:
                    m = h.masked_fill(~inside, float("-inf")).amax(1)
                    out.append(torch.where(torch.isfinite(m), m, torch.zeros_like(m)))
            self.pooled[layer] = torch.stack(out, 1).cpu().numpy()
        if layer in self.spec.token_layers:
            self.token_states[layer] = [h[r, s:e].cpu().numpy()
                                        for r, (s, e) in enumerate(self.spans)]

    def result(self) -> dict:
        """``{"pooled": (n, pooling, layers, hidden), "tokens": [per-prompt (tokens,
        token_layers, hidden)]}`` from what the hooks collected; empty arrays where nothing
        was asked for."""
        spec = self.spec
        n = len(self.spans)
        pooled = np.stack([self.pooled[k] for k in spec.layers], 2) if spec.layers else \
            np.empty((n, len(spec.pooling), 0, 0), np.float32)
        tokens = [np.stack([self.token_states[k][r] for k in spec.token_layers], 1)
                  if spec.token_layers else np.empty((0, 0, 0), np.float32) for r in range(n)]
        return {"pooled": pooled, "tokens": tokens}
