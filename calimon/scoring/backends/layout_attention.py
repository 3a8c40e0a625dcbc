"""Causal attention without an explicit mask for calimon's scoring passes (``calimon_sdpa``).

A scoring pass reuses the shared template prefix from its KV cache, so the queries (the tails
after the prefix) are fewer than the keys (prefix and tails). sdpa's ``is_causal`` aligns its
triangle to the upper left, which is wrong for that shape, so transformers builds an explicit
causal mask instead; an explicit mask takes sdpa off its causal kernels (flash on a GPU; on a
CPU the kernel then computes every block, the masked half included, and transformers repeats
the grouped key/value heads for it). This module gives those passes the layout the causal
kernel wants, with no mask at all:

- ``causal`` (the default): the query is padded on the left with one zero row per prefix key,
  so queries and keys have the same length and ``is_causal`` is exactly the right triangle;
  the pad rows' outputs are dropped. The extra work is the prefix's own triangle (218 tokens
  against thousands). This is the very call a plain ``model(input_ids)`` makes, on every device.
- ``lower_right``: torch's ``causal_lower_right`` bias (flash attention on a GPU, where its
  causal flag means lower right; a materialized mask on a CPU); kept to compare on a GPU.

Right padding needs no mask either: a real token never sees a later position, and padding only
comes after the last real token of its row, whose outputs are never read.

Packed batches (`calimon.scoring.backends.packing`): several prompts' tails run as one sequence; each
document attends to the shared prefix and causally to itself, one kernel call per document
(``Layout.docs``), while every weight matmul runs over the packed tokens without padding. With
``Layout.varlen`` on a CUDA device whose torch has `torch.nn.attention.varlen`, the documents
take one variable-length flash-attention call instead (each document's keys: the prefix, then
its own; causal aligned to the lower right, so no query padding either). On an H100 that made
packed humaneval-pairs batches 1.30x faster (eager kernels) and equal-length rows, where it was
tried too, 3% slower (benchmarks/results/perf-gpu-levers.md): rows keep sdpa.

The implementation is registered with transformers under ``calimon_sdpa``; a model switched to
it behaves exactly as under ``sdpa`` for every call that does not pass ``calimon_layout`` (its
masks are sdpa's, its attention is sdpa's), so generation and other users are unchanged.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

IMPLEMENTATION = "calimon_sdpa"
VARIANTS = ("causal", "lower_right")
# decoder families whose attention is plain causal self-attention with rotary positions (no
# sliding window, no logit soft-capping, no mask used outside attention): the ones tested
MODEL_TYPES = frozenset({"llama", "qwen2", "qwen3"})
VARLEN_DEVICES = frozenset({"cuda"})  # where torch's varlen flash attention runs (tests add cpu)


@dataclass(frozen=True)
class Layout:
    """How one scoring pass lies: ``docs`` the (offset, length) of each packed document in the
    one sequence (None: one prompt per row, right-padded); ``variant`` one of `VARIANTS`."""

    docs: tuple[tuple[int, int], ...] | None = None
    variant: str = "causal"
    varlen: bool = False  # packed documents in one varlen flash-attention call (CUDA)


def layout_supported(model) -> bool:
    """Whether ``model`` can run calimon's mask-free layout: a tested decoder family, every
    layer full causal attention, and sdpa (or this module's implementation) as its attention."""
    cfg = model.config
    if getattr(cfg, "model_type", None) not in MODEL_TYPES:
        return False
    if any(t != "full_attention" for t in getattr(cfg, "layer_types", None) or ()):
        return False
    if getattr(cfg, "use_sliding_window", False) or getattr(cfg, "attn_logit_softcapping", None):
        return False
    return getattr(cfg, "_attn_implementation", None) in ("sdpa", IMPLEMENTATION)


def use_layout_attention(model) -> bool:
    """Switch a supported model from sdpa to ``calimon_sdpa`` (once; a no-op after) and say
    whether the layout can be used; a model it cannot serve is left as it is (False)."""
    if not layout_supported(model):
        return False
    if model.config._attn_implementation != IMPLEMENTATION:
        _register()
        model.set_attn_implementation(IMPLEMENTATION)
    return model.config._attn_implementation == IMPLEMENTATION


@functools.cache
def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(IMPLEMENTATION, layout_attention)
    AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)


