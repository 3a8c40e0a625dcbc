"""Per-document causal attention on the CPU: flex_attention (eager and torch.compile'd) against
one sdpa call per document, on one packed sequence (3 documents, 1,200 tokens, 9 heads of 64).

    python benchmarks/perf/flex_check.py

Prints seconds of each and the largest difference of their outputs; one thread. Why calimon's
packed batches (calimon/scoring/backends/layout_attention.py) call sdpa per document.
"""

from __future__ import annotations

import time


def main() -> None:
    """Run the three ways once each (the compiled one twice: its compile, then a call)."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    torch.set_num_threads(1)
    bounds = ((0, 300), (300, 800), (800, 1200))
    docs = torch.cat([torch.full((b - a,), i) for i, (a, b) in enumerate(bounds)])
    n = len(docs)

    def same_doc_causal(b, h, q, k):
        return (docs[q] == docs[k]) & (q >= k)

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 9, n, 64, generator=gen) for _ in range(3))
    mask = create_block_mask(same_doc_causal, 1, 1, n, n, device="cpu")

    def timed(name, fn):
        start = time.perf_counter()
        out = fn()
        print(f"{name:34s} {time.perf_counter() - start:8.3f} s")
        return out

    eager = timed("flex_attention, eager", lambda: flex_attention(q, k, v, block_mask=mask))
    compiled = torch.compile(flex_attention)
    timed("flex_attention, compile + call", lambda: compiled(q, k, v, block_mask=mask))
    timed("flex_attention, compiled call", lambda: compiled(q, k, v, block_mask=mask))
    per_doc = timed("sdpa per document (is_causal)", lambda: torch.cat(
        [sdpa(q[:, :, a:b], k[:, :, a:b], v[:, :, a:b], is_causal=True) for a, b in bounds], 2))
    print(f"max abs difference, eager flex vs per-document sdpa: "
          f"{(eager - per_doc).abs().max().item():.1e}")


if __name__ == "__main__":
    main()
