"""Useful FLOPs of a decoder-only transformer (llama-style), counted from its config.json.

Counted: every weight matmul (2 FLOPs per multiply-add), the attention score and value products
over the real context (causal), and the output layer only at the positions whose logits are
computed. Not counted: padding, norms, activations, softmax, rotary (all O(d) per token) and the
embedding lookup. A prefix served from a KV cache is counted once, where it was computed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @classmethod
    def from_config(cls, path: str | Path) -> Shape:
        """The shape of the model folder ``path`` (its config.json)."""
        return cls.from_dict(json.loads((Path(path) / "config.json").read_text()))

    @classmethod
    def from_dict(cls, cfg: dict) -> Shape:
        """The shape of a config.json given as a dict."""
        heads = cfg["num_attention_heads"]
        return cls(cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"],
                   heads, cfg.get("num_key_value_heads", heads),
                   cfg.get("head_dim") or cfg["hidden_size"] // heads, cfg["vocab_size"])

    @property
    def layer_params(self) -> int:
        """Weights one token multiplies through in one layer (q, k, v, o, gate, up, down)."""
        q = self.hidden * self.heads * self.head_dim
        kv = 2 * self.hidden * self.kv_heads * self.head_dim
        o = self.heads * self.head_dim * self.hidden
        mlp = 3 * self.hidden * self.intermediate
        return q + kv + o + mlp

    def tokens(self, start: int, end: int, layers: int | None = None) -> float:
        """FLOPs of running positions [start, end) through `layers` layers (default: all),
        attending causally to everything before them (positions 0..p)."""
        n = max(0, end - start)
        if n == 0:
            return 0.0
        layers = self.layers if layers is None else layers
        linear = 2.0 * self.layer_params * n
        context = (start + end + 1) * n / 2.0  # sum of (p + 1) for p in [start, end)
        attention = 4.0 * self.heads * self.head_dim * context  # QK^T and AV
        return layers * (linear + attention)

    def logits(self, positions: int = 1) -> float:
        return 2.0 * self.hidden * self.vocab * positions


def prefill_readout_flops(shape: Shape, lengths: list[int], prefix: int) -> float:
    """Verdict/json readout: the shared prefix once, each tail once, logits at one position."""
    total = shape.tokens(0, prefix) if prefix else 0.0
    for n in lengths:
        total += shape.tokens(prefix, n) + shape.logits(1)
    return total


def generation_flops(shape: Shape, lengths: list[int], generated: list[int]) -> float:
    """Greedy generation: the whole prompt, then each new token; logits at each new token."""
    total = 0.0
    for n, g in zip(lengths, generated, strict=True):
        total += shape.tokens(0, n) + shape.logits(1)
        if g > 1:
            total += shape.tokens(n, n + g - 1) + shape.logits(g - 1)
    return total


def probe_flops(shape: Shape, lengths: list[int], layer: int, prefix: int = 0) -> float:
    """A probe head: positions through the first `layer` layers, no output layer."""
    total = shape.tokens(0, prefix, layer) if prefix else 0.0
    return total + sum(shape.tokens(prefix, n, layer) for n in lengths)
