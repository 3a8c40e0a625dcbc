"""The step of a probe monitor (`calimon.scoring.probes.monitor.ProbeMonitor`) on the
transformers backend: a held state extended by a prompt's new tokens. A service's session
(`calimon.serve.probe_kv`) and the span study's masked variants
(`calimon.studies.spans.probe_sharing`) both run it.

A probe head reads the hidden states of one layer ``k`` (a bundle: of each of its heads' layers):
pooled over the response tokens (``mean``, ``max``), at the prompt's last token (``last``), or
per response token (attention and token heads). Nothing past layer ``k`` changes what it reads,
so a step runs its new tokens through the first ``k`` decoder blocks only, on top of the
session's keys and values of those blocks, and keeps the captured layers' states of the response
tokens read so far (float32, one row per token: what mean, max, attention and token heads need;
``last`` reads the prompt's final token, which every step computes). The head then reads the
whole response's states exactly as it reads those of a whole-transcript pass.

Exact by construction, as a service session's keys and values (`calimon.serve.kv`): each step the whole prompt is tokenized anew, the
cache and the held states are cut back to the longest common token prefix with what the session
holds (a token that merges across the old end of the text is recomputed; a prompt that does not
extend the held one keeps only the template head), and the question after the transcript is
computed and cropped off again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from calimon.scoring.backends.capture import Captured, CaptureSpec
from calimon.verdict import Verdict


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def cache_nbytes(cache) -> int:
    """Bytes of the keys and values a ``DynamicCache`` holds."""
    total = 0
    for layer in getattr(cache, "layers", ()):
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if t is not None:
                total += t.numel() * t.element_size()
    return total


@dataclass
class ProbeState:
    """What a session holds for a probe monitor: ``ids`` (the prompt up to the response's end)
    whose keys and values of the first ``depth`` blocks ``cache`` holds, where the response
    starts, ``states`` (layer -> the held response tokens' states at it) and ``windows`` (the
    readings of windows already read, by transcript hash, when the trajectory is read in
    windows: `calimon.serve.probe_steps`)."""

    ids: list[int]
    cache: Any
    response_start: int
    states: dict[int, np.ndarray] = field(default_factory=dict)
    windows: dict[str, Verdict] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Bytes of the cached keys and values and of the held states."""
        kv = cache_nbytes(self.cache) if self.cache is not None else 0
        return kv + sum(a.nbytes for a in self.states.values())


def depth_of(spec: CaptureSpec) -> int:
    """The deepest layer a capture reads (0: the token embeddings)."""
    return max((*spec.layers, *spec.token_layers), default=0)


def held_layers(spec: CaptureSpec) -> tuple[int, ...]:
    """The layers whose per-token response states a session keeps: the token layers, and the
    pooled layers when a pooling reads more than the last token."""
    keep = set(spec.token_layers)
    if set(spec.pooling) - {"last"}:
        keep |= set(spec.layers)
    return tuple(sorted(keep))


class _Stop(Exception):
    """Raised by the hook of the deepest captured layer: the rest of the model is not run."""


def _crop(cache, keep: int) -> None:
    held = cache.get_seq_length()
    if held > keep:
        cache.crop(keep - held)  # a negative count removes that many tokens from the end


def _run(backend, cache, ids: list[int], start: int, wanted: list[int]) -> dict[int, np.ndarray]:
    """Run ``ids`` (at positions from ``start``) on top of ``cache`` up to the deepest of
    ``wanted`` layers; their states, (tokens, hidden) float32 each."""
    import torch

    model = backend.model
    device = next(model.parameters()).device
    modules = {0: model.get_input_embeddings()}
    modules.update({i + 1: layer for i, layer in enumerate(getattr(model, "model", model).layers)})
    depth, out = max(wanted), {}

    def hook(k: int):
        def fn(module, inputs, output):
            h = output[0] if isinstance(output, tuple | list) else output
            out[k] = h[0].detach().float().cpu().numpy()
            if k == depth:
                raise _Stop
        return fn

    hooks = [modules[k].register_forward_hook(hook(k)) for k in wanted]
    backend.forward_calls += 1
    try:
        positions = torch.arange(start, start + len(ids), device=device).unsqueeze(0)
        model.model(input_ids=torch.tensor([ids], dtype=torch.long, device=device),
                    position_ids=positions, past_key_values=cache, use_cache=True)
    except _Stop:
        pass
    finally:
        for h in hooks:
            h.remove()
    return out


def _pooled(spec: CaptureSpec, states: dict[int, np.ndarray], new: dict[int, np.ndarray]
            ) -> np.ndarray:
    """(1, pooling, layers, hidden) as `calimon.scoring.backends.capture.LayerCollector` pools:
    an empty response pools to zeros."""
    hidden = next(iter(new.values())).shape[1]
    out = np.zeros((1, len(spec.pooling), len(spec.layers), hidden), np.float32)
    for j, k in enumerate(spec.layers):
        for i, how in enumerate(spec.pooling):
            if how == "last":
                out[0, i, j] = new[k][-1]
            elif len(states[k]):
                out[0, i, j] = states[k].mean(0) if how == "mean" else states[k].max(0)
    return out


def extend_probe(backend, state: ProbeState | None, enc, spec: CaptureSpec
                 ) -> tuple[Captured, ProbeState, int]:
    """What a whole-transcript pass captures of prompt ``enc`` (an `EncodedPrompt`), from
    ``state`` extended by its new tokens; the state that holds ``enc`` up to its response's
    end; and how many tokens were reused from ``state`` (module docstring)."""
    import torch
    from transformers.cache_utils import DynamicCache

    ids, rs, keep = list(enc.ids), enc.response_start, enc.response_end
    if not 0 <= keep < len(ids):
        raise ValueError(f"the response ends at {keep}: nothing after it of {len(ids)} tokens")
    reused = 0
    if state is not None:
        reused = min(common_prefix(state.ids, ids), keep)
        if state.response_start != rs:  # held states lie elsewhere: keep the request at most
            reused = min(reused, state.response_start, rs)
    wanted = sorted(set(spec.layers) | set(spec.token_layers))
    with torch.inference_mode():
        cache = state.cache if reused else DynamicCache(config=backend.model.config)
        _crop(cache, reused)
        new = _run(backend, cache, ids[reused:], reused, wanted)
        _crop(cache, keep)
    held = max(0, reused - rs)
    states = {}
    for k in held_layers(spec):
        old = state.states.get(k) if state is not None else None
        old = old[:held] if old is not None and held else new[k][:0]
        states[k] = np.concatenate([old, new[k][max(rs - reused, 0):keep - reused]])
    tokens = np.stack([states[k] for k in spec.token_layers], 1) if spec.token_layers else \
        np.empty((0, 0, 0), np.float32)
    got = Captured(logprobs=np.empty((1, 0), np.float32), pooled=_pooled(spec, states, new),
                   tokens=[tokens], spec=spec)
    return got, ProbeState(ids[:keep], cache, rs, states), reused


__all__ = ["ProbeState", "cache_nbytes", "common_prefix", "depth_of", "extend_probe",
           "held_layers"]
