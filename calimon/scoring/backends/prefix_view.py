"""The shared prefix's KV cache as each scoring pass reads it: a read-only view per pass (the
transformers backend computes the prefix once and every batch attends to it)."""

from __future__ import annotations

import copy
import functools


def _read_only_prefix(prefix_cache, rows: int):
    """A view of the shared prefix's KV cache for one forward pass of `rows` prompts: each
    layer hands attention the prefix followed by the new tokens' keys and values, but stores
    nothing. The prefix is never copied (rows are broadcast views) and the tails' keys and
    values are freed layer by layer instead of held for the whole pass: only the logits at
    one position are read, so nothing needs them afterwards (at 8k tokens that is ~0.4 GB)."""
    read_only = _read_only_layer_class()
    view = copy.copy(prefix_cache)
    # a layer the prefix pass never reached (a model cut short of its configured depth) holds
    # no prefix: it gets an empty layer of its own, as a fresh cache would have
    view.layers = [read_only(layer.keys.expand(rows, -1, -1, -1),
                             layer.values.expand(rows, -1, -1, -1))
                   if getattr(layer, "keys", None) is not None else type(layer)()
                   for layer in prefix_cache.layers]
    return view


@functools.cache
def _read_only_layer_class():
    import torch
    from transformers.cache_utils import DynamicLayer

    class ReadOnlyLayer(DynamicLayer):
        def __init__(self, keys, values):
            super().__init__()
            self.keys, self.values = keys, values
            self.dtype, self.device = keys.dtype, keys.device
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            return (torch.cat([self.keys, key_states], dim=-2),
                    torch.cat([self.values, value_states], dim=-2))

    return ReadOnlyLayer
