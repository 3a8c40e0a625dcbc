"""A session's cached keys and values on the transformers backend, extended step by step.

Exact by construction: each step the whole prompt is tokenized anew (so a token that merges
across the old end of the text is seen as the full scoring sees it), the cache is kept up to the
longest common token prefix with what it holds, and the rest is computed on top of it in one
pass, with each token at its absolute position. The readout's question and answer cue after the
transcript (``ids[keep:]``) is part of that pass, then cropped off again
(`transformers.DynamicCache.crop`), so the cache only ever holds transcript tokens, which the
next step's prompt starts with.

A new session starts from a copy of the template head's keys and values (`HeadCache`: the
tokens before the transcript, the same for every prompt, computed once per server), so its first
step computes what a whole-transcript request computes: the transcript and the question.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from calimon.scoring.probes.steps import cache_nbytes, common_prefix


@dataclass
class KVState:
    """The tokens whose keys and values ``cache`` holds (a ``DynamicCache``)."""

    ids: list[int]
    cache: Any

    @property
    def nbytes(self) -> int:
        """Bytes of the cached keys and values."""
        return cache_nbytes(self.cache)


def full_use(service, tokens: int) -> dict[str, Any]:
    """The cost of scoring a whole prompt: every token but the template's shared head, which the
    backend keeps cached (an API backend, which tokenizes on its own side, has no token encoder
    here: every token counts)."""
    from calimon.scoring.backends.base import CapabilityError

    try:
        encoder = getattr(service.served.monitor, "encoder", None)
    except CapabilityError:
        encoder = None
    head = getattr(encoder, "prefix_len", 0) or 0
    return {"mode": "full", "reused_tokens": 0, "computed_tokens": max(tokens - head, 0)}


def supports_kv(model) -> bool:
    """Whether the model's cache can be cropped back exactly: no sliding-window or other layer
    that forgets tokens (such a model is scored whole at each step)."""
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache(config=model.config)
    return not any(getattr(layer, "is_sliding", False) for layer in cache.layers)


class HeadCache:
    """The template head's keys and values, computed once; `seed` hands each new session its
    own copy."""

    def __init__(self):
        self._state: KVState | None = None

    def seed(self, backend, head: list[int], depth: int | None = None) -> KVState | None:
        """A copy of the cached head (computed now if the head changed); None for no head.
        ``depth``: only the first ``depth`` decoder layers are copied, the others left empty
        (a pass that stops at that layer, `calimon.serve.probe_kv`)."""
        import copy

        import torch
        from transformers.cache_utils import DynamicCache

        if not head:
            return None
        if self._state is None or self._state.ids != head:
            model = backend.model
            device = next(model.parameters()).device
            cache = DynamicCache(config=model.config)
            with torch.inference_mode():
                model.model(input_ids=torch.tensor([head], device=device),
                            past_key_values=cache, use_cache=True)
            backend.forward_calls += 1
            self._state = KVState(list(head), cache)
        with torch.inference_mode():
            if depth is None:
                return KVState(list(head), copy.deepcopy(self._state.cache))
            cache = copy.copy(self._state.cache)
            cache.layers = [copy.deepcopy(layer) if i < depth else type(layer)()
                            for i, layer in enumerate(self._state.cache.layers)]
            return KVState(list(head), cache)


def _crop(cache, keep: int) -> None:
    held = cache.get_seq_length()
    if held > keep:
        cache.crop(keep - held)  # a negative count removes that many tokens from the end


def extend(backend, state: KVState | None, ids: list[int], keep: int
           ) -> tuple[np.ndarray, KVState, int]:
    """The log-probs of the token after ``ids``, the state that holds ``ids[:keep]``, and how
    many tokens were reused from ``state``. ``keep < len(ids)``: the tokens after ``keep``
    (the question) are computed and cropped off."""
    import torch
    from transformers.cache_utils import DynamicCache

    if not 0 <= keep < len(ids):
        raise ValueError(f"keep={keep} must leave at least one of {len(ids)} tokens to compute")
    model = backend.model
    device = next(model.parameters()).device
    reused = 0 if state is None else min(common_prefix(state.ids, ids), keep)
    with torch.inference_mode():
        if reused == 0:
            cache = DynamicCache(config=model.config)
        else:
            cache = state.cache
            _crop(cache, reused)
        new = torch.tensor([ids[reused:]], dtype=torch.long, device=device)
        positions = torch.arange(reused, len(ids), device=device).unsqueeze(0)
        backend.forward_calls += 1
        hidden = model.model(input_ids=new, position_ids=positions, past_key_values=cache,
                             use_cache=True).last_hidden_state
        logits = model.lm_head(hidden[:, -1]).float()
        logprobs = torch.log_softmax(logits, dim=-1).cpu().numpy()[0]
        _crop(cache, keep)
    return logprobs, KVState(list(ids[:keep]), cache), reused