def layout_attention(module, query, key, value, attention_mask, dropout: float = 0.0,
                     scaling: float | None = None, **kwargs):
    """transformers' attention interface: sdpa's own function unless the call carries a
    ``calimon_layout`` (a `Layout`), then causal attention in that layout with the mask
    ignored. Shapes: query (batch, heads, queries, dim); key, value (batch, kv heads, prefix +
    queries, dim); returns (batch, queries, heads, dim), None."""
    layout = kwargs.pop("calimon_layout", None)
    if layout is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask,
                                      dropout=dropout, scaling=scaling, **kwargs)
    if kwargs.get("sliding_window") is not None or kwargs.get("softcap") is not None:
        raise ValueError("calimon_layout: sliding-window or soft-capped attention is not "
                         "supported (layout_supported should have refused this model)")
    prefix = key.shape[2] - query.shape[2]
    if layout.docs is None:
        out = _causal(query, key, value, prefix, scaling, layout.variant)
        return out.transpose(1, 2).contiguous(), None
    return _packed(query, key, value, prefix, scaling, layout), None


def _packed(query, key, value, prefix: int, scaling, layout: Layout):
    """One packed sequence (batch 1): each document attends to the prefix and to itself."""
    import torch

    if _varlen_on(query, layout):
        return _packed_varlen(query, key, value, prefix, scaling, layout.docs)
    b, h, n, d = query.shape
    out = query.new_empty((b, n, h, d))
    for off, length in layout.docs:
        sl = slice(prefix + off, prefix + off + length)
        k = torch.cat([key[:, :, :prefix], key[:, :, sl]], 2) if prefix else key[:, :, sl]
        v = torch.cat([value[:, :, :prefix], value[:, :, sl]], 2) if prefix else value[:, :, sl]
        res = _causal(query[:, :, off:off + length], k, v, prefix, scaling, layout.variant)
        out[:, off:off + length] = res.transpose(1, 2)
    return out


def _varlen_on(query, layout: Layout) -> bool:
    return layout.varlen and query.device.type in VARLEN_DEVICES and varlen_kernel() is not None


def _packed_varlen(query, key, value, prefix: int, scaling, docs):
    """`_packed` as one varlen call: queries (total, heads, dim); each document's keys gathered
    as the prefix followed by its own."""
    index, cu_q, cu_k, max_q, max_k = _varlen_index(docs, prefix, str(query.device))
    q = query[0].transpose(0, 1).contiguous()
    k = key[0].transpose(0, 1).index_select(0, index)
    v = value[0].transpose(0, 1).index_select(0, index)
    return varlen_kernel()(q, k, v, cu_q, cu_k, max_q, max_k, scaling).unsqueeze(0)


@functools.lru_cache(maxsize=8)
def _varlen_index(docs, prefix: int, device: str):
    """(key rows to gather, cumulative query and key lengths (int32), longest of each), built
    once per layout and reused by every layer."""
    import torch

    rows = [torch.cat([torch.arange(prefix), torch.arange(prefix + off, prefix + off + n)])
            for off, n in docs]
    q_len = torch.tensor([0] + [n for _, n in docs])
    k_len = torch.tensor([0] + [prefix + n for _, n in docs])
    return (torch.cat(rows).to(device), q_len.cumsum(0).to(device, torch.int32),
            k_len.cumsum(0).to(device, torch.int32), int(q_len.max()), int(k_len.max()))


@functools.cache
def varlen_kernel():
    """``call(q, k, v, cu_q, cu_k, max_q, max_k, scale)``: torch's causal varlen flash
    attention, whichever signature this torch has (``window_size`` or ``is_causal``; grouped
    kv heads declared where it asks), or None where torch has none."""
    import inspect

    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    params = inspect.signature(varlen_attn).parameters
    causal = {"window_size": (-1, 0)} if "window_size" in params else {"is_causal": True}

    def call(q, k, v, cu_q, cu_k, max_q, max_k, scale):
        extra = {"enable_gqa": True} if "enable_gqa" in params and q.shape[1] != k.shape[1] \
            else {}
        return varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, scale=scale, **causal, **extra)

    return call


def _causal(query, key, value, prefix: int, scaling, variant: str):
    """Queries that are the last of the keys, each seeing the keys up to its own position."""
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    gqa = query.shape[1] != key.shape[1]
    if prefix == 0:
        return sdpa(query, key, value, is_causal=True, scale=scaling, enable_gqa=gqa)
    if variant == "lower_right":
        from torch.nn.attention.bias import causal_lower_right

        if gqa:  # the bias's flash dispatch takes equal head counts
            reps = query.shape[1] // key.shape[1]
            key, value = key.repeat_interleave(reps, 1), value.repeat_interleave(reps, 1)
        bias = causal_lower_right(query.shape[2], key.shape[2])
        return sdpa(query, key, value, attn_mask=bias, scale=scaling)
    b, h, t, d = query.shape
    padded = query.new_zeros((b, h, prefix + t, d))
    padded[:, :, prefix:] = query
    return sdpa(padded, key, value, is_causal=True, scale=scaling, enable_gqa=gqa)[:, :, prefix:]
