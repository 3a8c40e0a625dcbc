"""Fused kernels for a scoring pass on CUDA: RMSNorm, rotary embedding and SwiGLU, each one
kernel instead of transformers' eager chain of elementwise operations.

Two sources, chosen by `TransformersOptions.kernels`:

- ``liger``: liger-kernel's Triton kernels (its `apply_liger_kernel_to_*` patch of the model
  instance; no compilation at start), where the package is installed;
- ``compile``: the same three pieces as `torch.compile` functions over tensors alone, with
  dynamic shapes, so one compilation serves every batch shape (no model-wide graph: the
  attention, the KV cache and calimon's layouts stay in eager code).

Only the decoder families of `calimon.scoring.backends.layout_attention.MODEL_TYPES` are fused,
on CUDA. Fusing patches the model's modules (their ``forward``) and its modeling module's
``apply_rotary_pos_emb``; `unfuse` undoes both. The rotary replacement falls back to the
original function for a tensor off `FAST_DEVICES`, so a CPU model of the same family in the
process is unaffected. benchmarks/results/perf-gpu-levers.md measures each against the eager pass.
"""

from __future__ import annotations

import functools
import sys

KERNELS = ("none", "liger", "compile")
FAST_DEVICES = frozenset({"cuda"})  # where fused kernels run (tests add "cpu")
_FAMILIES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3"}  # model_type -> liger name
_ATTR = "_calimon_fused"


def available(how: str) -> bool:
    """Whether ``how`` can run in this process (liger-kernel importable; torch.compile)."""
    if how == "liger":
        try:
            import liger_kernel.transformers  # noqa: F401
        except ImportError:
            return False
    return how in KERNELS


def fuse(model, how: str) -> str:
    """Fuse ``model``'s norms, rotary embedding and MLPs with ``how`` (one of `KERNELS`; a
    previous fusing is undone first). Returns what was applied: ``how``, or "none" for a model
    off CUDA, of another family, or where ``how`` is not `available`."""
    if how not in KERNELS:
        raise ValueError(f"kernels must be one of {', '.join(KERNELS)}, got {how!r}")
    if getattr(model, _ATTR, "none") == how:
        return how
    unfuse(model)
    family = _FAMILIES.get(getattr(model.config, "model_type", None))
    fast = next(model.parameters()).device.type in FAST_DEVICES
    if how == "none" or family is None or not fast or not available(how):
        return "none"
    norms, mlps = _parts(model)
    (_liger if how == "liger" else _compiled)(model, family, norms, mlps)
    model._calimon_fused_modules = norms + mlps
    setattr(model, _ATTR, how)
    return how


def unfuse(model) -> None:
    """Undo `fuse`: the modules' own ``forward`` back, and the original rotary function."""
    if getattr(model, _ATTR, "none") == "none":
        return
    for module in model.__dict__.pop("_calimon_fused_modules", []):
        for name in ("forward", "_get_name"):
            module.__dict__.pop(name, None)
    modeling = sys.modules[type(model).__module__]
    modeling.apply_rotary_pos_emb = getattr(modeling.apply_rotary_pos_emb, "eager",
                                            modeling.apply_rotary_pos_emb)
    setattr(model, _ATTR, "none")


def _parts(model):
    """(RMSNorm modules, MLP modules) of the decoder, found by class name."""
    norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
    mlps = [m for m in model.modules() if type(m).__name__.endswith("MLP")
            and getattr(m.config, "hidden_act", None) == "silu"]
    return norms, mlps


def _set_rope(model, fast) -> None:
    """The modeling module's rotary function becomes ``fast`` on CUDA tensors, the original
    elsewhere (kept as ``.eager`` for `unfuse`)."""
    modeling = sys.modules[type(model).__module__]
    eager = getattr(modeling.apply_rotary_pos_emb, "eager", modeling.apply_rotary_pos_emb)

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        if q.device.type in FAST_DEVICES:  # liger's takes position_ids third: by keyword
            return fast(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)
        return eager(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)

    apply_rotary_pos_emb.eager = eager
    modeling.apply_rotary_pos_emb = apply_rotary_pos_emb


def _liger(model, family: str, norms, mlps) -> None:
    """liger-kernel's patch of this instance (norms and MLPs; no loss patch), its module-wide
    class swaps undone so that models built later are untouched; rotary through `_set_rope`."""
    import liger_kernel.transformers as liger
    from liger_kernel.transformers.rope import liger_rotary_pos_emb

    modeling = sys.modules[type(model).__module__]
    saved = dict(vars(modeling))
    try:
        getattr(liger, f"apply_liger_kernel_to_{family}")(
            rope=False, cross_entropy=False, fused_linear_cross_entropy=False, rms_norm=True,
            swiglu=True, model=model)
    finally:
        for name, value in saved.items():
            setattr(modeling, name, value)
    _set_rope(model, liger_rotary_pos_emb)


def _compiled(model, family: str, norms, mlps) -> None:
    """torch.compile'd norm, rotary and SwiGLU bound to this instance's modules."""
    kernels = _compiled_kernels()
    for norm in norms:
        norm.forward = functools.partial(_norm_forward, kernels["rms_norm"], norm)
    for mlp in mlps:
        mlp.forward = functools.partial(_mlp_forward, kernels["swiglu"], mlp)
    modeling = sys.modules[type(model).__module__]
    eager = getattr(modeling.apply_rotary_pos_emb, "eager", modeling.apply_rotary_pos_emb)
    _set_rope(model, _compiled_rope(eager))


def _norm_forward(kernel, norm, hidden_states):
    return kernel(hidden_states, norm.weight, norm.variance_epsilon)


def _mlp_forward(kernel, mlp, x):
    return mlp.down_proj(kernel(mlp.gate_proj(x), mlp.up_proj(x)))


@functools.cache
def _compiled_kernels() -> dict:
    import torch

    def rms_norm(x, weight, eps: float):  # transformers' LlamaRMSNorm / Qwen3RMSNorm, as is
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
        return weight * h.to(dtype)

    def swiglu(gate, up):
        return torch.nn.functional.silu(gate) * up

    return {"rms_norm": _compile(rms_norm), "swiglu": _compile(swiglu)}


@functools.cache
def _compiled_rope(eager):
    return _compile(eager)


def _compile(fn):
    """One function compiled for every shape (dynamic): a batch of another size or length
    reuses it instead of compiling again."""
    import torch

    return torch.compile(fn, dynamic=True)
