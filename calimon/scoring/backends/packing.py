"""One scoring pass in calimon's mask-free layout: right-padded rows or one packed sequence.

`TransformersBackend` hands a batch here when its model supports the layout
(`calimon.scoring.backends.layout_attention`). Every prompt of the batch starts with the same shared
prefix, whose KV cache is reused; only the tails (the tokens after it) run.

- **rows**: one tail per row, right-padded to the longest, no attention mask (causal attention
  alone keeps each real token away from the padding after it). Used for a single prompt and for
  tails of equal length, where there is no padding.
- **packed**: tails of different lengths laid end to end in one sequence of their total length,
  each with its own positions (prefix length + 0, 1, ...), attending to the prefix and causally
  to itself (one attention call per document); nothing is computed for padding. The verdict and
  json readouts read the logits at each document's last token; a capture (probe heads) gets each
  layer's states unpacked into rows before pooling, so it pools exactly as on padded rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from calimon.scoring.backends.capture import LayerCollector
from calimon.scoring.backends.layout_attention import Layout


def forward_layout(backend, tails: Sequence[Sequence[int]], prefix: tuple[int, ...],
                   prefix_view=None, capture=None, *, pack: bool = True,
                   variant: str = "causal"):
    """Log-probs (n, vocab) at each tail's last token, and with ``capture=(spec, spans relative
    to the prefix)`` also the collector's result, as `TransformersBackend._forward_last`
    returns them. ``prefix_view(rows)``: the shared prefix's KV cache for that many rows (None
    without a prefix); ``pack``: lay tails of different lengths in one sequence."""
    import torch

    model, dev = backend.model, backend._device
    lengths = [len(t) for t in tails]
    packed = pack and len(set(lengths)) > 1
    ids, positions, last, layout = (_packed_inputs if packed else _row_inputs)(
        tails, len(prefix), backend.tokenizer.pad_token_id or 0)
    layout = Layout(docs=layout, variant=variant, varlen=getattr(backend, "use_varlen", False))
    kwargs = {}
    if prefix:
        kwargs["past_key_values"] = prefix_view(ids.shape[0])
    hooks, got = [], None
    if capture is not None:
        hooks, got = _install_hooks(backend, capture[0], capture[1], lengths, packed)
    try:
        with torch.inference_mode():
            hidden = model.model(input_ids=ids.to(dev), position_ids=positions.to(dev),
                                 attention_mask=_placeholder_mask(dev), use_cache=bool(prefix),
                                 calimon_layout=layout, **kwargs).last_hidden_state
            rows, cols = last
            logits = model.lm_head(hidden[rows.to(dev), cols.to(dev)]).float()
            logprobs = torch.log_softmax(logits, dim=-1).cpu().numpy()
    finally:
        for h in hooks:
            h.remove()
    return logprobs if capture is None else (logprobs, got.result())


def _placeholder_mask(dev):
    """A 4-d placeholder: transformers takes a 4-d mask as ready and builds none; the layout
    attention ignores it."""
    import torch

    return torch.ones((1, 1, 1, 1), dtype=torch.bool, device=dev)


def _row_inputs(tails, prefix_len: int, pad: int):
    """(ids (n, width) right-padded, positions, (rows, last columns), None)."""
    import torch

    lengths = torch.tensor([len(t) for t in tails])
    width = int(lengths.max())
    ids = torch.full((len(tails), width), pad, dtype=torch.long)
    for row, t in enumerate(tails):
        ids[row, :len(t)] = torch.tensor(list(t))
    positions = (torch.arange(width) + prefix_len).unsqueeze(0).expand(len(tails), -1)
    return ids, positions, (torch.arange(len(tails)), lengths - 1), None


def _packed_inputs(tails, prefix_len: int, pad: int):
    """(ids (1, total), positions restarting at each document, (zeros, each document's last
    index), docs as (offset, length))."""
    import torch

    lengths = [len(t) for t in tails]
    offsets = [sum(lengths[:i]) for i in range(len(lengths))]
    ids = torch.tensor([[tok for t in tails for tok in t]], dtype=torch.long)
    positions = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0) + prefix_len
    ends = torch.tensor([o + n - 1 for o, n in zip(offsets, lengths, strict=True)])
    return ids, positions, (torch.zeros_like(ends), ends), tuple(zip(offsets, lengths,
                                                                      strict=True))


class PackedCollector(LayerCollector):
    """A `LayerCollector` for a packed pass: each hooked layer's (1, total, hidden) output is
    laid back into right-padded rows (zeros after each document) before it is pooled."""

    def __init__(self, spec, spans, lengths):
        super().__init__(spec, spans, lengths)
        import torch

        self._rows = torch.cat([torch.full((n,), r, dtype=torch.long)
                                for r, n in enumerate(self.lengths)])
        self._cols = torch.cat([torch.arange(n) for n in self.lengths])
        self._width = max(self.lengths)

    def _collect(self, layer: int, h) -> None:
        rows, cols = self._rows.to(h.device), self._cols.to(h.device)
        padded = h.new_zeros((len(self.lengths), self._width, h.shape[-1]))
        padded[rows, cols] = h[0]
        super()._collect(layer, padded)


def _install_hooks(backend, spec, spans, lengths, packed: bool):
    """Forward hooks on the layers ``spec`` reads (0: the embeddings, k: decoder block k),
    feeding a collector (a `PackedCollector` when the pass is packed)."""
    collector = (PackedCollector if packed else LayerCollector)(spec, spans, lengths)
    modules = {0: backend.model.get_input_embeddings()}
    for i, layer in enumerate(backend._decoder_layers()):
        modules[i + 1] = layer
    wanted = sorted(set(spec.layers) | set(spec.token_layers))
    hooks = [modules[k].register_forward_hook(collector.hook(k)) for k in wanted]
    return hooks, collector
