"""The transformers backend's defaults that depend on the device: prompts and tokens per
forward pass, the fused kernels and the varlen attention of a scoring pass.

On a CPU one prefill of a few hundred tokens already keeps the cores busy (one prompt per pass,
benchmarks/results/perf.md). On a GPU a pass needs many tokens to fill the chip; the token
budget below is the one benchmarks/results/perf-gpu-levers.md measured fastest (random-weight
Qwen3-4B, bf16, H100), capped by what the device's free memory holds for the activations of one
pass. Every default here is overridden by its backend option.
"""

from __future__ import annotations

from collections.abc import Sequence

CPU_BATCH_TOKENS = 8192
CPU_MAX_BATCH = 1
# padded prompt tokens per pass on a GPU: on an H100 (perf-gpu-levers.md, liger kernels) 54
# prompts of 600 tokens per pass ran 168 samples/s (the best fixed batch, 32: 166; the old
# default, 13: 149) and 8 of 4,000 tokens 2.110 s per 32 (best fixed, 16: 2.096; old, 2: 2.238)
GPU_BATCH_TOKENS = 32768
GPU_MAX_BATCH = 256  # prompts per pass on a GPU: the token budget decides first
FREE_MEMORY_SHARE = 0.25  # of the free device memory one pass's activations may take
# "auto" on a GPU: the first of these available. liger-kernel made the pass 1.36x faster at
# 4,000 tokens (49.3% against 36.2% MFU, H100) and needs no compilation; torch.compile'd kernels
# ("compile", 47.2%) compile in every process (seconds to tens of seconds), which a CLI call of
# a few hundred short prompts does not win back, so they are opt-in (perf-gpu-levers.md).
GPU_KERNELS = ("liger", "none")
GPU_VARLEN = True  # None on a GPU: packed batches take one varlen attention call


def is_gpu(device: str) -> bool:
    """Whether ``device`` (a torch device string) is a CUDA device."""
    return str(device).startswith("cuda")


def batch_tokens(device: str, model=None) -> int:
    """Padded prompt tokens per forward pass: `CPU_BATCH_TOKENS` off a GPU; on one,
    `GPU_BATCH_TOKENS` or fewer where the free memory holds fewer (`activation_bytes`)."""
    if not is_gpu(device):
        return CPU_BATCH_TOKENS
    if model is None:
        return GPU_BATCH_TOKENS
    import torch

    free, _total = torch.cuda.mem_get_info(torch.device(device))
    itemsize = next(model.parameters()).element_size()
    fit = int(free * FREE_MEMORY_SHARE // activation_bytes(model.config, itemsize))
    return max(CPU_BATCH_TOKENS, min(GPU_BATCH_TOKENS, fit))


def activation_bytes(config, itemsize: int = 2) -> int:
    """An upper estimate of the bytes one prompt token holds while a decoder block runs: its
    residual stream, normed input, attention projections and the MLP's three wide tensors, at
    ``itemsize`` bytes per value (the model's dtype)."""
    cfg = getattr(config, "text_config", None) or config
    hidden = int(cfg.hidden_size)
    heads = int(cfg.num_attention_heads)
    kv = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or hidden // heads)
    width = 4 * hidden + 2 * (heads + 2 * kv) * head_dim + 3 * int(cfg.intermediate_size)
    return width * itemsize


def max_batch_size(device: str) -> int:
    """Prompts per forward pass: `CPU_MAX_BATCH` off a GPU, `GPU_MAX_BATCH` on one."""
    return GPU_MAX_BATCH if is_gpu(device) else CPU_MAX_BATCH


def kernels(choice: str, device: str) -> str:
    """The fused kernels a scoring pass uses (`calimon.scoring.backends.fused`): ``choice``
    unless "auto"; "auto" is "none" off a GPU and the first available of `GPU_KERNELS` on one."""
    if choice != "auto":
        return choice
    if not is_gpu(device):
        return "none"
    from calimon.scoring.backends.fused import available

    return next((k for k in GPU_KERNELS if available(k)), "none")


def varlen(choice: bool | None, device: str) -> bool:
    """Whether packed batches take one varlen attention call: ``choice`` unless None; None is
    `GPU_VARLEN` on a GPU, False elsewhere."""
    if choice is not None:
        return choice
    return GPU_VARLEN and is_gpu(device)


# On a GPU a reused prefix saves its share of the pass and costs a query shorter than its keys
# (the mask-free layout pads it back): on an H100 (benchmarks/results/perf-gpu.md and
# perf-gpu-noprefix.md, a 218-token prefix) it won 1.37x at 600 tokens (36% of the prompt),
# broke even at 4,000 (5%) and lost 2.7% at 16,000 (1.4%). On a CPU it won 1.10x at 4,000.
GPU_PREFIX_MIN_SHARE = 0.05


def reuse_prefix(device: str, prefix_len: int, lengths: Sequence[int]) -> bool:
    """Whether a batch of prompts of these token `lengths` reuses its shared `prefix_len`
    tokens from the KV cache: always on a CPU; on a GPU when the prefix is at least
    `GPU_PREFIX_MIN_SHARE` of the batch's mean prompt length."""
    if prefix_len <= 0 or not lengths:
        return False
    if not is_gpu(device):
        return True
    return prefix_len >= GPU_PREFIX_MIN_SHARE * (sum(lengths) / len(lengths))
